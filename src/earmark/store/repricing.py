"""The SQL of repricing at the cutover: which open holds priced by shape are priced at a
version that is no longer the one in effect for their model and tier.

The versions in effect are the price book's (core/prices.py decides which is in effect
when, windows and tiers included), sent as arrays, so that the database returns only the
holds that are due, at most a bound of them, oldest first: holds whose price did not move
never fill the page. The pages are keyed on (created_at, reservation_id), which no write
to an open hold changes, so that a scan goes on after the last hold of its page: holds it
could not move (their budget has no room for the new price) never hide the ones behind.
"""

from __future__ import annotations

from datetime import datetime

from earmark.core.model import EstimateSource
from earmark.core.prices import PriceBook, tier
from earmark.store.tx import Conn

# A hold's shape is stored as a JSON array (rows.py): provider, model, ... service tier at
# position 8 (absent in shapes stored before it existed: the default tier).
DUE = f"""
SELECT r.reservation_id::text AS reservation_id, r.created_at
FROM open_holds o
JOIN reservations r USING (reservation_id)
JOIN unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) AS now_in(provider, model, tier,
     version)
  ON now_in.provider = (r.shape::jsonb ->> 0) AND now_in.model = (r.shape::jsonb ->> 1)
 AND now_in.tier = coalesce(r.shape::jsonb ->> 8, '')
WHERE o.expires_at IS NOT NULL
  AND r.charged = 0 AND r.source = {int(EstimateSource.SHAPE)} AND r.shape IS NOT NULL
  AND r.price_version <> now_in.version
  AND ($6::timestamptz IS NULL OR (r.created_at, r.reservation_id) > ($6, $7::uuid))
ORDER BY r.created_at, r.reservation_id
LIMIT $5
"""

# Where a scan of the due holds goes on from: the (created_at, reservation_id) of the last
# hold it took.
After = tuple[datetime, str]


def in_effect(book: PriceBook, at: datetime) -> list[tuple[str, str, str, int]]:
    """(provider, model, tier, version) of every price in effect at `at`."""
    found: dict[tuple[str, str, str], int] = {}
    for (provider, model), versions in book.by_model().items():
        for each in {tier(p.service_tier) for p in versions}:
            price = book.at(provider, model, at, each)
            if price is not None:
                found[(provider, model, each)] = price.version
    return [(*key, version) for key, version in sorted(found.items())]


async def due(
    conn: Conn, now_in: list[tuple[str, str, str, int]], limit: int, after: After | None = None
) -> list[After]:
    """The holds priced at another version than now_in's (in_effect), at most limit, oldest
    first, after `after` (None: from the oldest): each as its paging key, its id last."""
    if not now_in:
        return []
    at, last_id = after if after is not None else (None, None)
    rows = await conn.fetch(
        DUE,
        [p for p, _, _, _ in now_in],
        [m for _, m, _, _ in now_in],
        [t for _, _, t, _ in now_in],
        [v for _, _, _, v in now_in],
        limit,
        at,
        last_id,
    )
    return [(row["created_at"], row["reservation_id"]) for row in rows]
