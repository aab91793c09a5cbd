"""Plans from a fake Kinde over real HTTP: Reserve by account through a live sidecar on an
injected clock, the fail-closed cache, the admission rate limit, billing cycles and the
meter outbox."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
import structlog
from google.protobuf.duration_pb2 import Duration

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.fake_kinde import CLIENT_SECRET, FakeKinde
from tests.helpers import FakeClock, assert_invariants, eventually, fetch_budget_row
from tests.workloads.test_commands import run_json

START = datetime(2026, 8, 15, 12, tzinfo=UTC)
CYCLE = "acct/tokens/2026-08-01"


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = START


def plans_sidecar(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock, **extra: object
) -> Sidecar:
    settings = sidecar_settings(
        dsn,
        socket_dir,
        limits_provider="kinde",
        kinde_domain=kinde.url,
        report_interval_seconds=0.05,
        **extra,
    )
    return Sidecar(settings, clock=clock)


@pytest.fixture
async def side(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> AsyncIterator[Running]:
    async with running(plans_sidecar(dsn, socket_dir, kinde, clock), dsn) as s:
        yield s


async def until_remaining(side: Running, remaining: int) -> None:
    """Waits until the account's cycle shows `remaining` left, asking with Reserves too
    large for any limit here: refused, they hold nothing and say what is left."""

    async def shows() -> bool:
        probe = await side.budget.Reserve(reserve("acct", 10**12, uuid.uuid4().hex))
        return not probe.admitted and remaining == probe.remaining

    await eventually(shows, within_seconds=10, what=f"{remaining} left after a new read")


def reserve(account: str, amount: int, key: str, **extra: object) -> pb.ReserveRequest:
    return pb.ReserveRequest(account=account, amount=amount, idempotency_key=key, **extra)  # type: ignore[arg-type]


async def test_reserve_by_account_opens_the_cycle_budget(side: Running) -> None:
    """A Reserve by account holds on ACCOUNT/FEATURE/CYCLE, created with the plan's limit
    and the time of the read; ListCycles shows it."""
    reply = await side.budget.Reserve(reserve("acct", 40_000, "job-1"))
    cycles = await side.admin.ListCycles(pb.ListCyclesRequest(account="acct"))
    (cycle,) = cycles.cycles
    assert (True, CYCLE, 60_000) == (reply.admitted, reply.budget_id, reply.remaining)
    assert (CYCLE, 100_000, "acct", "tokens") == (
        cycle.budget_id,
        cycle.limit,
        cycle.account,
        cycle.feature,
    )
    assert (datetime(2026, 8, 1, tzinfo=UTC), datetime(2026, 9, 1, tzinfo=UTC), START) == (
        cycle.cycle_start.ToDatetime(tzinfo=UTC),
        cycle.cycle_end.ToDatetime(tzinfo=UTC),
        cycle.limit_read_at.ToDatetime(tzinfo=UTC),
    )


async def test_a_thousand_cold_reserves_make_one_read(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> None:
    """1,000 concurrent Reserves for a cold account make one entitlements GET; 60 s later
    the next Reserve makes one more."""
    async with running(
        plans_sidecar(dsn, socket_dir, kinde, clock, admissions_per_minute=100_000), dsn
    ) as s:
        replies = await asyncio.gather(
            *(s.budget.Reserve(reserve("acct", 10, f"k{i}")) for i in range(1_000))
        )
        first = kinde.state.requests["entitlements"]
        clock.advance(timedelta(seconds=60))
        await s.budget.Reserve(reserve("acct", 10, "later"))

        async def read_again() -> bool:
            return 2 <= kinde.state.requests["entitlements"]

        # The read past the minute runs behind the Reserve that found the limit stale.
        await eventually(read_again, within_seconds=10, what="a second entitlements read")
        assert (1_000, 1, 2) == (
            sum(r.admitted for r in replies),
            first,
            kinde.state.requests["entitlements"],
        )
        await assert_invariants(dsn)


async def test_provider_down_stale_then_closed_then_open(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """With Kinde down, Reserves admit on the last limit at 9 min; past 10 min they are
    refused LIMIT_UNAVAILABLE and hold nothing; when Kinde returns they admit again."""
    hour = Duration(seconds=3600)
    await side.budget.Reserve(reserve("acct", 1_000, "a", lease=hour))
    kinde.state.failing = True
    clock.advance(timedelta(minutes=9))
    stale = await side.budget.Reserve(reserve("acct", 1_000, "b", lease=hour))
    clock.advance(timedelta(minutes=1, seconds=1))
    closed = await side.budget.Reserve(reserve("acct", 1_000, "c", lease=hour))
    held = (await fetch_budget_row(side.dsn, CYCLE))["held"]
    kinde.state.failing = False
    clock.advance(timedelta(seconds=5))
    reopened = await side.budget.Reserve(reserve("acct", 1_000, "d"))
    assert (True, False, True) == (stale.admitted, closed.admitted, reopened.admitted)
    assert pb.REFUSAL_REASON_LIMIT_UNAVAILABLE == closed.reason
    # a and b hold; the refused c holds nothing.
    assert 2_000 == held
    await assert_invariants(side.dsn)


async def test_limit_cut_applies_to_the_next_reserve_and_null_is_unlimited(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """A plan cut from 100,000 to 50,000 leaves a running hold as it is; past the cache's
    minute the plan is read again behind the Reserves, which see 50,000 once it is in. A
    null maximum admits without limit."""
    running_job = await side.budget.Reserve(
        reserve("acct", 40_000, "job", lease=Duration(seconds=3600))
    )
    kinde.state.limits["acct"] = {"tokens": 50_000}
    clock.advance(timedelta(seconds=61))
    await side.budget.Renew(pb.RenewRequest(reservation_id=running_job.reservation_id))
    await until_remaining(side, 10_000)
    after = await side.budget.Reserve(reserve("acct", 20_000, "next"))
    row = await fetch_budget_row(side.dsn, CYCLE)
    kinde.state.limits["acct"] = {"tokens": None}
    clock.advance(timedelta(seconds=61))

    async def unlimited_now() -> bool:
        probe = await side.budget.Reserve(reserve("acct", 10**9, uuid.uuid4().hex))
        return probe.admitted

    await eventually(unlimited_now, within_seconds=10, what="the null maximum read")
    unlimited = await side.budget.Reserve(reserve("acct", 10**9, "big"))
    assert (50_000, 40_000) == (row["limit_units"], row["held"])
    assert (False, 10_000) == (after.admitted, after.remaining)
    assert (True, False) == (unlimited.admitted, unlimited.HasField("remaining"))


async def test_the_121st_admission_in_a_minute_waits(side: Running, clock: FakeClock) -> None:
    """120 admissions in a minute pass; the 121st is RATE_LIMITED with retry_after and holds
    nothing; a retried key does not count again; after the window it is admitted."""
    for i in range(120):
        assert (await side.budget.Reserve(reserve("acct", 1, f"k{i}"))).admitted
    retried = await side.budget.Reserve(reserve("acct", 1, "k0"))
    clock.advance(timedelta(seconds=20))
    limited = await side.budget.Reserve(reserve("acct", 1, "k120"))
    held = (await fetch_budget_row(side.dsn, CYCLE))["held"]
    clock.advance(timedelta(seconds=40))
    later = await side.budget.Reserve(reserve("acct", 1, "k120"))
    assert (True, False, pb.REFUSAL_REASON_RATE_LIMITED) == (
        retried.admitted,
        limited.admitted,
        limited.reason,
    )
    assert (40, 120) == (limited.retry_after.seconds, held)
    assert later.admitted
    await assert_invariants(side.dsn)


async def test_load_spends_the_plan_and_the_meter_ends_at_it(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> None:
    """120 jobs of 1,000 at 50 in flight on a plan of 100,000: 100 admitted, 20 refused,
    and the fake meter ends at exactly 100,000 for the cycle; refused holds never reach it."""
    async with running(
        plans_sidecar(dsn, socket_dir, kinde, clock, admissions_per_minute=1_000), dsn
    ) as s:
        gate = asyncio.Semaphore(50)

        async def job(i: int) -> bool:
            async with gate:
                reply = await s.budget.Reserve(reserve("acct", 1_000, f"job-{i}"))
                if not reply.admitted:
                    return False
                await s.budget.Settle(
                    pb.SettleRequest(reservation_id=reply.reservation_id, used=1_000)
                )
                return True

        outcomes = await asyncio.gather(*(job(i) for i in range(120)))
        meter = ("agreement_acct", "tokens")

        async def metered() -> bool:
            return kinde.state.meters.get(meter) == 100_000

        await eventually(metered, within_seconds=10, what="the meter at 100,000")
        assert (100, 20) == (sum(outcomes), 120 - sum(outcomes))
        assert all(int(r["meter_value"]) <= 100_000 for r in kinde.state.meter_reports)
        await assert_invariants(dsn)


async def test_a_month_boundary_opens_a_new_cycle(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """A hold from the last day of August settles into August after September began; the
    first Reserve of September opens its own cycle with a fresh limit; the late settle's
    usage is reported in September's period, where the provider books it."""
    clock.set(datetime(2026, 8, 31, 23, 59, tzinfo=UTC))
    august = await side.budget.Reserve(reserve("acct", 40_000, "late-august"))
    clock.set(datetime(2026, 9, 1, 0, 0, 30, tzinfo=UTC))
    kinde.state.limits["acct"] = {"tokens": 70_000}
    september = await side.budget.Reserve(reserve("acct", 5_000, "early-september"))
    # The plan read 90 s ago was still usable: September opened on it while the plan was
    # read again behind; the cycle takes 70,000 once that read is in.
    await until_remaining(side, 65_000)
    await side.budget.Settle(pb.SettleRequest(reservation_id=august.reservation_id, used=30_000))
    old = await fetch_budget_row(side.dsn, "acct/tokens/2026-08-01")
    new = await fetch_budget_row(side.dsn, "acct/tokens/2026-09-01")

    async def reported() -> bool:
        return any(r["meter_value"] == "30000" for r in kinde.state.meter_reports)

    await eventually(reported, within_seconds=10, what="the late settle reported")
    assert "acct/tokens/2026-09-01" == september.budget_id
    assert (30_000, 0, 100_000) == (old["used"], old["held"], old["limit_units"])
    assert (70_000, 5_000) == (new["limit_units"], new["held"])


async def test_secrets_reach_no_log_line_or_error(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> None:
    """Through reads, failures and meter reports, neither the client secret nor any token
    appears in a log event or in an answer."""
    with structlog.testing.capture_logs() as logs:
        async with running(plans_sidecar(dsn, socket_dir, kinde, clock), dsn) as s:
            admitted = await s.budget.Reserve(reserve("acct", 1_000, "a"))
            await s.budget.Settle(pb.SettleRequest(reservation_id=admitted.reservation_id, used=10))
            kinde.state.failing = True
            clock.advance(timedelta(minutes=11))
            refused = await s.budget.Reserve(reserve("acct", 1_000, "b"))

            async def failed_report() -> bool:
                return any(e["event"] == "meter_report_failed" for e in logs)

            kinde.state.failing = True
            await eventually(failed_report, within_seconds=10, what="a failed report logged")
    text = repr(logs) + refused.message
    secrets = [CLIENT_SECRET, *kinde.state.tokens]
    assert [] == [secret for secret in secrets if secret in text]


def targets(s: Running) -> tuple[str, ...]:
    return ("--target", s.target, "--admin-target", s.admin_target)


async def test_lab_and_load_run_through_the_plan(
    dsn: str, socket_dir: Path, kinde: FakeKinde
) -> None:
    """`earmark lab --account` (5 jobs of 40,000 on the fake's plan of 100,000): 2 started,
    3 refused, 80,000 spent. `earmark load --account` (120 jobs of 1,000 at 50 in flight
    on a fresh plan of 100,000): 100 admitted, 20 refused, and the meter ends at 100,000."""
    kinde.state.limits["lab"] = {"tokens": 100_000}
    kinde.state.limits["load"] = {"tokens": 100_000}
    clock = FakeClock(datetime.now(UTC))
    async with running(
        plans_sidecar(dsn, socket_dir, kinde, clock, admissions_per_minute=1_000), dsn
    ) as s:
        lab = await run_json("lab", *targets(s), "--account", "lab")
        load = await run_json("load", *targets(s), "--account", "load")

        async def metered() -> bool:
            return kinde.state.meters.get(("agreement_load", "tokens")) == 100_000

        await eventually(metered, within_seconds=10, what="the load's meter at 100,000")
        await assert_invariants(dsn)
    assert {"started": 2, "refused": 3, "capped": 0, "spent": 80_000, "over_plan": 0} == lab["hold"]
    assert (100, 20, 100_000, 0) == (
        load["admitted"],
        load["refused"],
        load["spent"],
        load["held_at_end"],
    )


async def test_a_second_sidecar_knows_how_stale_the_limit_is(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> None:
    """The read's time lives on the budget row: a new sidecar started while Kinde is down
    admits on the row's limit until it is 10 minutes old, then refuses."""
    async with running(plans_sidecar(dsn, socket_dir, kinde, clock), dsn) as first:
        await first.budget.Reserve(reserve("acct", 1_000, "a"))
    kinde.state.failing = True
    clock.advance(timedelta(minutes=5))
    async with running(plans_sidecar(dsn, socket_dir, kinde, clock), dsn) as second:
        calls_before = sum(kinde.state.requests.values())
        within = await second.budget.Reserve(reserve("acct", 1_000, "b"))
        clock.advance(timedelta(minutes=5, seconds=1))
        past = await second.budget.Reserve(reserve("acct", 1_000, "c"))
    assert (True, False) == (within.admitted, past.admitted)
    assert pb.REFUSAL_REASON_LIMIT_UNAVAILABLE == past.reason
    # The second sidecar asked Kinde (and failed), rather than trusting the row blindly.
    assert sum(kinde.state.requests.values()) > calls_before


async def test_refresh_limits_applies_a_plan_change_at_once(
    side: Running, kinde: FakeKinde
) -> None:
    """Admin.RefreshLimits reads the plan now and sets the current cycle's limit, without
    waiting for the cache's minute; a static sidecar answers FAILED_PRECONDITION."""
    await side.budget.Reserve(reserve("acct", 1_000, "a"))
    kinde.state.limits["acct"] = {"tokens": 5_000}
    refreshed = await side.admin.RefreshLimits(pb.RefreshLimitsRequest(account="acct"))
    (cycle,) = refreshed.cycles
    assert (CYCLE, 5_000, 4_000) == (cycle.budget_id, cycle.limit, cycle.remaining)


async def test_a_static_sidecar_refuses_reserve_by_account(sidecar: Running) -> None:
    """Without a limits provider a Reserve by account is FAILED_PRECONDITION naming
    account, and account with budget_id is INVALID_ARGUMENT."""
    with pytest.raises(grpc.aio.AioRpcError) as static:
        await sidecar.budget.Reserve(reserve("acct", 1, "k"))
    with pytest.raises(grpc.aio.AioRpcError) as both:
        await sidecar.budget.Reserve(reserve("acct", 1, "k", budget_id="b"))
    assert (grpc.StatusCode.FAILED_PRECONDITION, "account") == (
        static.value.code(),
        (static.value.details() or "").split(":")[0],
    )
    assert (grpc.StatusCode.INVALID_ARGUMENT, "budget_id") == (
        both.value.code(),
        (both.value.details() or "").split(":")[0],
    )


async def test_two_sidecars_open_one_cycle_at_once(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> None:
    """Two sidecars, both cold, each sent 50 Reserves at once for the same new account,
    make one cycle budget between them and answer every Reserve."""
    second_dir = socket_dir / "second"
    second_dir.mkdir()
    async with (
        running(plans_sidecar(dsn, socket_dir, kinde, clock), dsn) as a,
        running(plans_sidecar(dsn, second_dir, kinde, clock), dsn) as b,
    ):
        replies = await asyncio.gather(
            *((a if i % 2 else b).budget.Reserve(reserve("acct", 100, f"k{i}")) for i in range(100))
        )
        cycles = await a.admin.ListCycles(pb.ListCyclesRequest(account="acct"))
    assert (100, [CYCLE]) == (
        sum(r.admitted for r in replies),
        [c.budget_id for c in cycles.cycles],
    )
    await assert_invariants(dsn)


@pytest.mark.parametrize("slow", ["stall", "trickle"])
async def test_a_slow_kinde_holds_up_no_reserve_with_a_usable_limit(
    side: Running, kinde: FakeKinde, clock: FakeClock, slow: str
) -> None:
    """With Kinde stalled, or trickling its answer a byte at a time, past the fresh minute,
    Reserves are answered within their 5 s deadline on the last read, which is still
    usable; one read waits behind them."""
    await side.budget.Reserve(reserve("acct", 1_000, "before", lease=Duration(seconds=3600)))
    held = threading.Event()
    if slow == "stall":
        kinde.state.stall = held
    else:
        kinde.state.trickle = held
    clock.advance(timedelta(minutes=3))
    replies = await asyncio.gather(
        *(side.budget.Reserve(reserve("acct", 1_000, f"stalled-{i}"), timeout=5) for i in range(20))
    )

    async def one_read_waiting() -> bool:
        return 2 == kinde.state.requests["entitlements"]

    await eventually(one_read_waiting, within_seconds=10, what="the read behind the Reserves")
    held.set()
    assert ({True}, {98_000 - 1_000 * i for i in range(20)}) == (
        {r.admitted for r in replies},
        {r.remaining for r in replies},
    )
