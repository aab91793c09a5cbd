"""What one batch decides on and what it decides: the state the store loads for a budget,
the answers and writes, and the small steps every operation shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from earmark.core import rules
from earmark.core.estimates import SampleKey
from earmark.core.model import (
    Budget,
    ChargeRecord,
    Hold,
    HoldState,
    LedgerEntry,
    LedgerKind,
    PeriodTotals,
)
from earmark.core.notices import Event
from earmark.core.ops import Result
from earmark.core.prices import PriceBook
from earmark.core.ratelimit import AdmissionWindow
from earmark.core.records import CallRecord
from earmark.core.templates import Template
from earmark.errors import (
    EarmarkError,
    FailedPrecondition,
    PermissionDenied,
    Reason,
    budget_not_found,
    reservation_not_found,
)


@dataclass(slots=True)
class BatchState:
    """What the store loaded for one batch: the budget (None if it does not exist),
    the holds the batch names, by id and by (owner, idempotency key), earlier charge
    answers, the price book, and the job samples the batch reads or adds to (shared by the
    states of one transaction, since jobs span budgets of one unit). budgets holds every
    budget the transaction locked, this one among them, shared by the states of one
    transaction: a hold on nested budgets moves them all."""

    budget_id: str
    budget: Budget | None
    budgets: dict[str, Budget] = field(default_factory=dict)
    holds_by_id: dict[str, Hold] = field(default_factory=dict)
    holds_by_key: dict[tuple[str, str], Hold] = field(default_factory=dict)
    charges: dict[tuple[str, str], ChargeRecord] = field(default_factory=dict)
    prices: PriceBook = field(default_factory=PriceBook)
    samples: dict[SampleKey, list[int]] = field(default_factory=dict)
    # Admission counters of the accounts the batch's Reserves name, shared like samples.
    windows: dict[str, AdmissionWindow] = field(default_factory=dict)
    # The closed periods the batch's holds belong to, by (budget_id, period_no), shared
    # like budgets: a hold reserved before its budget's boundary moves these.
    closed: dict[tuple[str, int], PeriodTotals] = field(default_factory=dict)
    # The templates of the budgets that follow one and whose period rolls in this batch,
    # by template id (core.templates.refresh), shared like budgets.
    templates: dict[str, Template] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.budget is not None:
            assert self.budgets.setdefault(self.budget_id, self.budget) is self.budget


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
    # Every budget whose row changed, by id.
    touched: dict[str, Budget] = field(default_factory=dict)
    # Holds that went into doubt, and the ids of holds that came out of it.
    doubted: list[Hold] = field(default_factory=list)
    undoubted: list[str] = field(default_factory=list)
    # What reconciliation needs of each provider call sent or settled, by reservation id.
    calls: dict[str, CallRecord] = field(default_factory=dict)
    # Periods this batch closed (new rows), and closed periods whose counters it moved.
    closed_new: dict[tuple[str, int], PeriodTotals] = field(default_factory=dict)
    closed_moved: dict[tuple[str, int], PeriodTotals] = field(default_factory=dict)
    # Notices caused by this batch, written with it.
    events: list[Event] = field(default_factory=list)
    # Budgets whose temporary limit ended (core.raises), by id: their limit is written by a
    # statement of its own, since the batch's budget row carries no limit.
    lapsed: dict[str, Budget] = field(default_factory=dict)
    # Budgets that took their template's newer settings as their new period began (core.
    # templates.refresh), by id: their settings are written by a statement of their own.
    refreshed: dict[str, Budget] = field(default_factory=dict)

    def writes_anything(self) -> bool:
        return bool(self.new_holds or self.changed_holds or self.new_charges or self.ledger)


def require_live(state: BatchState, decision: BatchDecision, hold: Hold, now: datetime) -> None:
    """Charge and Renew need a live hold; one whose lease passed lapses here and now."""
    if rules.lease_passed(hold, now):
        lapse(state, decision, hold, now)
    if hold.state is not HoldState.HELD:
        raise not_held(hold)


def not_held(hold: Hold, why: str = "") -> FailedPrecondition:
    """The error for a hold that is not in the state an operation needs, with the reason
    its state gives (HOLD_EXPIRED, HOLD_SETTLED, HOLD_IN_DOUBT, HOLD_NOT_IN_DOUBT)."""
    match hold.state:
        case HoldState.HELD:
            reason = Reason.HOLD_NOT_IN_DOUBT
        case HoldState.SETTLED:
            reason = Reason.HOLD_SETTLED
        case HoldState.EXPIRED:
            reason = Reason.HOLD_EXPIRED
        case HoldState.IN_DOUBT:
            reason = Reason.HOLD_IN_DOUBT
        case unreachable:
            assert_never(unreachable)
    return FailedPrecondition(
        f"reservation {hold.reservation_id} is {hold.state.name}{why}",
        reason,
        reservation_id=hold.reservation_id,
        state=hold.state.name,
    )


def lapse(state: BatchState, decision: BatchDecision, hold: Hold, now: datetime) -> None:
    """A live hold whose lease passed. Undispatched, it expires: the job keeps what it
    charged, the rest returns. Dispatched, the provider may have accepted the call (and
    bill for it), so returning the hold could let the budget be spent twice: it goes into
    doubt, still held, until the worker settles it late or an operator resolves it."""
    if not hold.dispatched:
        close(state, decision, hold, LedgerKind.EXPIRE, now)
        return
    move(state, decision, hold, LedgerKind.IN_DOUBT, 0, 0, now)
    hold.state = HoldState.IN_DOUBT
    decision.changed_holds[hold.reservation_id] = hold
    decision.doubted.append(hold)


def close(
    state: BatchState, decision: BatchDecision, hold: Hold, kind: LedgerKind, now: datetime
) -> int:
    """Closes an open hold without a Settle (expiry, or an operator's release): the job
    keeps what it charged and the rest returns to every budget of the hold; returns what
    returned."""
    held_delta = rules.expire_held(hold)
    move(state, decision, hold, kind, held_delta, 0, now, opened=-1)
    if hold.state is HoldState.IN_DOUBT:
        decision.undoubted.append(hold.reservation_id)
    hold.state = HoldState.EXPIRED
    hold.closed_at = now
    decision.changed_holds[hold.reservation_id] = hold
    return -held_delta


def budgets_of(state: BatchState, hold: Hold) -> list[Budget]:
    """Every budget of the hold, its own first; the store locked them all."""
    return [_locked(state, budget_id) for budget_id in hold.budget_ids()]


def _locked(state: BatchState, budget_id: str) -> Budget:
    budget = state.budgets.get(budget_id)
    if budget is None:
        raise budget_not_found(budget_id)
    return budget


def move(
    state: BatchState,
    decision: BatchDecision,
    hold: Hold,
    kind: LedgerKind,
    held_delta: int,
    used_delta: int,
    now: datetime,
    *,
    opened: int = 0,
) -> None:
    """Moves every budget of the hold by the same deltas, with a ledger entry on each, in
    the period of each that the hold belongs to (its current one, or a closed one). Every
    budget and period is found before any moves, so that a missing one changes nothing."""
    counters = counters_of(state, hold)
    for index, budget in enumerate(budgets_of(state, hold)):
        budget_id = budget.budget_id
        period_no = hold.period_on(index)
        target = counters[index]
        target.held += held_delta
        target.used += used_delta
        target.open_reservations += opened
        if target is budget:
            decision.touched[budget_id] = budget
        else:
            assert isinstance(target, PeriodTotals)
            if opened:
                # A hold of a closed period opened or closed: the budget's count of them.
                budget.open_earlier += opened
                decision.touched[budget_id] = budget
            key = (budget_id, period_no)
            if key not in decision.closed_new:
                decision.closed_moved[key] = target
        decision.ledger.append(
            LedgerEntry(
                budget_id, hold.reservation_id, kind, held_delta, used_delta, now, period_no
            )
        )


def counters_of(state: BatchState, hold: Hold) -> list[Budget | PeriodTotals]:
    """The counters a hold moves on each of its budgets: the budget's own when the hold is
    of its current period, else the closed period's the store loaded."""
    found: list[Budget | PeriodTotals] = []
    for index, budget in enumerate(budgets_of(state, hold)):
        period_no = hold.period_on(index)
        if period_no == budget.period_no:
            found.append(budget)
            continue
        closed = state.closed.get((budget.budget_id, period_no))
        assert closed is not None, f"period {period_no} of {budget.budget_id!r} not loaded"
        found.append(closed)
    return found


def budget_of(state: BatchState) -> Budget:
    if state.budget is None:
        raise budget_not_found(state.budget_id)
    return state.budget


def hold_of(state: BatchState, reservation_id: str, owner: str | None) -> Hold:
    """The hold an operation names; owner None is an operator's, who may act on any."""
    hold = state.holds_by_id.get(reservation_id)
    if hold is None or hold.budget_id != state.budget_id:
        raise reservation_not_found(reservation_id)
    if owner is not None and hold.owner != owner:
        raise PermissionDenied(
            f"reservation {reservation_id} belongs to another caller",
            Reason.HOLD_OF_ANOTHER_CALLER,
            reservation_id=reservation_id,
        )
    return hold
