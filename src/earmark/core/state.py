"""What one batch decides on and what it decides: the state the store loads for a budget,
the answers and writes, and the small steps every operation shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from earmark.core import rules
from earmark.core.estimates import SampleKey
from earmark.core.model import (
    Budget,
    ChargeRecord,
    Hold,
    HoldState,
    LedgerEntry,
    LedgerKind,
)
from earmark.core.ops import Result
from earmark.core.prices import PriceBook
from earmark.core.ratelimit import AdmissionWindow
from earmark.errors import EarmarkError, FailedPrecondition, NotFound, PermissionDenied


@dataclass(slots=True)
class BatchState:
    """What the store loaded for one batch: the budget (None if it does not exist),
    the holds the batch names, by id and by (owner, idempotency key), earlier charge
    answers, the price book, and the job samples the batch reads or adds to (shared by the
    states of one transaction, since jobs span budgets of one unit)."""

    budget_id: str
    budget: Budget | None
    holds_by_id: dict[str, Hold] = field(default_factory=dict)
    holds_by_key: dict[tuple[str, str], Hold] = field(default_factory=dict)
    charges: dict[tuple[str, str], ChargeRecord] = field(default_factory=dict)
    prices: PriceBook = field(default_factory=PriceBook)
    samples: dict[SampleKey, list[int]] = field(default_factory=dict)
    # Admission counters of the accounts the batch's Reserves name, shared like samples.
    windows: dict[str, AdmissionWindow] = field(default_factory=dict)


@dataclass(slots=True)
class BatchDecision:
    """Every answer in arrival order, and every write the answers depend on."""

    results: list[Result | EarmarkError] = field(default_factory=list)
    new_holds: list[Hold] = field(default_factory=list)
    changed_holds: dict[str, Hold] = field(default_factory=dict)
    new_charges: list[ChargeRecord] = field(default_factory=list)
    ledger: list[LedgerEntry] = field(default_factory=list)
    # Job samples that settles added to; their whole lists are written back.
    samples: set[SampleKey] = field(default_factory=set)
    # Accounts whose admission counters moved.
    windows: set[str] = field(default_factory=set)

    def writes_anything(self) -> bool:
        return bool(self.new_holds or self.changed_holds or self.new_charges or self.ledger)


def require_live(state: BatchState, decision: BatchDecision, hold: Hold, now: datetime) -> None:
    """Charge and Renew need a live hold; one whose lease passed is closed here and now."""
    if rules.lease_passed(hold, now):
        expire(state, decision, hold, now)
    if hold.state is not HoldState.HELD:
        raise FailedPrecondition(f"reservation {hold.reservation_id} is {hold.state.name}")


def expire(state: BatchState, decision: BatchDecision, hold: Hold, now: datetime) -> None:
    budget = budget_of(state)
    held_delta = rules.expire_held(hold)
    budget.held += held_delta
    budget.open_reservations -= 1
    hold.state = HoldState.EXPIRED
    hold.closed_at = now
    decision.changed_holds[hold.reservation_id] = hold
    ledger_entry(decision, hold, LedgerKind.EXPIRE, held_delta, 0, now)


def budget_of(state: BatchState) -> Budget:
    if state.budget is None:
        raise NotFound(f"budget {state.budget_id!r} not found")
    return state.budget


def hold_of(state: BatchState, reservation_id: str, owner: str) -> Hold:
    hold = state.holds_by_id.get(reservation_id)
    if hold is None or hold.budget_id != state.budget_id:
        raise NotFound(f"reservation {reservation_id} not found")
    if hold.owner != owner:
        raise PermissionDenied(f"reservation {reservation_id} belongs to another caller")
    return hold


def ledger_entry(
    decision: BatchDecision,
    hold: Hold,
    kind: LedgerKind,
    held_delta: int,
    used_delta: int,
    now: datetime,
) -> None:
    decision.ledger.append(
        LedgerEntry(
            budget_id=hold.budget_id,
            reservation_id=hold.reservation_id,
            kind=kind,
            held_delta=held_delta,
            used_delta=used_delta,
            at=now,
        )
    )
