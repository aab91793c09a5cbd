"""Pricing arithmetic and the price book: properties over generated shapes and rates, and
which version is in effect when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from fractions import Fraction
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from earmark.core import prices
from earmark.core.prices import Price, PriceBook, Shape, Usage

START = datetime(2026, 8, 1, tzinfo=UTC)

rates = st.integers(0, 10**9)
tokens = st.integers(0, 10**7)
calls = st.integers(1, 20)


def price_of(input_rate: int, output_rate: int, cached_rate: int, fee: int) -> Price:
    return Price(
        provider="p",
        model="m",
        version=1,
        effective_from=START,
        effective_to=None,
        input_per_mtok=input_rate,
        output_per_mtok=output_rate,
        cached_input_per_mtok=cached_rate,
        request_fee=fee,
    )


def exact(price: Price, uncached: int, cached: int, output: int, attempts: int) -> Fraction:
    """The cost as a rational number of micro-dollars, with no rounding at all."""
    per_call = Fraction(
        uncached * price.input_per_mtok
        + cached * price.cached_rate()
        + output * price.output_per_mtok,
        1_000_000,
    )
    return attempts * (per_call + price.request_fee)


@settings(max_examples=500, deadline=None)
@given(rates, rates, rates, st.integers(0, 10**6), tokens, tokens, tokens, calls)
def test_cost_is_the_exact_cost_rounded_up_once(
    input_rate: int,
    output_rate: int,
    cached_rate: int,
    fee: int,
    uncached: int,
    cached: int,
    output: int,
    attempts: int,
) -> None:
    """A shape's cost is never below the exact rational cost, and less than 1 micro-dollar
    above it; one call's usage of the same size costs what a one-attempt shape does."""
    price = price_of(input_rate, output_rate, cached_rate, fee)
    shape = Shape("p", "m", uncached + cached, output, cached, attempts)
    one_call = Shape("p", "m", uncached + cached, output, cached, 1)
    usage = Usage(uncached + cached, output, cached, 1)
    cost = prices.shape_cost(price, shape)
    truth = exact(price, uncached, cached, output, attempts)
    assert truth <= cost < truth + 1
    assert prices.shape_cost(price, one_call) == prices.usage_cost(price, usage)


@settings(max_examples=500, deadline=None)
@given(rates, rates, rates, st.integers(0, 10**6), tokens, tokens, tokens, calls)
def test_requests_multiply_only_the_fee(
    input_rate: int,
    output_rate: int,
    cached_rate: int,
    fee: int,
    uncached: int,
    cached: int,
    output: int,
    requests: int,
) -> None:
    """A usage's tokens are the total over all its requests: they are priced once, and the
    requests multiply only the per-request fee (the exact cost, rounded up once)."""
    price = price_of(input_rate, output_rate, cached_rate, fee)
    usage = Usage(uncached + cached, output, cached, requests)
    tokens_only = exact(
        price_of(input_rate, output_rate, cached_rate, 0), uncached, cached, output, 1
    )
    truth = tokens_only + requests * fee
    cost = prices.usage_cost(price, usage)
    assert truth <= cost < truth + 1
    assert (requests - 1) * fee == cost - prices.usage_cost(
        price, Usage(uncached + cached, output, cached, 1)
    )


@settings(max_examples=300, deadline=None)
@given(rates, rates, tokens, tokens, tokens)
def test_cache_writes_cost_their_own_rate(
    input_rate: int, write_rate: int, plain: int, written: int, output: int
) -> None:
    """Input written to the cache costs the cache-write rate (0: the input rate); the rest
    of the input costs the input rate."""
    price = Price("p", "m", 1, START, None, input_rate, 0, cache_write_per_mtok=write_rate)
    usage = Usage(plain + written, output, 0, cache_write_input_tokens=written)
    truth = Fraction(plain * input_rate + written * (write_rate or input_rate), 1_000_000)
    cost = prices.usage_cost(price, usage)
    assert truth <= cost < truth + 1


@settings(max_examples=500, deadline=None)
@given(
    rates,
    rates,
    rates,
    st.integers(0, 10**6),
    tokens,
    tokens,
    tokens,
    calls,
    st.sampled_from(["uncached", "cached", "output", "attempts"]),
    st.integers(1, 10**6),
)
def test_cost_is_monotone_in_every_count(
    input_rate: int,
    output_rate: int,
    cached_rate: int,
    fee: int,
    uncached: int,
    cached: int,
    output: int,
    attempts: int,
    grown: str,
    more: int,
) -> None:
    """More uncached input, cached input, output or attempts never costs less."""
    price = price_of(input_rate, output_rate, cached_rate, fee)
    counts = {"uncached": uncached, "cached": cached, "output": output, "attempts": attempts}
    bigger = dict(counts, **{grown: counts[grown] + more})

    def cost(c: dict[str, int]) -> int:
        shape = Shape(
            "p", "m", c["uncached"] + c["cached"], c["output"], c["cached"], c["attempts"]
        )
        return prices.shape_cost(price, shape)

    assert cost(counts) <= cost(bigger)


def test_gpt4o_preflight_call_costs_four_and_a_half_cents() -> None:
    """10,000 input and 2,000 output tokens at $2.50/$10.00 per million cost $0.045."""
    price = price_of(2_500_000, 10_000_000, 0, 0)
    assert 45_000 == prices.usage_cost(price, Usage(10_000, 2_000))


def test_cached_input_and_fees_and_attempts() -> None:
    """Cached input at its own rate (0 means the input rate), a fee per call, times calls."""
    price = price_of(3_000_000, 15_000_000, 300_000, 10_000)
    shape = Shape("p", "m", 8_000, 2_000, 6_000, attempts=3)
    # (2,000 x 3 + 6,000 x 0.3 + 2,000 x 15) per call = 37,800 + 10,000 fee, x 3.
    assert 143_400 == prices.shape_cost(price, shape)
    assert 3 * (24_000 + 30_000) == prices.shape_cost(price_of(3_000_000, 15_000_000, 0, 0), shape)


def test_two_requests_of_a_usage_charge_its_tokens_once() -> None:
    """The issue's case: 30,000 input and 2,000 output tokens over 2 requests at $1/$1 per
    million and no fee cost 32,000, not 64,000; a $0.01 fee is taken twice."""
    assert 32_000 == prices.usage_cost(
        price_of(1_000_000, 1_000_000, 0, 0), Usage(30_000, 2_000, 0, 2)
    )
    assert 52_000 == prices.usage_cost(
        price_of(1_000_000, 1_000_000, 0, 10_000), Usage(30_000, 2_000, 0, 2)
    )


def test_anthropic_cache_reads_and_writes() -> None:
    """Sonnet at $3 input, $15 output, $0.30 cache reads and $3.75 cache writes: 1,000
    plain input, 20,000 read and 5,000 written, 800 output cost 3,000 + 6,000 + 18,750 +
    12,000 micro-dollars."""
    price = Price("anthropic", "sonnet", 1, START, None, 3_000_000, 15_000_000, 300_000,
                  cache_write_per_mtok=3_750_000)  # fmt: skip
    usage = Usage(26_000, 800, 20_000, cache_write_input_tokens=5_000)
    assert 39_750 == prices.usage_cost(price, usage)


def test_tokens_budgets_count_input_and_output() -> None:
    """A tokens budget holds (input + max_output) x attempts and is charged input + output."""
    assert 30_000 == prices.shape_tokens(Shape("p", "m", 8_000, 2_000, 1_000, attempts=3))
    assert 10_000 == prices.usage_tokens(Usage(8_000, 2_000, 1_000))


def version(number: int, at: datetime, **extra: object) -> Price:
    values: dict[str, object] = {
        "provider": "deepseek",
        "model": "v4-flash",
        "version": number,
        "effective_from": at,
        "effective_to": None,
        "input_per_mtok": number,
        "output_per_mtok": number,
    }
    values.update(extra)
    return Price(**values)  # type: ignore[arg-type]


def test_the_latest_effective_version_is_in_effect() -> None:
    """A later effective_from supersedes; before it the older version holds; after an
    effective_to with no successor there is no price."""
    cutover = START + timedelta(days=15)
    book = PriceBook(
        [version(1, START), version(2, cutover, effective_to=cutover + timedelta(days=1))]
    )
    versions = [
        None if (p := book.at("deepseek", "v4-flash", at)) is None else p.version
        for at in (START - timedelta(seconds=1), START, cutover, cutover + timedelta(days=2))
    ]
    assert [None, 1, 2, 1] == versions


@given(st.integers(0, 24 * 60 - 1))
def test_peak_and_off_peak_windows_cover_the_day_once(minute: int) -> None:
    """Windows [990, 30) and [30, 990) put each minute of the day in exactly one of them."""
    cutover = START + timedelta(days=15)
    book = PriceBook(
        [
            version(1, START),
            version(2, cutover, daily_from_minute=990, daily_to_minute=30),
            version(3, cutover, daily_from_minute=30, daily_to_minute=990),
        ]
    )
    at = cutover + timedelta(days=1, minutes=minute)
    found = book.at("deepseek", "v4-flash", at)
    assert found is not None
    assert (3 if 30 <= minute < 990 else 2) == found.version


def test_a_correction_with_the_same_start_wins() -> None:
    """Two versions from the same moment: the higher version is the correction."""
    book = PriceBook([version(1, START), version(2, START)])
    found = book.at("deepseek", "v4-flash", START)
    assert found is not None
    assert 2 == found.version


@settings(max_examples=300, deadline=None)
@given(rates, rates, rates, tokens, tokens, tokens, st.integers(0, 100), st.integers(0, 10**6))
def test_long_cache_writes_and_tool_calls_are_priced_exactly(
    write_rate: int,
    long_rate: int,
    input_rate: int,
    short: int,
    long: int,
    plain: int,
    searches: int,
    fee: int,
) -> None:
    """1-hour writes cost their rate, the other writes the cache-write rate, each tool call
    its fee: the usage costs the exact sum rounded up once."""
    price = Price(
        provider="p", model="m", version=1, effective_from=START, effective_to=None,
        input_per_mtok=input_rate, output_per_mtok=0, cache_write_per_mtok=write_rate,
        cache_write_long_per_mtok=long_rate, tool_fees=(("web_search", fee),),
    )  # fmt: skip
    usage = Usage(
        input_tokens=plain + short + long, output_tokens=0,
        cache_write_input_tokens=short + long, cache_write_long_input_tokens=long,
        tool_calls=(("web_search", searches),),
    )  # fmt: skip
    exact_cost = (
        Fraction(
            plain * price.input_per_mtok
            + short * price.cache_write_rate()
            + long * price.cache_write_long_rate(),
            1_000_000,
        )
        + searches * fee
    )
    cost = prices.usage_cost(price, usage)
    assert 0 <= cost - exact_cost < 1


def test_a_price_is_looked_up_by_its_tier() -> None:
    """Each tier has its own versions; every name of the default tier finds the default."""

    def tiered(version: int, tier: str, rate: int) -> Price:
        return Price(
            provider="p", model="m", version=version, effective_from=START, effective_to=None,
            input_per_mtok=rate, output_per_mtok=0, service_tier=tier,
        )  # fmt: skip

    book = PriceBook([tiered(1, "", 1), tiered(2, "priority", 2)])
    found = [book.at("p", "m", START, tier) for tier in ("", "default", "auto", "priority", "flex")]
    assert [1, 1, 1, 2, None] == [p.input_per_mtok if p else None for p in found]


def gemini(version: int, above: int, input_rate: int, output_rate: int, **extra: object) -> Price:
    values: dict[str, object] = {
        "provider": "google", "model": "gemini-2.5-pro", "version": version,
        "effective_from": START, "effective_to": None, "input_per_mtok": input_rate,
        "output_per_mtok": output_rate, "input_tokens_above": above,
    }  # fmt: skip
    values.update(extra)
    return Price(**values)  # type: ignore[arg-type]


GEMINI_25_PRO = PriceBook(
    [gemini(1, 0, 1_250_000, 10_000_000), gemini(2, 200_000, 2_500_000, 15_000_000)]
)


@given(st.integers(0, 10**7))
def test_a_call_is_priced_by_the_highest_tier_below_its_input(input_tokens: int) -> None:
    """At or below 200,000 input tokens the base row prices a call, above it the long
    prompts' row, for all of the call's tokens."""
    found = GEMINI_25_PRO.at("google", "gemini-2.5-pro", START, input_tokens=input_tokens)
    assert found is not None
    assert (2 if input_tokens > 200_000 else 1) == found.version


def test_gemini_25_pro_tiers_price_whole_calls() -> None:
    """100,000 in / 1,000 out costs $0.135 at the base rates; 250,000 in / 1,000 out costs
    $0.64, every token at the long prompts' rates."""
    costs = []
    for input_tokens in (100_000, 250_000):
        shape = Shape("google", "gemini-2.5-pro", input_tokens, 1_000)
        price = GEMINI_25_PRO.at("google", "gemini-2.5-pro", START, input_tokens=input_tokens)
        assert price is not None
        costs.append(prices.shape_cost(price, shape))
    assert [135_000, 640_000] == costs


def test_a_newer_row_for_all_prompts_replaces_an_older_long_prompt_row() -> None:
    """A base price put later is in effect for long prompts too, as a later all-day price
    replaces an older window; a tier put with it keeps its place."""
    later = START + timedelta(days=1)
    book = PriceBook(
        [
            *GEMINI_25_PRO.versions("google", "gemini-2.5-pro"),
            gemini(3, 0, 1, 1, effective_from=later),
        ]
    )
    long_prompt = book.at("google", "gemini-2.5-pro", later, input_tokens=300_000)
    assert long_prompt is not None
    assert 3 == long_prompt.version
    both = PriceBook(
        [*book.versions("google", "gemini-2.5-pro"), gemini(4, 200_000, 2, 2, effective_from=later)]
    )
    assert [(0, 3), (200_000, 4)] == [
        (above, p.version) for above, p in both.brackets("google", "gemini-2.5-pro", later)
    ]


def test_brackets_say_which_version_prices_each_range_of_prompts() -> None:
    """The brackets of gemini-2.5-pro: the base row up to 200,000 tokens, the long row
    above; a model without tiers has one bracket."""
    brackets = GEMINI_25_PRO.brackets("google", "gemini-2.5-pro", START)
    assert [(0, 1), (200_000, 2)] == [(above, p.version) for above, p in brackets]
    assert [(0, 1)] == [
        (above, p.version)
        for above, p in PriceBook([version(1, START)]).brackets("deepseek", "v4-flash", START)
    ]


@given(
    st.integers(0, 2 * 24 * 60 - 1), st.sampled_from([(2026, 3, 8), (2026, 11, 1), (2026, 7, 1)])
)
def test_a_window_in_a_zone_with_daylight_saving_keeps_its_local_hours(
    minute: int, day: tuple[int, int, int]
) -> None:
    """A 09:00-17:00 America/New_York window holds 09:00 to 17:00 local time on the days
    daylight saving starts and ends and on a summer day: its UTC hours move with the zone."""
    zone = ZoneInfo("America/New_York")
    book = PriceBook(
        [
            version(1, START - timedelta(days=365)),
            version(
                2, START - timedelta(days=365), daily_from_minute=9 * 60, daily_to_minute=17 * 60,
                window_timezone="America/New_York",
            ),
        ]
    )  # fmt: skip
    at = datetime(*day, tzinfo=UTC) + timedelta(minutes=minute)
    local = at.astimezone(zone)
    found = book.at("deepseek", "v4-flash", at)
    assert found is not None
    assert (2 if 9 <= local.hour < 17 else 1) == found.version
