"""Wiring: the database, the services, health, reflection, metrics, the sweeper, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import threading
from datetime import timedelta
from typing import Any, cast

import grpc
import structlog
from grpc_health.v1 import health, health_pb2
from grpc_reflection.v1alpha import reflection

from earmark import files, limits, listeners
from earmark.background import Background, Duties
from earmark.datadir import DataDirLock
from earmark.errors import EarmarkError, Unavailable
from earmark.metrics import Metrics
from earmark.notices.deliver import Deliverer
from earmark.notices.target import Target, load_target
from earmark.plans.cache import LimitCache
from earmark.plans.file import FileProvider
from earmark.plans.gate import PlanGate
from earmark.plans.kinde import KindeProvider
from earmark.plans.marks import MarkWatcher
from earmark.plans.provider import LimitsProvider
from earmark.plans.reporter import Reporter
from earmark.regions.agent import HomeLink, RegionAgent
from earmark.regions.holds import RegionHolds
from earmark.service import auth
from earmark.service.admin import AdminService
from earmark.service.budget import BudgetService
from earmark.service.drain import Drain
from earmark.service.edge import StreamSlots
from earmark.service.elsewhere import AdminElsewhere
from earmark.service.regions import RegionsService
from earmark.settings import KINDE_CLIENT_ID, KINDE_CLIENT_SECRET, Settings, split_host_port
from earmark.signals import stop_signals
from earmark.store import Store, StoreObserver
from earmark.store.embedded import EMBEDDED_DATABASE, EmbeddedPostgres, ensure_database
from earmark.store.events import EventLog
from earmark.store.interface import AdminStore, Cycles, Holds
from earmark.store.probe import DatabaseProbe
from earmark.store.store import Clock, utc_now
from earmark.supervise import Supervisor
from earmark.v1 import budget_pb2, budget_pb2_grpc

log = structlog.get_logger("earmark.server")

# The exit status of a process whose stop passed its bound (exit_at_the_bound).
STOP_OVERRAN_EXIT_CODE = 70

BUDGET_SERVICE = budget_pb2.DESCRIPTOR.services_by_name["Budget"].full_name
ADMIN_SERVICE = budget_pb2.DESCRIPTOR.services_by_name["Admin"].full_name
REGIONS_SERVICE = budget_pb2.DESCRIPTOR.services_by_name["Regions"].full_name
SERVICE_NAMES = (BUDGET_SERVICE, ADMIN_SERVICE)


class StartAbandoned(Exception):
    """A signal ended start() while it waited for the database."""


class Sidecar:
    """One Earmark process's parts. start() brings them up in order, stop() takes them down
    in reverse: health, RPCs (drained within the grace period), sweeper, pool, database."""

    def __init__(
        self, settings: Settings, *, clock: Clock = utc_now, tracer_provider: Any = None
    ) -> None:
        # With settings.tracing: an OpenTelemetry TracerProvider (None: the global one).
        self.tracer_provider = tracer_provider
        self.settings = settings
        # What the rules take as now: leases, prices in effect. Tests set their own.
        self.clock = clock
        self.metrics = Metrics()
        self.embedded: EmbeddedPostgres | None = None
        self.store: Store | None = None
        self.server: grpc.aio.Server | None = None
        self.admin_server: grpc.aio.Server | None = None
        # The probes' own listener (--health-listen), if any.
        self.health_server: grpc.aio.Server | None = None
        # A home's listener for its regions (--region-listen), and the port it got; a
        # region's agent (--home).
        self.region_server: grpc.aio.Server | None = None
        self.region_port = 0
        self.region_agent: RegionAgent | None = None
        self.health_port = 0
        # Where Admin listens: unix:PATH, or HOST:PORT with the port it got.
        self.admin_address = ""
        self.streams = StreamSlots()
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self.drain = Drain(starting=True)
        self._abandoned = asyncio.Event()
        self._data_dir_lock: DataDirLock | None = None
        # What keeps the sidecar from being live, by source (a stalled loop, the embedded
        # database that will not start again); live while empty.
        self._not_live: dict[str, str] = {}
        self.port = 0
        self.metrics_port = 0
        self._metrics_httpd: Any = None
        self.background: Background | None = None
        self.provider: LimitsProvider | None = None
        self.plans: PlanGate | None = None
        self._limit_cache: LimitCache | None = None
        # Where budget notices are posted (--notify-url), if anywhere.
        self.notify_target: Target | None = None

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        # Before anything else: the data dir (the embedded PostgreSQL's home, the admin
        # socket) belongs to one sidecar at a time.
        self._data_dir_lock = DataDirLock.take(self.settings.data_dir)
        # Every file a setting names must be a regular file: a FIFO would block its read.
        files.require_setting_files(self.settings)
        # Then the provider, before the database starts: a plans file that cannot be used,
        # or Kinde credentials missing, stops the start in one line, at once.
        self.provider = self._provider()
        # And the notices' secret: one that will not do is one line, at once, too.
        self.notify_target = load_target(self.settings.notify_url, self.settings.notify_secret_file)
        dsn = self.settings.database_url
        if dsn is None:
            self.embedded = EmbeddedPostgres(self.settings.data_dir)
            await asyncio.to_thread(self.embedded.start)
            await ensure_database(self.embedded.uri(), EMBEDDED_DATABASE)
            dsn = self.embedded.uri(EMBEDDED_DATABASE)
        m = self.metrics
        observer = StoreObserver(
            on_retry=m.tx_retries.inc,
            on_batch=m.batch_size.observe,
            on_expired=m.expired_holds.inc,
            on_exhausted=m.tx_retries_exhausted.inc,
            on_write_fault=self._write_fault,
        )
        self.store = Store(
            dsn,
            pool_size_max=self.settings.pool_size_max,
            clock=self.clock,
            observer=observer,
            admission="naive" if self.settings.admission == "naive" else "grouped",
            prepared_statements=self.settings.database_pooler != "pgbouncer",
        )
        self._start_plans(self.store)
        if self.settings.home:
            self.region_agent = self._region_agent(self.store)
        # Listeners first, so that health answers (NOT_SERVING) while the database is
        # waited for; until then every call is told UNAVAILABLE (Drain.starting).
        self.server, self.port = await self._serve_workers(self.store)
        self.admin_server, self.admin_address = await self._serve_admin(self.store)
        if self.settings.region_listen:
            self.region_server, self.region_port = await self._serve_regions(self.store)
        self._serve_metrics()
        if self.settings.health_listen:
            self.health_server, self.health_port = listeners.health_server(
                self.settings, self.health
            )
            await self.health_server.start()
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self._set_health(False)
        log.info(
            "listening",
            port=self.port,
            admin=self.admin_address,
            metrics_port=self.metrics_port,
            health_port=self.health_port,
        )
        await self._connect(self.store)
        self.drain.starting = False
        await self._set_health(True)
        self._start_background(self.store, dsn)
        log.info(
            "serving",
            port=self.port,
            health_port=self.health_port,
            admin=self.admin_address,
            tls=self.settings.tls,
            worker_tokens=self.settings.worker_token_file is not None,
            metrics_port=self.metrics_port,
            database="embedded" if self.embedded else "external",
            event_loop=type(asyncio.get_running_loop()).__module__.split(".")[0],
            try_next=self._try_next(),
        )

    def _try_next(self) -> str:
        """What a person who just started the sidecar can type next."""
        host, _ = split_host_port(self.settings.listen, "listen")
        host = f"[{host}]" if ":" in host else host
        grpcurl = "grpcurl" if self.settings.tls else "grpcurl -plaintext"
        return (
            f"earmark budgets put demo --unit tokens --limit 100000 --admin-target "
            f"{self.admin_address}; {grpcurl} {host}:{self.port} list"
        )

    def _start_background(self, store: Store, dsn: str) -> None:
        m = self.metrics
        supervisor = None
        if self.embedded is not None:
            supervisor = Supervisor(self.embedded, m, self._embedded_liveness)
        self.background = Background(
            store,
            m,
            self.settings,
            self._set_health,
            probe=DatabaseProbe(dsn),
            on_liveness=self._set_liveness,
            supervisor=supervisor,
            duties=Duties(
                reporter=None
                if self.provider is None
                else Reporter(store, self.provider, m, self.clock),
                notices=self._deliverer(dsn),
                # Plan changes pushed by `earmark kinde-webhooks` reach the gate through marks.
                marks=None if self.plans is None else MarkWatcher(store, self.plans.forget),
                plans_file=self.provider if isinstance(self.provider, FileProvider) else None,
                regions=self.region_agent,
            ),
        )
        self.background.start()

    def _deliverer(self, dsn: str) -> Deliverer | None:
        """The notices' deliverer, with --notify-url; without it, events are only recorded
        (`earmark events list` shows them)."""
        if self.notify_target is None:
            return None
        log.info("notices_posted", url=self.notify_target.shown)
        events = EventLog(dsn, prepared_statements=self.settings.database_pooler != "pgbouncer")
        return Deliverer(
            events,
            self.notify_target,
            self.metrics,
            self.clock,
            lease_seconds=self.settings.notify_lease_seconds,
        )

    def abandon_start(self) -> None:
        """Ends the wait for the database (a signal came while start() waits): start()
        then raises StartAbandoned after stopping what it started. Only the wait is cut
        short; the embedded PostgreSQL's start, if under way, finishes first, so that
        stop() stops it rather than leaving it running."""
        self._abandoned.set()

    async def _connect(self, store: Store) -> None:
        """Connects the store, trying again with backoff for --database-wait-seconds while
        the database cannot be reached (a pod whose database starts a little later); each
        failed try is logged, without the URL. Past the wait: Unavailable, in one line."""
        wait = self.settings.database_wait_seconds
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        rng = random.Random()
        for attempt in itertools.count(1):
            try:
                await store.connect()
                return
            except Unavailable as error:
                left = deadline - loop.time()
                if left <= 0:
                    raise Unavailable(
                        f"database: not reachable within {wait:g}s (--database-wait-seconds): "
                        f"{error.message}",
                        error.reason,
                    ) from None
                ceiling = min(
                    limits.database_wait_backoff_seconds_max,
                    limits.database_wait_backoff_seconds_base * 2 ** min(attempt, 32),
                )
                pause = min(left, rng.uniform(0.0, ceiling))
                log.warning(
                    "database_wait",
                    attempt=attempt,
                    reason=error.reason.value,
                    error=error.message,
                    seconds_left=round(left, 1),
                )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._abandoned.wait(), pause)
                if self._abandoned.is_set():
                    raise StartAbandoned("stopped while waiting for the database") from None

    def _serve_metrics(self) -> None:
        if self.settings.metrics_listen:
            self._metrics_httpd = listeners.serve_metrics(self.settings, self.metrics.registry)
            self.metrics_port = self._metrics_httpd.server_port

    def _write_fault(self, error: Unavailable) -> None:
        if self.background is not None:
            self.background.write_fault(error)

    def _plans_reloaded(self, result: str) -> None:
        """The plans file was read again: counted, and when it loaded, every account's next
        admission reads its plan and period from it."""
        self.metrics.plans_file_reloads.labels(result).inc()
        if result == "loaded" and self.plans is not None:
            self.plans.forget_all()

    def _provider(self) -> LimitsProvider | None:
        """The limits provider --limits-provider names; None for static (budgets are
        PutBudget's). A bad plans file raises PlansFileError (a ValueError) naming the key."""
        settings = self.settings
        if settings.limits_provider == "file":
            assert settings.plans_file is not None
            return FileProvider(settings.plans_file, self.clock, on_reload=self._plans_reloaded)
        if settings.limits_provider != "kinde":
            return None
        client_id = os.environ.get(KINDE_CLIENT_ID, "")
        secret = os.environ.get(KINDE_CLIENT_SECRET, "")
        if not client_id or not secret:
            raise ValueError(
                f"limits_provider kinde: set {KINDE_CLIENT_ID} and {KINDE_CLIENT_SECRET} "
                "(the M2M application's credentials) in the environment"
            )
        return KindeProvider(
            settings.kinde_domain,
            client_id,
            secret,
            token_domain=settings.kinde_token_domain or settings.kinde_domain,
            clock=self.clock,
            metrics=self.metrics,
        )

    def _start_plans(self, store: Cycles) -> None:
        """The limits provider's cache and the gate, for a sidecar with a provider (kinde,
        or the file stand-in)."""
        settings = self.settings
        if self.provider is None:
            return
        cache = self._limit_cache = LimitCache(
            self.provider,
            self.clock,
            fresh_seconds=settings.limit_fresh_seconds,
            stale_seconds=settings.limit_stale_seconds,
            retry_seconds=settings.limit_retry_seconds,
        )
        self.plans = PlanGate(
            store,
            cache,
            self.clock,
            anchor_day=settings.cycle_anchor_day,
            unit=settings.plan_unit,
            admissions_per_minute=settings.admissions_per_minute,
            default_feature=settings.default_feature,
        )

    def _grpc_server(
        self, service: str, tokens: auth.Tokens | None, protected: tuple[str, ...]
    ) -> grpc.aio.Server:
        return listeners.grpc_server(
            self.settings,
            service=service,
            tokens=tokens,
            protected=protected,
            health_servicer=self.health,
            streams=self.streams,
            metrics=self.metrics,
            tracer_provider=self.tracer_provider,
        )

    async def _serve_workers(self, store: Holds) -> tuple[grpc.aio.Server, int]:
        """The workers' listener: Budget, health and reflection; Admin is not there."""
        settings = self.settings
        tokens = None
        if settings.worker_token_file is not None:
            tokens = auth.load_worker_tokens(settings.worker_token_file)
        # Reflection describes every method and message: with worker tokens, only a worker
        # may ask it, as on Admin's listener. Health stays open for the probes.
        # Admin's methods answer where Admin is (AdminElsewhere): with worker tokens, to
        # a worker only, so that the admin listener's address is not told to anyone.
        protected = (
            f"/{BUDGET_SERVICE}/",
            f"/{reflection.SERVICE_NAME}/",
            f"/{ADMIN_SERVICE}/",
        )
        server = self._grpc_server(BUDGET_SERVICE, tokens, protected)
        holds: Holds = store
        if self.region_agent is not None:
            # A Reserve its share cannot admit asks the home for what it needs.
            holds = cast(Holds, RegionHolds(store, self.region_agent))
        service = BudgetService(
            holds,
            self.metrics,
            self.drain,
            lease_seconds_max=settings.lease_seconds_max,
            plans=self.plans,
        )
        budget_pb2_grpc.add_BudgetServicer_to_server(service, server)
        server.add_generic_rpc_handlers((AdminElsewhere(settings.admin_address),))
        port = listeners.add_tcp_port(server, settings, settings.listen, "listen")
        await server.start()
        return server, port

    def _region_agent(self, store: Store) -> RegionAgent:
        """A region's agent, its channel to the home open (it connects on first use)."""
        settings = self.settings
        token = None
        if settings.home_token_file is not None:
            token = auth.read_token(settings.home_token_file, "home_token_file")
        ca = None
        if settings.home_ca_file is not None:
            ca, _ = files.read_regular(
                settings.home_ca_file, "home_ca_file", limits.pem_file_bytes_max
            )
        agent = RegionAgent(
            store,
            self.metrics,
            name=settings.region,
            home=HomeLink(settings.home, token, ca),
            clock=self.clock,
        )
        agent.open()
        log.info("region", region=settings.region, home=settings.home)
        return agent

    async def _serve_regions(self, store: Store) -> tuple[grpc.aio.Server, int]:
        """A home's listener for its regions' asks: Regions, health and reflection; with
        --region-token-file every call but health carries a region's token."""
        settings = self.settings
        tokens = None
        if settings.region_token_file is not None:
            tokens = auth.load_worker_tokens(settings.region_token_file, "region_token_file")
        protected = (f"/{REGIONS_SERVICE}/", f"/{reflection.SERVICE_NAME}/")
        server = self._grpc_server(REGIONS_SERVICE, tokens, protected)
        budget_pb2_grpc.add_RegionsServicer_to_server(
            RegionsService(store, self.metrics, self.drain, self.clock), server
        )
        port = listeners.add_tcp_port(server, settings, settings.region_listen, "region_listen")
        await server.start()
        log.info("home", region=settings.region, region_port=port)
        return server, port

    async def _serve_admin(self, store: AdminStore) -> tuple[grpc.aio.Server, str]:
        """Admin's own listener: a Unix socket only this user can open (the default), or
        TCP where every call but health carries the admin token."""
        settings = self.settings
        tokens = None
        if settings.admin_token_file is not None:
            tokens = auth.load_admin_token(settings.admin_token_file)
        protected = (f"/{ADMIN_SERVICE}/", f"/{reflection.SERVICE_NAME}/")
        server = self._grpc_server(ADMIN_SERVICE, tokens, protected)
        budget_pb2_grpc.add_AdminServicer_to_server(
            AdminService(store, self.metrics, self.drain, plans=self.plans), server
        )
        address = listeners.bind_admin(server, settings)
        await server.start()
        return server, address

    async def _stop_servers(self) -> None:
        servers = [
            s
            for s in (self.server, self.admin_server, self.health_server, self.region_server)
            if s is not None
        ]
        if not servers:
            return
        grace = self.settings.shutdown_grace_seconds
        started = asyncio.get_running_loop().time()
        await self._say_what_stopping_waits_for(grace)
        drained = await self.drain.drain(
            grace, self.settings.drain_holds_seconds, self.settings.drain_quiet_seconds
        )
        # Once Earmark's own calls are done, what still runs is streams that never end
        # by themselves (health Watch): they get a moment, not the rest of the grace.
        left = max(0.0, grace - (asyncio.get_running_loop().time() - started))
        await asyncio.gather(
            *(s.stop(grace=min(left, limits.stream_grace_seconds)) for s in servers)
        )
        log.info(
            "drained",
            in_flight_left=self.drain.active,
            open_holds_left=len(self.drain.holds),
            within_grace=drained,
        )
        self.server = self.admin_server = self.health_server = self.region_server = None

    async def _say_what_stopping_waits_for(self, grace: float) -> None:
        """One line on SIGTERM: the holds admitted here that the drain waits for (those
        still held: one in doubt has no worker about to settle it, so it is not waited
        for) and when the drain ends at the latest."""
        tracked = list(self.drain.holds)
        held, known = tracked, True
        if tracked and self.store is not None:
            try:
                held = await asyncio.wait_for(
                    self.store.held_among(tracked), limits.stop_holds_read_seconds_max
                )
            except (EarmarkError, TimeoutError):
                # The database cannot say: wait for every one, as before (within the bound).
                known = False
        if known:
            self.drain.keep_only(held)
        holds_seconds = min(self.settings.drain_holds_seconds, grace) if held else 0.0
        log.info(
            "stopping",
            grace_seconds=grace,
            drain_deadline=(utc_now() + timedelta(seconds=grace)).isoformat(),
            exit_by=(utc_now() + timedelta(seconds=stop_bound_seconds(grace))).isoformat(),
            holds_open=len(held),
            holds_known=known,
            holds_waited_seconds=holds_seconds,
            holds=held[: limits.stop_holds_shown_max],
            in_flight=self.drain.active,
        )

    async def stop(self) -> None:
        """Drains and stops everything start() started; safe after a failed start."""
        await self.health.enter_graceful_shutdown()
        await self._stop_servers()
        if self.background is not None:
            await self.background.stop()
            self.background = None
        if self.region_agent is not None:
            await self.region_agent.close()
            self.region_agent = None
        if self.store is not None:
            await self.store.close()
            self.store = None
        if self.plans is not None:
            await self.plans.close()
        if self._limit_cache is not None:
            await self._limit_cache.close()
            self._limit_cache = None
        if self.provider is not None:
            await self.provider.close()
            self.provider = None
        if self._metrics_httpd is not None:
            await listeners.stop_metrics(self._metrics_httpd)
            self._metrics_httpd = None
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
            self.embedded = None
        if self._data_dir_lock is not None:
            self._data_dir_lock.release()
            self._data_dir_lock = None
        log.info("stopped")

    async def stop_sweeper(self) -> None:
        if self.background is not None:
            await self.background.stop_sweeper()

    async def _set_liveness(self, source: str, problem: str | None) -> None:
        """The server as a whole (""): NOT_SERVING only while the sidecar cannot recover by
        itself (a background loop stalled, its embedded database will not start), so that
        it is restarted; SERVING again if every source recovers first."""
        if problem is None:
            self._not_live.pop(source, None)
        else:
            self._not_live[source] = problem
        status = (
            health_pb2.HealthCheckResponse.NOT_SERVING
            if self._not_live
            else health_pb2.HealthCheckResponse.SERVING
        )
        await self.health.set("", status)

    async def _embedded_liveness(self, live: bool) -> None:
        await self._set_liveness("embedded-database", None if live else "would not start again")

    async def _set_health(self, serving: bool) -> None:
        """Both services are SERVING while the database answers. The server as a whole
        ("") stays SERVING until shutdown: it is what liveness probes ask, and a database
        outage is a reason to stop sending work here, not to restart the process."""
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in SERVICE_NAMES:
            await self.health.set(name, status)


def stop_bound_seconds(grace_seconds: float) -> float:
    """How long after SIGTERM the process has exited at the latest: the drain's grace, then
    the rest of the stop."""
    return grace_seconds + limits.stop_after_drain_seconds_max


def exit_at_the_bound(seconds: float) -> threading.Timer:
    """A daemon timer that ends the process once seconds have passed: what the stop waits
    on (a thread stuck in a system call, a database that does not stop) cannot hold SIGTERM
    past its bound. A stop that ends first ends the process, and the timer with it."""

    def overran() -> None:
        with contextlib.suppress(OSError):
            os.write(
                2,
                f"earmark: the stop did not end within {seconds:g}s of SIGTERM "
                f"(--shutdown-grace-seconds + {limits.stop_after_drain_seconds_max:g}s); "
                "exiting now\n".encode(),
            )
        os._exit(STOP_OVERRAN_EXIT_CODE)

    timer = threading.Timer(seconds, overran)
    timer.daemon = True
    timer.start()
    return timer


async def serve(settings: Settings) -> None:
    """Runs a sidecar until SIGTERM or SIGINT, then drains and stops it within
    stop_bound_seconds."""
    sidecar = Sidecar(settings)
    stopping = asyncio.Event()

    def stop_requested(_: object) -> None:
        exit_at_the_bound(stop_bound_seconds(settings.shutdown_grace_seconds))
        # A signal while the sidecar still waits for its database ends the wait (and only
        # the wait: start() is never cancelled halfway through starting PostgreSQL).
        sidecar.abandon_start()

    with stop_signals(asyncio.get_running_loop(), stopping.set):
        stopped = asyncio.create_task(stopping.wait())
        stopped.add_done_callback(stop_requested)
        try:
            await sidecar.start()
        except StartAbandoned:
            log.info("stopping", grace_seconds=settings.shutdown_grace_seconds)
            return
        try:
            await stopping.wait()
        finally:
            await sidecar.stop()
