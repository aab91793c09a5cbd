"""The background loops against a real database: a loop survives what its pass raises, and
a loop that stops finishing passes turns liveness NOT_SERVING."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from earmark import background, limits
from earmark.background import Background
from earmark.metrics import Metrics
from earmark.settings import Settings
from earmark.store import Store
from earmark.store.probe import DatabaseProbe
from tests.helpers import FakeClock, eventually, fetch_budget_row
from tests.store.test_store import reserve_op


class Flaky:
    """The store as the loops see it, whose sweep_once raises what the test feeds it first,
    or waits until released (a pass that hangs); everything else is the real store's."""

    def __init__(self, store: Store, *failures: BaseException) -> None:
        self._store = store
        self.failures = list(failures)
        self.hang = asyncio.Event()
        self.hang.set()
        self.sweeps = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def sweep_once(self, batch_size: int) -> int:
        self.sweeps += 1
        await self.hang.wait()
        if self.failures:
            raise self.failures.pop(0)
        return await self._store.sweep_once(batch_size)


@pytest.fixture
async def clocked_store(dsn: str, clock: FakeClock) -> AsyncIterator[Store]:
    store = await Store.open(dsn, clock=clock)
    try:
        yield store
    finally:
        await store.close()


def loops(store: Any, dsn: str, **kwargs: Any) -> tuple[Background, Metrics]:
    metrics = Metrics()

    async def on_database(serving: bool) -> None:
        pass

    settings = Settings(sweep_interval_seconds=0.05, metrics_refresh_seconds=0.05)
    return (
        Background(store, metrics, settings, on_database, probe=DatabaseProbe(dsn), **kwargs),
        metrics,
    )


async def test_a_loop_survives_an_unexpected_exception(
    clocked_store: Store, clock: FakeClock, dsn: str
) -> None:
    """A sweeper pass that raises an exception nobody expected is logged and counted, and
    the sweeper goes on: it returns a hold whose lease passed."""
    await clocked_store.put_budget("b", 100, "t")
    await clocked_store.submit(reserve_op(40, lease_seconds=5))
    clock.advance(timedelta(seconds=10))
    flaky = Flaky(clocked_store, KeyError("nobody expected this"))
    loop, metrics = loops(flaky, dsn)
    loop.start()
    try:

        async def returned() -> bool:
            return 0 == (await fetch_budget_row(dsn, "b"))["held"]

        await eventually(returned, within_seconds=10, what="the hold returned after the error")
    finally:
        await loop.stop()
    errors = metrics.registry.get_sample_value(
        "earmark_background_errors_total", {"loop": "sweeper"}
    )
    assert (1.0, []) == (errors, flaky.failures)


async def test_a_stalled_loop_turns_liveness_off_and_back(dsn: str, clocked_store: Store) -> None:
    """A sweeper whose pass hangs past its stall window turns liveness NOT_SERVING, naming
    the loop; once its pass finishes, liveness is SERVING again."""
    told: list[tuple[str, str | None]] = []

    async def on_liveness(source: str, problem: str | None) -> None:
        # The other loops look stalled too when the clock jumps: only the sweeper's count.
        if source == "loop:sweeper":
            told.append((source, problem))

    now = [1_000.0]
    flaky = Flaky(clocked_store)
    flaky.hang.clear()
    loop, _ = loops(flaky, dsn, on_liveness=on_liveness, monotonic=lambda: now[0])
    loop.start()
    try:

        async def sweeps(count: int) -> bool:
            return flaky.sweeps >= count

        await eventually(lambda: sweeps(1), within_seconds=5, what="a pass starts")
        await loop.check_stalls()
        assert [] == told
        now[0] += loop.loops["sweeper"].stall_seconds + 1
        await loop.check_stalls()
        assert [("loop:sweeper", True)] == [(s, p is not None) for s, p in told]
        flaky.hang.set()
        await eventually(lambda: sweeps(2), within_seconds=5, what="passes again")
        await loop.check_stalls()
        assert ("loop:sweeper", None) == told[-1]
    finally:
        flaky.hang.set()
        await loop.stop()


def test_backoff_is_full_jitter_and_bounded() -> None:
    """A failing loop waits a uniform draw below a doubling ceiling, never past the cap
    (or the loop's own interval, when that is longer)."""
    rng = random.Random(7)
    draws = [background.backoff_seconds(n, 1.0, rng) for n in range(1, 200)]
    assert all(0 <= d <= limits.background_backoff_seconds_max for d in draws)
    assert max(draws) > limits.background_backoff_seconds_max / 2
    slow = [background.backoff_seconds(n, 60.0, rng) for n in range(1, 50)]
    assert all(0 <= d <= 60.0 for d in slow)


def test_stall_windows() -> None:
    """A loop is stalled after ten of its intervals, at least 30 s, plus what one pass may
    take (the meter reporter waits on the provider)."""
    assert limits.background_stall_seconds_min == background.stall_seconds(1.0)
    assert 10 * 60.0 == background.stall_seconds(60.0)
    assert (
        limits.report_pass_seconds_max + limits.background_stall_seconds_min
        == background.stall_seconds(1.0, limits.report_pass_seconds_max)
    )
