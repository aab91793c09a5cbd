"""The PostgreSQL store checked against its model: a Hypothesis state machine runs the same
random operations (Reserves plain, priced and nested; Charges by amount and by usage;
Renews; Settles with every outcome; sweeps on an injected clock; ResolveHold; ReleaseHold;
PutBudget changing limits, escrow and overage, run limits (max_open_holds, max_admissions,
closes_at), and a daily budget's rate windows and mode; PutPrice; the clock taken to just
before midnight, so that holds cross a period's boundary) on the store and on the model in
memory, compares every answer and every budget, hold, ledger, closed period, notice and job
samples row after each step, and ends each run on the audit. EARMARK_MODEL_EXAMPLES runs it
longer. tests/store/test_contract.py states the same contract case by case."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Awaitable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from earmark.core import resets
from earmark.core.estimates import SampleKey
from earmark.core.model import (
    Budget,
    BudgetMode,
    Hold,
    Outcome,
    OveragePolicy,
    PeriodTotals,
    Policies,
)
from earmark.core.ops import (
    ChargeOp,
    Op,
    ReleaseOp,
    RenewOp,
    RepriceOp,
    ReserveOp,
    ResolveOp,
    Result,
    SettleOp,
)
from earmark.core.periods import Calendar, Period
from earmark.core.prices import Price, Shape, Usage
from earmark.core.raises import Raise
from earmark.core.specs import Fields
from earmark.core.templates import TemplateInput
from earmark.errors import EarmarkError
from earmark.store import Store
from earmark.store.audit import audit
from earmark.store.interface import Holds
from earmark.store.model import Model
from tests.conftest import TABLES
from tests.helpers import FakeClock

T = TypeVar("T")
START = datetime(2026, 12, 1, 12, tzinfo=UTC)
# Two budgets in tokens (t2 may be held on with t1, nested) and one in money, priced.
TOKENS, MONEY = ("t1", "t2"), "u1"
# A budget in tokens that resets every day, with notices at half and at 90%.
DAILY = "d1"
DAILY_POLICIES = Policies(calendar=Calendar(Period.DAY), threshold_bps=(5_000, 9_000))
SHAPE = Shape("openai", "gpt", input_tokens=1_000, max_output_tokens=500)
# A call with no maximum of its own: held for the price's ceiling (CEILING tokens).
CEILING = 800
OPEN_SHAPE = Shape("openai", "gpt", input_tokens=1_000, max_output_tokens=0, output_ceiling=True)
EXAMPLES = int(os.environ.get("EARMARK_MODEL_EXAMPLES", "25"))
# Budgets a template makes on first sight (issue 47): its pattern, and the ids Reserves name.
PATTERN, MADE = "e/*", ("e/a", "e/b")

amounts = st.integers(1, 3_000)
keys = st.sampled_from(["k1", "k2", "k3", "k4"])
leases = st.integers(5, 60).map(lambda s: timedelta(seconds=s))
outcomes = st.sampled_from(list(Outcome))
# A budget's run limits (issue 47): (max_open_holds, max_admissions, seconds until
# closes_at), each often unset; a closes_at of 0 seconds has already closed.
run_limits = st.tuples(
    st.sampled_from([None, None, 1, 2]),
    st.sampled_from([None, None, 1, 3]),
    st.sampled_from([None, None, 0, 30, 600]),
)
usages = st.builds(
    Usage,
    input_tokens=st.integers(0, 2_000),
    output_tokens=st.integers(0, 1_000),
    requests=st.integers(1, 3),
)


def answer(outcome: Result | EarmarkError) -> object:
    """What a caller is told: the result itself, or the error's kind and reason."""
    if isinstance(outcome, EarmarkError):
        return (type(outcome).__name__, outcome.reason)
    return outcome


def budget_row(budget: Budget) -> tuple[object, ...]:
    return (
        budget.budget_id, budget.limit, budget.used, budget.held, budget.open_reservations,
        budget.escrow_bps, budget.overage_policy, budget.overage_limit, budget.overage_since,
        budget.period_no, budget.period_start, budget.period_end, budget.noticed_bps,
        budget.mode, budget.admissions_per_minute, budget.units_per_minute, budget.rate,
        budget.threshold_bps, budget.threshold_basis, budget.period, budget.unit,
        budget.max_open_holds, budget.max_admissions, budget.closes_at, budget.admissions,
        budget.limit_until, budget.limit_after, budget.limit_reason, budget.template_id,
        budget.template_version, budget.changed_by_hand, budget.open_earlier,
    )  # fmt: skip


def hold_row(hold: Hold) -> tuple[object, ...]:
    return (
        hold.reservation_id, hold.budget_id, hold.also_budget_ids, int(hold.state), hold.amount,
        hold.charged, hold.expires_at, hold.dispatched, hold.price_version,
    )  # fmt: skip


def period_row(period: PeriodTotals) -> tuple[object, ...]:
    return (
        period.budget_id, period.period_no, period.period_start, period.period_end,
        period.limit, period.used, period.held, period.open_reservations,
    )  # fmt: skip


class StoreAgainstModel(RuleBasedStateMachine):
    holds = Bundle("holds")

    def __init__(self, dsn: str) -> None:
        super().__init__()
        self.dsn = dsn
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock(START)
        self.model = Model.empty(self.clock)
        # One connection for the run's reads of every row, opened once.
        self.conn: asyncpg.Connection = self.run(asyncpg.connect(dsn))
        self.run(self.conn.execute(f"TRUNCATE {TABLES}"))
        # The model's template versions count from 1, as the sequence's do from its start.
        self.run(self.conn.execute("ALTER SEQUENCE budget_template_versions RESTART"))
        self.store = self.run(Store.open(dsn, clock=self.clock))

    def run(self, work: Awaitable[T]) -> T:
        return self.loop.run_until_complete(work)

    def teardown(self) -> None:
        try:
            self.run(self.store.close())
            self.run(self.conn.close())
        finally:
            self.loop.close()

    def both(self, call: str, *args: Any, **kwargs: Any) -> object:
        """Calls both stores the same way and asserts they told the caller the same."""
        told = []
        for store in (self.store, self.model):
            method = getattr(store, call)
            try:
                told.append(answer(self.run(method(*args, **kwargs))))
            except EarmarkError as error:
                told.append(answer(error))
        stored, modelled = told
        assert modelled == stored
        return stored

    def op(self, op: Op) -> object:
        return self.both("submit", op)

    @initialize()
    def budgets(self) -> None:
        for budget_id in TOKENS:
            self.both("put_budget", budget_id, 5_000, "tokens")
        self.both("put_budget", MONEY, 10_000, "usd_micros")
        self.both("put_budget", DAILY, 5_000, "tokens", policies=DAILY_POLICIES)
        price = Price("openai", "gpt", 0, START - timedelta(days=1), None, 1_000_000, 4_000_000)
        self.both("put_price", price)

    @rule(
        budget=st.sampled_from(TOKENS),
        limit=st.one_of(st.none(), st.integers(0, 8_000)),
        escrow_bps=st.sampled_from([0, 1_000]),
        soft=st.booleans(),
        runs=run_limits,
    )
    def put_budget(
        self,
        budget: str,
        limit: int | None,
        escrow_bps: int,
        soft: bool,
        runs: tuple[int | None, int | None, int | None],
    ) -> None:
        policy = OveragePolicy.SOFT if soft and limit is not None else OveragePolicy.HARD
        overage = 1_000 if policy is OveragePolicy.SOFT else None
        self.both(
            "put_budget", budget, limit, "tokens",
            escrow_bps=escrow_bps, overage_policy=policy, overage_limit=overage,
            policies=self.run_limited(Policies(), runs),
        )  # fmt: skip

    def run_limited(
        self, policies: Policies, runs: tuple[int | None, int | None, int | None]
    ) -> Policies:
        """policies with the run limits drawn: closes_at that many seconds from now."""
        open_holds, admissions, closes_in = runs
        closes = None if closes_in is None else self.clock() + timedelta(seconds=closes_in)
        return replace(
            policies, max_open_holds=open_holds, max_admissions=admissions, closes_at=closes
        )

    @rule(
        limit=st.integers(0, 8_000),
        admissions=st.sampled_from([None, 1, 3]),
        units=st.sampled_from([None, 2_000]),
        observe=st.booleans(),
        runs=run_limits,
    )
    def put_daily(
        self,
        limit: int,
        admissions: int | None,
        units: int | None,
        observe: bool,
        runs: tuple[int | None, int | None, int | None],
    ) -> None:
        policies = replace(
            self.run_limited(DAILY_POLICIES, runs),
            mode=BudgetMode.OBSERVE if observe else BudgetMode.ENFORCE,
            admissions_per_minute=admissions,
            units_per_minute=units,
        )
        self.both("put_budget", DAILY, limit, "tokens", policies=policies)

    @rule(
        budget=st.sampled_from([*TOKENS, DAILY, "none"]),
        limit=st.one_of(st.none(), st.integers(0, 8_000)),
        admissions=st.sampled_from([None, 1, 3]),
        named=st.sets(
            st.sampled_from(
                ["limit", "admissions_per_minute", "mode", "escrow_bps", "max_open_holds"]
            )
        ),
        open_holds=st.sampled_from([None, 1, 2]),
    )
    def update_budget(
        self,
        budget: str,
        limit: int | None,
        admissions: int | None,
        named: set[str],
        open_holds: int | None,
    ) -> None:
        """An update of the fields named (some merges refused, as PutBudget's rules say),
        told alike by both, which then hold the same rows (same_rows)."""
        given = Fields(
            budget, limit=limit, admissions_per_minute=admissions, mode=BudgetMode.OBSERVE,
            escrow_bps=1_000, max_open_holds=open_holds,
        )  # fmt: skip
        self.both("update_budget", given, frozenset(named))

    @rule(
        limit=st.integers(0, 8_000),
        daily=st.booleans(),
        open_holds=st.sampled_from([None, 1, 2]),
    )
    def put_template(self, limit: int, daily: bool, open_holds: int | None) -> None:
        """A template of the made budgets, put or replaced: it makes the next one missing,
        and reaches those made before at their next period."""
        period = int(Period.DAY) if daily else 0
        fields = Fields("", limit=limit, unit="tokens", period=period, max_open_holds=open_holds)
        self.both("put_template", TemplateInput("e", PATTERN, fields))

    @rule(
        budget=st.sampled_from([*TOKENS, *MADE]),
        limit=st.integers(0, 8_000),
        hours=st.sampled_from([None, 1, 30]),
    )
    def raise_limit(self, budget: str, limit: int, hours: int | None) -> None:
        """A limit set by hand, for some hours (a temporary raise) or from now on."""
        until = None if hours is None else self.clock() + timedelta(hours=hours)
        raised = Raise(until=until, reason="drawn")
        self.both("update_budget", Fields(budget, limit=limit), frozenset({"limit"}), raised=raised)

    @rule(seconds=st.integers(0, 40))
    def before_midnight(self, seconds: int) -> None:
        """The clock just before the next midnight: the next steps cross the boundary."""
        now = self.clock()
        midnight = datetime(now.year, now.month, now.day, tzinfo=UTC) + timedelta(days=1)
        self.clock.set(midnight - timedelta(seconds=seconds))

    @rule(input_rate=st.integers(0, 3_000_000), request_fee=st.integers(0, 50))
    def put_price(self, input_rate: int, request_fee: int) -> None:
        at = self.clock() - timedelta(seconds=1)
        price = Price(
            "openai", "gpt", 0, at, None, input_rate, 4_000_000, request_fee=request_fee,
            max_output_tokens=CEILING,
        )  # fmt: skip
        self.both("put_price", price)

    @rule(
        target=holds,
        budget=st.sampled_from([*TOKENS, MONEY, DAILY, *MADE]),
        amount=amounts,
        key=keys,
        lease=leases,
        nested=st.booleans(),
        shape=st.sampled_from([None, SHAPE, OPEN_SHAPE]),
        prompt=st.one_of(st.none(), usages),
        degrade=st.booleans(),
        job=st.sampled_from(["", "j"]),
    )
    def reserve(
        self,
        budget: str,
        amount: int,
        key: str,
        lease: timedelta,
        nested: bool,
        shape: Shape | None,
        prompt: Usage | None,
        degrade: bool,
        job: str,
    ) -> str:
        also = ("t2",) if nested and budget == "t1" else ()
        rid = str(uuid.uuid4())
        op = ReserveOp(
            budget, key, 0 if shape else amount, lease, rid, shape=shape, job=job,
            also_budget_ids=also, charge=prompt, degrade=degrade and shape is not None,
        )  # fmt: skip
        told = self.op(op)
        return getattr(told, "reservation_id", "") or rid

    @rule(hold=holds, amount=st.integers(0, 2_000), key=keys, usage=st.one_of(st.none(), usages))
    def charge(self, hold: str, amount: int, key: str, usage: Usage | None) -> None:
        self.op(ChargeOp(hold, key, 0 if usage else amount, usage=usage))

    @rule(hold=holds, lease=leases)
    def renew(self, hold: str, lease: timedelta) -> None:
        self.op(RenewOp(hold, lease))

    @rule(
        hold=holds, used=st.integers(0, 4_000), outcome=outcomes, usage=st.one_of(st.none(), usages)
    )
    def settle(self, hold: str, used: int, outcome: Outcome, usage: Usage | None) -> None:
        self.op(SettleOp(hold, 0 if usage else used, outcome, usage=usage))

    @rule(hold=holds, used=st.integers(0, 4_000))
    def resolve(self, hold: str, used: int) -> None:
        self.op(ResolveOp(hold, used))

    @rule(hold=holds)
    def release(self, hold: str) -> None:
        self.op(ReleaseOp(hold))

    @rule(hold=holds)
    def reprice(self, hold: str) -> None:
        self.op(RepriceOp(hold))

    @rule(seconds=st.integers(0, 90))
    def sweep(self, seconds: int) -> None:
        self.clock.advance(timedelta(seconds=seconds))
        self.both("sweep_once")

    @invariant()
    def same_rows(self) -> None:
        """Every budget, hold, ledger and job samples row of the store is the model's."""
        if not hasattr(self, "store"):
            return
        budgets, holds, ledger, samples, problems = self.run(self._rows())
        periods, events = self.run(self._periods_and_events())
        now = self.clock()
        modelled_budgets = [budget_row(resets.current(b, now)) for b in self.model.budgets.values()]
        assert sorted(modelled_budgets) == budgets
        assert sorted(hold_row(h) for h in self.model.holds.values()) == holds
        modelled = sorted(
            (e.budget_id, e.reservation_id or "", str(e.kind), e.held_delta, e.used_delta, e.at)
            for e in self.model.ledger
        )
        assert modelled == ledger
        assert self.model.samples == samples
        assert sorted(period_row(p) for p in self.model.periods.values()) == periods
        assert [(e.kind, e.budget_id, e.dedupe_key) for e in self.model.events] == events
        assert [] == problems

    async def _periods_and_events(self) -> tuple[list[Any], list[Any]]:
        periods = await self.conn.fetch(
            "SELECT budget_id, period_no, period_start, period_end, limit_units, used, "
            "held, open_reservations FROM budget_periods"
        )
        events = await self.conn.fetch(
            "SELECT kind, budget_id, dedupe_key FROM events ORDER BY seq"
        )
        return sorted(tuple(r) for r in periods), [tuple(r) for r in events]

    async def _rows(
        self,
    ) -> tuple[list[Any], list[Any], list[Any], dict[SampleKey, list[int]], list[str]]:
        conn = self.conn
        budgets = [budget_row(await self.store.get_budget(r["budget_id"]))
                   for r in await conn.fetch("SELECT budget_id FROM budgets")]  # fmt: skip
        rows = await conn.fetch(
            "SELECT reservation_id::text, budget_id, also_budget_ids, state, amount, "
            "charged, expires_at, dispatched, price_version FROM reservations"
        )
        holds = [(r[0], r[1], tuple(r[2]), *tuple(r)[3:]) for r in rows]
        ledger = [
            tuple(r)
            for r in await conn.fetch(
                "SELECT budget_id, coalesce(reservation_id::text, ''), kind, held_delta, "
                "used_delta, at "
                "FROM ledger"
            )
        ]
        rows = await conn.fetch("SELECT unit, root, job, model, samples FROM tenant_samples")
        samples = {
            (r["unit"], r["root"], r["job"], r["model"]): json.loads(r["samples"]) for r in rows
        }
        return sorted(budgets), sorted(holds), sorted(ledger), samples, await audit(conn)


def test_the_store_does_what_its_model_does(database_url: str) -> None:
    """Random operations on the store and on the model: the same answers, the same rows,
    and a clean audit after every step."""
    store_is_a_store: type[Holds] = Store
    model_is_a_store: type[Holds] = Model
    assert (store_is_a_store, model_is_a_store) == (Store, Model)
    run_state_machine_as_test(
        lambda: StoreAgainstModel(database_url),  # type: ignore[arg-type]
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
