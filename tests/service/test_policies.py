"""Budget policies (issue 34) through live sidecars on an injected clock and a real
PostgreSQL: periods that reset on the calendar, threshold notices written exactly once,
shadow mode, and rate windows per budget."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from earmark.notices.signing import secret_bytes
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, eventually, scrape
from tests.notices.receiver import receiving
from tests.notices.recorded import SECRET
from tests.service.test_calls import cost, price, stamp

DAY = timedelta(days=1)
# The longest lease: a hold is open across a boundary only when reserved within its hour.
LONG = Duration(seconds=3600)


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = datetime(2026, 3, 7, 17, tzinfo=UTC)


@pytest.fixture
async def side(dsn: str, socket_dir: Path, clock: FakeClock) -> AsyncIterator[Running]:
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as s:
        yield s


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[arg-type,misc]


async def put(side: Running, budget_id: str, limit: int = 1_000, **fields: Any) -> pb.BudgetState:
    request = pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit="tokens", **fields)
    state: pb.BudgetState = await side.admin.PutBudget(request)
    return state


async def hold(side: Running, budget_id: str, amount: int, **fields: Any) -> pb.ReserveResponse:
    request = pb.ReserveRequest(
        budget_id=budget_id, amount=amount, idempotency_key=uuid.uuid4().hex, lease=LONG, **fields
    )
    reply: pb.ReserveResponse = await side.budget.Reserve(request)
    return reply


async def settle(side: Running, reservation_id: str, used: int) -> None:
    await side.budget.Settle(
        pb.SettleRequest(reservation_id=reservation_id, used=used, outcome=pb.OUTCOME_SUCCEEDED)
    )


def window(state: pb.BudgetState) -> tuple[datetime, datetime]:
    return (
        state.period_start.ToDatetime(tzinfo=UTC),
        state.resets_at.ToDatetime(tzinfo=UTC),
    )


async def closed_period(dsn: str, budget_id: str, period_no: int) -> tuple[int, int, int]:
    """(used, held, open holds) of a closed period of the budget."""
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT used, held, open_reservations FROM budget_periods "
            "WHERE budget_id = $1 AND period_no = $2",
            budget_id,
            period_no,
        )
    finally:
        await conn.close()
    assert row is not None
    return row["used"], row["held"], row["open_reservations"]


async def test_a_day_in_new_york_resets_at_local_midnight_across_both_changes_of_time(
    side: Running, dsn: str, clock: FakeClock
) -> None:
    """A DAY budget in America/New_York resets at local midnight: the day the clocks go
    forward is 23 hours long, the day they go back 25, and a hold open across midnight
    settles into the day it was reserved in."""
    clock.set(utc(2026, 3, 8, 4, 40))  # 23:40 on March 7th in New York
    first = await put(side, "ny", period=pb.PERIOD_DAY, timezone="America/New_York")
    before = await hold(side, "ny", 300)
    clock.set(utc(2026, 3, 8, 5, 20))  # 01:20 on the day the clocks go forward
    after = await hold(side, "ny", 100)
    spring = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="ny"))
    await settle(side, before.reservation_id, 250)
    spring_settled = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="ny"))
    clock.set(utc(2026, 11, 1, 16))  # noon on the day the clocks go back
    autumn = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="ny"))
    await settle(side, after.reservation_id, 100)
    assert (
        (utc(2026, 3, 7, 5), utc(2026, 3, 8, 5)),
        utc(2026, 3, 8, 5),
        utc(2026, 3, 9, 4),
        (utc(2026, 3, 8, 5), utc(2026, 3, 9, 4)),
        (0, 100),
        (0, 100),
        (250, 0, 0),
        (utc(2026, 11, 1, 4), utc(2026, 11, 2, 5)),
        (0, 0),
        (100, 0, 0),
    ) == (
        window(first),
        before.resets_at.ToDatetime(tzinfo=UTC),
        after.resets_at.ToDatetime(tzinfo=UTC),
        window(spring),
        (spring.used, spring.held),
        (spring_settled.used, spring_settled.held),
        await closed_period(dsn, "ny", 0),
        window(autumn),
        (autumn.used, autumn.held),
        await closed_period(dsn, "ny", 1),
    )
    await assert_invariants(dsn)


@pytest.mark.parametrize(
    ("start", "february", "march"),
    [
        (utc(2027, 2, 10), utc(2027, 2, 28), utc(2027, 3, 31)),
        (utc(2028, 2, 10), utc(2028, 2, 29), utc(2028, 3, 31)),
    ],
    ids=["2027", "leap-2028"],
)
async def test_a_month_anchored_on_the_31st_starts_on_februarys_last_day(
    side: Running, dsn: str, clock: FakeClock, start: datetime, february: datetime, march: datetime
) -> None:
    """A MONTH budget anchored on the 31st runs from January 31st to February's last day
    (the 28th, or the 29th in a leap year), then to March 31st; a hold reserved in
    January's period, expired and settled late, stays there."""
    clock.set(start)
    first = await put(side, "month", period=pb.PERIOD_MONTH, period_anchor=31)
    old = await hold(side, "month", 400)
    clock.set(february + timedelta(hours=1))
    second = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="month"))
    new = await hold(side, "month", 900)
    await settle(side, old.reservation_id, 400)
    now = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="month"))
    assert (
        (utc(start.year, 1, 31), february),
        (february, march),
        True,
        (0, 900),
        (400, 0, 0),
    ) == (
        window(first),
        window(second),
        new.admitted,
        (now.used, now.held),
        await closed_period(dsn, "month", 0),
    )
    await assert_invariants(dsn)


async def test_a_week_anchored_on_monday_resets_at_mondays_local_midnight(
    side: Running, dsn: str, clock: FakeClock
) -> None:
    """A WEEK budget anchored on Monday in Europe/Berlin runs from Monday 00:00 local to the
    next; resets_at is right before and after the boundary."""
    clock.set(utc(2026, 12, 2, 12))  # a Wednesday
    first = await put(
        side, "week", period=pb.PERIOD_WEEK, period_anchor=1, timezone="Europe/Berlin"
    )
    clock.set(utc(2026, 12, 6, 22, 30))
    open_hold = await hold(side, "week", 1_000)
    clock.set(utc(2026, 12, 6, 22, 59, 59))  # a second before Berlin's Monday
    last = await hold(side, "week", 1)
    clock.set(utc(2026, 12, 6, 23))
    first_of_next = await hold(side, "week", 1_000)
    await settle(side, open_hold.reservation_id, 1_000)
    assert (
        (utc(2026, 11, 29, 23), utc(2026, 12, 6, 23)),
        (False, utc(2026, 12, 6, 23)),
        (True, utc(2026, 12, 13, 23)),
        (1_000, 0, 0),
    ) == (
        window(first),
        (last.admitted, last.resets_at.ToDatetime(tzinfo=UTC)),
        (first_of_next.admitted, first_of_next.resets_at.ToDatetime(tzinfo=UTC)),
        await closed_period(dsn, "week", 0),
    )
    await assert_invariants(dsn)


async def test_a_changed_period_takes_effect_at_the_next_boundary(
    side: Running, dsn: str, clock: FakeClock
) -> None:
    """A MONTH budget changed to DAY keeps its month until the month ends, then resets
    daily."""
    clock.set(utc(2026, 12, 2, 12))
    await put(side, "change", period=pb.PERIOD_MONTH)
    await hold(side, "change", 500)
    changed = await put(side, "change", period=pb.PERIOD_DAY)
    clock.set(utc(2027, 1, 1, 12))
    later = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="change"))
    assert (
        (pb.PERIOD_DAY, utc(2026, 12, 1), utc(2027, 1, 1), 500),
        (utc(2027, 1, 1), utc(2027, 1, 2), 0),
    ) == (
        (changed.period, *window(changed), changed.held),
        (*window(later), later.held),
    )
    await assert_invariants(dsn)


async def events_of(dsn: str) -> list[tuple[str, str, Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT kind, budget_id, payload FROM events ORDER BY seq")
    finally:
        await conn.close()
    return [(r["kind"], r["budget_id"], r["payload"]) for r in rows]


async def test_thresholds_raced_through_two_sidecars_are_delivered_once_each(
    dsn: str, socket_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    """Thresholds 8000 and 10000 on a budget raced by 50 workers through 2 sidecars, each
    holding a fiftieth of the limit: exactly one event per threshold, each delivered to a
    real receiver on 127.0.0.1 that checks every signature."""
    secret_file = tmp_path / "notify.secret"
    secret_file.write_text(SECRET + "\n")
    second_dir = socket_dir / "second"
    second_dir.mkdir()
    with receiving(secret_bytes(SECRET), clock) as (url, inbox):
        notify = {"notify_url": url, "notify_secret_file": secret_file}
        async with (
            running(Sidecar(sidecar_settings(dsn, socket_dir, **notify), clock=clock), dsn) as a,
            running(Sidecar(sidecar_settings(dsn, second_dir, **notify), clock=clock), dsn) as b,
        ):
            await put(a, "raced", threshold_bps=[8000, 10000], period=pb.PERIOD_MONTH)

            async def worker(index: int) -> None:
                side = a if index % 2 else b
                reply = await hold(side, "raced", 20)
                assert reply.admitted
                await settle(side, reply.reservation_id, 20)

            await asyncio.gather(*(worker(i) for i in range(50)))
            state = await a.admin.GetBudget(pb.GetBudgetRequest(budget_id="raced"))

            async def both_taken() -> bool:
                return 2 == len(inbox.snapshot()[1])

            await eventually(both_taken, within_seconds=20, what="both notices delivered")
            requests, taken, duplicates = inbox.snapshot()
    events = await events_of(dsn)
    assert (
        1_000,
        [("budget.threshold_crossed", "raced")] * 2,
        [8000, 10000],
        [None, None],
        0,
    ) == (
        state.used,
        [(kind, budget_id) for kind, budget_id, _ in events],
        sorted(json.loads(body)["data"]["threshold_bps"] for body in taken.values()),
        [r.refused for r in requests],
        duplicates,
    )
    await assert_invariants(dsn)


async def test_a_threshold_is_noticed_once_a_period_and_again_the_next(
    side: Running, dsn: str, clock: FakeClock
) -> None:
    """Spend that falls below a threshold and rises past it again in the same period is not
    noticed twice; the next period notices it again."""
    clock.set(utc(2026, 12, 2, 12))
    await put(side, "again", threshold_bps=[5000], period=pb.PERIOD_DAY)
    first = await hold(side, "again", 600)
    await settle(side, first.reservation_id, 0)
    await hold(side, "again", 600)
    clock.advance(DAY)
    await hold(side, "again", 600)
    assert ["again/0/5000", "again/1/5000"] == await _dedupe_keys(dsn)
    await assert_invariants(dsn)


async def _dedupe_keys(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return [
            r["dedupe_key"] for r in await conn.fetch("SELECT dedupe_key FROM events ORDER BY seq")
        ]
    finally:
        await conn.close()


async def test_observe_admits_what_enforce_would_refuse_and_counts_it(
    side: Running, dsn: str
) -> None:
    """OBSERVE: 40 Reserves of $0.10 on $1.00 are all admitted, 30 answer would_refuse and
    the metric counts 30; back to ENFORCE, the next is refused."""
    request = pb.PutBudgetRequest(
        budget_id="shadow", limit=1_000_000, unit="usd_micros", mode=pb.BUDGET_MODE_OBSERVE
    )
    observing = await side.admin.PutBudget(request)
    replies = [await hold(side, "shadow", 100_000) for _ in range(40)]
    state = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="shadow"))
    metrics = scrape(side.sidecar.metrics_port)
    request.mode = pb.BUDGET_MODE_ENFORCE
    await side.admin.PutBudget(request)
    enforced = await hold(side, "shadow", 100_000)
    assert (
        pb.BUDGET_MODE_OBSERVE,
        40,
        30,
        {pb.REFUSAL_REASON_INSUFFICIENT_BUDGET},
        (0, 4_000_000),
        30.0,
        (False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET),
    ) == (
        observing.mode,
        sum(r.admitted for r in replies),
        sum(r.would_refuse for r in replies),
        {r.would_refuse_reason for r in replies if r.would_refuse},
        (state.used, state.held),
        metrics[("earmark_would_refuse_total", (("reason", "insufficient_budget"),))],
        (enforced.admitted, enforced.reason),
    )
    await assert_invariants(dsn)


async def test_rate_windows_across_two_sidecars_admit_exactly_their_minute(
    dsn: str, socket_dir: Path, clock: FakeClock
) -> None:
    """120 admissions a minute across 2 sidecars: of 150 Reserves at once, 120 are
    admitted and 30 refused RATE_LIMITED with a retry_after of 60.5 s (the window slides:
    half a second into the next minute, the 120 weigh less than 119); two minutes later
    the window has room again."""
    second_dir = socket_dir / "second"
    second_dir.mkdir()
    async with (
        running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as a,
        running(Sidecar(sidecar_settings(dsn, second_dir), clock=clock), dsn) as b,
    ):
        await put(a, "rated", limit=10**9, admissions_per_minute=120)
        replies = await asyncio.gather(*(hold(a if i % 2 else b, "rated", 1) for i in range(150)))
        refused = [r for r in replies if not r.admitted]
        clock.advance(timedelta(minutes=2))
        later = await hold(a, "rated", 1)
    assert (
        120,
        {pb.REFUSAL_REASON_RATE_LIMITED},
        {timedelta(seconds=60.5)},
        True,
    ) == (
        sum(r.admitted for r in replies),
        {r.reason for r in refused},
        {r.retry_after.ToTimedelta() for r in refused},
        later.admitted,
    )
    await assert_invariants(dsn)


async def test_a_units_window_refuses_past_its_amount_a_minute(side: Running, dsn: str) -> None:
    """units_per_minute bounds the amount held a minute: 3 holds of 400 fit 1,000 twice,
    and the third is refused RATE_LIMITED naming the budget."""
    await put(side, "units", limit=10**6, units_per_minute=1_000)
    replies = [await hold(side, "units", 400) for _ in range(3)]
    assert (
        [True, True, False],
        pb.REFUSAL_REASON_RATE_LIMITED,
        "units",
    ) == (
        [r.admitted for r in replies],
        replies[2].reason,
        replies[2].refused_budget_id,
    )
    await assert_invariants(dsn)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"period": 9}, "period"),
        ({"period": pb.PERIOD_DAY, "timezone": "Mars/Olympus"}, "timezone"),
        ({"period": pb.PERIOD_DAY, "timezone": "America"}, "timezone"),
        ({"period": pb.PERIOD_DAY, "timezone": "localtime"}, "timezone"),
        ({"period": pb.PERIOD_WEEK, "period_anchor": 8}, "period_anchor"),
        ({"threshold_bps": [8000, 8000]}, "threshold_bps"),
        ({"threshold_bps": [0]}, "threshold_bps"),
        ({"mode": 7}, "mode"),
        ({"admissions_per_minute": 0}, "admissions_per_minute"),
        ({"units_per_minute": -1}, "units_per_minute"),
    ],
)
async def test_bad_policies_are_refused_naming_the_field(
    side: Running, fields: dict[str, Any], field: str
) -> None:
    """A policy field that names nothing is INVALID_ARGUMENT naming it, and changes
    nothing."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await put(side, "bad", **fields)
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await side.admin.GetBudget(pb.GetBudgetRequest(budget_id="bad"))
    assert (grpc.StatusCode.INVALID_ARGUMENT, field, grpc.StatusCode.NOT_FOUND) == (
        refused.value.code(),
        (refused.value.details() or "").split(":")[0],
        missing.value.code(),
    )


async def test_a_hold_gone_into_doubt_and_a_soft_budget_past_its_limit_write_events(
    side: Running, dsn: str, clock: FakeClock
) -> None:
    """A dispatched hold whose lease passes writes hold.in_doubt once; a SOFT budget
    admitting past its limit writes budget.exceeded once in the period."""
    await put(side, "soft", limit=100, overage_policy=pb.OVERAGE_POLICY_SOFT)
    first = await hold(side, "soft", 80)
    await side.budget.Charge(
        pb.ChargeRequest(reservation_id=first.reservation_id, amount=10, idempotency_key="c")
    )
    over = [await hold(side, "soft", 30) for _ in range(2)]
    clock.advance(timedelta(hours=2))

    async def doubted() -> bool:
        return "hold.in_doubt" in [kind for kind, _, _ in await events_of(dsn)]

    await eventually(doubted, within_seconds=10, what="the sweeper's in-doubt event")
    events = await events_of(dsn)
    assert (
        [True, True],
        ["budget.exceeded", "hold.in_doubt"],
        first.reservation_id,
    ) == (
        [r.over_limit for r in over],
        [kind for kind, _, _ in events],
        json.loads(events[1][2])["data"]["reservation_id"],
    )
    await assert_invariants(dsn)


async def test_a_hold_open_across_a_boundary_keeps_its_price_and_its_budget(
    side: Running, dsn: str, clock: FakeClock
) -> None:
    """A hold reserved by shape at 23:50 and charged after midnight, past a cheaper price,
    is charged in full at its own price; while it is open its budget can be neither
    archived nor given another unit."""
    clock.set(utc(2026, 12, 1, 23, 50))
    await side.admin.PutPrice(price(effective_from=stamp(utc(2026, 11, 1))))
    await side.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="night", limit=10**9, unit="usd_micros", period=pb.PERIOD_DAY)
    )
    shape = pb.UsageShape(
        provider="openai", model="gpt-5", input_tokens=1_000, max_output_tokens=1_000
    )
    reply = await side.budget.Reserve(
        pb.ReserveRequest(budget_id="night", idempotency_key="n", lease=LONG, shape=shape)
    )
    await side.admin.PutPrice(
        price(effective_from=stamp(utc(2026, 12, 1, 23, 55)), input_usd_micros_per_mtok=1)
    )
    clock.set(utc(2026, 12, 2, 0, 5))
    charged = await side.budget.Charge(
        pb.ChargeRequest(reservation_id=reply.reservation_id, amount=100, idempotency_key="c")
    )
    refusals = []
    for call in (
        side.admin.DeleteBudget(pb.DeleteBudgetRequest(budget_id="night")),
        side.admin.PutBudget(pb.PutBudgetRequest(budget_id="night", unit="tokens")),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call
        refusals.append(refused.value.code())
    assert ((100, False), [grpc.StatusCode.FAILED_PRECONDITION] * 2) == (
        (charged.charged, charged.capped),
        refusals,
    )
    await assert_invariants(dsn)


async def test_an_observing_budget_never_lowers_a_calls_output(side: Running, dsn: str) -> None:
    """A Reserve with degrade on an OBSERVE budget too small for its output keeps the
    output it asked for and says the budget would refuse it."""
    await side.admin.PutPrice(price(effective_from=stamp(utc(2026, 1, 1))))
    await side.admin.PutBudget(
        pb.PutBudgetRequest(
            budget_id="watch", limit=cost(1_000, 500), unit="usd_micros",
            mode=pb.BUDGET_MODE_OBSERVE,
        )
    )  # fmt: skip
    shape = pb.UsageShape(
        provider="openai", model="gpt-5", input_tokens=1_000, max_output_tokens=4_000
    )
    reply = await side.budget.Reserve(
        pb.ReserveRequest(
            budget_id="watch", idempotency_key="w", lease=LONG, shape=shape, degrade=True
        )
    )
    assert (True, 4_000, False, True) == (
        reply.admitted,
        reply.max_output_tokens,
        reply.degraded,
        reply.would_refuse,
    )
    await assert_invariants(dsn)


async def test_a_closed_period_settled_past_a_threshold_notices_it_there(
    side: Running, dsn: str, clock: FakeClock
) -> None:
    """A hold of yesterday settled today past its amount takes yesterday's spend past 100%:
    the notice names yesterday's period, and today's is untouched."""
    clock.set(utc(2026, 12, 1, 23, 30))
    await put(side, "late", threshold_bps=[10000], period=pb.PERIOD_DAY)
    old = await hold(side, "late", 900)
    clock.set(utc(2026, 12, 2, 0, 10))
    await hold(side, "late", 1)
    await settle(side, old.reservation_id, 1_500)
    assert ["late/0/10000"] == await _dedupe_keys(dsn)
    await assert_invariants(dsn)
