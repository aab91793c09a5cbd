"""The limit cache: fresh for 60 s, kept for 10 min while the provider fails, then closed;
one provider read per account at a time however many ask."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from earmark.plans.cache import LimitCache, LimitRead, LimitUnavailable
from earmark.plans.kinde import KindeProvider
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde
from tests.helpers import FakeClock, eventually

START = datetime(2026, 8, 15, 12, tzinfo=UTC)


@pytest.fixture
def kinde() -> Iterator[FakeKinde]:
    with fake_kinde() as fake:
        fake.state.limits["acct"] = {"tokens": 100_000}
        yield fake


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
async def cache(kinde: FakeKinde, clock: FakeClock) -> AsyncIterator[LimitCache]:
    provider = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET)
    try:
        yield LimitCache(provider, clock)
    finally:
        await provider.close()


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
    calls = kinde.state.requests["entitlements"] + kinde.state.requests["token"]
    clock.advance(timedelta(seconds=5))
    await cache.get("acct")
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
