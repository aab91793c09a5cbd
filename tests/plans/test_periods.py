"""The gate's billing periods against a real PostgreSQL: an account's cycle for a feature is
its agreement's period as the provider gives it, asked again when it ends, guessed back to
back (and logged) while the provider cannot tell, and the anchor day's cycle only where the
provider gives none."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import structlog

from earmark import limits
from earmark.core.model import Budget
from earmark.plans.cache import LimitCache, LimitUnavailable
from earmark.plans.gate import PlanGate
from earmark.plans.provider import Limits, Period, ProviderUnavailable
from earmark.store import Store
from tests.helpers import FakeClock

P1 = Period(datetime(2026, 11, 15, tzinfo=UTC), datetime(2026, 12, 15, tzinfo=UTC))
P2 = Period(P1.end, datetime(2027, 1, 15, tzinfo=UTC))
# How long an admission waits for a period read here: short, so a stall costs little.
WAIT_SECONDS = 0.2


class Agreements:
    """The gate's provider: plans of one feature, and the periods a test sets; it records
    which periods were asked for, and fails or stalls when told to."""

    name = "agreements"

    def __init__(self) -> None:
        self.period: Period | None = P1
        self.failing = False
        self.stall: asyncio.Event | None = None
        self.asked: list[tuple[str, str]] = []
        self.forgotten: list[str] = []

    async def read_limits(self, account: str) -> Limits:
        return {"tokens": 100_000}

    async def read_period(self, account: str, feature: str) -> Period | None:
        self.asked.append((account, feature))
        if self.stall is not None:
            await self.stall.wait()
        if self.failing:
            raise ProviderUnavailable("agreements: HTTP 503")
        return self.period

    async def report_usage(self, account: str, feature: str, total: int, at: datetime) -> None:
        raise AssertionError("not reported to")

    def forget(self, account: str) -> None:
        self.forgotten.append(account)

    async def close(self) -> None:
        pass


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = datetime(2026, 12, 1, 12, tzinfo=UTC)


@pytest.fixture
def provider() -> Agreements:
    return Agreements()


@pytest.fixture
async def gate(dsn: str, clock: FakeClock, provider: Agreements) -> AsyncIterator[PlanGate]:
    store = await Store.open(dsn, clock=clock)
    plans = PlanGate(
        store,
        LimitCache(provider, clock, wait_seconds=WAIT_SECONDS),
        clock,
        anchor_day=1,
        unit="tokens",
        admissions_per_minute=0,
        default_feature="tokens",
    )
    try:
        yield plans
    finally:
        await plans.close()
        await store.close()


async def cycle_row(gate: PlanGate, budget_id: str) -> Budget:
    (budget,) = [b for b in await gate._store.cycles_of("acct") if b.budget_id == budget_id]
    return budget


async def test_the_cycle_is_the_agreements_period(gate: PlanGate, provider: Agreements) -> None:
    """The budget is named by the period's first day and spans it; the period is asked of
    the provider once, however many admissions follow."""
    ids = [await gate.budget_for("acct", "tokens") for _ in range(3)]
    row = await cycle_row(gate, "acct/tokens/2026-11-15")
    assert (["acct/tokens/2026-11-15"] * 3, [("acct", "tokens")]) == (ids, provider.asked)
    assert (P1.start, P1.end) == (row.cycle_start, row.cycle_end)


async def test_the_period_is_asked_again_at_its_end(
    gate: PlanGate, provider: Agreements, clock: FakeClock
) -> None:
    """Past the period's end the provider is asked again and its new period opens a new
    budget."""
    first = await gate.budget_for("acct", "tokens")
    provider.period = P2
    clock.set(P1.end + timedelta(minutes=1))
    second = await gate.budget_for("acct", "tokens")
    assert ("acct/tokens/2026-11-15", "acct/tokens/2026-12-15", 2) == (
        first,
        second,
        len(provider.asked),
    )


async def test_a_provider_that_cannot_tell_gets_the_next_period_guessed(
    gate: PlanGate, provider: Agreements, clock: FakeClock
) -> None:
    """At the period's end with the provider failing, the next period is taken to follow
    back to back (a month later on the same day), logged as assumed, and the provider is
    asked again only after the retry time."""
    await gate.budget_for("acct", "tokens")
    provider.failing = True
    clock.set(P1.end + timedelta(minutes=1))
    with structlog.testing.capture_logs() as logs:
        guessed = await gate.budget_for("acct", "tokens")
        again = await gate.budget_for("acct", "tokens")
    asked_while_guessing = len(provider.asked)
    clock.advance(timedelta(seconds=limits.limit_retry_seconds))
    provider.failing = False
    provider.period = P2
    confirmed = await gate.budget_for("acct", "tokens")
    row = await cycle_row(gate, guessed)
    assert ["acct/tokens/2026-12-15"] * 3 == [guessed, again, confirmed]
    assert (2, 3) == (asked_while_guessing, len(provider.asked))
    assert (P2.start, P2.end) == (row.cycle_start, row.cycle_end)
    assert ["period_assumed"] == [e["event"] for e in logs if e["event"].startswith("period")]


async def test_no_known_period_and_a_failing_provider_fail_closed(
    gate: PlanGate, provider: Agreements
) -> None:
    """With no period known and the provider failing, the admission is refused as
    LIMIT_UNAVAILABLE (LimitUnavailable), naming the feature and the cause."""
    provider.failing = True
    with pytest.raises(LimitUnavailable) as caught:
        await gate.budget_for("acct", "tokens")
    assert (
        "account 'acct': feature 'tokens': its billing period is unknown (agreements: HTTP 503)"
    ) == str(caught.value)


async def test_a_stalled_provider_is_waited_for_at_most_the_bound(
    gate: PlanGate, provider: Agreements, clock: FakeClock
) -> None:
    """A provider that does not answer at the period's end holds admissions only for the
    cache's wait: all five are answered with the guess while the read still stalls, and one
    read runs, however many admissions ask."""
    await gate.budget_for("acct", "tokens")
    provider.stall = asyncio.Event()
    clock.set(P1.end + timedelta(minutes=1))
    ids = await asyncio.gather(*(gate.budget_for("acct", "tokens") for _ in range(5)))
    stalled = not provider.stall.is_set() and gate.reading_period("acct", "tokens")
    provider.stall.set()
    assert (["acct/tokens/2026-12-15"] * 5, True, 2) == (ids, stalled, len(provider.asked))


async def test_no_period_from_the_provider_means_the_anchor_days_cycle(
    gate: PlanGate, provider: Agreements
) -> None:
    """A provider that gives no period (an agreement without current_period_*) leaves the
    cycle to --cycle-anchor-day: the calendar month here."""
    provider.period = None
    assert "acct/tokens/2026-12-01" == await gate.budget_for("acct", "tokens")


async def test_a_period_that_starts_during_a_day_is_named_to_the_minute(
    gate: PlanGate, provider: Agreements
) -> None:
    """A plan changed at 10:30 opens a period then: its budget is named to the minute, so it
    does not share the id of a period begun earlier that day."""
    provider.period = Period(datetime(2026, 12, 1, 10, 30, tzinfo=UTC), P1.end)
    assert "acct/tokens/20261201T1030Z" == await gate.budget_for("acct", "tokens")


async def test_forget_asks_for_the_period_again(gate: PlanGate, provider: Agreements) -> None:
    """A plan change (forget) makes the next admission ask the provider for the period
    again, and tells the provider to drop its cached agreements."""
    await gate.budget_for("acct", "tokens")
    gate.forget("acct")
    provider.period = Period(datetime(2026, 12, 1, 10, 30, tzinfo=UTC), P1.end)
    changed = await gate.budget_for("acct", "tokens")
    assert ("acct/tokens/20261201T1030Z", ["acct"], 2) == (
        changed,
        provider.forgotten,
        len(provider.asked),
    )


class Crowded(Agreements):
    """Plans that stall until released, counting how many reads run at once."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.running = self.peak = 0

    async def read_limits(self, account: str) -> Limits:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await self.release.wait()
            return {"tokens": 100_000}
        finally:
            self.running -= 1


async def test_provider_reads_are_bounded(clock: FakeClock) -> None:
    """Forty accounts asked for at once while the provider stalls: at most
    limits.provider_reads_concurrent_max reads run at a time, the rest queue, and each
    admission gives up after its wait; released, every read completes."""
    provider = Crowded()
    cache = LimitCache(provider, clock, wait_seconds=WAIT_SECONDS)
    try:
        asked = await asyncio.gather(
            *(cache.get(f"acct{i}") for i in range(40)), return_exceptions=True
        )
        peak_while_stalled = provider.peak
        provider.release.set()
        reads = await asyncio.gather(*(cache.get(f"acct{i}", force=True) for i in range(40)))
    finally:
        await cache.close()
    assert (limits.provider_reads_concurrent_max, {LimitUnavailable}) == (
        peak_while_stalled,
        {type(a) for a in asked},
    )
    assert [{"tokens": 100_000}] * 40 == [dict(r.limits) for r in reads]
