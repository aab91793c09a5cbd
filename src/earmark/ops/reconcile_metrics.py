"""earmark_reconcile_*: what a reconciliation found, for Prometheus. A run ends, so they are
written for a textfile collector (--metrics-file, atomically) or pushed to a Pushgateway
(--pushgateway), grouped by provider and key so that runs for several keys keep apart."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import TYPE_CHECKING, Any

from earmark import limits
from earmark.core.reconcile import Class, Reconciliation
from earmark.ops.connect import OpsError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

JOB = "earmark_reconcile"


def registry_of(
    provider: str,
    key: str,
    result: Reconciliation,
    applied: list[Any],
    failing: bool,
    now: datetime,
) -> CollectorRegistry:
    # Imported here: the command line loads every command, and a client-only install (no
    # server extra) has no prometheus_client.
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry()
    labels = ("provider", "key")
    buckets = Gauge(
        "earmark_reconcile_buckets",
        "Report buckets of the last run, by class",
        (*labels, "class"),
        registry=registry,
    )
    for cls in Class:
        count = sum(1 for b in result.buckets if b.cls is cls)
        buckets.labels(provider, key, str(cls)).set(count)
    resolved = Gauge(
        "earmark_reconcile_in_doubt_resolved",
        "In-doubt holds the last run resolved by evidence",
        labels,
        registry=registry,
    )
    resolved.labels(provider, key).set(sum(1 for a in applied if not a.refused))
    unresolved = Gauge(
        "earmark_reconcile_in_doubt_unresolved",
        "In-doubt holds the last run's evidence could not separate",
        labels,
        registry=registry,
    )
    unresolved.labels(provider, key).set(
        sum(len(b.in_doubt) for b in result.buckets if b.cls is Class.UNRESOLVED)
    )
    ratio = Gauge(
        "earmark_reconcile_drift_ratio",
        "The provider's cost over the ledger's priced calls, the last whole day",
        (*labels, "model"),
        registry=registry,
    )
    latest: dict[str, float] = {}
    for d in sorted(result.drift, key=lambda d: d.day):
        if d.ratio is not None:
            # The day's tool lines are one row of no model: labelled "(tools)".
            latest[d.model or f"({d.kind})"] = d.ratio
    for model in sorted(latest)[: limits.reconcile_models_max]:
        ratio.labels(provider, key, model).set(latest[model])
    failed = Gauge(
        "earmark_reconcile_failing",
        "1 when the last run found the ledger and the bill disagreeing (exit 3)",
        labels,
        registry=registry,
    )
    failed.labels(provider, key).set(1 if failing else 0)
    last = Gauge(
        "earmark_reconcile_last_run_timestamp_seconds",
        "When the last run read the reports",
        labels,
        registry=registry,
    )
    last.labels(provider, key).set(now.timestamp())
    return registry


def publish(
    args: argparse.Namespace,
    provider: str,
    key: str,
    result: Reconciliation,
    applied: list[Any],
    failing: bool,
    now: datetime,
) -> None:
    if not args.metrics_file and not args.pushgateway:
        return
    from prometheus_client import push_to_gateway, write_to_textfile

    registry = registry_of(provider, key or "organization", result, applied, failing, now)
    if args.metrics_file:
        try:
            write_to_textfile(str(args.metrics_file), registry)
        except OSError as error:
            raise OpsError(f"cannot write --metrics-file {args.metrics_file}: {error}") from None
    if args.pushgateway:
        grouping = {"provider": provider, "key": key or "organization"}
        try:
            push_to_gateway(
                args.pushgateway,
                job=JOB,
                registry=registry,
                grouping_key=grouping,
                timeout=limits.reconcile_http_timeout_seconds,
            )
        except OSError as error:
            raise OpsError(
                f"cannot push to the Pushgateway at {args.pushgateway}: {error}"
            ) from None
