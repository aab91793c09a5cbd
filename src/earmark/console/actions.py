"""The console's actions on a budget: each read from its form once, said in words on a
confirmation page, and made as one Admin call only once the operator confirms."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, replace

from earmark import limits
from earmark.client import AsyncClient
from earmark.client.types import BudgetState
from earmark.console import fields, present
from earmark.console.fields import BadInput
from earmark.core.model import HoldState
from earmark.core.prices import USD_MICROS

VERBS = ("resolve", "release", "limit", "archive")
# The amount each verb takes, by its form field, and the largest it may be.
AMOUNTS = {"resolve": ("used", limits.amount_units_max), "limit": ("limit", limits.limit_units_max)}
# Where an action returns once made: its budget's page, or the in-doubt holds of every
# budget when it was asked for there.
BACK = ("budget", "holds")


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

    def back_path(self) -> str:
        if self.back == "holds":
            return "/holds?state=in-doubt"
        return "/budget?" + urllib.parse.urlencode({"id": self.budget_id})

    def in_unit(self, unit: str) -> Action:
        """The action with its amount read in the budget's unit as people write it
        (dollars with cents for usd_micros, "10.00" too), within what the verb takes."""
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
    return Action(verb, budget_id, rid, typed, back=back)


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
            # PutBudget sets every field: the others are sent as they are.
            await client.put_budget(
                action.budget_id,
                action.amount,
                state.unit,
                default_estimate=state.default_estimate,
                estimate_policy=state.estimate_policy,
                escrow_bps=state.escrow_bps,
                overage_policy=state.overage_policy,
                overage_limit=state.overage_limit,
            )
        case _:
            await client.delete_budget(action.budget_id)
