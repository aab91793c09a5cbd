"""A budget's spend summed from its ledger on a real PostgreSQL (GetSpend's query): by the
model its holds' calls went to (or their shape's), by job and by UTC day, over a time
range and cut to a number of groups; and which holds an operator released."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from earmark.core.model import Outcome
from earmark.core.ops import ChargeOp, ReleaseOp, ReserveOp, ReserveResult, SettleOp
from earmark.core.prices import Price, Shape, Usage
from earmark.errors import NotFound
from earmark.store import Store
from earmark.store.spend import Spend, SpendGroup, SpendQuery, SpendRow
from tests.helpers import FakeClock, assert_invariants

# 23:00 UTC: an hour later is the next day.
NOW = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
DAY_1, DAY_2 = "2026-12-01", "2026-12-02"
# openai/gpt-5 at $2.50 in and $10.00 out per million tokens: 1,000 in and 500 out cost
# 2,500 + 5,000 micro-dollars.
GPT_COST = 7_500
# anthropic/claude-x's shape of 1,000 in and 100 out is held at 3,000 + 1,500.
CLAUDE_HELD = 4_500


@dataclass
class Made:
    """The holds the test's spend was made of."""

    by_call: str
    unnamed: str
    by_shape: str
    released: str
    unspent: str


@dataclass
class Priced:
    store: Store
    clock: FakeClock
    dsn: str


@pytest.fixture
async def priced(dsn: str) -> AsyncIterator[Priced]:
    """A store on a fake clock with a price for openai/gpt-5 and anthropic/claude-x."""
    clock = FakeClock(NOW)
    store = await Store.open(dsn, clock=clock)
    try:
        since = NOW - timedelta(days=30)
        await store.put_price(
            Price("openai", "gpt-5", 0, since, None, 2_500_000, 10_000_000, max_output_tokens=9)
        )
        await store.put_price(Price("anthropic", "claude-x", 0, since, None, 3_000_000, 15_000_000))
        yield Priced(store, clock, dsn)
    finally:
        await store.close()


async def reserve(store: Store, amount: int, job: str, shape: Shape | None = None) -> str:
    """A hold on team, also held on org."""
    result = await store.submit(
        ReserveOp(
            budget_id="team",
            idempotency_key=uuid.uuid4().hex,
            amount=amount,
            lease=timedelta(minutes=5),
            new_reservation_id=str(uuid.uuid4()),
            shape=shape,
            job=job,
            also_budget_ids=("org",),
        )
    )
    assert isinstance(result, ReserveResult)
    assert result.admitted
    return result.reservation_id


async def spend_made(store: Store, clock: FakeClock) -> Made:
    """On day 1: a call to openai/gpt-5 charged by its usage (its call recorded), and a hold
    naming no model; on day 2: a hold by anthropic/claude-x's shape settled by an amount
    (no call recorded), a hold charged 4,000 and released, and one settled at nothing."""
    await store.put_budget("org", 100_000_000, "usd_micros")
    await store.put_budget("team", 50_000_000, "usd_micros")
    by_call = await reserve(store, 1_000_000, "summarize")
    usage = Usage(1_000, 500, provider="openai", model="gpt-5")
    await store.submit(ChargeOp(by_call, "c1", 0, usage=usage))
    await store.submit(SettleOp(by_call, GPT_COST, Outcome.SUCCEEDED))
    unnamed = await reserve(store, 30_000, "summarize")
    await store.submit(SettleOp(unnamed, 20_000, Outcome.SUCCEEDED))
    clock.advance(timedelta(hours=1))
    shape = Shape("anthropic", "claude-x", input_tokens=1_000, max_output_tokens=100)
    by_shape = await reserve(store, 0, "translate", shape)
    await store.submit(SettleOp(by_shape, 3_000, Outcome.SUCCEEDED))
    released = await reserve(store, 10_000, "translate")
    await store.submit(ChargeOp(released, "c1", 4_000))
    await store.submit(ReleaseOp(released))
    unspent = await reserve(store, 5_000, "translate")
    await store.submit(SettleOp(unspent, 0, Outcome.SUCCEEDED))
    return Made(by_call, unnamed, by_shape, released, unspent)


def query(group: SpendGroup, budget_id: str = "team", **f: object) -> SpendQuery:
    values: dict[str, object] = {"since": None, "until": None, "rows": 100}
    values.update(f)
    return SpendQuery(budget_id, group, **values)  # type: ignore[arg-type]


async def test_spend_by_model_job_and_day_sums_to_the_budgets_used(
    priced: Priced,
) -> None:
    """By model: the recorded call's, the shape's for a hold with no call, "" for none; by
    job; by UTC day, newest first; each grouping sums to what GetBudget says was used, on
    the team and on the org its holds were also held on; a hold that spent nothing counts
    in no group."""
    store, clock = priced.store, priced.clock
    await spend_made(store, clock)
    team, org = await store.get_budget("team"), await store.get_budget("org")
    by_model = await store.scans.spend(query(SpendGroup.MODEL))
    by_job = await store.scans.spend(query(SpendGroup.JOB))
    by_day = await store.scans.spend(query(SpendGroup.DAY))
    org_days = await store.scans.spend(query(SpendGroup.DAY, "org"))
    assert GPT_COST + 20_000 + 3_000 + 4_000 == team.used == org.used
    assert Spend(
        "usd_micros",
        [SpendRow("", 24_000, 2), SpendRow("openai/gpt-5", GPT_COST, 1),
         SpendRow("anthropic/claude-x", 3_000, 1)],
        team.used,
        3,
    ) == by_model  # fmt: skip
    assert [SpendRow("summarize", GPT_COST + 20_000, 2), SpendRow("translate", 7_000, 2)] == (
        by_job.rows
    )
    assert [SpendRow(DAY_2, 7_000, 2), SpendRow(DAY_1, GPT_COST + 20_000, 2)] == by_day.rows
    assert (by_day.rows, team.used) == (org_days.rows, org_days.used)
    assert [team.used] * 3 == [sum(r.used for r in s.rows) for s in (by_model, by_job, by_day)]
    await assert_invariants(priced.dsn)


async def test_a_time_range_and_a_row_count_bound_the_answer(
    priced: Priced,
) -> None:
    """since and until keep the entries in [since, until); cut to one row, the answer still
    counts every group and what they used together; no entries answer no rows."""
    store, clock = priced.store, priced.clock
    await spend_made(store, clock)
    midnight = datetime(2026, 12, 2, tzinfo=UTC)
    late = await store.scans.spend(query(SpendGroup.JOB, since=midnight))
    early = await store.scans.spend(query(SpendGroup.JOB, until=midnight))
    top = await store.scans.spend(query(SpendGroup.MODEL, rows=1))
    empty = await store.scans.spend(query(SpendGroup.DAY, since=NOW + timedelta(days=9)))
    assert [SpendRow("translate", 7_000, 2)] == late.rows
    assert [SpendRow("summarize", GPT_COST + 20_000, 2)] == early.rows
    assert ([SpendRow("", 24_000, 2)], GPT_COST + 27_000, 3) == (top.rows, top.used, top.groups)
    assert Spend("usd_micros", [], 0, 0) == empty
    await assert_invariants(priced.dsn)


async def test_an_unknown_budget_is_not_found(priced: Priced) -> None:
    """Spend of a budget that does not exist is NotFound naming it."""
    store = priced.store
    with pytest.raises(NotFound) as raised:
        await store.scans.spend(query(SpendGroup.DAY, "nobody"))
    assert "budget 'nobody' not found" == raised.value.message
    await assert_invariants(priced.dsn)


async def test_released_holds_are_told_from_lapsed_ones(priced: Priced) -> None:
    """Of a released hold, a settled one and a hold whose lease lapsed (all but the first
    read as EXPIRED or SETTLED in their row), only the released one has a release entry."""
    store, clock = priced.store, priced.clock
    made = await spend_made(store, clock)
    lapsed = await reserve(store, 1_000, "translate")
    clock.advance(timedelta(minutes=10))
    assert 1 == await store.sweep_once()
    asked = [made.released, made.by_call, made.unspent, lapsed]
    assert {made.released} == await store.scans.released_among(asked)
    assert set() == await store.scans.released_among([])
    await assert_invariants(priced.dsn)
