"""The sidecar's periodic work: the sweeper, the database watch, the database gauges, the
meter reporter, the notices' deliverer, the plan marks' watch, the plans file's watch, and
a watchdog over them all.

Every loop survives any exception: a pass that fails is logged with the loop's name,
counted in earmark_background_errors_total{loop}, and followed by a full-jitter backoff.
A pass that ends, or fails because the database is unavailable, is a heartbeat; a loop
without one for its stall window (a pass hung, or the task gone) turns liveness
NOT_SERVING, so that the orchestrator restarts the sidecar. A database outage does not: it
takes the sidecar out of rotation (health of the services), not out of the pod.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from earmark import limits
from earmark.errors import Unavailable
from earmark.metrics import Metrics
from earmark.notices.deliver import Deliverer
from earmark.plans.file import FileProvider
from earmark.plans.marks import MarkWatcher
from earmark.plans.reporter import Reporter
from earmark.regions.agent import RegionAgent
from earmark.settings import Settings
from earmark.store.interface import Upkeep
from earmark.store.probe import DatabaseProbe
from earmark.supervise import Supervisor

log = structlog.get_logger("earmark.background")

# Called with whether the services can serve (the database answers and writes).
OnDatabase = Callable[[bool], Awaitable[None]]
# Called with a source of liveness and what is wrong with it (None: nothing).
OnLiveness = Callable[[str, str | None], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Loop:
    name: str
    step: Callable[[], Awaitable[None]]
    interval_seconds: float
    # A pass may take this long before the loop counts as stalled.
    stall_seconds: float


def stall_seconds(interval_seconds: float, pass_seconds_max: float = 0.0) -> float:
    """How long a loop may go without a heartbeat: background_stall_intervals of its
    intervals, at least background_stall_seconds_min, plus what one pass may take."""
    return pass_seconds_max + max(
        limits.background_stall_intervals * interval_seconds, limits.background_stall_seconds_min
    )


def backoff_seconds(failures: int, interval_seconds: float, rng: random.Random) -> float:
    """Full jitter after the failures-th failure in a row: uniform in [0, ceiling], the
    ceiling doubling from twice the interval up to the cap (the interval, if longer)."""
    cap = max(interval_seconds, limits.background_backoff_seconds_max)
    return rng.uniform(0.0, min(cap, interval_seconds * 2.0 ** min(failures, 32)))


class Background:
    def __init__(
        self,
        store: Upkeep,
        metrics: Metrics,
        settings: Settings,
        on_database: OnDatabase,
        *,
        probe: DatabaseProbe,
        on_liveness: OnLiveness | None = None,
        supervisor: Supervisor | None = None,
        duties: Duties | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        duties = duties or Duties()
        self._reporter = duties.reporter
        self._notices = duties.notices
        self._marks = duties.marks
        self._store = store
        self._probe = probe
        self._supervisor = supervisor
        self._metrics = metrics
        self._settings = settings
        self._on_database = on_database
        self._on_liveness = on_liveness
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self._database_up: bool | None = None
        self._serving: bool | None = None
        # What stopped the database from writing, until a write probe goes through.
        self._write_fault: Unavailable | None = None
        self._wake_watch = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._stopping: dict[str, asyncio.Event] = {}
        self._beats: dict[str, float] = {}
        self._stalled: set[str] = set()
        self.loops = {
            loop.name: loop
            for loop in (
                Loop("sweeper", self._sweep, settings.sweep_interval_seconds,
                     stall_seconds(settings.sweep_interval_seconds)),
                Loop("database-watch", self._watch_database,
                     limits.health_probe_interval_seconds,
                     stall_seconds(limits.health_probe_interval_seconds)),
                Loop("gauges", self._refresh_gauges, settings.metrics_refresh_seconds,
                     stall_seconds(settings.metrics_refresh_seconds)),
                Loop("repricer", self._reprice, limits.reprice_interval_seconds,
                     stall_seconds(limits.reprice_interval_seconds,
                                   limits.background_stop_seconds_max)),
            )
        }  # fmt: skip
        self.loops.update(_duty_loops(self, settings, duties))

    def start(self) -> None:
        now = self._monotonic()
        for name, loop in self.loops.items():
            self._beats[name] = now
            self._stopping[name] = asyncio.Event()
            self._tasks[name] = asyncio.create_task(self._run(loop), name=f"earmark-{name}")
        self._stopping["watchdog"] = asyncio.Event()
        self._tasks["watchdog"] = asyncio.create_task(self._watchdog(), name="earmark-watchdog")

    def write_fault(self, error: Unavailable) -> None:
        """The store saw the database refuse a write (disk full, read-only...): health
        turns NOT_SERVING at once, until a write probe goes through."""
        if self._write_fault is None:
            self._write_fault = error
            self._wake_watch.set()

    async def stop_sweeper(self) -> None:
        """Stops the sweeper; holds then expire only when a Charge, Renew or Settle finds
        their lease passed, or another sidecar sweeps."""
        await self._stop("sweeper")

    async def stop_region_ticks(self) -> None:
        """Stops a region's agent's loop (tests tick it themselves, one pass at a time)."""
        await self._stop("regions")

    async def stop(self) -> None:
        await self._stop("watchdog")
        for name in list(self._tasks):
            await self._stop(name)
        if self._notices is not None:
            await self._notices.close()
        await self._probe.close()

    async def _stop(self, name: str) -> None:
        """Asks the loop to stop after its current step. A step is a transaction, and an
        asyncpg query cancelled halfway leaves the connection mid-protocol, so the loop is
        cancelled only if it overstays; whatever it raises is logged, and stopping goes on."""
        task = self._tasks.pop(name, None)
        if task is None:
            return
        self._stopping[name].set()
        self._beats.pop(name, None)
        if name == "database-watch":
            self._wake_watch.set()
        done, _ = await asyncio.wait({task}, timeout=limits.background_stop_seconds_max)
        if not done:
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("background_stop_failed", loop=name)

    async def _pause(self, name: str, seconds: float, wake: asyncio.Event | None = None) -> bool:
        """Waits seconds between passes (less if woken); True once asked to stop."""
        waits = [asyncio.ensure_future(self._stopping[name].wait())]
        if wake is not None:
            waits.append(asyncio.ensure_future(wake.wait()))
        try:
            await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        if wake is not None:
            wake.clear()
        return self._stopping[name].is_set()

    async def _run(self, loop: Loop) -> None:
        """Runs loop's passes until asked to stop, whatever they raise."""
        failures = 0
        while not self._stopping[loop.name].is_set():
            pause = loop.interval_seconds
            try:
                await loop.step()
                failures = 0
                self._beats[loop.name] = self._monotonic()
            except Exception as error:
                failures += 1
                self._metrics.background_errors.labels(loop.name).inc()
                if isinstance(error, Unavailable):
                    # The database's fault, not the loop's: the loop is alive.
                    self._beats[loop.name] = self._monotonic()
                    log.warning("background_failed", loop=loop.name, reason=error.reason.value,
                                error=error.message, failures=failures)  # fmt: skip
                else:
                    log.exception("background_failed", loop=loop.name, failures=failures)
                pause = backoff_seconds(failures, loop.interval_seconds, self._rng)
            wake = self._wake_watch if loop.name == "database-watch" else None
            if await self._pause(loop.name, pause, wake):
                return

    async def _watchdog(self) -> None:
        while not await self._pause("watchdog", limits.background_watchdog_seconds):
            await self.check_stalls()

    async def check_stalls(self) -> None:
        """Turns liveness NOT_SERVING for each loop without a heartbeat for its stall
        window (a task that ended has none), and back when it beats again."""
        now = self._monotonic()
        for name, loop in self.loops.items():
            beat = self._beats.get(name)
            if beat is None:
                continue
            task = self._tasks.get(name)
            stalled = now - beat > loop.stall_seconds or (task is not None and task.done())
            if stalled == (name in self._stalled):
                continue
            if stalled:
                self._stalled.add(name)
                why = f"no pass finished in {now - beat:.0f}s (at most {loop.stall_seconds:g}s)"
                log.error("background_stalled", loop=name, why=why)
            else:
                self._stalled.discard(name)
                why = None
                log.info("background_running", loop=name)
            if self._on_liveness is not None:
                await self._on_liveness(f"loop:{name}", why)

    def _beat(self, name: str) -> None:
        """A loop made progress inside a pass: a long backlog is not a stall."""
        if name in self._beats:
            self._beats[name] = self._monotonic()

    async def _sweep(self) -> None:
        for _ in range(limits.sweep_batches_per_pass_max):
            closed = await self._store.sweep_once(limits.sweep_batch_size_max)
            self._beat("sweeper")
            if closed:
                log.info("sweeper_expired", holds=closed)
            if closed < limits.sweep_batch_size_max:
                break
        # At a budget's home (issue 48): shares whose lease ended come back with the holds.
        taken = await self._store.reclaim_shares()
        if taken:
            self._metrics.region_reclaimed_units.inc(taken)
            log.info("shares_reclaimed", units=taken)

    async def _reprice(self) -> None:
        """Holds priced by shape and not yet charged move to the price in effect soon after
        a cutover (within a pass), rather than at their first Charge; the versions that
        took effect are noticed (price.changed)."""
        moved = await self._store.reprice_due()
        if moved:
            log.info("repriced_at_cutover", holds=moved)
        # A version that took effect since the last pass is also when its price.changed
        # notice is due (issue 44); a pass notices a bounded batch, the next the rest.
        noticed = await self._store.notice_prices()
        if noticed:
            log.info("prices_noticed", versions=noticed)

    async def _report(self) -> None:
        assert self._reporter is not None
        for _ in range(limits.report_batches_per_pass_max):
            sent = await self._reporter.report_once()
            self._beat("reporter")
            if sent < limits.report_batch_size_max:
                return

    async def _deliver(self) -> None:
        assert self._notices is not None
        stopping = self._stopping["notices"]
        await self._notices.deliver_once(lambda: self._beat("notices"), stopping.is_set)

    async def _watch_marks(self) -> None:
        assert self._marks is not None
        await self._marks.poll_once()

    async def _watch_database(self) -> None:
        """Probes the database with a timeout of its own, so that a stalled database turns
        health NOT_SERVING within about two intervals; after a write fault, probes writes
        too, and health stays NOT_SERVING until one goes through."""
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
        fault = self._write_fault
        if up and fault is not None:
            # Out of rotation first (the write probe may wait out its timeouts), then see
            # whether writes go through again.
            if self._serving is not False:
                log.error("database_cannot_write", reason=fault.reason.value, error=fault.message)
                await self._serve(False)
            if await self._store.write_probe() is None:
                log.info("database_writes_again", after=fault.reason.value)
                # A fault reported while the probe ran is newer than what it proved.
                if self._write_fault is fault:
                    self._write_fault = None
        await self._serve(up and self._write_fault is None)

    async def _serve(self, serving: bool) -> None:
        """Tells health whether the services can serve, when that changed; remembered only
        once health took it, so that a failed call is made again on the next pass."""
        if serving != self._serving:
            await self._on_database(serving)
            self._serving = serving

    async def _refresh_gauges(self) -> None:
        self._metrics.set_open_holds(await self._store.open_holds_by_unit())
        watched = await self._store.watch_totals()
        self._metrics.in_doubt_holds.set(watched.in_doubt)
        self._metrics.in_doubt_oldest_seconds.set(watched.in_doubt_oldest_seconds)
        self._metrics.budgets_in_overage.set(watched.budgets_in_overage)
        self._metrics.set_budgets(
            await self._store.most_used_budgets(self._settings.metrics_budgets_max)
        )
        self._metrics.set_regions(await self._store.regions_seen())


@dataclass(frozen=True, slots=True)
class Duties:
    """The loops a sidecar runs only with what they need: the meter reporter (a limits
    provider), the notices' deliverer (--notify-url), the plan marks (plans) and the plans
    file's watcher (--limits-provider file)."""

    reporter: Reporter | None = None
    notices: Deliverer | None = None
    marks: MarkWatcher | None = None
    plans_file: FileProvider | None = None
    # In a region (--home): the agent that keeps its shares.
    regions: RegionAgent | None = None


def _duty_loops(background: Background, settings: Settings, duties: Duties) -> dict[str, Loop]:
    """The loops of the duties given, by name."""
    loops: dict[str, Loop] = {}
    if duties.reporter is not None:
        loops["reporter"] = Loop(
            "reporter",
            background._report,
            settings.report_interval_seconds,
            stall_seconds(settings.report_interval_seconds, limits.report_pass_seconds_max),
        )
    if duties.notices is not None:
        # The loop beats after each event, which may wait out its attempt.
        loops["notices"] = Loop(
            "notices",
            background._deliver,
            limits.notify_interval_seconds,
            stall_seconds(limits.notify_interval_seconds, limits.notify_event_seconds_max),
        )
    if duties.marks is not None:
        # A pass reads at most plan_marks_pages_max pages, each within a command's
        # timeout.
        loops["plan-marks"] = Loop(
            "plan-marks",
            background._watch_marks,
            limits.plan_marks_poll_seconds,
            stall_seconds(
                limits.plan_marks_poll_seconds,
                limits.plan_marks_pages_max * limits.db_command_timeout_seconds,
            ),
        )

    if duties.regions is not None:
        # A pass makes a call per limits.region_outbox_batch_max shares, each within
        # limits.region_call_seconds.
        calls = limits.region_shares_per_tick_max // limits.region_outbox_batch_max
        loops["regions"] = Loop(
            "regions",
            duties.regions.tick,
            limits.region_tick_seconds,
            stall_seconds(limits.region_tick_seconds, calls * limits.region_call_seconds),
        )
    if duties.plans_file is not None:
        loops["plans-file"] = Loop(
            "plans-file",
            duties.plans_file.check,
            limits.plans_file_check_seconds,
            stall_seconds(limits.plans_file_check_seconds),
        )
    return loops
