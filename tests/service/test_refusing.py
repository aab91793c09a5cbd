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
            clock.advance(timedelta(days=1))
            after = await get(a, "blocked")
            again = await hold(b, "blocked", 1_200)
            for reply in filled:
                await settle(a, reply.reservation_id, 0)
            requests, bodies, duplicates = inbox.snapshot()
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
    assert ["blocked/0/refusing", "blocked/1/refusing"] == [key for key, _ in refusing]
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
