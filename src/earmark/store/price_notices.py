"""The SQL of price.changed (issue 44): each price version noticed once, when it takes
effect. A put in effect at once writes its notice in its own transaction; the repricer's
pass writes those of the versions whose effective_from has passed since (migration 0026).

prices.noticed_at marks a version noticed (the one write prices' append-only trigger
allows). The pass locks the versions it notices FOR UPDATE SKIP LOCKED, so that two
sidecars' passes never take the same one (a pass that waited would find it noticed
anyway: READ COMMITTED reads the row again), and the events' unique dedupe key drops a
notice already written, as it does the batches'.
"""

from __future__ import annotations

import json
from datetime import datetime

from earmark.core import notices
from earmark.core.notices import Event
from earmark.core.prices import Price
from earmark.store import pricebook
from earmark.store.named import NamedQuery
from earmark.store.rows import PRICE_COLUMNS, price_from_row
from earmark.store.tx import Conn

# The versions in effect by now and not noticed, oldest first, taken from other passes.
DUE = NamedQuery(f"""
SELECT {PRICE_COLUMNS} FROM prices
WHERE noticed_at IS NULL AND effective_from <= $now
ORDER BY effective_from, price_id
LIMIT $limit
FOR UPDATE SKIP LOCKED
""")

MARK = NamedQuery("""
UPDATE prices SET noticed_at = $now
WHERE noticed_at IS NULL AND (provider, model, version) IN (
    SELECT * FROM unnest($providers::text[], $models::text[], $versions::bigint[]))
""")

INSERT_EVENTS = NamedQuery("""
INSERT INTO events (event_id, kind, budget_id, dedupe_key, payload, created_at)
SELECT * FROM unnest($event_ids::text[], $kinds::text[], $budget_ids::text[],
                     $dedupe_keys::text[], $payloads::jsonb[], $created_ats::timestamptz[])
ON CONFLICT DO NOTHING
""")


async def _events(conn: Conn, prices: list[Price], now: datetime) -> list[Event]:
    """The notices of prices, each with the version of its selector it follows."""
    versions: dict[tuple[str, str], list[Price]] = {}
    for price in prices:
        key = (price.provider, price.model)
        if key not in versions:
            rows = await pricebook.price_rows(conn, *key)
            versions[key] = [price_from_row(row) for row in rows]
    return [
        notices.price_event(p, notices.replaced(versions[(p.provider, p.model)], p), now)
        for p in prices
    ]


async def write(conn: Conn, prices: list[Price], now: datetime) -> int:
    """Writes the notices of prices (in effect by now) and marks them noticed; returns how
    many notices were new."""
    if not prices:
        return 0
    events = await _events(conn, prices, now)
    inserted = await conn.execute(
        INSERT_EVENTS.sql,
        *INSERT_EVENTS.args(
            event_ids=[e.event_id for e in events],
            kinds=[e.kind for e in events],
            budget_ids=[e.budget_id for e in events],
            dedupe_keys=[e.dedupe_key for e in events],
            payloads=[json.dumps(e.payload) for e in events],
            created_ats=[e.created_at for e in events],
        ),
    )
    await conn.execute(
        MARK.sql,
        *MARK.args(
            now=now,
            providers=[p.provider for p in prices],
            models=[p.model for p in prices],
            versions=[p.version for p in prices],
        ),
    )
    # "INSERT 0 n"
    return int(inserted.rsplit(" ", 1)[1])


async def notice_due(conn: Conn, now: datetime, limit: int) -> int:
    """Notices at most limit versions whose effective_from has passed by now and that no
    other pass holds; returns how many were noticed."""
    rows = await conn.fetch(DUE.sql, *DUE.args(now=now, limit=limit))
    return await write(conn, [price_from_row(row) for row in rows], now)
