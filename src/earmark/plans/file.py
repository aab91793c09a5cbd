"""The built-in stand-in for a billing provider (`--limits-provider file`): plans and
accounts from a TOML file, for a sidecar that has no billing account (a trial, a demo, a
test bench) but should behave as one that has.

    default_plan = "free"          # optional: the plan of an account not listed

    [plans.free.features]
    tokens = 10_000

    [plans.pro.features]
    tokens = 1_000_000
    images = "unlimited"           # no maximum

    [accounts.acme]
    plan = "pro"
    period_anchor = 2026-11-15T00:00:00Z   # optional: monthly periods from this instant

Everything is checked when the file is read: unknown keys, names past the bounds a Reserve's
account and feature keep, limits past PutBudget's bound; each error names its key path. The
file is looked at (mtime, size, inode) at most once every limits.plans_file_check_seconds
of the injected clock and read again when it changed; a bad edit keeps the last good plans,
logged once per edit as plans_file_rejected and counted. Usage reports go nowhere: there is
no billing account to tell, so they succeed, and `earmark usage` shows what would have been
sent.
"""

from __future__ import annotations

import asyncio
import calendar
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import structlog

from earmark import files, limits, validate
from earmark.core.bounds import limit_problem, shown
from earmark.errors import InvalidArgument
from earmark.plans.provider import Limits, Period, ProviderUnavailable

log = structlog.get_logger("earmark.plans")

# The value of a feature that has no maximum: TOML has no null.
UNLIMITED = "unlimited"
_TOP_KEYS = ("default_plan", "plans", "accounts")
_PLAN_KEYS = ("features",)
_ACCOUNT_KEYS = ("plan", "period_anchor")
# A key shown as it is in a key path; any other is quoted (and cut, as it came from outside).
_BARE_KEY = re.compile(rf"[A-Za-z0-9_-]{{1,{limits.provider_value_shown_chars_max}}}")

# What identifies one version of the file without reading it: (mtime_ns, size, inode).
Stamp = tuple[int, int, int]


class PlansFileError(ValueError):
    """The plans file cannot be used; the message names the file and the key path."""


@dataclass(frozen=True, slots=True)
class AccountEntry:
    plan: str
    # The instant the account's monthly billing periods count from; None: the sidecar's
    # --cycle-anchor-day applies.
    anchor: datetime | None


@dataclass(frozen=True, slots=True)
class Plans:
    """A plans file as read: every plan's limits by feature (None: no maximum)."""

    plans: Mapping[str, Mapping[str, int | None]]
    accounts: Mapping[str, AccountEntry]
    default_plan: str | None

    def plan_of(self, account: str) -> str | None:
        entry = self.accounts.get(account)
        return entry.plan if entry is not None else self.default_plan


def key_path(*parts: str) -> str:
    """A TOML key path as a person would type it: bare keys dotted, others quoted (and a
    long one cut, as it came from outside)."""
    return ".".join(part if _BARE_KEY.fullmatch(part) else _quoted(part) for part in parts)


def _quoted(key: str) -> str:
    cap = limits.provider_value_shown_chars_max
    return json.dumps(key if len(key) <= cap else f"{key[: cap - 3]}...")


def _table(value: object, path: str, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """value as a table, with no key but those in keys (when given)."""
    if not isinstance(value, dict):
        raise PlansFileError(f"{path}: is {_kind(value)}, not a table")
    if keys is not None:
        unknown = sorted(set(value) - set(keys))
        if unknown:
            raise PlansFileError(
                f"{path + '.' if path else ''}{key_path(unknown[0])}: is not a key here "
                f"(known: {', '.join(keys)})"
            )
    return value


def _kind(value: object) -> str:
    """What a TOML value is, in TOML's words."""
    names = {
        dict: "a table",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        datetime: "a date-time",
        date: "a date",
    }
    return names.get(type(value), "a time")


def _name(check: Callable[[str], str], path: str, value: str) -> str:
    """value checked by the rule earmark/validate applies to a Reserve's own field, so
    that every account and feature in the file can be reserved by; the error names path."""
    try:
        return check(value)
    except InvalidArgument as error:
        problem = error.message.split(": ", 1)[1]
        raise PlansFileError(f"{path}: {problem}") from None


def _plan_name(value: str) -> str:
    return validate.identifier("plan", value, limits.plan_name_length_max)


def _maximum(value: object, path: str) -> int | None:
    if value == UNLIMITED:
        return None
    if isinstance(value, str | float):
        raise PlansFileError(
            f"{path}: is {shown(value)}; give a whole number from 0 to "
            f'{limits.limit_units_max}, or "{UNLIMITED}"'
        )
    problem = limit_problem(value)
    if problem is not None:
        raise PlansFileError(f"{path}: {problem}")
    assert isinstance(value, int)
    return value


def _anchor(value: object, path: str) -> datetime:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise PlansFileError(
                f"{path}: {value.isoformat()} has no offset; give one, like 2026-11-15T00:00:00Z"
            )
        return value.astimezone(UTC)
    if isinstance(value, date):
        # A day alone: its midnight in UTC.
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    raise PlansFileError(f"{path}: is {_kind(value)}; give an instant like 2026-11-15T00:00:00Z")


def _sized(items: dict[str, Any], path: str, most: int) -> dict[str, Any]:
    if len(items) > most:
        raise PlansFileError(f"{path}: has {len(items)} entries; at most {most}")
    return items


def parse(text: str) -> Plans:
    """The plans in text; PlansFileError naming the key path of the first problem."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise PlansFileError(f"is not TOML: {error}") from None
    top = _table(document, "", _TOP_KEYS)
    if "plans" not in top:
        raise PlansFileError("plans: is missing; give at least one, like [plans.free.features]")
    plans: dict[str, dict[str, int | None]] = {}
    raw_plans = _sized(_table(top["plans"], "plans"), "plans", limits.plans_file_plans_max)
    for plan, body in raw_plans.items():
        path = key_path("plans", plan)
        _name(_plan_name, path, plan)
        features = _table(_table(body, path, _PLAN_KEYS).get("features", {}), f"{path}.features")
        _sized(features, f"{path}.features", limits.plans_file_features_max)
        plans[plan] = {}
        for feature, value in features.items():
            feature_path = key_path("plans", plan, "features", feature)
            _name(validate.feature, feature_path, feature)
            plans[plan][feature] = _maximum(value, feature_path)
    default_plan = top.get("default_plan")
    if default_plan is not None:
        if not isinstance(default_plan, str):
            raise PlansFileError(f"default_plan: is {_kind(default_plan)}, not a plan's name")
        _known(default_plan, "default_plan", plans)
    accounts: dict[str, AccountEntry] = {}
    raw_accounts = _table(top.get("accounts", {}), "accounts")
    _sized(raw_accounts, "accounts", limits.plans_file_accounts_max)
    for account, body in raw_accounts.items():
        path = key_path("accounts", account)
        _name(validate.account, path, account)
        entry = _table(body, path, _ACCOUNT_KEYS)
        chosen = entry.get("plan")
        if not isinstance(chosen, str):
            raise PlansFileError(
                f"{path}.plan: is {'missing' if chosen is None else _kind(chosen)}; "
                "give the name of a plan"
            )
        _known(chosen, f"{path}.plan", plans)
        anchor = entry.get("period_anchor")
        accounts[account] = AccountEntry(
            chosen, None if anchor is None else _anchor(anchor, f"{path}.period_anchor")
        )
    return Plans(plans, accounts, default_plan)


def _known(plan: str, path: str, plans: Mapping[str, object]) -> None:
    if plan not in plans:
        raise PlansFileError(f"{path}: names no plan of [plans] ({shown(plan)})")


def stamp_of(path: Path) -> Stamp:
    """What changes when the file is written or replaced (a ConfigMap's symlink swap)."""
    found = os.stat(path)
    return found.st_mtime_ns, found.st_size, found.st_ino


def load(path: Path) -> tuple[Plans, Stamp]:
    """The plans in the file at path and the stamp of the version read; PlansFileError
    naming the file and the problem."""
    where = f"plans_file: {path}"
    try:
        # Only a regular file, opened without blocking: a FIFO swapped in would otherwise
        # hold the reading thread, and with it the sidecar's stop, for good.
        data, found = files.read_regular(path, "plans_file", limits.plans_file_bytes_max)
        text = data.decode("utf-8")
    except files.FileProblem as error:
        raise PlansFileError(str(error)) from None
    except UnicodeDecodeError:
        raise PlansFileError(f"{where}: is not UTF-8") from None
    try:
        plans = parse(text)
    except PlansFileError as error:
        raise PlansFileError(f"{where}: {error}") from None
    return plans, (found.st_mtime_ns, found.st_size, found.st_ino)


def _month_shifted(anchor: datetime, months: int) -> datetime:
    """anchor moved by whole months; a day the month lacks (the 31st in April, the 29th in
    a February) is that month's last day, and the next month goes back to the anchor's day,
    so that periods never drift toward the start of the month."""
    index = anchor.year * 12 + anchor.month - 1 + months
    year, month = divmod(index, 12)
    day = min(anchor.day, calendar.monthrange(year, month + 1)[1])
    return anchor.replace(year=year, month=month + 1, day=day)


def period_at(anchor: datetime, at: datetime) -> Period:
    """The monthly period from anchor that contains at (before anchor too: periods run
    both ways from it)."""
    at = at.astimezone(UTC)
    months = (at.year - anchor.year) * 12 + at.month - anchor.month
    start = _month_shifted(anchor, months)
    while start > at:
        months -= 1
        start = _month_shifted(anchor, months)
    end = _month_shifted(anchor, months + 1)
    while end <= at:
        months += 1
        start, end = end, _month_shifted(anchor, months + 1)
    return Period(start, end)


class FileProvider:
    name = "file"

    def __init__(
        self,
        path: Path,
        clock: Callable[[], datetime],
        *,
        check_seconds: float = limits.plans_file_check_seconds,
        on_reload: Callable[[str], None] | None = None,
    ) -> None:
        """Reads the file at once: a bad one raises PlansFileError, so that the sidecar
        refuses to start rather than serve no plan."""
        assert 0 < check_seconds <= limits.plans_file_check_seconds
        self.path = path
        self._clock = clock
        self._check_seconds = check_seconds
        self._on_reload = on_reload or (lambda result: None)
        self._plans, self._stamp = load(path)
        self._checked_at = clock()
        # The problem last logged, so that a bad edit is logged once, not at every check.
        self._rejected: str | None = None
        self._lock = asyncio.Lock()

    @property
    def plans(self) -> Plans:
        """The plans in use: the last good version of the file."""
        return self._plans

    async def _current(self) -> Plans:
        """The plans, read again first if the check interval passed and the file changed."""
        if not self._due():
            return self._plans
        # A caller that comes while another looks at the file waits for it (the check time
        # moves only once the look is done), so that no read answers the plans it replaces.
        async with self._lock:
            if self._due():
                # A stat, and a read of at most plans_file_bytes_max when it changed: off
                # the event loop that the admissions share.
                await asyncio.to_thread(self._reload)
                self._checked_at = self._clock()
        return self._plans

    async def check(self) -> None:
        """Reads the file again if the check interval passed and it changed: the sidecar's
        background does this every interval, so that an edit is seen without waiting for a
        limit read (on_reload("loaded") then tells the gate)."""
        await self._current()

    def _due(self) -> bool:
        return (self._clock() - self._checked_at).total_seconds() >= self._check_seconds

    def _reload(self) -> None:
        try:
            if stamp_of(self.path) == self._stamp:
                return
            plans, stamp = load(self.path)
        except (OSError, PlansFileError) as error:
            problem = (
                str(error)
                if isinstance(error, PlansFileError)
                else f"plans_file: {self.path}: cannot read it ({type(error).__name__})"
            )
            if problem != self._rejected:
                self._rejected = problem
                self._on_reload("rejected")
                log.error("plans_file_rejected", error=problem, kept="the last good plans")
            return
        self._plans, self._stamp, self._rejected = plans, stamp, None
        self._on_reload("loaded")
        log.info(
            "plans_file_loaded",
            path=str(self.path),
            plans=len(plans.plans),
            accounts=len(plans.accounts),
        )

    def _plan(self, plans: Plans, account: str) -> str:
        plan = plans.plan_of(account)
        if plan is None:
            raise ProviderUnavailable(
                f"file {self.path}: account {account!r} is not listed in [accounts] and the "
                "file has no default_plan"
            )
        return plan

    async def read_limits(self, account: str) -> Limits:
        plans = await self._current()
        return dict(plans.plans[self._plan(plans, account)])

    async def read_period(self, account: str, feature: str) -> Period | None:
        plans = await self._current()
        self._plan(plans, account)
        entry = plans.accounts.get(account)
        if entry is None or entry.anchor is None:
            return None
        try:
            return period_at(entry.anchor, self._clock())
        except (ValueError, OverflowError):
            # Only an anchor near year 1 or 9999 gets here: its months leave datetime's range.
            raise ProviderUnavailable(
                f"file {self.path}: account {account!r}: no period from period_anchor "
                f"{entry.anchor.isoformat()} contains now"
            ) from None

    async def report_usage(self, account: str, feature: str, total: int, at: datetime) -> None:
        # No billing account to tell: the report succeeds, so the outbox marks it sent, and
        # `earmark usage` shows what was reported.
        return None

    def forget(self, account: str) -> None:
        # Nothing is cached per account: the file is looked at every check interval.
        return None

    async def close(self) -> None:
        return None
