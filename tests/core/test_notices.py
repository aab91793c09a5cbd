"""Notices decided with a batch (core.notices through decide_batch): each operation's own
change of spend, whatever else shares its batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from earmark.core.batch import BatchState, decide_batch
from earmark.core.model import Budget, Outcome
from earmark.core.ops import Op, ReserveOp, ReserveResult, SettleOp

NOW = datetime(2026, 12, 2, tzinfo=UTC)
LEASE = timedelta(seconds=60)


def keys(together: bool) -> list[str]:
    """The events of a Reserve that reaches 80% and a Settle that takes spend back below,
    decided in one batch or in two."""
    state = BatchState("b", Budget("b", 1_000, "t", threshold_bps=(8000,)))
    first = decide_batch(state, [ReserveOp("b", "k1", 700, LEASE, "r1")], NOW).results[0]
    assert isinstance(first, ReserveResult)
    ops: list[Op] = [
        ReserveOp("b", "k2", 200, LEASE, "r2"),
        SettleOp(first.reservation_id, 0, Outcome.SUCCEEDED),
    ]
    batches = [ops] if together else [[op] for op in ops]
    return [e.dedupe_key for ops in batches for e in decide_batch(state, ops, NOW).events]


def test_a_threshold_reached_is_noticed_however_the_operations_are_batched() -> None:
    """The Reserve that reaches 80% is noticed both in a batch of its own and beside a
    Settle that takes the spend back below."""
    assert (["b/0/8000"], ["b/0/8000"]) == (keys(together=False), keys(together=True))


def test_a_lowered_limit_is_noticed_at_the_next_rise() -> None:
    """Spend 500 of 1,000, then a limit of 600 (past 80% already): the next admission
    notices 80%."""
    budget = Budget("b", 1_000, "t", threshold_bps=(8000,))
    state = BatchState("b", budget)
    decide_batch(state, [ReserveOp("b", "k1", 500, LEASE, "r1")], NOW)
    budget.limit = 600
    events = decide_batch(state, [ReserveOp("b", "k2", 50, LEASE, "r2")], NOW).events
    assert ["b/0/8000"] == [e.dedupe_key for e in events]
