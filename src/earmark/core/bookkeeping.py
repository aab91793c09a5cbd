"""What every batch does around its operations: closes the periods that ended (core.resets)
and ends the temporary limits whose time came (core.raises), notices what each operation's
spend reached (core.notices), and checks that what moved on every budget's period is what
its ledger rows say (TigerBeetle's pair assertions)."""

from __future__ import annotations

from datetime import datetime

from earmark.core import notices, raises, resets, templates, thresholds
from earmark.core.model import HoldState, OveragePolicy, ThresholdBasis
from earmark.core.state import BatchDecision, BatchState


def roll_due(state: BatchState, decision: BatchDecision, now: datetime) -> None:
    """Closes the period of every locked budget whose period has ended (core.resets): the
    closed period's counters are kept for the holds reserved in it, and the budget starts
    again at zero; and ends every temporary limit whose time has come (core.raises), with
    its ledger entry and notice (its limit the store writes with a statement of its own:
    decision.lapsed); and gives a budget that follows its template the template's newer
    settings as its new period begins (core.templates.refresh: decision.refreshed). The
    budgets are shared by the states of a transaction: the first
    decision closes and ends each."""
    for budget in state.budgets.values():
        closed, change = resets.advance(budget, now)
        if change is not None:
            decision.ledger.append(change.entry())
            decision.events.append(change.event(budget))
            decision.lapsed[budget.budget_id] = budget
            decision.touched[budget.budget_id] = budget
        if closed is None:
            continue
        key = (closed.budget_id, closed.period_no)
        state.closed[key] = closed
        decision.closed_new[key] = closed
        decision.touched[budget.budget_id] = budget
        template = state.templates.get(budget.template_id or "")
        before = budget.limit
        if template is not None and templates.refresh(budget, template, now):
            decision.refreshed[budget.budget_id] = budget
            if budget.limit != before:
                # A change of limit is a ledger entry and a notice, whoever makes it.
                change = raises.LimitChange(
                    budget.budget_id, budget.period_no, before, budget.limit, None,
                    f"template {template.template_id!r} version {template.version}", now,
                )  # fmt: skip
                decision.ledger.append(change.entry())
                decision.events.append(change.event(budget))


def counters(state: BatchState) -> dict[tuple[str, int], tuple[int, int]]:
    """(used, held) of every period the batch may move: each budget's current and the
    closed ones loaded."""
    counters = {(b.budget_id, b.period_no): (b.used, b.held) for b in state.budgets.values()}
    counters.update({key: (c.used, c.held) for key, c in state.closed.items()})
    return counters


Spent = dict[tuple[str, int], tuple[int, int]]


def spent(state: BatchState) -> Spent:
    """(what its thresholds measure, used + held) of every period the batch may move, as
    counters keys them."""
    figures = {}
    for key, (used, held) in counters(state).items():
        owner = state.budgets.get(key[0])
        basis = ThresholdBasis.COMMITTED if owner is None else owner.threshold_basis
        figures[key] = (thresholds.measured(basis, used, held), used + held)
    return figures


def notice(state: BatchState, decision: BatchDecision, spent: Spent, now: datetime) -> None:
    """The notices of the spend that moved since spent was taken (which it updates): the
    thresholds reached and SOFT limits passed, in each budget's current period, and in a
    closed period a hold of it settled past its hold (the events' unique key drops one
    that period already had)."""
    for budget_id in sorted(decision.touched):
        budget = decision.touched[budget_id]
        key = (budget_id, budget.period_no)
        was = spent.get(key, (0, 0))
        spent[key] = (notices.measure(budget), budget.used + budget.held)
        if budget.threshold_bps or budget.overage_policy is OveragePolicy.SOFT:
            decision.events.extend(notices.budget_events(budget, was, now))
    for key in sorted({*decision.closed_moved, *decision.closed_new}):
        closed = state.closed[key]
        owner = state.budgets.get(key[0])
        basis = ThresholdBasis.COMMITTED if owner is None else owner.threshold_basis
        was = spent.get(key, (0, 0))
        spent[key] = now_is = (
            thresholds.measured(basis, closed.used, closed.held),
            closed.used + closed.held,
        )
        if owner is not None and (now_is[0] > was[0] or now_is[1] > was[1]):
            decision.events.extend(notices.closed_events(owner, closed, was, now))


def notice_doubted(decision: BatchDecision, now: datetime) -> None:
    """A hold.in_doubt notice for each hold the batch left in doubt."""
    for hold in decision.doubted:
        if hold.state is HoldState.IN_DOUBT:
            decision.events.append(notices.in_doubt_event(hold, now))


def assert_pairs(
    state: BatchState, decision: BatchDecision, before: dict[tuple[str, int], tuple[int, int]]
) -> None:
    """What moved on every budget's period equals what the ledger rows the batch writes say
    moved (TigerBeetle's pair assertions): a move that skipped the ledger, or a ledger row
    that moved nothing, fails here before anything is written."""
    moved: dict[tuple[str, int], tuple[int, int]] = {}
    for entry in decision.ledger:
        key = (entry.budget_id, entry.period_no)
        used, held = moved.get(key, (0, 0))
        moved[key] = (used + entry.used_delta, held + entry.held_delta)
    named = {key[0] for key in moved}
    assert named <= set(decision.touched) | {key[0] for key in decision.closed_moved} | {
        key[0] for key in decision.closed_new
    }, "a ledger row names a budget not touched"
    after = counters(state)
    for key, (used, held) in after.items():
        was_used, was_held = before.get(key, (0, 0))
        assert (used - was_used, held - was_held) == moved.get(key, (0, 0)), (
            f"budget {key[0]!r} moved otherwise than its ledger rows say in period {key[1]}"
        )
        assert held >= 0, "held went negative"
    assert set(moved) <= set(after), "a ledger row names a period not loaded"
    for budget in state.budgets.values():
        assert budget.open_reservations >= 0, "open_reservations went negative"
