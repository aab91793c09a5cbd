"""The provider calls ledger kept for reconciliation (migration 0016), read a page at a time:
each call with its hold's state and settlement."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import asyncpg

from earmark.core.model import HoldState
from earmark.core.prices import Usage
from earmark.store.named import NamedQuery
from earmark.store.operator import Page, encode_token, time_cursor
from earmark.store.tx import Conn


@dataclass(frozen=True, slots=True)
class CallsQuery:
    """One page of a provider's calls sent in [since, until)."""

    provider: str
    since: datetime
    until: datetime
    key_label: str
    size: int
    token: str


@dataclass(frozen=True, slots=True)
class CallRow:
    """One provider call and what became of its hold."""

    reservation_id: str
    budget_id: str
    also_budget_ids: tuple[str, ...]
    provider: str
    model: str
    service_tier: str
    key_label: str
    sent_at: datetime
    state: HoldState
    amount: int
    charged: int
    # None until a Settle or resolve reported it.
    usage: Usage | None
    settled_used: int | None
    evidence: str
    unit: str


# Oldest first, by (sent_at, reservation_id) after the cursor; a key label keeps the calls
# sent with it and those sent with none (a worker that does not label its key).
LIST_CALLS = NamedQuery("""
SELECT c.reservation_id, c.budget_id, r.also_budget_ids, c.provider, c.model, c.service_tier,
    c.key_label, c.sent_at, r.state, r.amount, r.charged, c.input_tokens,
    c.cached_input_tokens, c.cache_write_input_tokens, c.output_tokens, c.requests,
    r.settled_used, c.evidence, b.unit
FROM calls c JOIN reservations r ON r.reservation_id = c.reservation_id
    JOIN budgets b ON b.budget_id = c.budget_id
WHERE c.provider = $provider AND c.sent_at >= $since AND c.sent_at < $until
    AND ($key_label = '' OR c.key_label IN ($key_label, ''))
    AND (c.sent_at, c.reservation_id) > ($after_at, $after_id::uuid)
ORDER BY c.sent_at, c.reservation_id
LIMIT $rows
""")


async def call_rows(
    conn: Conn,
    provider: str,
    since: datetime,
    until: datetime,
    key_label: str,
    size: int,
    token: str,
) -> list[asyncpg.Record]:
    """The rows of one page, and one more if there is a next page: see call_page."""
    after_at, after_id = time_cursor(token, since)
    args = LIST_CALLS.args(
        provider=provider,
        since=since,
        until=until,
        key_label=key_label,
        after_at=after_at,
        after_id=after_id,
        rows=size + 1,
    )
    return await conn.fetch(LIST_CALLS.sql, *args)


def call_from_row(row: asyncpg.Record) -> CallRow:
    usage = None
    if row["requests"] is not None:
        usage = Usage(
            input_tokens=row["input_tokens"],
            output_tokens=row["output_tokens"],
            cached_input_tokens=row["cached_input_tokens"],
            requests=row["requests"],
            provider=row["provider"],
            model=row["model"],
            cache_write_input_tokens=row["cache_write_input_tokens"],
            service_tier=row["service_tier"],
        )
    return CallRow(
        reservation_id=str(row["reservation_id"]),
        budget_id=row["budget_id"],
        also_budget_ids=tuple(row["also_budget_ids"]),
        provider=row["provider"],
        model=row["model"],
        service_tier=row["service_tier"],
        key_label=row["key_label"],
        sent_at=row["sent_at"],
        state=HoldState(row["state"]),
        amount=row["amount"],
        charged=row["charged"],
        usage=usage,
        settled_used=row["settled_used"],
        evidence=row["evidence"],
        unit=row["unit"],
    )


def call_page(calls: list[CallRow], size: int) -> Page[CallRow]:
    """The page of call_rows' calls; the next page's token is empty on the last page."""
    if len(calls) <= size:
        return Page(calls, "")
    last = calls[size - 1]
    return Page(calls[:size], encode_token([last.sent_at.isoformat(), last.reservation_id]))
