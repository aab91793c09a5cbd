"""Wiring: the database, the services, health, reflection, metrics, the sweeper, shutdown."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from earmark import limits
from earmark.background import Background
from earmark.metrics import Metrics
from earmark.service.admin import AdminService
from earmark.service.budget import BudgetService
from earmark.service.drain import Drain
from earmark.settings import Settings, split_host_port
from earmark.store import Store, StoreObserver
from earmark.store.embedded import EmbeddedPostgres, ensure_database
from earmark.v1 import budget_pb2, budget_pb2_grpc

log = structlog.get_logger("earmark.server")

EMBEDDED_DATABASE = "earmark"
SERVICE_NAMES = (
    budget_pb2.DESCRIPTOR.services_by_name["Budget"].full_name,
    budget_pb2.DESCRIPTOR.services_by_name["Admin"].full_name,
)


class Sidecar:
    """One Earmark process's parts. start() brings them up in order, stop() takes them down
    in reverse: health, RPCs (drained within the grace period), sweeper, pool, database."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.embedded: EmbeddedPostgres | None = None
        self.store: Store | None = None
        self.server: grpc.aio.Server | None = None
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]
        self.drain = Drain()
        self.port = 0
        self.metrics_port = 0
        self._metrics_httpd: Any = None
        self.background: Background | None = None

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
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
        )
        self.store = await Store.open(
            dsn,
            pool_size_max=self.settings.pool_size_max,
            observer=observer,
            admission="naive" if self.settings.admission == "naive" else "grouped",
        )
        self.server = grpc.aio.server(
            maximum_concurrent_rpcs=limits.rpc_concurrency_max,
            options=[
                # Two sidecars must never share a port by accident.
                ("grpc.so_reuseport", 0),
                ("grpc.max_receive_message_length", limits.rpc_message_bytes_max),
            ],
        )
        budget_pb2_grpc.add_BudgetServicer_to_server(
            BudgetService(
                self.store, m, self.drain, lease_seconds_max=self.settings.lease_seconds_max
            ),
            self.server,
        )
        budget_pb2_grpc.add_AdminServicer_to_server(
            AdminService(self.store, m, self.drain), self.server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server
        )
        host, port = split_host_port(self.settings.listen, "listen")
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        await self.server.start()
        if self.settings.metrics_listen:
            host, port = split_host_port(self.settings.metrics_listen, "metrics_listen")
            self._metrics_httpd, _ = start_http_server(port, host, registry=m.registry)
            self.metrics_port = self._metrics_httpd.server_port
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self._set_health(True)
        self.background = Background(self.store, m, self.settings, self._set_health)
        self.background.start()
        log.info(
            "serving",
            port=self.port,
            metrics_port=self.metrics_port,
            database="embedded" if self.embedded else "external",
        )

    async def stop(self) -> None:
        """Drains and stops everything start() started; safe after a failed start."""
        await self.health.enter_graceful_shutdown()
        if self.server is not None:
            grace = self.settings.shutdown_grace_seconds
            started = asyncio.get_running_loop().time()
            drained = await self.drain.drain(grace)
            # Once Earmark's own calls are done, what still runs is streams that never end
            # by themselves (health Watch): they get a moment, not the rest of the grace.
            left = max(0.0, grace - (asyncio.get_running_loop().time() - started))
            await self.server.stop(grace=min(left, limits.stream_grace_seconds))
            log.info("drained", in_flight_left=self.drain.active, within_grace=drained)
            self.server = None
        if self.background is not None:
            await self.background.stop()
            self.background = None
        if self.store is not None:
            await self.store.close()
            self.store = None
        if self._metrics_httpd is not None:
            await asyncio.to_thread(self._metrics_httpd.shutdown)
            self._metrics_httpd.server_close()
            self._metrics_httpd = None
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)
            self.embedded = None
        log.info("stopped")

    async def stop_sweeper(self) -> None:
        if self.background is not None:
            await self.background.stop_sweeper()

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


async def serve(settings: Settings) -> None:
    """Runs a sidecar until SIGTERM or SIGINT, then drains and stops it."""
    sidecar = Sidecar(settings)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await sidecar.start()
    try:
        await stopping.wait()
        log.info("stopping", grace_seconds=settings.shutdown_grace_seconds)
    finally:
        await sidecar.stop()
