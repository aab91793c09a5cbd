"""Checks of what is priced: a Reserve's shape, the usage a Charge, Settle or Reserve
reports, and a price version; each failure names its field."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from zoneinfo import ZoneInfoNotFoundError

from google.protobuf.timestamp_pb2 import Timestamp

from earmark import limits
from earmark.core import periods, prices
from earmark.core.prices import Counts, Price, Shape, Usage
from earmark.errors import InvalidArgument
from earmark.v1 import budget_pb2 as pb
from earmark.validate import amount, identifier

_NANOS_PER_SECOND = 1_000_000_000
# Protobuf's Timestamp range: 0001-01-01 to 9999-12-31.
_TIMESTAMP_SECONDS_MIN = -62_135_596_800
_TIMESTAMP_SECONDS_MAX = 253_402_300_799


def _tokens(field: str, value: int) -> int:
    if value < 0 or value > limits.tokens_per_request_max:
        raise InvalidArgument(
            field, f"is {value}; it must lie between 0 and {limits.tokens_per_request_max}"
        )
    return value


def _calls(field: str, value: int) -> int:
    """0 means 1; at most limits.attempts_max."""
    if value < 0 or value > limits.attempts_max:
        raise InvalidArgument(field, f"is {value}; it must lie between 0 and {limits.attempts_max}")
    return value or 1


def _model(prefix: str, provider: str, model: str) -> tuple[str, str]:
    return (
        identifier(f"{prefix}.provider", provider, limits.provider_length_max),
        identifier(f"{prefix}.model", model, limits.model_length_max),
    )


def service_tier(field: str, value: str) -> str:
    """A provider's service tier, as given: a usage's "default" says the provider ran the
    call at the default tier, where "" says nothing (the hold's tier applies). The price
    book keys tiers by prices.tier."""
    return identifier(field, value, limits.service_tier_length_max) if value else ""


def _counts(field: str, value: Mapping[str, int], most: int) -> Counts:
    """Counts by kind (server tool calls, a tool's fees): at most limits.tool_kinds_max
    kinds, each a plain name, each count from 0 to most."""
    if len(value) > limits.tool_kinds_max:
        raise InvalidArgument(field, f"has {len(value)} kinds; at most {limits.tool_kinds_max}")
    for kind, n in value.items():
        identifier(f"{field}.key", kind, limits.tool_kind_length_max)
        if not 0 <= n <= most:
            raise InvalidArgument(f"{field}[{kind}]", f"is {n}; it must lie between 0 and {most}")
    return prices.counts(value.items())


def _input(prefix: str, value: pb.UsageShape | pb.TokenUsage) -> tuple[int, int, int, int]:
    """(input tokens, the part of them read from the provider's cache, the part written to
    it, the part of those written for an hour): the two parts together are at most the
    input."""
    input_tokens = _tokens(f"{prefix}.input_tokens", value.input_tokens)
    cached = _tokens(f"{prefix}.cached_input_tokens", value.cached_input_tokens)
    written = _tokens(f"{prefix}.cache_write_input_tokens", value.cache_write_input_tokens)
    long = _tokens(f"{prefix}.cache_write_long_input_tokens", value.cache_write_long_input_tokens)
    if cached > input_tokens:
        raise InvalidArgument(
            f"{prefix}.cached_input_tokens", f"is {cached}, more than input_tokens ({input_tokens})"
        )
    if cached + written > input_tokens:
        raise InvalidArgument(
            f"{prefix}.cache_write_input_tokens",
            f"is {written}; with cached_input_tokens ({cached}) more than input_tokens "
            f"({input_tokens}), which counts both",
        )
    if long > written:
        raise InvalidArgument(
            f"{prefix}.cache_write_long_input_tokens",
            f"is {long}, more than cache_write_input_tokens ({written}), which counts it",
        )
    return input_tokens, cached, written, long


def shape(value: pb.UsageShape) -> Shape:
    provider, model = _model("shape", value.provider, value.model)
    input_tokens, cached, written, long = _input("shape", value)
    most = _tokens("shape.max_output_tokens", value.max_output_tokens)
    if value.output_ceiling and most:
        raise InvalidArgument(
            "shape.output_ceiling",
            f"is set with max_output_tokens {most}: a call with its own maximum is held for it",
        )
    return Shape(
        provider=provider,
        model=model,
        input_tokens=input_tokens,
        max_output_tokens=most,
        output_ceiling=value.output_ceiling,
        cached_input_tokens=cached,
        attempts=_calls("shape.attempts", value.attempts),
        cache_write_input_tokens=written,
        cache_write_long_input_tokens=long,
        service_tier=service_tier("shape.service_tier", value.service_tier),
        max_tool_calls=_counts(
            "shape.max_tool_calls", value.max_tool_calls, limits.tool_calls_per_request_max
        ),
    )


def usage(value: pb.TokenUsage, prefix: str = "usage") -> Usage:
    provider, model = "", ""
    if value.provider or value.model:
        provider, model = _model(prefix, value.provider, value.model)
    input_tokens, cached, written, long = _input(prefix, value)
    return Usage(
        input_tokens=input_tokens,
        output_tokens=_tokens(f"{prefix}.output_tokens", value.output_tokens),
        cached_input_tokens=cached,
        requests=_calls(f"{prefix}.requests", value.requests),
        provider=provider,
        model=model,
        cache_write_input_tokens=written,
        cache_write_long_input_tokens=long,
        service_tier=service_tier(f"{prefix}.service_tier", value.service_tier),
        tool_calls=_counts(
            f"{prefix}.tool_calls", value.tool_calls, limits.tool_calls_per_request_max
        ),
    )


def reserve_amount(request: pb.ReserveRequest) -> tuple[int, Shape | None]:
    """amount > 0, or a shape with amount 0, or neither (an estimate); never both."""
    if request.amount < 0 or request.amount > limits.amount_units_max:
        amount("amount", request.amount)
    if not request.HasField("shape"):
        return request.amount, None
    if request.amount:
        raise InvalidArgument("amount", "and shape are both given; a Reserve names one or neither")
    return 0, shape(request.shape)


def amount_or_usage(
    field: str, value: int, has_usage: bool, message: pb.TokenUsage
) -> tuple[int, Usage | None]:
    """An amount (`field`) or usage, exactly one of them: Charge and Settle."""
    if not has_usage:
        return amount(field, value, zero_ok=field == "used"), None
    if value:
        raise InvalidArgument(field, "and usage are both given; a request names one of them")
    return 0, usage(message)


def timestamp(field: str, value: Timestamp) -> datetime:
    if not _TIMESTAMP_SECONDS_MIN <= value.seconds <= _TIMESTAMP_SECONDS_MAX:
        raise InvalidArgument(field, f"seconds {value.seconds} is outside years 1 to 9999")
    if not 0 <= value.nanos < _NANOS_PER_SECOND:
        raise InvalidArgument(field, f"nanos {value.nanos} is not within [0, 1e9)")
    return value.ToDatetime(tzinfo=UTC)


def _rate(field: str, value: int, maximum: int) -> int:
    if value < 0 or value > maximum:
        raise InvalidArgument(field, f"is {value}; it must lie between 0 and {maximum}")
    return value


def _minute(field: str, value: int) -> int:
    if not 0 <= value < prices.MINUTES_PER_DAY:
        raise InvalidArgument(field, f"is {value}; it must lie between 0 and 1439")
    return value


def _window_timezone(name: str) -> str:
    """The IANA zone a daily window is in, or "" for UTC."""
    if not name:
        return ""
    if len(name) > limits.timezone_length_max:
        raise InvalidArgument(
            "price.window_timezone", f"is longer than {limits.timezone_length_max} characters"
        )
    try:
        periods.zone_named(name)
    except ZoneInfoNotFoundError:
        raise InvalidArgument("price.window_timezone", f"{name!r} is no IANA timezone") from None
    return name


def price(present: bool, value: pb.Price) -> Price:
    """A price version to append: rates bounded, a window that is not empty."""
    if not present:
        raise InvalidArgument("price", "is required")
    provider, model = _model("price", value.provider, value.model)
    if not value.HasField("effective_from"):
        raise InvalidArgument("price.effective_from", "is required")
    effective_from = timestamp("price.effective_from", value.effective_from)
    effective_to = None
    if value.HasField("effective_to"):
        effective_to = timestamp("price.effective_to", value.effective_to)
        if effective_to <= effective_from:
            raise InvalidArgument("price.effective_to", "must come after effective_from")
    if value.version:
        raise InvalidArgument("price.version", "is assigned by the sidecar; leave it 0")
    daily_from = _minute("price.daily_from_minute", value.daily_from_minute)
    daily_to = _minute("price.daily_to_minute", value.daily_to_minute)
    if daily_from == daily_to != 0:
        raise InvalidArgument("price.daily_to_minute", "equals daily_from_minute: no minute is in")
    window_timezone = _window_timezone(value.window_timezone)
    source = value.source
    if len(source) > limits.price_source_length_max or "\x00" in source:
        raise InvalidArgument(
            "price.source", f"must be at most {limits.price_source_length_max} characters, no NUL"
        )
    rate_max = limits.rate_usd_micros_per_mtok_max
    return Price(
        provider=provider,
        model=model,
        version=0,
        effective_from=effective_from,
        effective_to=effective_to,
        input_per_mtok=_rate(
            "price.input_usd_micros_per_mtok", value.input_usd_micros_per_mtok, rate_max
        ),
        output_per_mtok=_rate(
            "price.output_usd_micros_per_mtok", value.output_usd_micros_per_mtok, rate_max
        ),
        cached_input_per_mtok=_rate(
            "price.cached_input_usd_micros_per_mtok",
            value.cached_input_usd_micros_per_mtok,
            rate_max,
        ),
        request_fee=_rate(
            "price.request_usd_micros", value.request_usd_micros, limits.request_fee_usd_micros_max
        ),
        cache_write_per_mtok=_rate(
            "price.cache_write_usd_micros_per_mtok",
            value.cache_write_usd_micros_per_mtok,
            rate_max,
        ),
        cache_write_long_per_mtok=_rate(
            "price.cache_write_long_usd_micros_per_mtok",
            value.cache_write_long_usd_micros_per_mtok,
            rate_max,
        ),
        max_output_tokens=_tokens("price.max_output_tokens", value.max_output_tokens),
        service_tier=prices.tier(service_tier("price.service_tier", value.service_tier)),
        tool_fees=_counts(
            "price.tool_usd_micros", value.tool_usd_micros, limits.request_fee_usd_micros_max
        ),
        source=source,
        input_tokens_above=_tokens("price.input_tokens_above", value.input_tokens_above),
        window_timezone=window_timezone,
        captured_at=(
            timestamp("price.captured_at", value.captured_at)
            if value.HasField("captured_at")
            else None
        ),
        daily_from_minute=daily_from,
        daily_to_minute=daily_to,
    )
