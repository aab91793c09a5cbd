"""A budget's rate windows (core.windows): a sliding minute kept as two counters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from earmark.core import windows
from earmark.core.batch import BatchState, decide_batch
from earmark.core.model import Budget
from earmark.core.ops import ReserveOp, ReserveResult

T0 = datetime(2026, 12, 2, 12, tzinfo=UTC)


def budget(**fields: int) -> Budget:
    return Budget("b", None, "tokens", **fields)  # type: ignore[arg-type]


def admit_all(b: Budget, count: int, amount: int, at: datetime) -> int:
    """How many of count holds of amount the windows admit at `at`."""
    admitted = 0
    for _ in range(count):
        windows.advance(b.rate, at)
        if windows.check(b, amount, at) is None:
            windows.count(b, amount)
            admitted += 1
    return admitted


def test_the_first_minute_admits_exactly_its_bound() -> None:
    """Within a burst's first minute the window counts exactly: 10 of 15 are admitted."""
    assert 10 == admit_all(budget(admissions_per_minute=10), 15, 1, T0)


def test_a_refusal_says_when_the_sliding_window_has_room() -> None:
    """Ten admitted at 0 s, refused at 30 s: the next fits 6 s into the next minute, when
    the ten weigh 9, so retry_after is 36 s; then it is admitted and the window is full."""
    b = budget(admissions_per_minute=10)
    admit_all(b, 10, 1, T0)
    at = T0 + timedelta(seconds=30)
    refusal = windows.check(b, 1, at)
    assert refusal is not None
    retry = at + (refusal.retry_after or timedelta(0))
    early = admit_all(b, 1, 1, retry - timedelta(milliseconds=1))
    assert (timedelta(seconds=36), "admissions", 0, 1, 0) == (
        refusal.retry_after,
        refusal.window,
        early,
        admit_all(b, 1, 1, retry),
        admit_all(b, 1, 1, retry),
    )


def test_the_units_window_counts_amounts() -> None:
    """units_per_minute 1,000 admits two holds of 400 and refuses the third."""
    b = budget(units_per_minute=1_000)
    assert [1, 1, 0] == [admit_all(b, 1, 400, T0) for _ in range(3)]


def test_a_hold_larger_than_the_units_window_never_fits() -> None:
    """A hold past units_per_minute is refused with no retry_after: waiting cannot help."""
    refusal = windows.check(budget(units_per_minute=100), 101, T0)
    assert refusal is not None
    assert (None, "units") == (refusal.retry_after, refusal.window)


def test_two_quiet_minutes_empty_the_window() -> None:
    """After two minutes without admissions both counters are empty."""
    b = budget(admissions_per_minute=5)
    admit_all(b, 5, 1, T0)
    assert 5 == admit_all(b, 9, 1, T0 + timedelta(minutes=2, seconds=1))


def test_a_nested_refusal_waits_for_every_budgets_window() -> None:
    """Two full windows of a nested Reserve: retry_after is the longer wait, so that the
    retry fits both."""
    outer = budget(admissions_per_minute=100)
    inner = Budget("inner", None, "tokens", admissions_per_minute=10)
    state = BatchState("inner", inner, budgets={"inner": inner, "b": outer})

    def nested(key: str, at: datetime) -> ReserveResult:
        op = ReserveOp("inner", key, 1, timedelta(seconds=60), f"r-{key}", also_budget_ids=("b",))
        result = decide_batch(state, [op], at).results[0]
        assert isinstance(result, ReserveResult)
        return result

    for i in range(10):
        nested(f"k{i}", T0)
    outer.rate.admissions = 100
    later = T0 + timedelta(seconds=30)
    refused = nested("x", later)
    again = nested("y", later + (refused.retry_after or timedelta(0)))
    assert (False, True) == (refused.admitted, again.admitted)
