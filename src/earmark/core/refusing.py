"""When a budget reads as refusing (issue 43), in `earmark budgets get/list` and the
console alike: it refused a Reserve for want of room (INSUFFICIENT_BUDGET) this period,
and either the latest refusal is recent (within limits.refusing_recent_seconds: a HARD
budget refuses before its remaining reaches 0, when what is left is too little for the
next hold), or nothing is left at all. A budget that refused an hour ago and has room now
(a raised limit, holds settled for less) reads as its other flags say; its count of
refusals this period stays in the REFUSALS column until the period ends."""

from __future__ import annotations

from datetime import datetime, timedelta

from earmark import limits

RECENT = timedelta(seconds=limits.refusing_recent_seconds)


def refusing(
    refusals: int,
    remaining: int | None,
    last_refused_at: datetime | None,
    now: datetime,
    *,
    soft: bool = False,
) -> bool:
    """Whether a budget with refusals this period, remaining left (None: unlimited) and
    its latest refusal at last_refused_at reads as refusing at now. A SOFT budget admits
    past its limit (remaining stops at 0 there), so only a recent refusal says it refuses."""
    if refusals <= 0:
        return False
    if not soft and remaining is not None and remaining <= 0:
        return True
    return last_refused_at is not None and now - last_refused_at <= RECENT
