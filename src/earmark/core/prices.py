"""Prices: a model's rate versions, which one is in effect at a moment, and what a token
shape or a provider's reported usage costs at it.

All amounts are integers: rates are micro-dollars per million tokens, costs are
micro-dollars, and every cost is rounded up once, at the end, so that a hold is never
below the exact rational cost and never above it by a micro-dollar or more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from earmark.core import periods

# Budgets in these units can be priced from tokens; other units take amounts only.
USD_MICROS = "usd_micros"
TOKENS = "tokens"
PRICED_UNITS = (USD_MICROS, TOKENS)

TOKENS_PER_RATE = 1_000_000
MICROS_PER_DOLLAR = 1_000_000
MINUTES_PER_DAY = 24 * 60

# Counts by kind (server tool calls, a tool's fee), sorted by kind: hashable and compared
# the same whatever order they were given in.
Counts = tuple[tuple[str, int], ...]

# What providers call their default service tier: priced as the tier with no name.
DEFAULT_TIERS = frozenset({"", "default", "auto", "standard"})


def tier(name: str) -> str:
    """A service tier as the price book keys it: "" for the default tier, by any name."""
    return "" if name in DEFAULT_TIERS else name


def counts(pairs: Iterable[tuple[str, int]]) -> Counts:
    """Counts by kind, sorted, without zeros."""
    return tuple(sorted((kind, n) for kind, n in pairs if n))


@dataclass(frozen=True, slots=True)
class Price:
    """One version of a model's rates, in effect from effective_from until effective_to
    (None: until a version with a later effective_from), within its daily UTC window."""

    provider: str
    model: str
    version: int
    effective_from: datetime
    effective_to: datetime | None
    input_per_mtok: int
    output_per_mtok: int
    # 0: cached input costs what input costs.
    cached_input_per_mtok: int = 0
    request_fee: int = 0
    source: str = ""
    captured_at: datetime | None = None
    daily_from_minute: int = 0
    daily_to_minute: int = 0
    # 0: input written to the provider's cache costs what input costs.
    cache_write_per_mtok: int = 0
    # The most output tokens one call may produce (0: unknown): the cap a call that sets
    # none is sent with.
    max_output_tokens: int = 0
    # 0: a 1-hour cache write costs what a cache write costs.
    cache_write_long_per_mtok: int = 0
    # The service tier these rates are for ("": the default).
    service_tier: str = ""
    # A fee per server tool call, by kind.
    tool_fees: Counts = ()
    # A prompt-length tier: for calls whose input tokens are above this many (0: the base
    # row), all of their tokens at these rates.
    input_tokens_above: int = 0
    # The IANA zone the daily window's minutes are of ("": UTC).
    window_timezone: str = ""

    def applies_to(self, input_tokens: int) -> bool:
        """Whether a call of input_tokens is in this row's prompt-length tier."""
        return self.input_tokens_above == 0 or input_tokens > self.input_tokens_above

    def cached_rate(self) -> int:
        return self.cached_input_per_mtok or self.input_per_mtok

    def cache_write_rate(self) -> int:
        return self.cache_write_per_mtok or self.input_per_mtok

    def cache_write_long_rate(self) -> int:
        return self.cache_write_long_per_mtok or self.cache_write_rate()

    def tool_fee(self, kind: str) -> int | None:
        """The fee of one call of the server tool kind; None when the price has none."""
        return dict(self.tool_fees).get(kind)

    def unpriced_tools(self, calls: Counts) -> list[str]:
        """The kinds of calls this price has no fee for."""
        fees = dict(self.tool_fees)
        return [kind for kind, _ in calls if kind not in fees]

    def in_effect(self, at: datetime) -> bool:
        if at < self.effective_from:
            return False
        if self.effective_to is not None and at >= self.effective_to:
            return False
        return in_daily_window(
            self.daily_from_minute, self.daily_to_minute, at, self.window_timezone
        )


def in_daily_window(from_minute: int, to_minute: int, at: datetime, timezone: str = "") -> bool:
    """[from, to) in minutes after midnight in timezone (UTC when ""); both 0 is all day;
    from > to wraps."""
    if from_minute == to_minute == 0:
        return True
    if timezone:
        at = at.astimezone(periods.zone_named(timezone))
    minute = at.hour * 60 + at.minute
    if from_minute < to_minute:
        return from_minute <= minute < to_minute
    return minute >= from_minute or minute < to_minute


@dataclass(frozen=True, slots=True)
class Shape:
    """What a job may consume: the provider calls a hold covers and each call's tokens."""

    provider: str
    model: str
    input_tokens: int
    max_output_tokens: int
    cached_input_tokens: int = 0
    attempts: int = 1
    cache_write_input_tokens: int = 0
    # The part of cache_write_input_tokens written at the 1-hour rate.
    cache_write_long_input_tokens: int = 0
    service_tier: str = ""
    # The most server tool calls of each kind each attempt may make.
    max_tool_calls: Counts = ()
    # The call sets no output limit: it is sent with the model's ceiling
    # (Price.max_output_tokens), which max_output_tokens is then set to when it is priced.
    output_ceiling: bool = False

    def names_model_only(self) -> bool:
        """A shape without tokens names the model whose history an estimate learns from."""
        return self.input_tokens == 0 and self.max_output_tokens == 0 and not self.output_ceiling


@dataclass(frozen=True, slots=True)
class Usage:
    """What a provider reported; provider and model may be "" when the hold names them."""

    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    requests: int = 1
    provider: str = ""
    model: str = ""
    cache_write_input_tokens: int = 0
    # The part of cache_write_input_tokens written at the 1-hour rate.
    cache_write_long_input_tokens: int = 0
    # "": the tier of the hold's shape.
    service_tier: str = ""
    tool_calls: Counts = ()


def _tokens_cost(
    price: Price, *, input_tokens: int, cached: int, written: int, written_long: int, output: int
) -> int:
    """One call's tokens at the price, in micro-dollars times TOKENS_PER_RATE (not yet
    rounded). input_tokens counts every input token; cached of them were read from the
    provider's cache and written of them were written to it (written_long of those for an
    hour), each at its own rate."""
    assert cached >= 0
    assert 0 <= written_long <= written
    assert cached + written <= input_tokens
    assert output >= 0
    return (
        (input_tokens - cached - written) * price.input_per_mtok
        + cached * price.cached_rate()
        + (written - written_long) * price.cache_write_rate()
        + written_long * price.cache_write_long_rate()
        + output * price.output_per_mtok
    )


def _tools_cost(price: Price, calls: Counts) -> int:
    """The server tool calls' fees, scaled as _tokens_cost is; every kind must be priced."""
    return sum(n * (price.tool_fee(kind) or 0) for kind, n in calls) * TOKENS_PER_RATE


def _rounded_up(scaled: int) -> int:
    # Ceiling division of a non-negative integer: one rounding, always up.
    return -(-scaled // TOKENS_PER_RATE)


def shape_cost(price: Price, shape: Shape) -> int:
    """The conservative ceiling: every attempt at its full input and maximum output, and
    each attempt's request fee."""
    assert shape.attempts >= 1
    per_call = _tokens_cost(
        price,
        input_tokens=shape.input_tokens,
        cached=shape.cached_input_tokens,
        written=shape.cache_write_input_tokens,
        written_long=shape.cache_write_long_input_tokens,
        output=shape.max_output_tokens,
    ) + _tools_cost(price, shape.max_tool_calls)
    return _rounded_up(shape.attempts * (per_call + price.request_fee * TOKENS_PER_RATE))


def usage_cost(price: Price, usage: Usage) -> int:
    """What the provider bills for the usage it reported: its tokens are the total over
    all its requests, so they are priced once; only the per-request fee is multiplied by
    the requests."""
    assert usage.requests >= 1
    tokens = _tokens_cost(
        price,
        input_tokens=usage.input_tokens,
        cached=usage.cached_input_tokens,
        written=usage.cache_write_input_tokens,
        written_long=usage.cache_write_long_input_tokens,
        output=usage.output_tokens,
    ) + _tools_cost(price, usage.tool_calls)
    return _rounded_up(tokens + usage.requests * price.request_fee * TOKENS_PER_RATE)


def shape_tokens(shape: Shape) -> int:
    return (shape.input_tokens + shape.max_output_tokens) * shape.attempts


def usage_tokens(usage: Usage) -> int:
    return usage.input_tokens + usage.output_tokens


class PriceBook:
    """Every price version, by provider and model; seq tells the store whether the
    versions it loaded are still all there are (prices are append-only)."""

    def __init__(self, prices: Iterable[Price] = (), seq: int = 0) -> None:
        self.seq = seq
        self._by_model: dict[tuple[str, str], list[Price]] = {}
        for price in prices:
            self._by_model.setdefault((price.provider, price.model), []).append(price)

    def __len__(self) -> int:
        return sum(len(versions) for versions in self._by_model.values())

    def at(
        self,
        provider: str,
        model: str,
        at: datetime,
        service_tier: str = "",
        input_tokens: int = 0,
    ) -> Price | None:
        """The price of the tier in effect at `at` for a call of input_tokens: of the tier's
        versions in effect then (their windows contain it) whose prompt-length tier the call
        is in (input_tokens_above 0, or below input_tokens), the one with the latest
        effective_from, then the longest prompts' tier, then the highest version (a
        correction). A newer row for all prompts thus replaces an older long-prompt one, as
        a newer all-day row replaces an older window."""
        assert input_tokens >= 0
        wanted = tier(service_tier)
        live = [
            p
            for p in self._by_model.get((provider, model), ())
            if p.service_tier == wanted and p.applies_to(input_tokens) and p.in_effect(at)
        ]
        return max(
            live, key=lambda p: (p.effective_from, p.input_tokens_above, p.version), default=None
        )

    def brackets(
        self, provider: str, model: str, at: datetime, service_tier: str = ""
    ) -> list[tuple[int, Price]]:
        """The prices of the tier in effect at `at` by prompt length: (n, price) for the
        calls of more than n input tokens up to the next pair's n (all prompts from the
        first, n 0), each the price `at` picks for them."""
        above = sorted(
            {0}
            | {
                p.input_tokens_above
                for p in self._by_model.get((provider, model), ())
                if p.service_tier == tier(service_tier) and p.in_effect(at)
            }
        )
        found: list[tuple[int, Price]] = []
        for n in above:
            # A call of n + 1 tokens is in every tier up to n's, as any longer call up to
            # the next threshold is; the base (n 0) also prices calls of 0 tokens.
            price = self.at(provider, model, at, service_tier, n + 1 if n else 0)
            if price is not None and (not found or found[-1][1] != price):
                found.append((n, price))
        return found

    def by_model(self) -> dict[tuple[str, str], list[Price]]:
        """Every version, by provider and model."""
        return {key: list(versions) for key, versions in self._by_model.items()}

    def version(self, provider: str, model: str, version: int) -> Price | None:
        for price in self._by_model.get((provider, model), ()):
            if price.version == version:
                return price
        return None

    def versions(self, provider: str, model: str) -> list[Price]:
        return list(self._by_model.get((provider, model), ()))
