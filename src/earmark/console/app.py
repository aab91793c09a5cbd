"""`earmark console`: the Starlette application and its uvicorn server.

The console is a client of one sidecar like any other: its pages read Admin (budgets,
holds, the ledger, prices) one page of a listing at a time, its actions are Admin calls,
and its Lab reserves through the workers' port. Everything it serves comes from the
package (templates, styles, scripts and the chart library), so it works offline.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path

import jinja2
import structlog
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from earmark import limits
from earmark.asgi import bind_tcp, quiet_server
from earmark.client import AsyncClient
from earmark.client.errors import EarmarkClientError
from earmark.console.errors import described
from earmark.console.fields import BadInput
from earmark.console.guard import Guard, Sessions
from earmark.console.labrun import LabRuns
from earmark.console.pages import Pages
from earmark.console.settings import ConsoleSettings
from earmark.console.throttle import LoginThrottle
from earmark.disconnects import Disconnects
from earmark.ops.connect import admin_target, read_token
from earmark.signals import stop_signals

log = structlog.get_logger("earmark.console")

HERE = Path(__file__).resolve().parent


def templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    return Jinja2Templates(env=env)


def utc_now() -> datetime:
    """The wall clock, in UTC: what the pages show unless a test gives its own."""
    return datetime.now(UTC)


def build(
    settings: ConsoleSettings, client: AsyncClient, clock: Callable[[], datetime] = utc_now
) -> tuple[Guard, LabRuns]:
    """The console's ASGI app on client, wrapped in its Guard (the app to serve), and its
    Lab (to close when serving ends); clock is the time its pages show and its login's
    throttle counts by."""
    login_file = settings.login_token_file
    login = read_token(login_file, "--login-token-file") if login_file else None
    lab = LabRuns(client)
    app = Starlette()
    guard = Guard(app, Sessions(), login, settings.tls, settings.hosts(), LoginThrottle(clock))
    pages = Pages(client, templates(), lab, guard, clock, settings.lab_step_seconds)

    async def home(request: Request) -> Response:
        return RedirectResponse("/budgets", status_code=303)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def bad_input(request: Request, error: Exception) -> Response:
        return pages.problem(request, 400, str(error))

    async def failed_call(request: Request, error: Exception) -> Response:
        assert isinstance(error, EarmarkClientError)
        status, message = described(error)
        log.info("admin_call_failed", path=request.url.path, status=status, error=message)
        return pages.problem(request, status, message)

    app.router.routes.extend(
        [
            Route("/", home),
            Route("/healthz", healthz),
            Route("/budgets", pages.budgets),
            Route("/budget", pages.budget),
            Route("/templates", pages.budget_templates),
            Route("/holds", pages.holds),
            Route("/spend", pages.spend),
            Route("/actions/{verb}", pages.action, methods=["POST"]),
            Route("/prices", pages.prices),
            Route("/lab", pages.lab_page),
            Route("/lab/run", pages.lab_start, methods=["POST"]),
            Route("/login", pages.login_page),
            Route("/login", pages.login, methods=["POST"]),
            Route("/logout", pages.logout, methods=["POST"]),
            Route("/api/budgets", pages.budgets_json),
            Route("/api/budget", pages.budget_json),
            Route("/api/lab/{run_id}", pages.lab_json),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ]
    )
    app.add_exception_handler(BadInput, bad_input)
    app.add_exception_handler(EarmarkClientError, failed_call)
    return guard, lab


def client_of(settings: ConsoleSettings) -> AsyncClient:
    """The sidecar's client: Admin at the flag, the SDK's variable or the data dir's socket,
    with Admin's token and the worker token read from their files."""
    admin = admin_target(settings.admin_target or None, settings.data_dir)
    return AsyncClient(
        settings.target,
        admin_target=admin,
        admin_token=read_token(settings.admin_token_file) if settings.admin_token_file else None,
        token=read_token(settings.token_file, "--token-file") if settings.token_file else None,
        timeout_seconds=settings.timeout_seconds,
    )


@contextlib.asynccontextmanager
async def serving(
    settings: ConsoleSettings, clock: Callable[[], datetime] = utc_now
) -> AsyncIterator[tuple[uvicorn.Server, str]]:
    """The console serving on its socket (bound first, so that a port in use is one line)
    until the block ends, on clock (tests give theirs); yields the server and the URL it
    serves."""
    sock = bind_tcp(settings.listen)
    client = client_of(settings)
    try:
        guard, lab = build(settings, client, clock)
        server = quiet_server(
            guard,
            limits.console_requests_max,
            settings.tls_cert_file,
            settings.tls_key_file,
            disconnects=Disconnects("console"),
        )
        host, port = sock.getsockname()[:2]
        url = f"{'https' if settings.tls else 'http'}://{host}:{port}"
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            # Served once uvicorn has started listening: a page asked for before would be
            # refused a connection. A server that failed to start raises here.
            listening = asyncio.create_task(server.listening.wait())
            await asyncio.wait([task, listening], return_when=asyncio.FIRST_COMPLETED)
            listening.cancel()
            if task.done():
                task.result()
            yield server, url
        finally:
            server.should_exit = True
            await task
            await lab.close()
    finally:
        sock.close()
        await client.close()


async def serve_console(settings: ConsoleSettings) -> None:
    """Serves the console until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    with stop_signals(asyncio.get_running_loop(), stop.set):
        async with serving(settings) as (_, url):
            log.info(
                "serving",
                url=url,
                tls=settings.tls,
                login=settings.login_token_file is not None,
                try_next=f"open {url} in a browser",
            )
            await stop.wait()
            log.info("stopping")
    log.info("stopped")
