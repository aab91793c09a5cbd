"""What a budget spent, summed from its ledger (Admin's GetSpend): the used its entries
moved over a time range, by the model its holds' calls went to, by the holds' job, or by
UTC day; and which holds an operator released (ListHolds' Hold.released)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from earmark.errors import budget_not_found
from earmark.store.named import NamedQuery
from earmark.store.tx import Conn


class SpendGroup(enum.IntEnum):
    """How spend is summed; the numbers are the wire enum's."""

    MODEL = 1
    JOB = 2
    DAY = 3


@dataclass(frozen=True, slots=True)
class SpendQuery:
    """A budget's spend over [since, until) (None: no bound), in at most rows groups."""

    budget_id: str
    group: SpendGroup
    since: datetime | None
    until: datetime | None
    rows: int


@dataclass(frozen=True, slots=True)
class SpendRow:
    key: str
    used: int
    # How many holds' entries moved used in the group.
    holds: int


@dataclass(frozen=True, slots=True)
class Spend:
    """The first groups, and what every group together used and how many there are."""

    unit: str
    rows: list[SpendRow]
    used: int
    groups: int


# A group's key. A hold's model is the one its call was recorded as sent to (migration
# 0016), else its shape's (a hold reserved by shape and settled by an amount records no
# call): provider/model, as core.amounts.model_key writes it; "" for a hold that named
# none. The ledger's times are timestamptz: a day is the UTC calendar day.
_MODEL = """coalesce(c.provider || '/' || c.model,
    concat_ws('/', nullif(r.shape::json ->> 0, ''), nullif(r.shape::json ->> 1, '')))"""
_KEYS = {
    SpendGroup.MODEL: (
        _MODEL,
        "LEFT JOIN reservations r ON r.reservation_id = s.reservation_id "
        "LEFT JOIN calls c ON c.reservation_id = s.reservation_id",
    ),
    SpendGroup.JOB: (
        "coalesce(r.job, '')",
        "LEFT JOIN reservations r ON r.reservation_id = s.reservation_id",
    ),
    SpendGroup.DAY: ("to_char(s.at AT TIME ZONE 'UTC', 'YYYY-MM-DD')", ""),
}
# Which groups an answer cut at its rows keeps: the most used ones, or the newest days.
_ORDER = {
    SpendGroup.MODEL: "used DESC, key",
    SpendGroup.JOB: "used DESC, key",
    SpendGroup.DAY: "key DESC",
}

# The budget's entries that moved used in the range, read from migration 0018's index on
# (budget_id, at) (the bounds written so that it can use them: an absent bound is an
# infinite one), on Admin's pool and behind its gate, like a page of the ledger's listing.
# What a call reads grows with the entries in its range. The window functions run before
# LIMIT: every group counts in groups and total.
_SPEND = """
WITH spent AS (
    SELECT l.reservation_id, l.used_delta, l.at FROM ledger l
    WHERE l.budget_id = $budget_id AND l.used_delta <> 0
        AND l.at >= coalesce($since::timestamptz, '-infinity'::timestamptz)
        AND l.at < coalesce($until::timestamptz, 'infinity'::timestamptz)
),
grouped AS (
    SELECT {key} AS key, sum(s.used_delta)::bigint AS used,
        count(DISTINCT s.reservation_id) AS holds
    FROM spent s {joins}
    GROUP BY 1
)
SELECT key, used, holds, count(*) OVER () AS groups, (sum(used) OVER ())::bigint AS total
FROM grouped
ORDER BY {order}
LIMIT $rows
"""
SPEND = {
    group: NamedQuery(_SPEND.format(key=key, joins=joins, order=_ORDER[group]))
    for group, (key, joins) in _KEYS.items()
}

# Of the given holds, those with a release entry in the ledger (migration 0017's index).
RELEASED_AMONG = """
SELECT DISTINCT reservation_id::text AS reservation_id FROM ledger
WHERE kind = 'release' AND reservation_id = ANY($1::uuid[])
"""


async def spend_rows(conn: Conn, query: SpendQuery) -> tuple[str, list[asyncpg.Record]]:
    """The budget's unit and its first query.rows groups (NotFound for no such budget)."""
    unit = await conn.fetchval("SELECT unit FROM budgets WHERE budget_id = $1", query.budget_id)
    if unit is None:
        raise budget_not_found(query.budget_id)
    sql = SPEND[query.group]
    args = sql.args(
        budget_id=query.budget_id, since=query.since, until=query.until, rows=query.rows
    )
    return unit, await conn.fetch(sql.sql, *args)


def spend_of(unit: str, rows: Sequence[asyncpg.Record]) -> Spend:
    first = rows[0] if rows else None
    return Spend(
        unit=unit,
        rows=[SpendRow(r["key"], r["used"], r["holds"]) for r in rows],
        used=first["total"] if first else 0,
        groups=first["groups"] if first else 0,
    )


async def released_among(conn: Conn, reservation_ids: Sequence[str]) -> set[str]:
    """Which of the holds an operator's ReleaseHold closed (rather than their lease)."""
    if not reservation_ids:
        return set()
    rows = await conn.fetch(RELEASED_AMONG, list(reservation_ids))
    return {row["reservation_id"] for row in rows}
