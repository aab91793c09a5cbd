"""A budget's run limits (issue 47) through the SDK: put_budget and update_budget set
max_open_holds, max_admissions and closes_at, get_budget reads them back with the
admissions counted this period, and each limit's refusal comes back as a Refusal with its
reason (and from hold(), as RefusedError naming it)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from earmark.client import AsyncClient, Refusal, RefusalReason, RefusedError, Reservation
from tests.conftest import CLOCK_START, Running
from tests.helpers import FakeClock, assert_invariants


def client(s: Running) -> AsyncClient:
    return AsyncClient(s.target, admin_target=s.admin_target)


async def test_run_limits_are_put_read_and_updated(sidecar: Running) -> None:
    """put_budget's run limits round-trip through GetBudget and ListBudgets; update_budget
    changes only the one it names, and None clears one; admissions counts each admitted
    Reserve."""
    closes = CLOCK_START + timedelta(days=3650)
    async with client(sidecar) as earmark:
        put = await earmark.put_budget(
            "run", 1_000, "tokens", max_open_holds=2, max_admissions=5, closes_at=closes
        )
        for key in ("a", "b"):
            held = await earmark.reserve("run", 10, idempotency_key=key)
            assert isinstance(held, Reservation)
        read = await earmark.get_budget("run")
        listed = [b async for b in earmark.list_budgets("run")]
        more = await earmark.update_budget("run", max_open_holds=3)
        cleared = await earmark.update_budget("run", max_admissions=None, closes_at=None)
    assert (2, 5, closes, 0, "", False) == (
        put.max_open_holds, put.max_admissions, put.closes_at, put.admissions, put.template_id,
        put.changed_by_hand,
    )  # fmt: skip
    assert (2, 5, closes, 2) == (
        read.max_open_holds,
        read.max_admissions,
        read.closes_at,
        read.admissions,
    )
    assert [read] == listed
    assert (3, 5, closes) == (more.max_open_holds, more.max_admissions, more.closes_at)
    assert (3, None, None, 2) == (
        cleared.max_open_holds,
        cleared.max_admissions,
        cleared.closes_at,
        cleared.admissions,
    )
    await assert_invariants(sidecar.dsn)


async def test_each_run_limit_refuses_with_its_reason(clocked: Running, clock: FakeClock) -> None:
    """Past max_open_holds a Reserve is refused TOO_MANY_OPEN until a hold closes; past
    max_admissions, ADMISSIONS_SPENT; from closes_at on, CLOSED. hold() raises each as
    RefusedError with the reason's name, and holds nothing."""
    closes = CLOCK_START + timedelta(hours=1)
    async with client(clocked) as earmark:
        await earmark.put_budget("open", 1_000, "tokens", max_open_holds=1)
        await earmark.put_budget("spent", 1_000, "tokens", max_admissions=1)
        await earmark.put_budget("closing", 1_000, "tokens", closes_at=closes)
        first = await earmark.reserve("open", 10, idempotency_key="1")
        assert isinstance(first, Reservation)
        too_many = await earmark.reserve("open", 10, idempotency_key="2")
        with pytest.raises(RefusedError) as raised_open:
            async with earmark.hold("open", 10):
                pass
        await earmark.settle(first.reservation_id, 10)
        again = await earmark.reserve("open", 10, idempotency_key="3")
        assert isinstance(again, Reservation)
        await earmark.settle(again.reservation_id, 10)

        once = await earmark.reserve("spent", 10, idempotency_key="1")
        assert isinstance(once, Reservation)
        await earmark.settle(once.reservation_id, 10)
        spent = await earmark.reserve("spent", 10, idempotency_key="2")
        with pytest.raises(RefusedError) as raised_spent:
            async with earmark.hold("spent", 10):
                pass

        before = await earmark.reserve("closing", 10, idempotency_key="1")
        assert isinstance(before, Reservation)
        await earmark.settle(before.reservation_id, 10)
        clock.advance(timedelta(hours=2))
        closed = await earmark.reserve("closing", 10, idempotency_key="2")
        with pytest.raises(RefusedError) as raised_closed:
            async with earmark.hold("closing", 10):
                pass
        states = [await earmark.get_budget(b) for b in ("open", "spent", "closing")]
    refusals = [too_many, spent, closed]
    assert all(isinstance(r, Refusal) for r in refusals)
    assert [
        RefusalReason.TOO_MANY_OPEN, RefusalReason.ADMISSIONS_SPENT, RefusalReason.CLOSED
    ] == [r.reason for r in refusals if isinstance(r, Refusal)]  # fmt: skip
    assert ["TOO_MANY_OPEN", "ADMISSIONS_SPENT", "CLOSED"] == [
        e.value.reason for e in (raised_open, raised_spent, raised_closed)
    ]
    assert [RefusalReason.TOO_MANY_OPEN, RefusalReason.ADMISSIONS_SPENT, RefusalReason.CLOSED] == [
        e.value.refusal.reason for e in (raised_open, raised_spent, raised_closed)
    ]
    # Only the admitted Reserves count, and nothing is left held.
    assert [(2, 0), (1, 0), (1, 0)] == [(s.admissions, s.held) for s in states]
    await assert_invariants(clocked.dsn)
