"""The SQL of the price book: versions appended by operators, listed, never changed."""

from __future__ import annotations

import json

import asyncpg

from earmark import limits
from earmark.core.prices import Price
from earmark.errors import FailedPrecondition, Reason
from earmark.store.named import NamedQuery
from earmark.store.rows import PRICE_COLUMNS, price_from_row
from earmark.store.tx import Conn

# Every Earmark process takes this transaction-scoped advisory lock before it appends a
# price, so that versions of one model increase without gaps and the count holds.
_PRICES_LOCK_KEY = 0x45505243  # "EPRC"

INSERT_PRICE = NamedQuery(f"""
INSERT INTO prices (provider, model, version, effective_from, effective_to, input_per_mtok,
                    output_per_mtok, cached_input_per_mtok, request_fee, source, captured_at,
                    daily_from_minute, daily_to_minute, cache_write_per_mtok,
                    max_output_tokens, cache_write_long_per_mtok, service_tier, tool_fees,
                    input_tokens_above, window_timezone)
VALUES ($provider, $model,
        (SELECT coalesce(max(version), 0) + 1 FROM prices
         WHERE provider = $provider AND model = $model),
        $effective_from, $effective_to, $input_per_mtok, $output_per_mtok,
        $cached_input_per_mtok, $request_fee, $source, $captured_at,
        $daily_from_minute, $daily_to_minute, $cache_write_per_mtok,
        $max_output_tokens, $cache_write_long_per_mtok, $service_tier, $tool_fees::jsonb,
        $input_tokens_above, $window_timezone)
RETURNING {PRICE_COLUMNS}
""")

# '' matches every provider (or model): ListPrices filters by what it is given.
LIST_PRICES = NamedQuery(f"""
SELECT {PRICE_COLUMNS} FROM prices
WHERE ($provider = '' OR provider = $provider) AND ($model = '' OR model = $model)
ORDER BY provider, model, version
LIMIT $limit
""")


async def insert_price(conn: Conn, price: Price) -> Price:
    """Appends price as its model's next version; at most limits.price_versions_max."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _PRICES_LOCK_KEY)
    # READ COMMITTED: after the lock, this sees every version committed before it.
    count = await conn.fetchval("SELECT count(*) FROM prices")
    if count >= limits.price_versions_max:
        raise FailedPrecondition(
            f"price: the price book holds {count} versions, the most it may "
            f"(limits.price_versions_max = {limits.price_versions_max})",
            Reason.PRICE_BOOK_FULL,
        )
    args = INSERT_PRICE.args(
        provider=price.provider,
        model=price.model,
        effective_from=price.effective_from,
        effective_to=price.effective_to,
        input_per_mtok=price.input_per_mtok,
        output_per_mtok=price.output_per_mtok,
        cached_input_per_mtok=price.cached_input_per_mtok,
        request_fee=price.request_fee,
        source=price.source,
        captured_at=price.captured_at,
        daily_from_minute=price.daily_from_minute,
        daily_to_minute=price.daily_to_minute,
        cache_write_per_mtok=price.cache_write_per_mtok,
        max_output_tokens=price.max_output_tokens,
        cache_write_long_per_mtok=price.cache_write_long_per_mtok,
        service_tier=price.service_tier,
        tool_fees=json.dumps(dict(price.tool_fees)),
        input_tokens_above=price.input_tokens_above,
        window_timezone=price.window_timezone,
    )
    row = await conn.fetchrow(INSERT_PRICE.sql, *args)
    assert row is not None
    return price_from_row(row)


async def price_rows(conn: Conn, provider: str, model: str) -> list[asyncpg.Record]:
    """The rows of every price version of the provider and model ("" for any), for
    rows.price_from_row."""
    args = LIST_PRICES.args(provider=provider, model=model, limit=limits.price_versions_max)
    return await conn.fetch(LIST_PRICES.sql, *args)
