"""Budgets across regions (issue 48, docs/regions.md): a region's sidecar's side of the
protocol in core/regions.py. The agent keeps the region's shares (asks, returns, reports,
renewals) off the request path; RegionHolds asks for what a Reserve needs when its share
cannot admit it."""
