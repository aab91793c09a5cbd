"""The meter books usage to the billing period open when it was charged: a late settle of
a closed period's hold adds to the open period's total and never rewrites the closed one,
while the budget it counts against stays the one its hold was reserved on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from earmark.core.model import Budget, Outcome
from earmark.core.ops import ChargeOp, ReserveOp, ReserveResult, SettleOp
from earmark.metrics import Metrics
from earmark.plans.kinde import KindeProvider
from earmark.plans.reporter import Reporter
from earmark.store import Store
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde
from tests.helpers import FakeClock, assert_invariants

# Two back-to-back periods of an agreement that renews on the 15th.
P1 = (datetime(2026, 11, 15, tzinfo=UTC), datetime(2026, 12, 15, tzinfo=UTC))
P2 = (P1[1], datetime(2027, 1, 15, tzinfo=UTC))
IN_P1 = datetime(2026, 12, 14, 23, 50, tzinfo=UTC)
IN_P2 = datetime(2026, 12, 15, 0, 10, tzinfo=UTC)


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = IN_P1


@pytest.fixture
async def store(dsn: str, clock: FakeClock) -> AsyncIterator[Store]:
    opened = await Store.open(dsn, clock=clock)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def kinde() -> Iterator[FakeKinde]:
    with fake_kinde() as fake:
        yield fake


def period_id(period: tuple[datetime, datetime]) -> str:
    return f"acct/tokens/{period[0]:%Y-%m-%d}"


async def open_period(store: Store, period: tuple[datetime, datetime]) -> str:
    budget_id = period_id(period)
    await store.ensure_cycle(
        Budget(budget_id, 100_000, "tokens", account="acct", feature="tokens",
               cycle_start=period[0], cycle_end=period[1], limit_read_at=period[0])
    )  # fmt: skip
    return budget_id


async def reserve(store: Store, budget_id: str, key: str, amount: int) -> str:
    reply = await store.submit(
        ReserveOp(budget_id, key, amount, timedelta(hours=1), _uuid(key), account="acct",
                  admissions_per_minute=120)
    )  # fmt: skip
    assert isinstance(reply, ReserveResult)
    assert reply.admitted
    return reply.reservation_id


def _uuid(key: str) -> str:
    return f"0195ac80-a14c-4ca2-8ec9-{sum(key.encode()):012d}"


async def meter(dsn: str) -> dict[datetime, int]:
    """Each period's total as the outbox holds it."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT cycle_start, total FROM meter_outbox")
    finally:
        await conn.close()
    return {row["cycle_start"]: row["total"] for row in rows}


async def used(store: Store, budget_id: str) -> int:
    (budget,) = [b for b in await store.cycles_of("acct") if b.budget_id == budget_id]
    return budget.used


async def test_a_late_settle_adds_to_the_open_period(
    dsn: str, store: Store, clock: FakeClock
) -> None:
    """A hold reserved in the first period and settled in the second: its usage counts
    against the first period's budget, and the meter books it to the second period, whose
    total was 300; the first period's total stays 500."""
    first = await open_period(store, P1)
    early = await reserve(store, first, "early", 1_000)
    late = await reserve(store, first, "late", 1_000)
    await store.submit(SettleOp(early, 500, Outcome.SUCCEEDED))
    clock.set(IN_P2)
    second = await open_period(store, P2)
    now = await reserve(store, second, "now", 1_000)
    await store.submit(SettleOp(now, 300, Outcome.SUCCEEDED))
    await store.submit(SettleOp(late, 700, Outcome.SUCCEEDED))
    assert {P1[0]: 500, P2[0]: 1_000} == await meter(dsn)
    assert (1_200, 300) == (await used(store, first), await used(store, second))
    await assert_invariants(dsn)


async def test_a_late_settle_before_the_next_period_opens_waits_for_it(
    dsn: str, store: Store, clock: FakeClock
) -> None:
    """A settle after the period's end, before any admission opened the next period's
    budget, is booked to the period that starts where the first ended; a Charge made in the
    first period stays in its total."""
    first = await open_period(store, P1)
    hold = await reserve(store, first, "late", 1_000)
    await store.submit(ChargeOp(hold, "step-1", 400))
    clock.set(IN_P2)
    await store.submit(SettleOp(hold, 650, Outcome.SUCCEEDED))
    assert {P1[0]: 400, P2[0]: 250} == await meter(dsn)
    assert 650 == await used(store, first)
    await assert_invariants(dsn)


async def test_a_closed_periods_total_is_not_sent_into_the_open_one(
    dsn: str, store: Store, clock: FakeClock, kinde: FakeKinde
) -> None:
    """A first period's total still due when its period has ended is not sent (it would
    overwrite the open period's total at the provider): it is counted as period_closed, and
    the open period's total is sent."""
    first = await open_period(store, P1)
    await store.submit(SettleOp(await reserve(store, first, "a", 1_000), 500, Outcome.SUCCEEDED))
    clock.set(IN_P2)
    second = await open_period(store, P2)
    await store.submit(SettleOp(await reserve(store, second, "b", 1_000), 300, Outcome.SUCCEEDED))
    provider = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET)
    metrics = Metrics()
    try:
        sent = await Reporter(store, provider, metrics, clock).report_once()
    finally:
        await provider.close()
    closed = metrics.registry.get_sample_value(
        "earmark_meter_reports_total", {"result": "period_closed"}
    )
    assert (1, ["300"], 1.0) == (
        sent,
        [r["meter_value"] for r in kinde.state.meter_reports],
        closed,
    )
    assert (0, None) == await store.outbox_state()
    await assert_invariants(dsn)
