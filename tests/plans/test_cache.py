"""The limit cache: fresh for 60 s, kept for 10 min while the provider fails, then closed;
one provider read per account at a time however many ask."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from earmark.plans.cache import LimitCache, LimitRead, LimitUnavailable
from earmark.plans.kinde import KindeProvider
from earmark.plans.provider import Period, ProviderUnavailable
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde
from tests.helpers import FakeClock, eventually

START = datetime(2026, 8, 15, 12, tzinfo=UTC)


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = START


@pytest.fixture
async def cache(kinde: FakeKinde, clock: FakeClock) -> AsyncIterator[LimitCache]:
    provider = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET)
    try:
        yield LimitCache(provider, clock)
    finally:
        await provider.close()


async def read_in(cache: LimitCache, at: datetime) -> bool:
    """Whether the cache holds a read made at `at` (a refresh behind an admission is in)."""
    known = cache.last_read("acct")
    return known is not None and known.read_at == at


async def idle(cache: LimitCache) -> bool:
    """Whether no provider read runs."""
    return not cache.reading("acct")


async def test_a_thousand_cold_askers_make_one_read(
    kinde: FakeKinde, cache: LimitCache, clock: FakeClock
) -> None:
    """1,000 concurrent asks on a cold account make one entitlements GET; 60 s later the
    next ask makes one more."""
    reads = await asyncio.gather(*(cache.get("acct") for _ in range(1_000)))
    first = kinde.state.requests["entitlements"]
    clock.advance(timedelta(seconds=59))
    await cache.get("acct")
    clock.advance(timedelta(seconds=1))
    await asyncio.gather(*(cache.get("acct") for _ in range(1_000)))
    await eventually(lambda: read_in(cache, clock()), within_seconds=10, what="the new read")
    assert {100_000} == {read.limits["tokens"] for read in reads}
    assert (1, 2) == (first, kinde.state.requests["entitlements"])


async def test_stale_for_ten_minutes_then_closed_then_open_again(
    kinde: FakeKinde, cache: LimitCache, clock: FakeClock
) -> None:
    """With the provider down the last read serves at 9 min, none past 10 min, and a read
    serves again once the provider returns."""
    await cache.get("acct")
    kinde.state.failing = True
    clock.advance(timedelta(minutes=9))
    stale = await cache.get("acct")
    clock.advance(timedelta(minutes=1, seconds=1))
    with pytest.raises(LimitUnavailable) as closed:
        await cache.get("acct")
    kinde.state.failing = False
    kinde.state.limits["acct"] = {"tokens": 50_000}
    clock.advance(timedelta(seconds=5))
    fresh = await cache.get("acct")
    assert (100_000, START) == (stale.limits["tokens"], stale.read_at)
    unavailable = "account 'acct': no limit read in the last 600s (kinde entitlements: HTTP 503)"
    assert unavailable == str(closed.value)
    assert (50_000, clock()) == (fresh.limits["tokens"], fresh.read_at)


async def test_a_failed_read_is_not_retried_at_once(
    kinde: FakeKinde, cache: LimitCache, clock: FakeClock
) -> None:
    """After a failure, asks within 5 s use what is known without calling the provider."""
    await cache.get("acct")
    kinde.state.failing = True
    clock.advance(timedelta(minutes=2))
    for _ in range(10):
        await cache.get("acct")
    await eventually(lambda: idle(cache), within_seconds=10, what="the failed read done")
    calls = kinde.state.requests["entitlements"] + kinde.state.requests["token"]
    clock.advance(timedelta(seconds=5))
    await cache.get("acct")
    await eventually(lambda: idle(cache), within_seconds=10, what="the next read done")
    after = kinde.state.requests["entitlements"] + kinde.state.requests["token"]
    assert after == calls + 1


async def test_a_seeded_read_tells_its_age(
    kinde: FakeKinde, cache: LimitCache, clock: FakeClock
) -> None:
    """A read seeded from the budget row counts from when it was made: 30 s old, it serves
    without a provider call; 11 min old with the provider down, it does not."""
    cache.seed("acct", LimitRead({"tokens": 7}, START - timedelta(seconds=30)))
    seeded = await cache.get("acct")
    kinde.state.failing = True
    cache.seed("old", LimitRead({"tokens": 7}, START - timedelta(minutes=11)))
    with pytest.raises(LimitUnavailable):
        await cache.get("old")
    assert (7, 0) == (seeded.limits["tokens"], kinde.state.requests["entitlements"])


async def test_a_caller_that_gives_up_does_not_cancel_the_shared_read(
    kinde: FakeKinde, cache: LimitCache
) -> None:
    """Two callers share a slow read; the first is cancelled, and the second still gets
    the read, from the one GET."""
    kinde.state.stall = threading.Event()
    first = asyncio.create_task(cache.get("acct"))
    second = asyncio.create_task(cache.get("acct"))

    async def stalled() -> bool:
        return kinde.state.requests["token"] == 1

    await eventually(stalled, within_seconds=10, what="the read reaching the fake")
    first.cancel()
    kinde.state.stall.set()
    read = await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (100_000, 1) == (read.limits["tokens"], kinde.state.requests["entitlements"])


class Oversized:
    """A provider (not Kinde) whose plan grants a maximum past limits.limit_units_max."""

    name = "oversized"

    async def read_limits(self, account: str) -> dict[str, int | None]:
        return {"tokens": 10**30}

    async def read_period(self, account: str, feature: str) -> Period | None:
        return None

    def forget(self, account: str) -> None:
        pass

    async def report_usage(self, account: str, feature: str, total: int, at: datetime) -> None:
        raise AssertionError("not reported to")

    async def close(self) -> None:
        pass


async def test_any_providers_limit_past_the_bound_is_unavailable(clock: FakeClock) -> None:
    """Whichever provider answers, a maximum past the bound is a failed read: nothing is
    remembered, and the account is unavailable, naming the provider and the value."""
    cache = LimitCache(Oversized(), clock)
    with pytest.raises(LimitUnavailable) as caught:
        await cache.get("acct")
    assert not cache.knows("acct")
    assert (
        "oversized: feature 'tokens': the maximum is 1000000000000000000000000000000; "
        "at most 1000000000000000000"
    ) in str(caught.value)


async def test_a_slow_provider_never_holds_up_a_usable_limit(
    kinde: FakeKinde, cache: LimitCache, clock: FakeClock
) -> None:
    """Past the fresh minute, with the provider stalled, asks answer at once with the last
    read (the refresh runs behind them) while it is within the stale window."""
    await cache.get("acct")
    kinde.state.stall = threading.Event()
    clock.advance(timedelta(minutes=5))
    answers = await asyncio.wait_for(asyncio.gather(*(cache.get("acct") for _ in range(10))), 5)

    async def reading() -> bool:
        return 2 == kinde.state.requests["entitlements"]

    await eventually(reading, within_seconds=10, what="one refresh behind the asks")
    kinde.state.stall.set()
    assert ({100_000}, {START}) == (
        {a.limits["tokens"] for a in answers},
        {a.read_at for a in answers},
    )


async def test_with_no_usable_limit_an_ask_waits_at_most_its_bound(
    kinde: FakeKinde, clock: FakeClock
) -> None:
    """A cold account with the provider stalled: the ask gives up after wait_seconds with
    LimitUnavailable saying so, and the read, going on behind, serves the next ask."""
    provider = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET)
    cache = LimitCache(provider, clock, wait_seconds=0.2)
    kinde.state.stall = threading.Event()
    try:
        with pytest.raises(LimitUnavailable) as waited:
            await asyncio.wait_for(cache.get("acct"), 5)
        kinde.state.stall.set()
        await eventually(lambda: read_in(cache, clock()), within_seconds=10, what="the read")
        later = await cache.get("acct")
    finally:
        await provider.close()
    assert "did not answer within 0.2s" in str(waited.value)
    assert 100_000 == later.limits["tokens"]


async def test_a_trickled_answer_ends_at_the_calls_deadline(kinde: FakeKinde) -> None:
    """An answer whose body comes a byte at a time (each within httpx's read timeout) ends
    at the call's whole deadline as unavailable, not minutes later."""
    provider = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET, timeout_seconds=0.5)
    kinde.state.trickle = threading.Event()
    try:
        with pytest.raises(ProviderUnavailable) as slow:
            await asyncio.wait_for(provider.read_limits("acct"), 10)
    finally:
        kinde.state.trickle.set()
        await provider.close()
    assert "timed out" in str(slow.value)
