"""Checks every request field before anything runs; each failure names its field."""

from __future__ import annotations

import enum
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from earmark import limits
from earmark.core import bounds, prices
from earmark.core.model import EstimatePolicy, Outcome
from earmark.core.prices import Price, Shape, Usage
from earmark.errors import InvalidArgument
from earmark.v1 import budget_pb2 as pb

E = TypeVar("E", bound=enum.IntEnum)

# Printable ASCII without spaces: ids travel in logs, metrics and shell commands. Every
# pattern is applied with fullmatch: `$` would also match before a trailing newline.
_ID = re.compile(r"[\x21-\x7e]+")
_UNIT = re.compile(r"[a-z][a-z0-9_]*")
_LABEL_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-/]*")
# Protobuf's bound on a Duration's seconds, about 10,000 years.
_DURATION_SECONDS_MAX = 315_576_000_000
_NANOS_PER_SECOND = 1_000_000_000
# Protobuf's Timestamp range: 0001-01-01 to 9999-12-31.
_TIMESTAMP_SECONDS_MIN = -62_135_596_800
_TIMESTAMP_SECONDS_MAX = 253_402_300_799


def identifier(field: str, value: str, length_max: int) -> str:
    if not value:
        raise InvalidArgument(field, "is required")
    if len(value) > length_max:
        raise InvalidArgument(field, f"is {len(value)} characters; at most {length_max}")
    if not _ID.fullmatch(value):
        raise InvalidArgument(field, "may hold only printable ASCII characters without spaces")
    return value


def budget_id(value: str) -> str:
    return identifier("budget_id", value, limits.budget_id_length_max)


def idempotency_key(value: str) -> str:
    return identifier("idempotency_key", value, limits.idempotency_key_length_max)


def reservation_id(value: str) -> str:
    if not value:
        raise InvalidArgument("reservation_id", "is required")
    if len(value) > 64:
        raise InvalidArgument("reservation_id", "is not a reservation id (a UUID)")
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidArgument("reservation_id", f"{value!r} is not a UUID") from None


def amount(field: str, value: int, *, zero_ok: bool = False) -> int:
    low = 0 if zero_ok else 1
    if value < low:
        raise InvalidArgument(field, f"is {value}; it must be {'>= 0' if zero_ok else '> 0'}")
    if value > limits.amount_units_max:
        raise InvalidArgument(field, f"is {value}; at most {limits.amount_units_max}")
    return value


def limit(value: int) -> int:
    # The one bound on a limit, shared with the limits read from the billing provider.
    problem = bounds.limit_problem(value)
    if problem is not None:
        raise InvalidArgument("limit", f"{problem} (absent is unlimited)" if value < 0 else problem)
    return value


def unit(value: str) -> str:
    if len(value) > limits.unit_length_max:
        raise InvalidArgument(
            "unit", f"is {len(value)} characters; at most {limits.unit_length_max}"
        )
    if value and not _UNIT.fullmatch(value):
        raise InvalidArgument("unit", "must be lower-case letters, digits and _ (like usd_micros)")
    return value


def lease(present: bool, value: Duration, lease_seconds_max: float) -> timedelta:
    """An absent lease is the default; a present one lies within [min, max]."""
    if not present:
        return timedelta(seconds=min(limits.lease_seconds_default, lease_seconds_max))
    duration("lease", value)
    seconds = value.seconds + value.nanos / 1e9
    if seconds < limits.lease_seconds_min or seconds > lease_seconds_max:
        raise InvalidArgument(
            "lease",
            f"is {seconds:g}s; it must lie between {limits.lease_seconds_min:g}s "
            f"and {lease_seconds_max:g}s",
        )
    return timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)


def duration(field: str, value: Duration) -> None:
    """A normalized protobuf Duration: nanos within (-1e9, 1e9) and of the seconds' sign."""
    seconds, nanos = value.seconds, value.nanos
    if abs(seconds) > _DURATION_SECONDS_MAX:
        raise InvalidArgument(field, f"seconds {seconds} is outside the Duration range")
    if abs(nanos) >= _NANOS_PER_SECOND:
        raise InvalidArgument(field, f"nanos {nanos} is not below one second")
    if (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0):
        raise InvalidArgument(field, f"seconds {seconds} and nanos {nanos} differ in sign")


def labels(value: dict[str, str]) -> dict[str, str]:
    if len(value) > limits.label_count_max:
        raise InvalidArgument(
            "labels", f"has {len(value)} entries; at most {limits.label_count_max}"
        )
    for key, text in value.items():
        if not key or len(key) > limits.label_key_length_max or not _LABEL_KEY.fullmatch(key):
            raise InvalidArgument(
                "labels",
                f"key {key[: limits.label_key_length_max]!r} must be 1 to "
                f"{limits.label_key_length_max} of letters, digits, _ . - /",
            )
        if len(text) > limits.label_value_length_max:
            raise InvalidArgument(
                "labels", f"value of {key!r} is longer than {limits.label_value_length_max}"
            )
        if "\x00" in text:
            # PostgreSQL stores no NUL character, in text or in jsonb.
            raise InvalidArgument("labels", f"value of {key!r} holds a NUL character")
    return dict(value)


def known(field: str, value: int, kind: type[E], wire_name: str) -> E:
    """A wire enum's number as the core's enum, or INVALID_ARGUMENT naming the field."""
    try:
        return kind(value)
    except ValueError:
        raise InvalidArgument(field, f"{value} is not a known {wire_name}") from None


def outcome(value: int) -> Outcome:
    return known("outcome", value, Outcome, "Outcome")


def account(value: str) -> str:
    # An account is the first part of its cycle budgets' ids, ACCOUNT/FEATURE/CYCLE: without
    # the slash, a token's prefix "acct1/" covers the cycles of account acct1 and of no
    # other account (not "acct1/x"), and an id names one account.
    found = identifier("account", value, limits.account_length_max)
    if "/" in found:
        raise InvalidArgument("account", "may not contain '/'")
    return found


def feature(value: str) -> str:
    # A feature is part of a budget id, ACCOUNT/FEATURE/CYCLE: it may not hold the slash.
    found = identifier("feature", value, limits.feature_length_max)
    if "/" in found:
        raise InvalidArgument("feature", "may not contain '/'")
    return found


def job(value: str) -> str:
    return identifier("job", value, limits.job_length_max) if value else ""


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


def _input(prefix: str, value: pb.UsageShape | pb.TokenUsage) -> tuple[int, int, int]:
    """(input tokens, the part of them read from the provider's cache, the part written to
    it): the two parts together are at most the input."""
    input_tokens = _tokens(f"{prefix}.input_tokens", value.input_tokens)
    cached = _tokens(f"{prefix}.cached_input_tokens", value.cached_input_tokens)
    written = _tokens(f"{prefix}.cache_write_input_tokens", value.cache_write_input_tokens)
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
    return input_tokens, cached, written


def shape(value: pb.UsageShape) -> Shape:
    provider, model = _model("shape", value.provider, value.model)
    input_tokens, cached, written = _input("shape", value)
    return Shape(
        provider=provider,
        model=model,
        input_tokens=input_tokens,
        max_output_tokens=_tokens("shape.max_output_tokens", value.max_output_tokens),
        cached_input_tokens=cached,
        attempts=_calls("shape.attempts", value.attempts),
        cache_write_input_tokens=written,
    )


def usage(value: pb.TokenUsage) -> Usage:
    provider, model = "", ""
    if value.provider or value.model:
        provider, model = _model("usage", value.provider, value.model)
    input_tokens, cached, written = _input("usage", value)
    return Usage(
        input_tokens=input_tokens,
        output_tokens=_tokens("usage.output_tokens", value.output_tokens),
        cached_input_tokens=cached,
        requests=_calls("usage.requests", value.requests),
        provider=provider,
        model=model,
        cache_write_input_tokens=written,
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


def default_estimate(present: bool, value: int) -> int | None:
    return amount("default_estimate", value) if present else None


def estimate_policy(value: int) -> EstimatePolicy:
    if value == 0:
        return EstimatePolicy.MEDIAN
    return known("estimate_policy", value, EstimatePolicy, "EstimatePolicy")


def _timestamp(field: str, value: Timestamp) -> datetime:
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


def price(present: bool, value: pb.Price) -> Price:
    """A price version to append: rates bounded, a window that is not empty."""
    if not present:
        raise InvalidArgument("price", "is required")
    provider, model = _model("price", value.provider, value.model)
    if not value.HasField("effective_from"):
        raise InvalidArgument("price.effective_from", "is required")
    effective_from = _timestamp("price.effective_from", value.effective_from)
    effective_to = None
    if value.HasField("effective_to"):
        effective_to = _timestamp("price.effective_to", value.effective_to)
        if effective_to <= effective_from:
            raise InvalidArgument("price.effective_to", "must come after effective_from")
    if value.version:
        raise InvalidArgument("price.version", "is assigned by the sidecar; leave it 0")
    daily_from = _minute("price.daily_from_minute", value.daily_from_minute)
    daily_to = _minute("price.daily_to_minute", value.daily_to_minute)
    if daily_from == daily_to != 0:
        raise InvalidArgument("price.daily_to_minute", "equals daily_from_minute: no minute is in")
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
        source=source,
        captured_at=(
            _timestamp("price.captured_at", value.captured_at)
            if value.HasField("captured_at")
            else None
        ),
        daily_from_minute=daily_from,
        daily_to_minute=daily_to,
    )


def price_filter(field: str, value: str, length_max: int) -> str:
    return identifier(field, value, length_max) if value else ""
