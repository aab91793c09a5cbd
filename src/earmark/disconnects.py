"""Clients that go away mid-request, on every HTTP server Earmark runs: counted, and
logged in one line at most each, never as a traceback.

Anyone who can reach a listener can open a connection and drop it halfway: uvicorn logs
the ClientDisconnect Starlette raises then as "Exception in ASGI application" with its
traceback (some 45 lines), and Python's socketserver, under prometheus_client's metrics
server, prints the ConnectionResetError of a client that reset mid-request the same way.
That is a log flood anyone can cause, and it hides the tracebacks that matter. Here each
such client is counted, and a server logs the first at once, then at most one line per
limits.http_disconnect_log_seconds, each saying how many went away since the line before.
"""

from __future__ import annotations

import socketserver
import ssl
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from earmark import limits

log = structlog.get_logger("earmark.http")

# What a client that closed or reset its connection mid-request raises in a thread that
# reads or writes the socket: the peer's reset, a write to a closed socket, and a TLS
# connection cut without its close message.
GONE = (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError)


class Disconnects:
    """The clients one server saw go away mid-request: counted, logged at most once per
    interval. Thread-safe, since the metrics server notes them from its request threads."""

    def __init__(
        self,
        server: str,
        *,
        counted: Callable[[], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        interval_seconds: float = limits.http_disconnect_log_seconds,
    ) -> None:
        self.server = server
        self.total = 0
        self._counted = counted
        self._monotonic = monotonic
        self._interval = interval_seconds
        self._lock = threading.Lock()
        # How many went away since the last line, and when that line was written.
        self._unlogged = 0
        self._logged_at: float | None = None

    def note(self) -> None:
        """One client went away mid-request."""
        line: tuple[int, int] | None = None
        with self._lock:
            self.total += 1
            self._unlogged += 1
            now = self._monotonic()
            if self._logged_at is None or now - self._logged_at >= self._interval:
                line = (self._unlogged, self.total)
                self._unlogged, self._logged_at = 0, now
        if self._counted is not None:
            self._counted()
        if line is not None:
            # count: how many went away since the line before, this one included.
            log.info("client_disconnected", server=self.server, count=line[0], total=line[1])


class QuietDisconnects:
    """ASGI middleware, outermost: a request whose client went away (Starlette's
    ClientDisconnect, alone or in an exception group) ends with a count instead of
    propagating to uvicorn, which would log its traceback. uvicorn answers nothing more to
    a client that is gone, so there is nothing else to do."""

    def __init__(self, app: ASGIApp, disconnects: Disconnects) -> None:
        self.app = app
        self.disconnects = disconnects

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            self.disconnects.note()
        except BaseExceptionGroup as group:
            _, rest = group.split(ClientDisconnect)
            if rest is not None:
                raise
            self.disconnects.note()


def quiet_socketserver(server: socketserver.BaseServer, disconnects: Disconnects) -> None:
    """Makes server (prometheus_client's metrics server, say) count a client that went away
    mid-request rather than print its traceback; any other error is still printed as
    socketserver prints it."""
    printed = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], GONE):
            disconnects.note()
            return
        printed(request, client_address)

    # An instance attribute: start_http_server makes the server, so its class is not ours.
    setattr(server, "handle_error", handle_error)  # noqa: B010
