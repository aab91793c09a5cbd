"""The HTTP side of `earmark kinde-webhooks`: a Starlette app served by uvicorn.

POST /kinde/webhooks takes Kinde's webhook (a JWT, at most webhook_body_bytes_max bytes),
verifies it (verify.py) and, for an event that changes an account's plan or agreement,
marks the account in PostgreSQL, in one transaction with the event's id and the delivery's
`webhook-id` header (Kinde's idempotency key), so that a delivery sent again changes
nothing. Kinde sends any delivery not answered 200 again for 36 hours and disables an
endpoint that keeps failing, so every verified delivery is answered 200: marked, ignored
(a published event that changes no limit), unknown_type (a type Kinde does not publish,
logged once per type) or replayed (a delivery or event seen before). Refused: 400
malformed, 401 not proven to come from Kinde or expired, 408 too slow to arrive
(webhook_body_seconds_max), 413 too large, 503 when Kinde's keys or the database cannot be
reached (Kinde tries again later). A client that goes away mid-body is counted
(disconnected) and logged a line at most (earmark.disconnects).
GET /metrics: earmark_webhooks_total{result} (counts only, no account or event in a label).
GET /healthz: 200 while serving.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

import asyncpg
import structlog
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from earmark import limits
from earmark.asgi import bind_tcp, quiet_server
from earmark.core.bounds import shown
from earmark.disconnects import Disconnects
from earmark.errors import EarmarkError
from earmark.metrics import LogDrops
from earmark.ops.audit import audit_url
from earmark.signals import stop_signals
from earmark.store import marks
from earmark.store.migrate import migrate
from earmark.store.pools import create_pool
from earmark.store.store import utc_now
from earmark.store.tx import Conn, mapped_db_errors, run_transaction
from earmark.webhooks.keys import KindeKeys
from earmark.webhooks.settings import WEBHOOK_PATH, WebhookSettings
from earmark.webhooks.verify import Event, Refusal, Verifier, malformed

log = structlog.get_logger("earmark.webhooks")

# The header Kinde names a delivery with: the same on each of its attempts.
DELIVERY_HEADER = "webhook-id"

# Every value the result label takes: a fixed set, so the series are bounded.
RESULTS = (
    "marked",
    "ignored",
    "unknown_type",
    "replayed",
    "malformed",
    "too_large",
    "too_slow",
    "unauthorized",
    "expired",
    "keys_unavailable",
    "database_unavailable",
    "disconnected",
)


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.webhooks = Counter(
            "earmark_webhooks",
            "Kinde webhooks by result: marked (an account's plan marked stale), ignored "
            "(an event that changes no plan), unknown_type (a type Kinde does not publish, "
            "acknowledged), replayed (a delivery seen before, acknowledged), disconnected "
            "(the client went away mid-request), or why it was refused.",
            ["result"],
            registry=self.registry,
        )
        # Every series from the start, so that a rate over a result never lacks one.
        for result in RESULTS:
            self.webhooks.labels(result)
        # The receiver's log lines that could not be written, as the sidecar counts its own.
        self.registry.register(LogDrops())


class TooLarge(Exception):
    pass


async def _body(request: Request) -> bytes:
    """The request's body, read no further than webhook_body_bytes_max."""
    cap = limits.webhook_body_bytes_max
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:
            raise TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _delivery_id(header: str | None) -> str | None:
    """The delivery's id from its webhook-id header; None when it came without one (its
    event id alone then tells a delivery sent again)."""
    value = (header or "").strip()
    if not value:
        return None
    cap = limits.webhook_delivery_id_length_max
    if len(value) > cap or not (value.isascii() and value.isprintable()):
        raise malformed(
            f"the {DELIVERY_HEADER} header is not an id of 1 to {cap} printable ASCII characters"
        )
    return value


class Webhooks:
    def __init__(self, verifier: Verifier, pool: asyncpg.Pool, metrics: WebhookMetrics) -> None:
        self._verifier = verifier
        self._pool = pool
        self._metrics = metrics
        # The event types Kinde does not publish logged so far, each once, at most
        # webhook_unknown_types_logged_max of them (shown, so each is bounded too).
        self._unknown_logged: set[str] = set()

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route(WEBHOOK_PATH, self.receive, methods=["POST"]),
                Route("/metrics", self.metrics, methods=["GET"]),
                Route("/healthz", self.healthz, methods=["GET"]),
            ]
        )

    async def receive(self, request: Request) -> Response:
        try:
            event = await self._verifier.verify(await self._read(request))
            result, delivery = await self._apply(event, request.headers.get(DELIVERY_HEADER))
        except Refusal as refusal:
            self._metrics.webhooks.labels(refusal.result).inc()
            log.warning("webhook_refused", result=refusal.result, reason=refusal.message)
            return JSONResponse(
                {"result": refusal.result, "error": refusal.message}, status_code=refusal.status
            )
        self._metrics.webhooks.labels(result).inc()
        if not event.known:
            self._log_unknown(event.type)
        log.info(
            "webhook_accepted",
            result=result,
            # A type Kinde does not publish is named in its own line, once.
            type=event.type if event.known else None,
            account=event.account or None,
            event_id=event.event_id or None,
            webhook_id=delivery,
        )
        return JSONResponse({"result": result})

    def _log_unknown(self, kind: str) -> None:
        """Logs a type Kinde does not publish the first time it comes: a flood of made-up
        types (each in a token Kinde signed) is a bounded number of lines."""
        named = shown(kind)
        if named in self._unknown_logged:
            return
        if len(self._unknown_logged) >= limits.webhook_unknown_types_logged_max:
            return
        self._unknown_logged.add(named)
        log.warning(
            "webhook_type_unknown",
            type=named,
            note="Kinde does not publish this event type: answered 200 and ignored (logged "
            "once per type); if it changes a customer's limits, Earmark should act on it",
        )

    async def _read(self, request: Request) -> bytes:
        try:
            async with asyncio.timeout(limits.webhook_body_seconds_max):
                return await _body(request)
        except TooLarge:
            raise Refusal(
                413, "too_large", f"the body is over {limits.webhook_body_bytes_max} bytes"
            ) from None
        except TimeoutError:
            raise Refusal(
                408,
                "too_slow",
                f"the body did not arrive within {limits.webhook_body_seconds_max:g}s",
            ) from None

    async def _apply(self, event: Event, header: str | None) -> tuple[str, str | None]:
        """The result of a verified event, and its delivery's id when it marks: an event
        that changes limits marks its account once, whatever number of times its delivery
        (the same webhook-id, or without one the same event id) comes."""
        if not event.marks:
            return ("ignored" if event.known else "unknown_type"), None
        delivery = _delivery_id(header)

        async def work(conn: Conn) -> datetime | None:
            return await marks.mark_account(
                conn, event.event_id, delivery, event.type, event.account, event.keep_until
            )

        try:
            marked = await run_transaction(self._pool, work, isolation="read_committed")
        except EarmarkError as error:
            # The message names the error's class and text, never the database URL.
            raise Refusal(503, "database_unavailable", f"database: {error.message}") from None
        return ("replayed" if marked is None else "marked"), delivery

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self._metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(self, request: Request) -> Response:
        return PlainTextResponse("ok\n")


async def open_database(settings: WebhookSettings) -> asyncpg.Pool:
    """A small pool on the sidecars' database (--database-url, else the embedded one on
    --data-dir, as `earmark audit` finds it), with the migrations it lacks applied."""
    dsn = audit_url(settings.database_url, settings.data_dir)
    with mapped_db_errors():
        pool = await create_pool(
            dsn, min_size=1, max_size=limits.webhook_pool_size_max, prepared_statements=True
        )
        try:
            async with pool.acquire(timeout=limits.pool_acquire_timeout_seconds) as conn:
                await migrate(conn)
        except BaseException:
            pool.terminate()
            raise
    return pool


async def serve_webhooks(
    settings: WebhookSettings, clock: Callable[[], datetime] = utc_now
) -> None:
    """Serves Kinde's webhooks until SIGTERM or SIGINT."""
    sock = bind_tcp(settings.listen)
    try:
        pool = await open_database(settings)
    except BaseException:
        sock.close()
        raise
    try:
        keys = KindeKeys(settings.kinde_domain)
        metrics = WebhookMetrics()
        webhooks = Webhooks(Verifier(settings.kinde_domain, keys, clock), pool, metrics)
        # A webhook is one short transaction: on SIGTERM those in flight finish within the
        # grace, and Kinde sends again what was cut off.
        server = quiet_server(
            webhooks.app(),
            limits.webhook_requests_max,
            settings.tls_cert_file,
            settings.tls_key_file,
            disconnects=Disconnects(
                "kinde-webhooks", counted=metrics.webhooks.labels("disconnected").inc
            ),
        )
        with stop_signals(asyncio.get_running_loop(), _stop, server):
            host, port = sock.getsockname()[:2]
            log.info(
                "listening",
                host=host,
                port=port,
                path=WEBHOOK_PATH,
                tls=settings.tls,
                jwks=keys.url,
            )
            await server.serve(sockets=[sock])
    finally:
        sock.close()
        await pool.close()
        log.info("stopped")


def _stop(server: uvicorn.Server) -> None:
    log.info("stopping")
    server.should_exit = True
