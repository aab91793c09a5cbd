"""ListCalls' and ResolveHold's evidence: what reconciliation sends."""

from __future__ import annotations

from datetime import UTC, datetime

from earmark import limits
from earmark.errors import InvalidArgument
from earmark.store.calls import CallsQuery
from earmark.v1 import budget_pb2 as pb
from earmark.validate import identifier, price_filter
from earmark.validate import scopes as validate_scopes
from earmark.validate.prices import timestamp

# No end: the last time a Timestamp can name.
_END = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


def calls_query(request: pb.ListCallsRequest) -> CallsQuery:
    """A listing of one provider's calls over [since, until); without until, to the end."""
    provider = identifier("provider", request.provider, limits.provider_length_max)
    if not request.HasField("since"):
        raise InvalidArgument("since", "is required")
    since = timestamp("since", request.since)
    until = timestamp("until", request.until) if request.HasField("until") else _END
    if until <= since:
        raise InvalidArgument("until", f"{until.isoformat()} is not after since")
    return CallsQuery(
        provider=provider,
        since=since,
        until=until,
        key_label=price_filter("key_label", request.key_label, limits.label_value_length_max),
        size=validate_scopes.page_size(request.page_size),
        token=validate_scopes.page_token(request.page_token),
    )


def evidence(value: str) -> str:
    """A resolve's evidence: free text, bounded, that PostgreSQL takes (protobuf has
    already refused a string that is not UTF-8)."""
    if len(value) > limits.evidence_length_max:
        raise InvalidArgument(
            "evidence", f"is {len(value)} characters long; at most {limits.evidence_length_max}"
        )
    if "\x00" in value:
        raise InvalidArgument("evidence", "holds a NUL character")
    return value
