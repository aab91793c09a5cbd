"""Clients that go away mid-request (earmark.disconnects): a line at most each, at most one
a limits.http_disconnect_log_seconds per server, and no traceback from the metrics
listener's server either. The webhook receiver's own case, through the real command, is in
tests/plans/test_webhooks.py."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest
import structlog
from prometheus_client import CollectorRegistry

from earmark import limits
from earmark.disconnects import Disconnects, quiet_socketserver
from earmark.listeners import serve_metrics
from tests.conftest import sidecar_settings
from tests.helpers import eventually


def test_a_flood_of_disconnects_is_one_line_per_interval() -> None:
    """100 clients gone in one instant are one line and the next, an interval later, one
    more counting the 99 left unlogged and itself, with every one counted."""
    now = [0.0]
    counted: list[int] = []
    disconnects = Disconnects("test", counted=lambda: counted.append(1), monotonic=lambda: now[0])
    with structlog.testing.capture_logs() as logs:
        for _ in range(100):
            disconnects.note()
        now[0] = limits.http_disconnect_log_seconds
        disconnects.note()
    lines = [(e["count"], e["total"]) for e in logs if e["event"] == "client_disconnected"]
    assert ([(1, 1), (100, 101)], 101, 101) == (lines, disconnects.total, len(counted))


def reset_mid_request(port: int) -> None:
    """Sends half a request line, then resets the connection (SO_LINGER 0)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /metr")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def test_the_metrics_server_counts_clients_that_reset_without_a_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The metrics listener's server (which prints a ConnectionResetError traceback for a
    client that resets mid-request), made quiet, counts 20 such clients, prints nothing
    and still answers."""
    settings = sidecar_settings("postgresql://unused@127.0.0.1/unused", tmp_path)
    httpd = serve_metrics(settings, CollectorRegistry())
    disconnects = Disconnects("metrics")
    quiet_socketserver(httpd, disconnects)
    try:
        port = httpd.server_port
        # 20, not more: the server's listen backlog is 5 and it accepts one connection per
        # wake-up, so a faster flood has the kernel drop connections for the client to retry
        # a second later, which only makes the test slow.
        for _ in range(20):
            reset_mid_request(port)

        async def all_counted() -> bool:
            return 20 == disconnects.total

        await eventually(all_counted, within_seconds=30, what="20 resets counted")
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            status = sock.recv(12)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert (b"HTTP/1.0 200", "") == (status, capfd.readouterr().err)
