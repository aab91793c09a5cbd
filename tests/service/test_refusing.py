"""A budget that refuses for want of room tells the operator (issue 43): the period's first
refusal writes one signed budget.refusing notice however many sidecars refuse at once, the
refusals are counted on the budget and exported, and thresholds fire on their own basis,
through live sidecars on an injected clock and a real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask

from earmark.notices.signing import secret_bytes
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, eventually, scrape
from tests.notices.receiver import receiving
from tests.notices.recorded import SECRET

LONG = Duration(seconds=3600)
CLOCK_START = datetime(2026, 12, 1, 9, tzinfo=UTC)


async def put(side: Running, budget_id: str, limit: int, **fields: Any) -> pb.BudgetState:
    request = pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit="tokens", **fields)
    state: pb.BudgetState = await side.admin.PutBudget(request)
    return state


async def hold(side: Running, budget_id: str, amount: int) -> pb.ReserveResponse:
    request = pb.ReserveRequest(
        budget_id=budget_id, amount=amount, idempotency_key=uuid.uuid4().hex, lease=LONG
    )
    reply: pb.ReserveResponse = await side.budget.Reserve(request)
    return reply


async def settle(side: Running, reservation_id: str, used: int) -> None:
    await side.budget.Settle(
        pb.SettleRequest(reservation_id=reservation_id, used=used, outcome=pb.OUTCOME_SUCCEEDED)
    )


async def get(side: Running, budget_id: str) -> pb.BudgetState:
    state: pb.BudgetState = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    return state


async def events_of(dsn: str, kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(dedupe key, data) of the events of kind, oldest first."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT dedupe_key, payload::text AS payload FROM events WHERE kind = $1 ORDER BY seq",
            kind,
        )
    finally:
        await conn.close()
    return [(row["dedupe_key"], json.loads(row["payload"])["data"]) for row in rows]


async def test_a_blocked_budget_is_noticed_once_across_two_sidecars_and_counted(
    dsn: str, socket_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    """A HARD budget whose limit is held (used still 0, so no 100% threshold fires) refuses
    three Reserves raced through two sidecars: one budget.refusing notice, delivered signed
    once; GetBudget and earmark_budget_refusals count 3; the next period starts at 0 and
    its first refusal is noticed again."""
    clock.set(CLOCK_START)
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
            await put(a, "blocked", 1_000, threshold_bps=[10_000], period=pb.PERIOD_DAY)
            filled = [await hold(a, "blocked", 400), await hold(b, "blocked", 400)]
            replies = await asyncio.gather(*(hold(side, "blocked", 300) for side in (a, b, a)))
            state = await get(b, "blocked")

            async def exported() -> bool:
                metrics = scrape(a.sidecar.metrics_port)
                key = ("earmark_budget_refusals", (("budget_id", "blocked"), ("unit", "tokens")))
                return 3.0 == metrics.get(key)

            await eventually(exported, within_seconds=20, what="the refusals exported")

            async def taken() -> bool:
                return 1 == len(inbox.snapshot()[1])

            await eventually(taken, within_seconds=20, what="the notice delivered")
            # Before the next period's notice can be posted too.
            requests, bodies, duplicates = inbox.snapshot()
            clock.advance(timedelta(days=1))
            after = await get(a, "blocked")
            again = await hold(b, "blocked", 1_200)
            for reply in filled:
                await settle(a, reply.reservation_id, 0)
    refusing = await events_of(dsn, "budget.refusing")
    (body,) = bodies.values()
    data = json.loads(body)["data"]
    assert [False, False, False] == [reply.admitted for reply in replies]
    assert {pb.REFUSAL_REASON_INSUFFICIENT_BUDGET} == {reply.reason for reply in replies}
    assert (3, True, True) == (
        state.refusals,
        state.HasField("first_refused_at"),
        state.last_refused_at.ToDatetime(tzinfo=UTC) == CLOCK_START,
    )
    assert ["blocked/0/refusing/1", "blocked/1/refusing/1"] == [key for key, _ in refusing]
    assert (0, 800, 800, 300, 200, "committed") == (
        data["used"],
        data["held"],
        data["committed"],
        data["refused_amount"],
        data["remaining"],
        data["threshold_basis"],
    )
    assert ([None], 0) == ([request.refused for request in requests], duplicates)
    assert [] == await events_of(dsn, "budget.threshold_crossed")
    assert (0, False) == (after.refusals, after.HasField("first_refused_at"))
    assert not again.admitted
    await assert_invariants(dsn)


async def test_a_refusal_for_a_rate_or_in_observe_is_not_counted(
    dsn: str, socket_dir: Path, clock: FakeClock
) -> None:
    """A Reserve refused by a rate window, and one an observing budget admits past its
    limit, count no refusal and write no notice: only want of room does."""
    clock.set(CLOCK_START)
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as side:
        await put(side, "paced", 1_000, admissions_per_minute=1)
        await put(side, "watched", 100, mode=pb.BUDGET_MODE_OBSERVE)
        paced = [await hold(side, "paced", 10) for _ in range(2)]
        watched = await hold(side, "watched", 500)
        states = [await get(side, name) for name in ("paced", "watched")]
        for reply in (*paced, watched):
            if reply.admitted:
                await settle(side, reply.reservation_id, 0)
    assert [True, False] == [reply.admitted for reply in paced]
    assert (pb.REFUSAL_REASON_RATE_LIMITED, True) == (paced[1].reason, watched.admitted)
    assert [0, 0] == [state.refusals for state in states]
    assert [] == await events_of(dsn, "budget.refusing")
    await assert_invariants(dsn)


async def test_a_threshold_fires_at_the_figure_of_its_basis(
    dsn: str, socket_dir: Path, clock: FakeClock
) -> None:
    """At 50%: a committed threshold fires when a hold takes used + held there; a used one
    does not for the hold, nor for a settle below it, and fires on the settle that takes
    used there; each notice carries used, held, committed and its basis."""
    clock.set(CLOCK_START)
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as side:
        for name, basis in (("by-commit", pb.THRESHOLD_BASIS_UNSPECIFIED),
                            ("by-use", pb.THRESHOLD_BASIS_USED)):  # fmt: skip
            await put(side, name, 1_000, threshold_bps=[5_000], threshold_basis=basis)
        committed = await hold(side, "by-commit", 600)
        first, second = await hold(side, "by-use", 600), await hold(side, "by-use", 300)
        before_settles = [key for key, _ in await events_of(dsn, "budget.threshold_crossed")]
        await settle(side, first.reservation_id, 400)
        after_one = [key for key, _ in await events_of(dsn, "budget.threshold_crossed")]
        await settle(side, second.reservation_id, 200)
        await settle(side, committed.reservation_id, 600)
        states = [await get(side, name) for name in ("by-commit", "by-use")]
    noticed = await events_of(dsn, "budget.threshold_crossed")
    figures = [
        (d["budget_id"], d["threshold_basis"], d["used"], d["held"], d["committed"])
        for _, d in noticed
    ]
    assert (["by-commit/0/5000"], ["by-commit/0/5000"]) == (before_settles, after_one)
    assert [("by-commit", "committed", 0, 600, 600), ("by-use", "used", 600, 0, 600)] == figures
    assert [pb.THRESHOLD_BASIS_COMMITTED, pb.THRESHOLD_BASIS_USED] == [
        state.threshold_basis for state in states
    ]
    await assert_invariants(dsn)


async def update(side: Running, budget_id: str, paths: list[str], **fields: Any) -> pb.BudgetState:
    """UpdateBudget of budget_id naming paths."""
    request = pb.UpdateBudgetRequest(
        budget=pb.PutBudgetRequest(budget_id=budget_id, **fields),
        update_mask=FieldMask(paths=paths),
    )
    state: pb.BudgetState = await side.admin.UpdateBudget(request)
    return state


async def test_a_new_limit_is_noticed_again_when_it_refuses(
    dsn: str, socket_dir: Path, clock: FakeClock
) -> None:
    """A budget that never resets notices its first refusal; an update of its thresholds
    does not rearm the notice, a raised limit does, and that limit's first refusal is
    noticed once more, keyed by the count it came at."""
    clock.set(CLOCK_START)
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as side:
        await put(side, "forever", 100)
        full = await hold(side, "forever", 100)
        first = await hold(side, "forever", 50)
        await update(side, "forever", ["threshold_bps"], threshold_bps=[9_000])
        second = await hold(side, "forever", 50)
        clock.advance(timedelta(days=20))
        await update(side, "forever", ["limit"], limit=200)
        third, fourth = await hold(side, "forever", 150), await hold(side, "forever", 150)
        state = await get(side, "forever")
        await settle(side, full.reservation_id, 100)
    noticed = await events_of(dsn, "budget.refusing")
    assert [False] * 4 == [r.admitted for r in (first, second, third, fourth)]
    assert [("forever/0/refusing/1", 100, 1), ("forever/0/refusing/3", 200, 3)] == [
        (key, data["limit"], data["refusals"]) for key, data in noticed
    ]
    assert (4, CLOCK_START) == (state.refusals, state.first_refused_at.ToDatetime(tzinfo=UTC))
    await assert_invariants(dsn)


async def test_an_update_keeps_the_overage_flag_unless_it_names_the_policy(
    dsn: str, socket_dir: Path, clock: FakeClock
) -> None:
    """A SOFT budget past its limit keeps its overage flag through an update of its
    threshold basis, and an update of its limit clears it, as PutBudget does."""
    clock.set(CLOCK_START)
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as side:
        await put(side, "soft", 100, overage_policy=pb.OVERAGE_POLICY_SOFT, overage_limit=100)
        over = await hold(side, "soft", 150)
        basis = await update(side, "soft", ["threshold_basis"], threshold_basis=2)
        limit = await update(side, "soft", ["limit"], limit=300)
        await settle(side, over.reservation_id, 150)
    assert (True, True, False) == (
        over.admitted,
        basis.HasField("overage_since"),
        limit.HasField("overage_since"),
    )
    await assert_invariants(dsn)


async def test_a_basis_changed_mid_period_notices_its_thresholds_anew(
    dsn: str, socket_dir: Path, clock: FakeClock
) -> None:
    """80% noticed on committed when a hold takes used + held there; switched to used, the
    settle that takes used there notices it again, on the used basis."""
    clock.set(CLOCK_START)
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as side:
        await put(side, "switched", 100, threshold_bps=[8_000])
        reply = await hold(side, "switched", 85)
        await update(side, "switched", ["threshold_basis"], threshold_basis=2)
        await settle(side, reply.reservation_id, 85)
    noticed = await events_of(dsn, "budget.threshold_crossed")
    assert [("switched/0/8000", "committed", 0), ("switched/0/8000/used", "used", 85)] == [
        (key, data["threshold_basis"], data["used"]) for key, data in noticed
    ]
    await assert_invariants(dsn)


async def test_a_period_a_previous_release_rolled_counts_its_own_refusals(
    dsn: str, socket_dir: Path, clock: FakeClock
) -> None:
    """A daily budget with no room refuses on its first day; its row then rolled as the
    previous release rolls it (period and window moved, the refusal columns untouched)
    reads as having refused nothing, and the new day's first refusal is noticed."""
    clock.set(CLOCK_START)
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as side:
        await put(side, "daily", 0, period=pb.PERIOD_DAY)
        await hold(side, "daily", 1)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(
                "INSERT INTO budget_periods (budget_id, period_no, period_start, period_end, "
                "limit_units, used, held, open_reservations) "
                "SELECT budget_id, period_no, period_start, period_end, limit_units, 0, 0, 0 "
                "FROM budgets WHERE budget_id = 'daily'"
            )
            await conn.execute(
                "UPDATE budgets SET period_no = 1, period_start = period_end, "
                "period_end = period_end + interval '1 day' WHERE budget_id = 'daily'"
            )
        finally:
            await conn.close()
        clock.advance(timedelta(days=1))
        rolled = await get(side, "daily")
        await hold(side, "daily", 1)
        after = await get(side, "daily")
    noticed = [key for key, _ in await events_of(dsn, "budget.refusing")]
    assert (0, 1) == (rolled.refusals, after.refusals)
    assert ["daily/0/refusing/1", "daily/1/refusing/1"] == noticed
    await assert_invariants(dsn)
