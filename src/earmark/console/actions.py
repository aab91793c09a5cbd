"""The console's actions on a budget: each read from its form once, said in words on a
confirmation page, and made as one Admin call only once the operator confirms."""

from __future__ import annotations

import urllib.parse
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from earmark import limits
from earmark.client import AsyncClient
from earmark.client.types import BudgetState
from earmark.console import fields, present
from earmark.console.fields import BadInput
from earmark.core.model import BudgetMode, HoldState, ThresholdBasis
from earmark.core.periods import Period
from earmark.core.prices import USD_MICROS
from earmark.ops import policies as named

VERBS = ("resolve", "release", "limit", "policies", "archive")
# The amount each verb takes, by its form field, and the largest it may be.
AMOUNTS = {"resolve": ("used", limits.amount_units_max), "limit": ("limit", limits.limit_units_max)}
# The thresholds field: every threshold a budget may have, in percent, with separators.
THRESHOLDS_TEXT_MAX = limits.thresholds_max * len("1000.00, ")
# Where an action returns once made: its budget's page, or the in-doubt holds of every
# budget when it was asked for there.
BACK = ("budget", "holds")


@dataclass(frozen=True, slots=True)
class Policies:
    """What the policies form sets of a budget (issue 34); units_per_minute is read from
    units_typed once the budget's unit is known (Action.in_unit)."""

    period: Period = Period.NEVER
    timezone: str = ""
    period_anchor: int = 0
    threshold_bps: tuple[int, ...] = ()
    mode: BudgetMode = BudgetMode.ENFORCE
    admissions_per_minute: int | None = None
    units_typed: str = ""
    units_per_minute: int | None = None
    threshold_basis: ThresholdBasis = ThresholdBasis.COMMITTED


@dataclass(frozen=True, slots=True)
class Action:
    verb: str
    budget_id: str
    reservation_id: str = ""
    # resolve: what the provider billed; limit: the new limit: as typed, and once read in
    # the budget's unit (in_unit).
    typed: str = ""
    amount: int = 0
    back: str = "budget"
    policies: Policies = field(default_factory=Policies)

    def back_path(self) -> str:
        if self.back == "holds":
            return "/holds?state=in-doubt"
        return "/budget?" + urllib.parse.urlencode({"id": self.budget_id})

    def in_unit(self, unit: str) -> Action:
        """The action with its amount read in the budget's unit as people write it
        (dollars with cents for usd_micros, "10.00" too), within what the verb takes."""
        if self.verb == "policies" and self.policies.units_typed:
            units = fields.amount(
                self.policies.units_typed, "units_per_minute", unit, 1, limits.limit_units_max
            )
            return replace(self, policies=replace(self.policies, units_per_minute=units))
        if self.verb not in AMOUNTS:
            return self
        name, high = AMOUNTS[self.verb]
        return replace(self, amount=fields.amount(self.typed, name, unit, 0, high))


def action_of(verb: str, form: dict[str, str]) -> Action:
    """The action a form asks for, every field checked but its amount, which is read once
    the budget's unit is known (Action.in_unit)."""
    if verb not in VERBS:
        raise BadInput(f"action: {verb!r} is not one of {', '.join(VERBS)}")
    budget_id = fields.text(form.get("budget"), "budget", limits.budget_id_length_max)
    back = form.get("back") or "budget"
    if back not in BACK:
        raise BadInput(f"back: {back[:64]!r} is not one of {', '.join(BACK)}")
    typed = ""
    if verb in AMOUNTS:
        name = AMOUNTS[verb][0]
        typed = fields.text(form.get(name), name, limits.amount_text_length_max)
    rid = ""
    if verb in ("resolve", "release"):
        rid = fields.reservation_id(form.get("reservation_id"))
    chosen = policies_of(form) if verb == "policies" else Policies()
    return Action(verb, budget_id, rid, typed, back=back, policies=chosen)


def _choice(raw: str | None, name: str, choices: Collection[str], default: str) -> str:
    """One of a select's choices (the default when none is sent)."""
    value = (raw or "").strip() or default
    if value not in choices:
        raise BadInput(f"{name}: {value[:32]!r} is not one of {', '.join(choices)}")
    return value


def policies_of(form: dict[str, str]) -> Policies:
    """The policies form's fields, each checked (the sidecar checks the timezone names a
    zone and the anchor fits the period, and answers naming the field)."""
    period = named.PERIODS[_choice(form.get("period"), "period", named.PERIODS, "never")]
    mode = named.MODES[_choice(form.get("mode"), "mode", named.MODES, "enforce")]
    basis_name = _choice(form.get("threshold_basis"), "threshold_basis", named.BASES, "committed")
    text = fields.text(form.get("thresholds"), "thresholds", THRESHOLDS_TEXT_MAX, False)
    try:
        thresholds = named.thresholds_of_text(text)
    except named.BadPercent as bad:
        raise BadInput(f"thresholds: {bad}") from None
    admissions = fields.text(form.get("admissions_per_minute"), "admissions_per_minute", 32, False)
    return Policies(
        period=period,
        timezone=fields.text(form.get("timezone"), "timezone", limits.timezone_length_max, False),
        period_anchor=fields.whole(form.get("period_anchor"), "period_anchor", 0, 31, 0),
        threshold_bps=thresholds,
        mode=mode,
        admissions_per_minute=(
            fields.whole(admissions, "admissions_per_minute", 1, limits.admissions_per_minute_max)
            if admissions
            else None
        ),
        units_typed=fields.text(
            form.get("units_per_minute"), "units_per_minute", limits.amount_text_length_max, False
        ),
        threshold_basis=named.BASES[basis_name],
    )


async def in_doubt_on(client: AsyncClient, action: Action) -> None:
    """Raises BadInput unless the action's hold is in doubt on its budget (resolve and
    release act only on holds in doubt, and only on the budget the page shows)."""
    holds = client.list_holds(
        action.budget_id, state=HoldState.IN_DOUBT, page_size=limits.console_page_rows_max
    )
    async for hold in present.at_most(holds, limits.console_nesting_holds_max):
        if hold.reservation_id == action.reservation_id:
            return
    raise BadInput(
        f"reservation_id: {action.reservation_id} is not a hold in doubt on {action.budget_id}"
    )


def described(action: Action, state: BudgetState) -> str:
    """What the action will do, in the budget's unit."""
    unit, budget_id = state.unit, action.budget_id
    match action.verb:
        case "resolve":
            return (
                f"Resolve hold {action.reservation_id} at {present.amount(action.amount, unit)} "
                f"spent: the rest of the hold returns to {budget_id} and every budget the "
                "hold names."
            )
        case "release":
            return (
                f"Release hold {action.reservation_id}: it keeps what it charged and the "
                f"rest returns to {budget_id} and every budget the hold names."
            )
        case "limit":
            return (
                f"Change {budget_id}'s limit from {present.amount(state.limit, unit)} to "
                f"{present.amount(action.amount, unit)}"
                + ("." if unit == USD_MICROS else f" {present.unit_name(unit)}.")
            )
        case "policies":
            return policies_described(action, state)
        case _:
            return f"Archive {budget_id}: it takes no Reserves any more; its ledger stays."


async def act(client: AsyncClient, action: Action, state: BudgetState) -> None:
    """The action's one Admin call."""
    match action.verb:
        case "resolve":
            await client.resolve_hold(action.reservation_id, action.amount)
        case "release":
            await client.release_hold(action.reservation_id)
        case "limit":
            await client.update_budget(action.budget_id, limit=action.amount)
        case "policies":
            await update_policies(client, action.budget_id, action.policies)
        case _:
            await client.delete_budget(action.budget_id)


def policies_described(action: Action, state: BudgetState) -> str:
    """What the policies form will set, in words."""
    chosen, unit = action.policies, state.unit
    period = named.period_text(chosen.period, chosen.timezone, chosen.period_anchor)
    resets = "never resets" if chosen.period == Period.NEVER else f"resets every {period}"
    calendar = (chosen.period, chosen.timezone, chosen.period_anchor)
    if calendar != (state.period, state.timezone, state.period_anchor):
        resets += " (from the next boundary)"
    thresholds = named.percents(chosen.threshold_bps)
    basis = "used + held" if chosen.threshold_basis == ThresholdBasis.COMMITTED else "used"
    notices = (
        f"notices at {', '.join(thresholds)} of the limit ({basis})" if thresholds else "no notices"
    )
    rate = named.rate_parts(chosen.admissions_per_minute, chosen.units_per_minute, unit)
    mode = (
        "observe mode (admits what it would refuse, and says so)"
        if chosen.mode == BudgetMode.OBSERVE
        else "enforce mode"
    )
    bound = f"at most {' and '.join(rate)}" if rate else "no rate bound"
    return f"Set {action.budget_id}'s policies: {mode}; {resets}; {notices}; {bound}."


async def update_policies(client: AsyncClient, budget_id: str, chosen: Policies) -> None:
    """UpdateBudget of the fields the policies form shows, and of no other: every setting
    it does not show (the limit, escrow, overage, estimates) stays as the budget has it,
    also when another operator changed one since the page was read."""
    await client.update_budget(
        budget_id,
        period=chosen.period,
        timezone=chosen.timezone,
        period_anchor=chosen.period_anchor,
        threshold_bps=chosen.threshold_bps,
        threshold_basis=chosen.threshold_basis,
        mode=chosen.mode,
        admissions_per_minute=chosen.admissions_per_minute,
        units_per_minute=chosen.units_per_minute,
    )
