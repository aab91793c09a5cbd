"""The store's contract (store/interface.py's Holds): every case runs, parametrized, on the
PostgreSQL Store and on the Model in memory, and states what each must answer (results,
errors, budgets, holds, ledger, closed periods and notices), so both answer alike.
tests/store/test_model.py runs random sequences on both and compares them row by row."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import pytest

from earmark.core.model import (
    Budget,
    HoldState,
    Outcome,
    Policies,
    RefusalReason,
    ThresholdBasis,
)
from earmark.core.ops import (
    ChargeOp,
    ChargeResult,
    Op,
    RenewOp,
    RenewResult,
    ReserveOp,
    ReserveResult,
    SettleOp,
    SettleResult,
)
from earmark.core.periods import Calendar, Period
from earmark.core.prices import Price, Shape, Usage
from earmark.core.specs import Fields
from earmark.errors import EarmarkError, Reason
from earmark.store import Store
from earmark.store.interface import Holds
from earmark.store.model import Model
from tests.helpers import FakeClock, assert_invariants

R = TypeVar("R")
# Noon on a Tuesday: a day's boundary is twelve hours away.
CLOCK_START = datetime(2026, 12, 1, 12, tzinfo=UTC)
LEASE = timedelta(seconds=30)
DAILY = Policies(calendar=Calendar(Period.DAY))


@dataclass
class Backend:
    """A store under contract, and how to read what it keeps."""

    name: str
    store: Holds
    dsn: str
    model: Model | None = None

    async def ledger(self) -> list[tuple[object, ...]]:
        """(budget, kind, held_delta, used_delta, period_no) of every ledger row, in order."""
        if self.model is not None:
            entries = self.model.ledger
            return [(e.budget_id, str(e.kind), e.held_delta, e.used_delta, e.period_no)
                    for e in entries]  # fmt: skip
        rows = await self._fetch(
            "SELECT budget_id, kind, held_delta, used_delta, period_no FROM ledger "
            "ORDER BY entry_id"
        )
        return [tuple(r) for r in rows]

    async def periods(self) -> list[tuple[object, ...]]:
        """(budget, period_no, end, limit, used, held, open) of every closed period."""
        if self.model is not None:
            return sorted(
                (p.budget_id, p.period_no, p.period_end, p.limit, p.used, p.held,
                 p.open_reservations)
                for p in self.model.periods.values()
            )  # fmt: skip
        rows = await self._fetch(
            "SELECT budget_id, period_no, period_end, limit_units, used, held, "
            "open_reservations FROM budget_periods ORDER BY budget_id, period_no"
        )
        return [tuple(r) for r in rows]

    async def events(self) -> list[tuple[str, str]]:
        """(kind, budget) of every notice, in order."""
        if self.model is not None:
            return [(e.kind, e.budget_id) for e in self.model.events]
        rows = await self._fetch("SELECT kind, budget_id FROM events ORDER BY seq")
        return [(r["kind"], r["budget_id"]) for r in rows]

    async def doubted(self) -> list[str]:
        """The reservation id of every hold.in_doubt notice, in order."""
        if self.model is not None:
            keys = [e.dedupe_key for e in self.model.events if e.kind == "hold.in_doubt"]
        else:
            rows = await self._fetch(
                "SELECT dedupe_key FROM events WHERE kind = 'hold.in_doubt' ORDER BY seq"
            )
            keys = [r["dedupe_key"] for r in rows]
        # "hold/RESERVATION/in_doubt"
        return [key.split("/")[1] for key in keys]

    async def _fetch(self, sql: str) -> list[Any]:
        conn = await asyncpg.connect(self.dsn)
        try:
            return list(await conn.fetch(sql))
        finally:
            await conn.close()


@pytest.fixture(params=["postgres", "model"])
async def backend(
    request: pytest.FixtureRequest, dsn: str, clock: FakeClock
) -> AsyncIterator[Backend]:
    """The PostgreSQL store on an empty database, or the model, on the test's clock."""
    if request.param == "model":
        model = Model.empty(clock)
        yield Backend("model", model, dsn, model)
        return
    store = await Store.open(dsn, clock=clock)
    try:
        yield Backend("postgres", store, dsn)
    finally:
        await store.close()


async def attempt(call: Awaitable[object]) -> object:
    """What the caller is told: the answer, or the error's kind and reason."""
    try:
        return await call
    except EarmarkError as error:
        return (type(error).__name__, error.reason)


async def submit(store: Holds, op: Op, kind: type[R]) -> R:
    """op's answer, which must be of kind."""
    result = await store.submit(op)
    assert isinstance(result, kind)
    return result


def counters(budget: Budget) -> tuple[int | None, int, int, int]:
    """(limit, used, held, open holds)."""
    return (budget.limit, budget.used, budget.held, budget.open_reservations)


def reserve(budget_id: str, amount: int, key: str, **kwargs: Any) -> ReserveOp:
    """A Reserve whose reservation id follows from its budget and key."""
    rid = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{budget_id}/{key}"))
    return ReserveOp(budget_id, key, amount, kwargs.pop("lease", LEASE), rid, **kwargs)


async def test_a_budget_is_put_read_and_put_again(backend: Backend) -> None:
    """A new budget reads back as put; put again, its settings change and its counters
    stay; an unknown budget is not found, and a new one needs a unit."""
    store = backend.store
    await store.put_budget("b", 1_000, "tokens", escrow_bps=1_000)
    await store.submit(reserve("b", 300, "k"))
    again = await store.put_budget("b", 2_000, "", escrow_bps=0)
    read = await store.get_budget("b")
    assert ((2_000, 0, 300, 1), "tokens", 0) == (counters(read), read.unit, read.escrow_bps)
    assert counters(read) == counters(again)
    assert ("NotFound", Reason.BUDGET_NOT_FOUND) == await attempt(store.get_budget("none"))
    made = store.put_budget("new", 5, "")
    assert ("InvalidArgument", Reason.INVALID_FIELD) == await attempt(made)


async def test_reserve_charge_renew_settle(backend: Backend, clock: FakeClock) -> None:
    """A hold's life answers the same: each call's answer, the budget after, and the
    ledger rows in order."""
    store = backend.store
    await store.put_budget("b", 1_000, "tokens")
    held = await submit(store, reserve("b", 400, "k"), ReserveResult)
    rid = held.reservation_id
    charged = await submit(store, ChargeOp(rid, "c1", 150), ChargeResult)
    clock.advance(timedelta(seconds=10))
    renewed = await submit(store, RenewOp(rid, timedelta(seconds=60)), RenewResult)
    settled = await submit(store, SettleOp(rid, 250, Outcome.SUCCEEDED), SettleResult)
    opened = clock.at - timedelta(seconds=10)
    assert (True, 400, 600, opened + LEASE) == (
        held.admitted, held.amount, held.remaining, held.expires_at
    )  # fmt: skip
    assert (150, 150, 250) == (charged.charged, charged.total_charged, charged.hold_remaining)
    assert clock.at + timedelta(seconds=60) == renewed.expires_at
    assert (250, 150, HoldState.SETTLED) == (settled.used, settled.released, settled.state)
    assert (1_000, 250, 0, 0) == counters(await store.get_budget("b"))
    assert [
        ("b", "hold", 400, 0, 0),
        ("b", "charge", -150, 150, 0),
        ("b", "settle", -250, 100, 0),
    ] == await backend.ledger()


async def test_refusals_retries_and_closed_holds(backend: Backend) -> None:
    """No room is a refusal that holds nothing; a repeated key answers its hold again; a
    settled hold refuses a Charge and answers a repeated Settle; an unknown one is not
    found."""
    store = backend.store
    await store.put_budget("b", 1_000, "tokens")
    first = await submit(store, reserve("b", 800, "k1"), ReserveResult)
    refused = await submit(store, reserve("b", 300, "k2"), ReserveResult)
    again = await submit(store, reserve("b", 800, "k1"), ReserveResult)
    assert (False, RefusalReason.INSUFFICIENT_BUDGET, 200, "") == (
        refused.admitted, refused.reason, refused.remaining, refused.reservation_id
    )  # fmt: skip
    assert (True, first.reservation_id) == (again.duplicate, again.reservation_id)
    settle = SettleOp(first.reservation_id, 100, Outcome.SUCCEEDED)
    await store.submit(settle)
    repeated = await submit(store, settle, SettleResult)
    late = store.submit(ChargeOp(first.reservation_id, "c", 5))
    assert ("FailedPrecondition", Reason.HOLD_SETTLED) == await attempt(late)
    assert (True, 100) == (repeated.duplicate, repeated.used)
    unknown = store.submit(SettleOp(str(uuid.uuid4()), 1, Outcome.SUCCEEDED))
    assert ("NotFound", Reason.RESERVATION_NOT_FOUND) == await attempt(unknown)
    nowhere = store.submit(reserve("none", 1, "k"))
    assert ("NotFound", Reason.BUDGET_NOT_FOUND) == await attempt(nowhere)
    assert (1_000, 100, 0, 0) == counters(await store.get_budget("b"))


async def test_the_sweeper_expires_and_doubts_lapsed_holds(
    backend: Backend, clock: FakeClock
) -> None:
    """Nothing is due before a lease passes; then an undispatched hold expires (its
    amount returns) and a charged one goes into doubt, still held."""
    store = backend.store
    await store.put_budget("b", 1_000, "tokens")
    idle = await submit(store, reserve("b", 300, "idle"), ReserveResult)
    sent = await submit(store, reserve("b", 200, "sent"), ReserveResult)
    await store.submit(ChargeOp(sent.reservation_id, "c", 50))
    clock.advance(LEASE - timedelta(seconds=1))
    before = await store.sweep_once()
    held = await store.held_among([idle.reservation_id, sent.reservation_id])
    clock.advance(timedelta(seconds=1))
    assert (0, sorted([idle.reservation_id, sent.reservation_id])) == (before, sorted(held))
    assert 2 == await store.sweep_once()
    assert [] == await store.held_among([idle.reservation_id, sent.reservation_id])
    assert (1_000, 50, 150, 1) == counters(await store.get_budget("b"))
    settled = await submit(
        store, SettleOp(sent.reservation_id, 50, Outcome.SUCCEEDED), SettleResult
    )
    assert (True, HoldState.SETTLED) == (settled.was_in_doubt, settled.state)
    assert [
        ("b", "charge", -50, 50, 0),
        ("b", "expire", -300, 0, 0),
        ("b", "hold", 200, 0, 0),
        ("b", "hold", 300, 0, 0),
        ("b", "in_doubt", 0, 0, 0),
        ("b", "settle", -150, 0, 0),
    ] == sorted(await backend.ledger())


async def test_holds_that_lapse_together_are_doubted_in_id_order(
    backend: Backend, clock: FakeClock
) -> None:
    """Charged holds whose leases end at the same instant go into doubt in the order of
    their ids, in the store as in the model, and their notices are written in it (the store
    read them in its table's order, the model in its own: the state machine's flake)."""
    store = backend.store
    await store.put_budget("b", 1_000, "tokens")
    ids = []
    for i in range(8):
        hold = await submit(store, reserve("b", 10, f"k{i}"), ReserveResult)
        await store.submit(ChargeOp(hold.reservation_id, "c", 1))
        ids.append(hold.reservation_id)
    assert sorted(ids) != ids
    clock.advance(LEASE)
    assert 8 == await store.sweep_once()
    assert sorted(ids) == await backend.doubted()


async def test_a_period_rolls_at_its_boundary(backend: Backend, clock: FakeClock) -> None:
    """A daily budget reads as the next day's, at zero, once midnight passes; the first
    Reserve after it closes the day, and a hold of the day before settles into the closed
    day, which keeps its counters."""
    store = backend.store
    await store.put_budget("d", 1_000, "tokens", policies=DAILY)
    late = await submit(store, reserve("d", 700, "k1", lease=timedelta(hours=24)), ReserveResult)
    midnight = datetime(2026, 12, 2, tzinfo=UTC)
    assert midnight == late.resets_at
    clock.set(midnight + timedelta(minutes=1))
    read = await store.get_budget("d")
    assert ((1_000, 0, 0, 0), 1, midnight) == (counters(read), read.period_no, read.period_start)
    fresh = await submit(store, reserve("d", 900, "k2"), ReserveResult)
    settled = await submit(
        store, SettleOp(late.reservation_id, 600, Outcome.SUCCEEDED), SettleResult
    )
    assert (True, 100, 600) == (fresh.admitted, fresh.remaining, settled.used)
    assert (1_000, 0, 900, 1) == counters(await store.get_budget("d"))
    assert [("d", 0, midnight, 1_000, 600, 0, 0)] == await backend.periods()
    assert [
        ("d", "hold", 700, 0, 0),
        ("d", "hold", 900, 0, 1),
        ("d", "settle", -700, 600, 0),
    ] == await backend.ledger()


async def test_a_budgets_rate_window_refuses_until_it_has_room(
    backend: Backend, clock: FakeClock
) -> None:
    """Past its admissions a minute a budget refuses RATE_LIMITED, naming itself and when
    to try again (the sliding window: once half the next minute has passed, the previous
    minute's two count as one), and holds nothing; once the window slides it admits again."""
    store = backend.store
    rated = Policies(admissions_per_minute=2)
    await store.put_budget("r", 1_000, "tokens", policies=rated)
    for key in ("k1", "k2"):
        await store.submit(reserve("r", 10, key))
    refused = await submit(store, reserve("r", 10, "k3"), ReserveResult)
    assert (False, RefusalReason.RATE_LIMITED, "r", timedelta(seconds=90)) == (
        refused.admitted, refused.reason, refused.refused_budget_id, refused.retry_after
    )  # fmt: skip
    assert (1_000, 0, 20, 2) == counters(await store.get_budget("r"))
    clock.advance(timedelta(minutes=2))
    admitted = await submit(store, reserve("r", 10, "k4"), ReserveResult)
    assert (True, 970) == (admitted.admitted, admitted.remaining)


async def test_an_accounts_cycle_and_admission_rate(backend: Backend, clock: FakeClock) -> None:
    """A cycle budget is made, given only newer limit reads, and listed newest first; only
    a Reserve by its account holds on it, within the account's admissions a minute."""
    store = backend.store
    read_at = clock.at
    november = cycle("acme", "chat", datetime(2026, 11, 1, tzinfo=UTC), 500, read_at)
    december = cycle("acme", "chat", datetime(2026, 12, 1, tzinfo=UTC), 1_000, read_at)
    made = [await store.ensure_cycle(spec) for spec in (november, december)]
    stale = await store.ensure_cycle(replace(december, limit=1, limit_read_at=read_at - HOUR))
    newer = await store.ensure_cycle(replace(december, limit=2_000, limit_read_at=read_at + HOUR))
    assert ([500, 1_000], None) == ([b.limit for b in made if b is not None], stale)
    shown = [(b.limit, b.account, b.feature) for b in [newer] if b is not None]
    assert [(2_000, "acme", "chat")] == shown
    listed = await store.cycles_of("acme")
    assert [december.budget_id, november.budget_id] == [b.budget_id for b in listed]
    by_id = store.submit(reserve(december.budget_id, 10, "k0"))
    assert ("FailedPrecondition", Reason.CYCLE_BUDGET_NEEDS_ACCOUNT) == await attempt(by_id)
    period = store.put_budget(december.budget_id, 5, "", policies=DAILY)
    assert ("FailedPrecondition", Reason.CYCLE_BUDGET_NEEDS_ACCOUNT) == await attempt(period)
    by_account = {"account": "acme", "admissions_per_minute": 1}
    first = await submit(store, reserve(december.budget_id, 10, "k1", **by_account), ReserveResult)
    second = await submit(store, reserve(december.budget_id, 10, "k2", **by_account), ReserveResult)
    assert (True, False, RefusalReason.RATE_LIMITED) == (
        first.admitted, second.admitted, second.reason
    )  # fmt: skip
    clock.advance(timedelta(minutes=1))
    third = await submit(store, reserve(december.budget_id, 10, "k3", **by_account), ReserveResult)
    assert (True, 1_980) == (third.admitted, third.remaining)


async def test_archiving_and_a_units_lock(backend: Backend) -> None:
    """A budget in use keeps its unit and is not archived while it has open holds; archived,
    it is not put again and archiving again answers the first."""
    store = backend.store
    await store.put_budget("a", 100, "tokens")
    held = await submit(store, reserve("a", 10, "k"), ReserveResult)
    assert ("FailedPrecondition", Reason.UNIT_LOCKED) == await attempt(
        store.put_budget("a", 100, "usd_micros")
    )
    open_holds = await attempt(store.archive_budget("a"))
    assert ("FailedPrecondition", Reason.BUDGET_HAS_OPEN_HOLDS) == open_holds
    await store.submit(SettleOp(held.reservation_id, 10, Outcome.SUCCEEDED))
    archived = await store.archive_budget("a")
    again = await store.archive_budget("a")
    assert (archived.archived_at, (100, 10, 0, 0)) == (again.archived_at, counters(again))
    put = store.put_budget("a", 5, "tokens")
    assert ("FailedPrecondition", Reason.BUDGET_ARCHIVED) == await attempt(put)


async def test_thresholds_notice_once_per_period(backend: Backend, clock: FakeClock) -> None:
    """A threshold is noticed once when spend reaches it, and again in the next period."""
    store = backend.store
    noticed = Policies(calendar=Calendar(Period.DAY), threshold_bps=(5_000,))
    await store.put_budget("n", 1_000, "tokens", policies=noticed)
    await store.submit(reserve("n", 600, "k1"))
    await store.submit(reserve("n", 100, "k2"))
    clock.advance(timedelta(hours=12))
    await store.submit(reserve("n", 600, "k3"))
    crossed = ("budget.threshold_crossed", "n")
    assert [crossed, crossed] == await backend.events()


HOUR = timedelta(hours=1)


def cycle(account: str, feature: str, start: datetime, limit: int, read_at: datetime) -> Budget:
    """The spec of account's cycle budget for feature starting at start, a month long."""
    end = start.replace(month=start.month % 12 + 1, year=start.year + start.month // 12)
    return Budget(
        budget_id=f"{account}/{feature}/{start:%Y-%m-%d}",
        limit=limit,
        unit="tokens",
        account=account,
        feature=feature,
        cycle_start=start,
        cycle_end=end,
        limit_read_at=read_at,
    )


async def test_prices_are_versioned_and_price_a_reserve_by_shape(
    backend: Backend, clock: FakeClock
) -> None:
    """Each put of a model's price is its next version; a Reserve by shape holds what the
    version in effect says the call may cost, and a Settle by usage charges its price."""
    store = backend.store
    await store.put_budget("m", 10_000, "usd_micros")
    day = timedelta(days=1)
    first = Price("openai", "gpt", 0, clock.at - day, None, 1_000_000, 4_000_000)
    second = replace(first, effective_from=clock.at - HOUR, input_per_mtok=2_000_000)
    versions = [(await store.put_price(p)).version for p in (first, second)]
    shape = Shape("openai", "gpt", input_tokens=1_000, max_output_tokens=500)
    held = await submit(store, reserve("m", 0, "k", shape=shape), ReserveResult)
    usage = Usage(input_tokens=1_000, output_tokens=100)
    settle = SettleOp(held.reservation_id, 0, Outcome.SUCCEEDED, usage=usage)
    settled = await submit(store, settle, SettleResult)
    assert [1, 2] == versions
    assert (4_000, 2) == (held.amount, held.price_version)
    assert (2_400, 2) == (settled.used, settled.price_version)
    assert (10_000, 2_400, 0, 0) == counters(await store.get_budget("m"))


async def test_a_price_put_in_effect_is_noticed_with_its_put(
    backend: Backend, clock: FakeClock
) -> None:
    """A price version put in effect writes one price.changed, of no budget; one dated in
    the future writes none with its put (the store's pass notices it later)."""
    store = backend.store
    now_in = Price("openai", "gpt", 0, clock.at - HOUR, None, 1_000_000, 4_000_000)
    await store.put_price(now_in)
    await store.put_price(replace(now_in, effective_from=clock.at + HOUR))
    assert [("price.changed", "")] == await backend.events()


async def test_an_update_sets_only_the_fields_it_names(backend: Backend) -> None:
    """update_budget merges the named fields into the stored budget (an unnamed one stays,
    a named one unset is cleared), checks the merge with PutBudget's rules and puts it as
    PutBudget does: counters kept, a unit in use locked, an unknown or archived budget
    refused."""
    store = backend.store
    policies = Policies(
        calendar=Calendar(Period.DAY),
        threshold_bps=(8_000,),
        admissions_per_minute=60,
        threshold_basis=ThresholdBasis.USED,
    )
    await store.put_budget("u", 1_000, "tokens", escrow_bps=500, policies=policies)
    await store.submit(reserve("u", 100, "k"))
    raised = await store.update_budget(Fields("u", limit=2_000, unit="other"), frozenset({"limit"}))
    settings = (
        raised.limit, raised.unit, raised.escrow_bps, raised.period, raised.threshold_bps,
        raised.admissions_per_minute, raised.threshold_basis, counters(raised)[1:],
    )  # fmt: skip
    cleared = await store.update_budget(Fields("u"), frozenset({"admissions_per_minute"}))
    needs_limit = store.update_budget(Fields("u"), frozenset({"limit"}))
    locked = store.update_budget(Fields("u", unit="credits"), frozenset({"unit"}))
    missing = store.update_budget(Fields("none", limit=1), frozenset({"limit"}))
    await store.put_budget("gone", None, "tokens")
    await store.archive_budget("gone")
    archived = store.update_budget(Fields("gone", limit=1), frozenset({"limit"}))
    assert (
        (2_000, "tokens", 500, Period.DAY, (8_000,), 60, ThresholdBasis.USED, (0, 100, 1)),
        (None, 2_000),
        ("InvalidArgument", Reason.INVALID_FIELD),
        ("FailedPrecondition", Reason.UNIT_LOCKED),
        ("NotFound", Reason.BUDGET_NOT_FOUND),
        ("FailedPrecondition", Reason.BUDGET_ARCHIVED),
    ) == (
        settings,
        (cleared.admissions_per_minute, cleared.limit),
        await attempt(needs_limit),
        await attempt(locked),
        await attempt(missing),
        await attempt(archived),
    )
    assert counters(raised) == counters(await store.get_budget("u"))


async def run_limited(store: Holds, clock: FakeClock) -> dict[str, Any]:
    """One sequence of a daily run (max_open_holds 2, max_admissions 3, closing at 01:00
    the next day) and a parent of max_open_holds 1 over an unlimited child: each answer,
    and the budgets read along the way."""
    closes = datetime(2026, 12, 2, 1, tzinfo=UTC)
    limited = replace(DAILY, max_open_holds=2, max_admissions=3, closes_at=closes)
    await store.put_budget("r", 1_000, "tokens", policies=limited)
    await store.put_budget("p", None, "tokens", policies=Policies(max_open_holds=1))
    await store.put_budget("c", None, "tokens")
    told: dict[str, Any] = {}
    for key in ("k1", "k2", "k3"):
        told[key] = await store.submit(reserve("r", 100, key))
    told["s1"] = await store.submit(SettleOp(told["k1"].reservation_id, 60, Outcome.SUCCEEDED))
    told["k4"] = await store.submit(reserve("r", 100, "k4"))
    told["k4 again"] = await store.submit(reserve("r", 100, "k4"))
    for key in ("k2", "k4"):
        await store.submit(SettleOp(told[key].reservation_id, 50, Outcome.SUCCEEDED))
    told["k5"] = await store.submit(reserve("r", 100, "k5"))
    told["spent"] = await store.get_budget("r")
    clock.set(datetime(2026, 12, 2, 0, 1, tzinfo=UTC))
    told["k6"] = await store.submit(reserve("r", 100, "k6", lease=HOUR))
    told["next day"] = await store.get_budget("r")
    clock.set(closes)
    told["k7"] = await store.submit(reserve("r", 1, "k7"))
    told["s6"] = await store.submit(SettleOp(told["k6"].reservation_id, 90, Outcome.SUCCEEDED))
    told["closed"] = await store.get_budget("r")
    for key in ("n1", "n2"):
        told[key] = await store.submit(reserve("c", 10, key, also_budget_ids=("p",)))
    told["parent"] = await store.get_budget("p")
    return told


async def test_run_limits_refuse_in_order_and_count_per_period(
    backend: Backend, clock: FakeClock
) -> None:
    """A daily run refuses a 3rd open hold TOO_MANY_OPEN and a 4th admission of the day
    ADMISSIONS_SPENT (a retried key still answers its hold), admits again the next day, is
    CLOSED from closes_at on while its open hold settles; a parent's max_open_holds refuses
    a Reserve on its child, naming the parent."""
    told = await run_limited(backend.store, clock)
    reasons = {
        key: (told[key].admitted, told[key].reason, told[key].refused_budget_id)
        for key in ("k1", "k2", "k3", "k4", "k5", "k6", "k7", "n1", "n2")
    }
    ok = (True, RefusalReason.UNSPECIFIED, "")
    assert {
        "k1": ok,
        "k2": ok,
        "k3": (False, RefusalReason.TOO_MANY_OPEN, "r"),
        "k4": ok,
        "k5": (False, RefusalReason.ADMISSIONS_SPENT, "r"),
        "k6": ok,
        "k7": (False, RefusalReason.CLOSED, "r"),
        "n1": ok,
        "n2": (False, RefusalReason.TOO_MANY_OPEN, "p"),
    } == reasons
    assert "it has 2 holds open; max_open_holds is 2" in told["k3"].message
    assert "it has admitted 3 Reserves this period; max_admissions is 3" in told["k5"].message
    assert (True, told["k4"].reservation_id) == (
        told["k4 again"].duplicate,
        told["k4 again"].reservation_id,
    )
    assert (90, 10, HoldState.SETTLED) == (told["s6"].used, told["s6"].released, told["s6"].state)
    assert [(3, (1_000, 160, 0, 0)), (1, (1_000, 0, 100, 1)), (1, (1_000, 90, 0, 0))] == [
        (told[key].admissions, counters(told[key])) for key in ("spent", "next day", "closed")
    ]
    assert (1, (None, 0, 10, 1)) == (told["parent"].admissions, counters(told["parent"]))


async def test_run_limits_answer_alike_on_the_store_and_the_model(dsn: str) -> None:
    """The run-limit sequence on the PostgreSQL store and on the model: the same answers,
    budgets, ledger rows, closed periods and notices."""
    seen = []
    for name in ("postgres", "model"):
        clock = FakeClock(CLOCK_START)
        model = Model.empty(clock) if name == "model" else None
        store: Holds = model if model is not None else await Store.open(dsn, clock=clock)
        try:
            backend = Backend(name, store, dsn, model)
            told = await run_limited(store, clock)
            seen.append(
                (told, await backend.ledger(), await backend.periods(), await backend.events())
            )
        finally:
            if isinstance(store, Store):
                await store.close()
    stored, modelled = seen
    assert modelled == stored


async def test_a_call_priced_at_zero_holds_zero_on_a_zero_budget(
    backend: Backend, clock: FakeClock
) -> None:
    """On a limit of 0 a Reserve of 1 is refused with 0 remaining, and a shape whose price
    version is $0 holds 0: a Charge by usage charges 0, a Settle of 5 is all overshoot, and
    one left alone expires returning nothing; each move is a ledger row of 0 held."""
    store = backend.store
    await store.put_budget("z", 0, "usd_micros")
    await store.put_price(Price("local", "free", 0, clock.at - HOUR, None, 0, 0))
    shape = Shape("local", "free", input_tokens=1_000, max_output_tokens=500)
    refused = await submit(store, reserve("z", 1, "one"), ReserveResult)
    free = await submit(store, reserve("z", 0, "free", shape=shape), ReserveResult)
    idle = await submit(store, reserve("z", 0, "idle", shape=shape), ReserveResult)
    usage = Usage(input_tokens=1_000, output_tokens=200)
    charged = await submit(store, ChargeOp(free.reservation_id, "c", 0, usage=usage), ChargeResult)
    settled = await submit(store, SettleOp(free.reservation_id, 5, Outcome.SUCCEEDED), SettleResult)
    clock.advance(LEASE)
    swept = await store.sweep_once()
    assert (False, RefusalReason.INSUFFICIENT_BUDGET, 0) == (
        refused.admitted, refused.reason, refused.remaining
    )  # fmt: skip
    assert [(True, 0, 1)] * 2 == [(r.admitted, r.amount, r.price_version) for r in (free, idle)]
    assert (0, False) == (charged.charged, charged.capped)
    assert (5, 0, 5) == (settled.used, settled.released, settled.overshoot)
    assert (1, (0, 5, 0, 0)) == (swept, counters(await store.get_budget("z")))
    assert [
        ("z", "expire", 0, 0, 0),
        ("z", "hold", 0, 0, 0),
        ("z", "hold", 0, 0, 0),
        ("z", "settle", 0, 5, 0),
    ] == sorted(await backend.ledger())
    if backend.model is None:
        await assert_invariants(backend.dsn)
