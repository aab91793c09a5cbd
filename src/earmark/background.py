"""The sidecar's periodic work: the sweeper, the database watch, the database gauges.

Each loop is bounded per tick and survives a database outage: it logs, waits its
interval and tries again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from earmark import limits
from earmark.errors import EarmarkError
from earmark.metrics import Metrics
from earmark.plans.reporter import Reporter
from earmark.settings import Settings
from earmark.store import Store
from earmark.store.probe import DatabaseProbe
from earmark.supervise import Supervisor

log = structlog.get_logger("earmark.background")

# The sweeper closes at most this many batches per tick, then sleeps.
sweep_batches_per_tick_max = 20

OnDatabase = Callable[[bool], Awaitable[None]]


class Background:
    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        settings: Settings,
        on_database: OnDatabase,
        *,
        probe: DatabaseProbe,
        supervisor: Supervisor | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        self._reporter = reporter
        self._store = store
        self._probe = probe
        self._supervisor = supervisor
        self._metrics = metrics
        self._settings = settings
        self._on_database = on_database
        self._database_up: bool | None = None
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping: dict[str, asyncio.Event] = {}

    def start(self) -> None:
        loops = {
            "sweeper": self._sweep_forever,
            "database-watch": self._watch_database,
            "gauges": self._refresh_gauges,
        }
        if self._reporter is not None:
            loops["reporter"] = self._report_forever
        for name, loop in loops.items():
            self._stopping[name] = asyncio.Event()
            self._tasks[name] = asyncio.create_task(loop(), name=f"earmark-{name}")

    async def stop_sweeper(self) -> None:
        """Stops the sweeper; holds then expire only when a Charge, Renew or Settle finds
        their lease passed, or another sidecar sweeps."""
        await self._stop("sweeper")

    async def stop(self) -> None:
        for name in list(self._tasks):
            await self._stop(name)
        await self._probe.close()

    async def _stop(self, name: str) -> None:
        """Asks the loop to stop after its current step. A step is a transaction, and an
        asyncpg query cancelled halfway leaves the connection mid-protocol, so the loop is
        cancelled only if it overstays; whatever it raises is logged, and stopping goes on."""
        task = self._tasks.pop(name, None)
        if task is None:
            return
        self._stopping[name].set()
        done, _ = await asyncio.wait({task}, timeout=limits.background_stop_seconds_max)
        if not done:
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("background_stop_failed", loop=name)

    async def _pause(self, name: str, seconds: float) -> bool:
        """Waits seconds between steps; True once the loop is asked to stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping[name].wait(), seconds)
        return self._stopping[name].is_set()

    async def _sweep_forever(self) -> None:
        while not self._stopping["sweeper"].is_set():
            try:
                for _ in range(sweep_batches_per_tick_max):
                    closed = await self._store.sweep_once(limits.sweep_batch_size_max)
                    if closed:
                        log.info("sweeper_expired", holds=closed)
                    if closed < limits.sweep_batch_size_max:
                        break
            except EarmarkError as error:
                log.warning("sweeper_failed", error=error.message)
            if await self._pause("sweeper", self._settings.sweep_interval_seconds):
                return

    async def _report_forever(self) -> None:
        assert self._reporter is not None
        while not self._stopping["reporter"].is_set():
            try:
                while await self._reporter.report_once() >= limits.report_batch_size_max:
                    pass
            except EarmarkError as error:
                log.warning("reporter_failed", error=error.message)
            if await self._pause("reporter", self._settings.report_interval_seconds):
                return

    async def _watch_database(self) -> None:
        """Probes the database every interval with a timeout of its own, so that a stalled
        database turns health NOT_SERVING within about two intervals."""
        while not self._stopping["database-watch"].is_set():
            why = await self._probe.check()
            up = why is None
            if not up and self._database_up is not False:
                log.error("database_unreachable", error=why)
            if self._supervisor is not None:
                if up:
                    self._supervisor.database_up()
                else:
                    await self._supervisor.database_down(asyncio.get_running_loop().time())
            if up != self._database_up:
                if up and self._database_up is False:
                    log.info("database_reachable")
                    await self._store.expire_connections()
                self._database_up = up
                self._metrics.database_up.set(1 if up else 0)
                await self._on_database(up)
            if await self._pause("database-watch", limits.health_probe_interval_seconds):
                return

    async def _refresh_gauges(self) -> None:
        while not self._stopping["gauges"].is_set():
            try:
                self._metrics.set_open_holds(await self._store.open_holds_by_unit())
                watched = await self._store.watch_totals()
                self._metrics.in_doubt_holds.set(watched.in_doubt)
                self._metrics.in_doubt_oldest_seconds.set(watched.in_doubt_oldest_seconds)
                self._metrics.budgets_in_overage.set(watched.budgets_in_overage)
                self._metrics.set_budgets(
                    await self._store.most_used_budgets(self._settings.metrics_budgets_max)
                )
            except EarmarkError as error:
                log.warning("gauges_failed", error=error.message)
            if await self._pause("gauges", self._settings.metrics_refresh_seconds):
                return
