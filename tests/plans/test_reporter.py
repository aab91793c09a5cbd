"""The meter reporter against a real PostgreSQL and a fake Kinde over real HTTP: a crash
between sending a total and recording it only makes the total be sent again, which
changes nothing, since totals are absolute."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from earmark.core.cycles import cycle_at
from earmark.core.model import Budget, Outcome
from earmark.core.ops import ReserveOp, ReserveResult, SettleOp
from earmark.metrics import Metrics
from earmark.plans.kinde import KindeProvider
from earmark.plans.reporter import Reporter
from earmark.store import Store
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde
from tests.helpers import FakeClock, assert_invariants

START = datetime(2026, 8, 15, 12, tzinfo=UTC)
CYCLE = "acct/tokens/2026-08-01"


@pytest.fixture
def kinde() -> Iterator[FakeKinde]:
    with fake_kinde() as fake:
        yield fake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def parts(
    dsn: str, kinde: FakeKinde, clock: FakeClock
) -> AsyncIterator[tuple[Store, KindeProvider]]:
    store = await Store.open(dsn, clock=clock)
    provider = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET)
    try:
        yield store, provider
    finally:
        await provider.close()
        await store.close()


async def settle_one(store: Store, used: int) -> None:
    cycle = cycle_at(START)
    await store.ensure_cycle(
        Budget(CYCLE, 100_000, "tokens", account="acct", feature="tokens",
               cycle_start=cycle.start, cycle_end=cycle.end, limit_read_at=START)
    )  # fmt: skip
    reply = await store.submit(
        ReserveOp(CYCLE, "k", 1_000, timedelta(minutes=5), "0195ac80-a14c-4ca2-8ec9-7d026d864de0",
                  account="acct", admissions_per_minute=120)
    )  # fmt: skip
    assert isinstance(reply, ReserveResult)
    await store.submit(SettleOp(reply.reservation_id, used, Outcome.SUCCEEDED))


async def test_a_crashed_report_is_sent_again_and_changes_nothing(
    dsn: str, parts: tuple[Store, KindeProvider], kinde: FakeKinde, clock: FakeClock
) -> None:
    """A reporter that sent 700 and died before recording it holds the claim for its lease;
    then another sends 700 again: the meter stays at 700, and the outbox is done."""
    store, provider = parts
    await settle_one(store, 700)
    (claimed,) = await store.claim_reports()
    await provider.report_usage(claimed.account, claimed.feature, claimed.total, claimed.at)
    while_claimed = await store.claim_reports()
    clock.advance(timedelta(seconds=61))
    reporter = Reporter(store, provider, Metrics(), clock)
    sent = [await reporter.report_once(), await reporter.report_once()]
    depth, _ = await store.outbox_state()
    assert ([], [1, 0], 0) == (while_claimed, sent, depth)
    assert ["700", "700"] == [r["meter_value"] for r in kinde.state.meter_reports]
    assert {("agreement_acct", "tokens"): 700} == kinde.state.meters
    await assert_invariants(dsn)


async def test_a_failed_report_backs_off_and_succeeds_later(
    parts: tuple[Store, KindeProvider], kinde: FakeKinde, clock: FakeClock
) -> None:
    """While the meter fails the total stays due, tried again only after its backoff; once
    the meter answers it is sent once."""
    store, provider = parts
    await settle_one(store, 300)
    kinde.state.failing = True
    metrics = Metrics()
    reporter = Reporter(store, provider, metrics, clock)
    first = await reporter.report_once()
    depth_while_failing = metrics.registry.get_sample_value("earmark_meter_outbox_depth")
    again_at_once = await reporter.report_once()
    kinde.state.failing = False
    clock.advance(timedelta(seconds=2))
    later = await reporter.report_once()
    counts = {
        result: metrics.registry.get_sample_value("earmark_meter_reports_total", {"result": result})
        for result in ("sent", "failed")
    }
    assert ([0, 0, 1], 300) == (
        [first, again_at_once, later],
        kinde.state.meters[("agreement_acct", "tokens")],
    )
    assert ({"sent": 1.0, "failed": 1.0}, 1.0) == (counts, depth_while_failing)
    assert 0.0 == metrics.registry.get_sample_value("earmark_meter_outbox_depth")
