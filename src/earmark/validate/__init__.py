"""Checks every request field before anything runs; each failure names its field."""

from __future__ import annotations

import enum
import re
import uuid
from datetime import timedelta
from typing import TypeVar

from google.protobuf.duration_pb2 import Duration

from earmark import limits
from earmark.core.model import Outcome
from earmark.errors import InvalidArgument

E = TypeVar("E", bound=enum.IntEnum)

# Printable ASCII without spaces: ids travel in logs, metrics and shell commands. Every
# pattern is applied with fullmatch: `$` would also match before a trailing newline.
_ID = re.compile(r"[\x21-\x7e]+")
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


def price_filter(field: str, value: str, length_max: int) -> str:
    return identifier(field, value, length_max) if value else ""
