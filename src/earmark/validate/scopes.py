"""Checks of the scopes, phases, policies and pages fields; each failure names its field."""

from __future__ import annotations

from collections.abc import Sequence

from earmark import limits
from earmark.core.model import OPEN_STATES, HoldState, Phase
from earmark.errors import InvalidArgument
from earmark.validate import identifier, known


def also_budget_ids(values: Sequence[str], own: str) -> tuple[str, ...]:
    """The other budgets of a nested Reserve: at most limits.also_budget_ids_max, each a
    budget id, distinct, and none the Reserve's own budget_id."""
    if len(values) > limits.also_budget_ids_max:
        raise InvalidArgument(
            "also_budget_ids", f"has {len(values)} entries; at most {limits.also_budget_ids_max}"
        )
    seen: set[str] = set()
    for index, value in enumerate(values):
        found = identifier(f"also_budget_ids[{index}]", value, limits.budget_id_length_max)
        if found == own:
            raise InvalidArgument(f"also_budget_ids[{index}]", f"is budget_id {own!r} again")
        if found in seen:
            raise InvalidArgument(f"also_budget_ids[{index}]", f"names {found!r} twice")
        seen.add(found)
    return tuple(values)


def phase(value: int) -> Phase:
    return Phase.WORK if value == 0 else known("phase", value, Phase, "Phase")


def page_size(value: int) -> int:
    if value == 0:
        return limits.page_size_default
    if value < 0 or value > limits.page_size_max:
        raise InvalidArgument(
            "page_size", f"is {value}; it must lie between 1 and {limits.page_size_max}"
        )
    return value


def page_token(value: str) -> str:
    """An opaque token from a previous page, bounded; its contents are checked where read."""
    if len(value) > limits.page_token_length_max:
        raise InvalidArgument("page_token", "is not a token this sidecar gave")
    return value


def hold_state(value: int) -> HoldState | None:
    """A state to list holds in; unspecified lists every state."""
    return None if value == 0 else known("state", value, HoldState, "ReservationState")


def state_across_budgets(state: HoldState | None) -> HoldState:
    """The state a ListHolds with an empty budget_id lists across every budget: it must
    name one, and an open one (closed holds list per budget)."""
    if state is None:
        raise InvalidArgument(
            "budget_id",
            "is empty, and state too; give a budget_id, or a state (RESERVATION_STATE_HELD "
            "or RESERVATION_STATE_IN_DOUBT) to list its holds across every budget",
        )
    if state not in OPEN_STATES:
        raise InvalidArgument(
            "state",
            f"is RESERVATION_STATE_{state.name}; across every budget (an empty budget_id) "
            "only RESERVATION_STATE_HELD or RESERVATION_STATE_IN_DOUBT are listed; give a "
            "budget_id for closed holds",
        )
    return state
