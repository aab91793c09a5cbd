"""GetSpend's request: a budget, how to sum its spend, a time range and how many groups;
each failure names its field."""

from __future__ import annotations

from earmark import limits
from earmark.errors import InvalidArgument
from earmark.store.spend import SpendGroup, SpendQuery
from earmark.v1 import budget_pb2 as pb
from earmark.validate import budget_id, known
from earmark.validate.prices import timestamp


def spend_query(request: pb.GetSpendRequest) -> SpendQuery:
    """The budget's spend over [since, until) (either may be absent), summed by group_by,
    in at most max_rows groups."""
    budget = budget_id(request.budget_id)
    if request.group_by == pb.SPEND_GROUP_UNSPECIFIED:
        raise InvalidArgument(
            "group_by", "is required: SPEND_GROUP_MODEL, SPEND_GROUP_JOB or SPEND_GROUP_DAY"
        )
    group = known("group_by", request.group_by, SpendGroup, "SpendGroup")
    since = timestamp("since", request.since) if request.HasField("since") else None
    until = timestamp("until", request.until) if request.HasField("until") else None
    if since is not None and until is not None and until <= since:
        raise InvalidArgument("until", f"{until.isoformat()} is not after since")
    return SpendQuery(budget, group, since, until, max_rows(request.max_rows))


def max_rows(value: int) -> int:
    if value == 0:
        return limits.spend_rows_default
    if value < 0 or value > limits.spend_rows_max:
        raise InvalidArgument(
            "max_rows", f"is {value}; it must lie between 1 and {limits.spend_rows_max}"
        )
    return value
