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

# A hold's shape is stored as a JSON array (rows.py): provider, model, input tokens, ...
# service tier at position 8 (absent in shapes stored before it existed: the default tier).
# A model's prices in effect come by prompt-length bracket: a hold's input tokens in
# (above, upto], or [0, upto] for the base bracket (above 0), say which version is its.
DUE = f"""
SELECT r.reservation_id::text AS reservation_id, r.created_at
FROM open_holds o
JOIN reservations r USING (reservation_id)
JOIN unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $8::bigint[], $9::bigint[])
     AS now_in(provider, model, tier, version, above, upto)
  ON now_in.provider = (r.shape::jsonb ->> 0) AND now_in.model = (r.shape::jsonb ->> 1)
 AND now_in.tier = coalesce(r.shape::jsonb ->> 8, '')
 AND ((r.shape::jsonb ->> 2)::bigint > now_in.above OR now_in.above = 0)
 AND (r.shape::jsonb ->> 2)::bigint <= now_in.upto
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


# The most input tokens of the last bracket: any a shape can have.
_ALL_TOKENS = 2**63 - 1
# (provider, model, tier, version, above, upto): the version in effect for the calls of
# that tier whose input tokens are in the bracket (above, upto].
InEffect = tuple[str, str, str, int, int, int]


def in_effect(book: PriceBook, at: datetime) -> list[InEffect]:
    """Every price in effect at `at`, by provider, model, tier and prompt-length bracket."""
    found: list[InEffect] = []
    for (provider, model), versions in book.by_model().items():
        for each in {tier(p.service_tier) for p in versions}:
            brackets = book.brackets(provider, model, at, each)
            ends = [above for above, _ in brackets[1:]] + [_ALL_TOKENS]
            for (above, price), upto in zip(brackets, ends, strict=True):
                found.append((provider, model, each, price.version, above, upto))
    return sorted(found)


async def due(
    conn: Conn, now_in: list[InEffect], limit: int, after: After | None = None
) -> list[After]:
    """The holds priced at another version than now_in's (in_effect), at most limit, oldest
    first, after `after` (None: from the oldest): each as its paging key, its id last."""
    if not now_in:
        return []
    at, last_id = after if after is not None else (None, None)
    rows = await conn.fetch(
        DUE,
        [each[0] for each in now_in],
        [each[1] for each in now_in],
        [each[2] for each in now_in],
        [each[3] for each in now_in],
        limit,
        at,
        last_id,
        [each[4] for each in now_in],
        [each[5] for each in now_in],
    )
    return [(row["created_at"], row["reservation_id"]) for row in rows]
