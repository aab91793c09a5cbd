"""PutBudget's rules (issue 43): what an operator sets of a budget, as plain data, checked
whole, each failure naming its field. PutBudget checks a request's fields with them, and
UpdateBudget the merge of a request's named fields into the stored budget (core.updates)
inside the store's transaction, so both refuse alike: the same checks, in the same order,
with the same errors. They live in core because the store runs them, which may import
neither the service nor its validation."""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from earmark import limits
from earmark.core import bounds, periods, thresholds
from earmark.core.model import (
    Budget,
    BudgetMode,
    EstimatePolicy,
    OveragePolicy,
    Policies,
    ThresholdBasis,
)
from earmark.errors import InvalidArgument

E = TypeVar("E", bound=enum.IntEnum)

_UNIT = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Fields:
    """A PutBudgetRequest as plain data: an absent optional is None, an enum its wire
    number (0: unspecified), a string as sent. Nothing in it is checked yet."""

    budget_id: str
    limit: int | None = None
    unit: str = ""
    default_estimate: int | None = None
    estimate_policy: int = 0
    escrow_bps: int = 0
    overage_policy: int = 0
    overage_limit: int | None = None
    period: int = 0
    timezone: str = ""
    period_anchor: int = 0
    threshold_bps: tuple[int, ...] = ()
    mode: int = 0
    admissions_per_minute: int | None = None
    units_per_minute: int | None = None
    threshold_basis: int = 0
    max_open_holds: int | None = None
    max_admissions: int | None = None
    closes_at: datetime | None = None


def known(field: str, value: int, kind: type[E], wire_name: str) -> E:
    """A wire enum's number as the core's enum, or INVALID_ARGUMENT naming the field."""
    try:
        return kind(value)
    except ValueError:
        raise InvalidArgument(field, f"{value} is not a known {wire_name}") from None


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


def default_estimate(value: int | None) -> int | None:
    if value is None:
        return None
    if value < 1:
        raise InvalidArgument("default_estimate", f"is {value}; it must be > 0")
    if value > limits.amount_units_max:
        raise InvalidArgument("default_estimate", f"is {value}; at most {limits.amount_units_max}")
    return value


def estimate_policy(value: int) -> EstimatePolicy:
    if value == 0:
        return EstimatePolicy.MEDIAN
    return known("estimate_policy", value, EstimatePolicy, "EstimatePolicy")


def escrow_bps(value: int, has_limit: bool) -> int:
    if value < 0 or value > limits.escrow_bps_max:
        raise InvalidArgument(
            "escrow_bps", f"is {value}; it must lie between 0 and {limits.escrow_bps_max}"
        )
    if value and not has_limit:
        raise InvalidArgument("escrow_bps", "needs a limit: an unlimited budget keeps no escrow")
    return value


def overage_policy(value: int) -> OveragePolicy:
    if value == 0:
        return OveragePolicy.HARD
    return known("overage_policy", value, OveragePolicy, "OveragePolicy")


def overage_limit(value: int | None, policy: OveragePolicy) -> int | None:
    """How far past its limit a SOFT budget may go; only SOFT takes one."""
    if value is None:
        return None
    if policy is not OveragePolicy.SOFT:
        raise InvalidArgument("overage_limit", "is only for overage_policy OVERAGE_POLICY_SOFT")
    if value < 0 or value > limits.limit_units_max:
        raise InvalidArgument(
            "overage_limit", f"is {value}; it must lie between 0 and {limits.limit_units_max}"
        )
    return value


def mode(value: int) -> BudgetMode:
    if value == 0:
        return BudgetMode.ENFORCE
    return known("mode", value, BudgetMode, "BudgetMode")


def threshold_basis(value: int) -> ThresholdBasis:
    """What the thresholds measure; unspecified (0) is COMMITTED, used + held."""
    if value == 0:
        return ThresholdBasis.COMMITTED
    return known("threshold_basis", value, ThresholdBasis, "ThresholdBasis")


def per_minute(name: str, value: int | None, most: int) -> int | None:
    """A rate window's bound: absent, none; else from 1 to most."""
    if value is None:
        return None
    if not 1 <= value <= most:
        raise InvalidArgument(name, f"is {value}; it must lie between 1 and {most}")
    return value


def run_limit(name: str, value: int | None, most: int) -> int | None:
    """A run limit (issue 47): absent, none; else from 0 (nothing admitted) to most."""
    if value is None:
        return None
    if not 0 <= value <= most:
        raise InvalidArgument(name, f"is {value}; it must lie between 0 and {most}")
    return value


def closes_at(value: datetime | None) -> datetime | None:
    """When a budget stops admitting: absent, never; else an aware instant."""
    if value is not None and value.tzinfo is None:
        raise InvalidArgument("closes_at", "must name its timezone")
    return value


def policies(
    *,
    period: int,
    timezone: str,
    anchor: int,
    threshold_bps: Sequence[int],
    has_limit: bool,
    mode_value: int,
    admissions: int | None,
    units: int | None,
    basis: int = 0,
    open_holds: int | None = None,
    admissions_max: int | None = None,
    closes: datetime | None = None,
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
            "admissions_per_minute", admissions, limits.admissions_per_minute_max
        ),
        units_per_minute=per_minute("units_per_minute", units, limits.limit_units_max),
        threshold_basis=threshold_basis(basis),
        max_open_holds=run_limit("max_open_holds", open_holds, limits.open_holds_max),
        max_admissions=run_limit("max_admissions", admissions_max, limits.amount_units_max),
        closes_at=closes_at(closes),
    )


@dataclass(frozen=True, slots=True)
class Spec:
    """What PutBudget sets, checked: the budget's own settings (a Budget at zero, its
    policies applied) and the policies apart, as the store's put_budget takes them."""

    budget: Budget
    policies: Policies


def checked(given: Fields) -> Spec:
    """given's settings, checked in PutBudget's order (each field, then those that depend
    on another: escrow and thresholds on a limit, an overage limit on SOFT), or
    InvalidArgument naming the first field that is wrong. The budget id is the caller's to
    check; a unit of "" keeps the budget's."""
    has_limit = given.limit is not None
    budget = Budget(
        budget_id=given.budget_id,
        limit=limit(given.limit) if given.limit is not None else None,
        unit=unit(given.unit),
        default_estimate=default_estimate(given.default_estimate),
        estimate_policy=estimate_policy(given.estimate_policy),
        escrow_bps=escrow_bps(given.escrow_bps, has_limit),
    )
    budget.overage_policy = overage_policy(given.overage_policy)
    budget.overage_limit = overage_limit(given.overage_limit, budget.overage_policy)
    chosen = policies(
        period=given.period,
        timezone=given.timezone,
        anchor=given.period_anchor,
        threshold_bps=given.threshold_bps,
        has_limit=has_limit,
        mode_value=given.mode,
        admissions=given.admissions_per_minute,
        units=given.units_per_minute,
        basis=given.threshold_basis,
        open_holds=given.max_open_holds,
        admissions_max=given.max_admissions,
        closes=given.closes_at,
    )
    return Spec(chosen.applied(budget), chosen)


def fields_of(budget: Budget) -> Fields:
    """What an operator set of budget, as the PutBudgetRequest that would set it again."""
    return Fields(
        budget_id=budget.budget_id,
        limit=budget.limit,
        unit=budget.unit,
        default_estimate=budget.default_estimate,
        estimate_policy=int(budget.estimate_policy),
        escrow_bps=budget.escrow_bps,
        overage_policy=int(budget.overage_policy),
        overage_limit=budget.overage_limit,
        period=int(budget.period),
        timezone=budget.timezone,
        period_anchor=budget.period_anchor,
        threshold_bps=tuple(budget.threshold_bps),
        mode=int(budget.mode),
        admissions_per_minute=budget.admissions_per_minute,
        units_per_minute=budget.units_per_minute,
        threshold_basis=int(budget.threshold_basis),
        max_open_holds=budget.max_open_holds,
        max_admissions=budget.max_admissions,
        closes_at=budget.closes_at,
    )
