"""What the commands that serve HTTP (`earmark kinde-webhooks`, `earmark console`) share:
a TCP socket bound before their server starts, so that a port in use is one line naming
the setting, and uvicorn's server as they run it, where a client that goes away
mid-request is counted and logged in a line at most (earmark.disconnects), not a
traceback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from starlette.types import ASGIApp

from earmark import limits
from earmark.disconnects import Disconnects, QuietDisconnects
from earmark.errors import Reason, Unavailable
from earmark.settings import split_host_port


def bind_tcp(listen: str, name: str = "listen") -> socket.socket:
    """A socket bound to listen (HOST:PORT; port 0 picks a free one), not yet listening."""
    host, port = split_host_port(listen, name)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise Unavailable(
            f"{name}: cannot listen on {listen}: {error.strerror}", Reason.LISTEN_FAILED
        ) from None
    return sock


class QuietServer(uvicorn.Server):
    """uvicorn's server without its own signal handling, which says when it listens.
    uvicorn raises a caught SIGTERM again once it has stopped, which would end the process
    before the command has closed what it opened; the commands handle SIGTERM and SIGINT
    themselves."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def quiet_server(
    app: ASGIApp,
    requests_max: int,
    tls_cert_file: Path | None,
    tls_key_file: Path | None,
    *,
    disconnects: Disconnects | None = None,
) -> QuietServer:
    """uvicorn serving app: no log of its own (the command logs), no lifespan, at most
    requests_max requests at once, HTTPS with a certificate; on SIGTERM, requests in flight
    get the sidecar's grace to finish. A client that goes away mid-request is noted in
    disconnects (by default, one of its own that logs as server "http")."""
    config = uvicorn.Config(
        QuietDisconnects(app, disconnects or Disconnects("http")),
        log_config=None,
        access_log=False,
        lifespan="off",
        server_header=False,
        # uvicorn takes a client's address from X-Forwarded-For when the peer is loopback
        # (or is named in FORWARDED_ALLOW_IPS). These servers have no trusted-proxy
        # setting, so a client's address is its connection's peer: otherwise a client on
        # the host could claim a new address with every request (the console's login
        # throttle keys on it).
        proxy_headers=False,
        limit_concurrency=requests_max,
        timeout_graceful_shutdown=int(limits.shutdown_grace_seconds_default),
        ssl_certfile=str(tls_cert_file) if tls_cert_file else None,
        ssl_keyfile=str(tls_key_file) if tls_key_file else None,
    )
    return QuietServer(config)
