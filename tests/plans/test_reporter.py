"""The meter reporter against a real PostgreSQL and a fake Kinde over real HTTP: a crash
between sending a total and recording it only makes the total be sent again, which
changes nothing, since totals are absolute."""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from earmark import limits
from earmark.core.cycles import cycle_at
from earmark.core.model import Budget, Outcome
from earmark.core.ops import ReserveOp, ReserveResult, SettleOp
from earmark.metrics import Metrics
from earmark.plans.kinde import KindeProvider
from earmark.plans.reporter import Reporter
from earmark.store import Store
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde
from tests.helpers import FakeClock, assert_invariants, eventually

START = datetime(2026, 8, 15, 12, tzinfo=UTC)
CYCLE = "acct/tokens/2026-08-01"


@pytest.fixture
def kinde() -> Iterator[FakeKinde]:
    with fake_kinde() as fake:
        yield fake


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = START


@pytest.fixture
async def parts(
    dsn: str, kinde: FakeKinde, clock: FakeClock
) -> AsyncIterator[tuple[Store, KindeProvider]]:
    store = await Store.open(dsn, clock=clock)
    provider = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET, clock=clock)
    try:
        yield store, provider
    finally:
        await provider.close()
        await store.close()


async def settle_one(store: Store, used: int, key: str = "k") -> None:
    cycle = cycle_at(START)
    await store.ensure_cycle(
        Budget(CYCLE, 100_000, "tokens", account="acct", feature="tokens",
               cycle_start=cycle.start, cycle_end=cycle.end, limit_read_at=START)
    )  # fmt: skip
    reply = await store.submit(
        ReserveOp(CYCLE, key, 1_000, timedelta(minutes=5), str(uuid.uuid4()),
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


def count(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return metrics.registry.get_sample_value(name, labels or {})


async def test_a_rejected_report_is_parked_and_a_newer_total_is_sent(
    parts: tuple[Store, KindeProvider], kinde: FakeKinde, clock: FakeClock
) -> None:
    """A total Kinde answers 400 is parked (logged with Kinde's code, counted, not tried
    again, not waiting in the outbox); a newer total of the same key is sent."""
    store, provider = parts
    await settle_one(store, 300)
    kinde.state.refuse_reports["agreement_acct"] = "METER_VALUE_INVALID"
    metrics = Metrics()
    reporter = Reporter(store, provider, metrics, clock)
    with structlog.testing.capture_logs() as logs:
        first = await reporter.report_once()
    clock.advance(timedelta(minutes=10))
    again = await reporter.report_once()
    parked_depth = count(metrics, "earmark_meter_outbox_depth")
    kinde.state.refuse_reports.clear()
    await settle_one(store, 200, key="k2")
    newer = await reporter.report_once()
    codes = [e["code"] for e in logs if e["event"] == "meter_report_rejected"]
    assert ([0, 0, 1], ["METER_VALUE_INVALID"], 0.0) == ([first, again, newer], codes, parked_depth)
    assert (2, 500) == (
        kinde.state.requests["meter_usage"],
        kinde.state.meters[("agreement_acct", "tokens")],
    )
    assert (1.0, 1.0) == (
        count(metrics, "earmark_meter_rejected_total"),
        count(metrics, "earmark_meter_reports_total", {"result": "rejected"}),
    )


async def test_a_rate_limited_report_waits_for_the_reset(
    parts: tuple[Store, KindeProvider], kinde: FakeKinde, clock: FakeClock
) -> None:
    """After a 429 with RateLimit-Reset 30, the total is not claimed before 30 s (even by
    a reporter whose provider never saw the 429), and is sent after."""
    store, provider = parts
    await settle_one(store, 300)
    kinde.state.rate_limited, kinde.state.rate_limit_reset = 1, "30"
    await Reporter(store, provider, Metrics(), clock).report_once()
    calls = sum(kinde.state.requests.values())
    fresh = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET, clock=clock)
    try:
        reporter = Reporter(store, fresh, Metrics(), clock)
        clock.advance(timedelta(seconds=29))
        early = await reporter.report_once()
        sent_early = sum(kinde.state.requests.values()) - calls
        clock.advance(timedelta(seconds=1))
        due = await reporter.report_once()
    finally:
        await fresh.close()
    assert (0, 0, 1, 300) == (
        early, sent_early, due, kinde.state.meters[("agreement_acct", "tokens")]
    )  # fmt: skip


async def test_the_meter_converges_after_a_straggler(
    dsn: str, kinde: FakeKinde, clock: FakeClock
) -> None:
    """A report that timed out after it was sent, applied by Kinde only after a newer total
    went through, is overwritten: once its deadline passes the newest total is sent again,
    and Kinde ends holding the database's total."""
    store = await Store.open(dsn, clock=clock)
    provider = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET, clock=clock, timeout_seconds=0.3)
    try:
        reporter = Reporter(store, provider, Metrics(), clock)
        await settle_one(store, 300)
        held = kinde.state.hold_report = threading.Event()
        timed_out = await reporter.report_once()
        await settle_one(store, 500, key="k2")
        clock.advance(timedelta(seconds=2))
        newer = await reporter.report_once()
        held.set()

        async def straggler_applied() -> bool:
            return 2 == len(kinde.state.meter_reports)

        await eventually(straggler_applied, within_seconds=10, what="the straggler applied")
        held_after_straggler = kinde.state.meters[("agreement_acct", "tokens")]
        before_deadline = await reporter.report_once()
        clock.advance(timedelta(seconds=limits.provider_timeout_seconds))
        after_deadline = await reporter.report_once()
        settled = await reporter.report_once()
    finally:
        await provider.close()
        await store.close()
    assert [0, 1, 0, 1, 0] == [timed_out, newer, before_deadline, after_deadline, settled]
    assert (300, ["800", "300", "800"]) == (
        held_after_straggler, [r["meter_value"] for r in kinde.state.meter_reports]
    )  # fmt: skip
    assert {("agreement_acct", "tokens", None): 800} == kinde.state.booked
