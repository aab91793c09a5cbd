"""Checks of a budget's policies (issue 34: period, notices, mode, rate windows); each
failure names its field."""

from __future__ import annotations

from collections.abc import Sequence

from earmark import limits
from earmark.core import periods, thresholds
from earmark.core.model import BudgetMode, Policies
from earmark.errors import InvalidArgument
from earmark.validate import known


def mode(value: int) -> BudgetMode:
    if value == 0:
        return BudgetMode.ENFORCE
    return known("mode", value, BudgetMode, "BudgetMode")


def per_minute(name: str, present: bool, value: int, most: int) -> int | None:
    """A rate window's bound: absent, none; else from 1 to most."""
    if not present:
        return None
    if not 1 <= value <= most:
        raise InvalidArgument(name, f"is {value}; it must lie between 1 and {most}")
    return value


def policies(
    *,
    period: int,
    timezone: str,
    anchor: int,
    threshold_bps: Sequence[int],
    has_limit: bool,
    mode_value: int,
    admissions: tuple[bool, int],
    units: tuple[bool, int],
) -> Policies:
    """The policies PutBudget sets, or InvalidArgument naming the first field that is
    wrong."""
    try:
        calendar = periods.checked(period, timezone, anchor)
    except periods.BadCalendar as bad:
        raise InvalidArgument(bad.field, str(bad).removeprefix(f"{bad.field}: ")) from None
    try:
        checked = thresholds.checked(list(threshold_bps))
    except thresholds.BadThresholds as bad:
        raise InvalidArgument("threshold_bps", str(bad).removeprefix("threshold_bps: ")) from None
    if checked and not has_limit:
        raise InvalidArgument("threshold_bps", "needs a limit: thresholds are shares of it")
    return Policies(
        calendar=calendar,
        threshold_bps=checked,
        mode=mode(mode_value),
        admissions_per_minute=per_minute(
            "admissions_per_minute", *admissions, limits.admissions_per_minute_max
        ),
        units_per_minute=per_minute("units_per_minute", *units, limits.limit_units_max),
    )
