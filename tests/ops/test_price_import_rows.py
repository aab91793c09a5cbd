"""The rows `earmark prices import` reads from genai-prices, held against genai-prices'
own arithmetic: for every model it imports of the providers the issue tried, every tier,
window, dated version and prompt length, Earmark's price book charges a call what
genai-prices says it costs (issue 44)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Any

import pytest
from genai_prices.types import Usage as GenaiUsage

from earmark.core.prices import PriceBook, Usage, counts, usage_cost
from earmark.ops import price_sources
from earmark.validate import prices as validate_prices

PROVIDERS = ("openai", "anthropic", "google", "deepseek", "groq", "azure", "mistral", "x-ai")
CAPTURED = datetime(2026, 12, 1, tzinfo=UTC)
# A day before every date genai-prices 0.2.3 starts a price on.
BEFORE_ALL = date(2024, 6, 1)
# A call's tokens besides its input: some read from the cache, some written (a quarter of
# them for an hour), output and two web searches.
CACHED, WRITTEN, WRITTEN_LONG, OUTPUT, SEARCHES = 100, 200, 50, 1_000, 2
NO_CEILINGS = price_sources.Ceilings("", {})


def _dates(model: Any) -> set[date]:
    constraints = [c.constraint for c in model.prices] if isinstance(model.prices, list) else []
    constraints += [v.constraint for v in model.price_variants or ()]
    return {c.start_date for c in constraints if hasattr(c, "start_date")}


def _genai_cost(model: Any, provider: Any, at: datetime, tier: str, input_tokens: int) -> int:
    """What genai-prices charges the call, in micro-dollars rounded up."""
    usage = GenaiUsage(
        input_tokens=input_tokens,
        cache_read_tokens=CACHED,
        cache_write_tokens=WRITTEN,
        cache_write_1h_tokens=WRITTEN_LONG,
        output_tokens=OUTPUT,
        web_searches=SEARCHES,
    )
    context = {"service_tier": tier} if tier else None
    total = model.calc_price(
        usage, provider, genai_request_timestamp=at, price_context=context
    ).total_price
    return int((total * Decimal(1_000_000)).to_integral_value(rounding=ROUND_CEILING))


def _earmark_cost(book: PriceBook, found: Any, at: datetime, tier: str, n: int) -> int | None:
    price = book.at(found.rows[0].provider, found.model, at, tier, input_tokens=n)
    if price is None:
        return None
    usage = Usage(
        input_tokens=n,
        output_tokens=OUTPUT,
        cached_input_tokens=CACHED,
        cache_write_input_tokens=WRITTEN,
        cache_write_long_input_tokens=WRITTEN_LONG,
        tool_calls=counts([("web_search", SEARCHES)]),
    )
    return usage_cost(price, usage)


@pytest.mark.parametrize("provider_id", PROVIDERS)
def test_the_book_charges_what_genai_prices_says(provider_id: str) -> None:
    """Every imported model of the provider, at each half hour of a day before any dated
    price and of each day a price starts on, for its base and each of its service tiers,
    just below and just above each prompt-length tier: the book's row (selected as the
    sidecar selects, each row valid as PutPrice takes it) charges what genai-prices does."""
    provider = price_sources.provider_entry(provider_id)
    models = {m.id: m for m in provider.models}
    mismatched = []
    for found in price_sources.catalogue(provider_id, [], NO_CEILINGS, CAPTURED):
        if found.refused:
            continue
        model = models[found.model]
        rows = [validate_prices.price(True, row) for row in found.rows]
        book = PriceBook(dataclasses.replace(p, version=i + 1) for i, p in enumerate(rows))
        tiers = sorted({p.service_tier for p in rows})
        lengths = {1_000} | {
            n for p in rows for n in (p.input_tokens_above, p.input_tokens_above + 1)
        }
        days = {BEFORE_ALL} | _dates(model)
        for day in sorted(days):
            for half_hour in range(48):
                at = datetime.combine(day, time(), UTC) + timedelta(minutes=30 * half_hour)
                for tier in tiers:
                    for n in sorted(x for x in lengths if x >= CACHED + WRITTEN):
                        theirs = _genai_cost(model, provider, at, tier, n)
                        ours = _earmark_cost(book, found, at, tier, n)
                        if theirs != ours:
                            mismatched.append((found.model, tier, at.isoformat(), n, ours, theirs))
    assert [] == mismatched[:5]


def test_no_imported_row_is_0_where_genai_prices_is_not() -> None:
    """Across the eight providers, no imported row has $0 input or $0 output where the
    database has a rate for it."""
    zero = [
        (found.model, row.service_tier, row.input_tokens_above)
        for provider_id in PROVIDERS
        for found in price_sources.catalogue(provider_id, [], NO_CEILINGS, CAPTURED)
        for row in found.rows
        if not row.input_usd_micros_per_mtok
    ]
    assert [] == zero
