"""Starting where the world is not ready: a database that answers only later, one that
never does, and a second sidecar on a data dir that is taken. Real processes, a real
PostgreSQL reached over a real TCP forwarder on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from earmark.spawn import spawn_sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.chaos.test_faults import NOT_SERVING, SERVING
from tests.conftest import TEST_DATABASE
from tests.helpers import child, eventually, free_port, reason_of

SECRET = "sekrit-pw-0123456789"


@contextlib.contextmanager
def refusing_port() -> Iterator[socket.socket]:
    """A socket bound to a free port on 127.0.0.1 that does not listen: a connection to it
    is refused, and no other socket (a connection's own end, a listener on port 0) can take
    the port before forwarder() listens on it, as one could after free_port()."""
    bound = socket.socket()
    try:
        bound.bind(("127.0.0.1", 0))
        yield bound
    finally:
        bound.close()


@contextlib.asynccontextmanager
async def forwarder(bound: socket.socket, unix_socket: str) -> AsyncIterator[None]:
    """A TCP server listening on the bound socket (refusing_port()) that carries each
    connection to the PostgreSQL listening on unix_socket: the database "starts" when this
    does."""

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        writer.close()

    writers: list[asyncio.StreamWriter] = []

    async def carry(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_unix_connection(unix_socket)
        writers.extend((writer, upstream_writer))
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    server = await asyncio.start_server(carry, sock=bound)
    try:
        yield
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()


def unix_socket_of(database_url: str) -> str:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(database_url).query)
    return f"{query['host'][0]}/.s.PGSQL.{query.get('port', ['5432'])[0]}"


def log_events(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


async def health(target: str, service: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=2
        )
    return int(reply.status)


async def test_serve_waits_for_a_database_that_starts_later(
    database_url: str, tmp_path: Path
) -> None:
    """With the database not there yet, `earmark serve` listens, says NOT_SERVING for its
    services (SERVING for itself, so it is not restarted), answers calls UNAVAILABLE with
    DATABASE_STARTING, logs each failed try without the password, and serves once the
    database answers."""
    with contextlib.ExitStack() as stack:
        bound = stack.enter_context(refusing_port())
        port = bound.getsockname()[1]
        url = f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/{TEST_DATABASE}"
        log = tmp_path / "sidecar.log"
        sink = stack.enter_context(log.open("wb"))
        async with child(
            sys.executable, "-m", "earmark", "serve", "--database-url", url,
            "--database-wait-seconds", "60", "--listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
            "--log-format", "json", stdout=sink, stderr=subprocess.PIPE,
        ) as process:  # fmt: skip

            async def said(event: str, times: int = 1) -> bool:
                return times <= sum(1 for e in log_events(log) if e.get("event") == event)

            await eventually(lambda: said("listening"), within_seconds=30, what="listening")
            (listening,) = [e for e in log_events(log) if e.get("event") == "listening"]
            target = f"127.0.0.1:{listening['port']}"
            assert (NOT_SERVING, SERVING) == (
                await health(target, "earmark.v1.Budget"),
                await health(target, ""),
            )
            async with grpc.aio.insecure_channel(target) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await budget_pb2_grpc.BudgetStub(channel).Reserve(
                        pb.ReserveRequest(budget_id="b", amount=1, idempotency_key="k"), timeout=5
                    )
            assert grpc.StatusCode.UNAVAILABLE == refused.value.code()
            assert "DATABASE_STARTING" == reason_of(refused.value)[0]
            await eventually(lambda: said("database_wait", 2), within_seconds=30,
                             what="two failed tries logged")  # fmt: skip
            async with forwarder(bound, unix_socket_of(database_url)):
                await eventually(lambda: said("serving"), within_seconds=30, what="serving")
                assert SERVING == await health(target, "earmark.v1.Budget")
                process.send_signal(signal.SIGTERM)
                assert 0 == await asyncio.wait_for(process.wait(), 30)
    assert SECRET not in log.read_text()


async def test_a_signal_ends_the_wait(tmp_path: Path) -> None:
    """SIGTERM while `earmark serve` waits for its database ends the wait: exit 0, and it
    never reported serving."""
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"
    log = tmp_path / "sidecar.log"
    with log.open("wb") as sink:
        async with child(
            sys.executable, "-m", "earmark", "serve", "--database-url", url,
            "--database-wait-seconds", "60", "--listen", "127.0.0.1:0",
            "--metrics-listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
            "--log-format", "json", stdout=sink,
        ) as process:  # fmt: skip

            async def waiting() -> bool:
                return any(e.get("event") == "database_wait" for e in log_events(log))

            await eventually(waiting, within_seconds=30, what="a failed try logged")
            process.send_signal(signal.SIGTERM)
            assert 0 == await asyncio.wait_for(process.wait(), 30)
    said = [e.get("event") for e in log_events(log)]
    assert ("stopping" in said, "serving" in said) == (True, False)


async def test_serve_gives_up_past_the_wait(tmp_path: Path) -> None:
    """A database that never answers ends `earmark serve` after --database-wait-seconds
    with exit status 1 and one line that names the wait, never the URL's password."""
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/nowhere"
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "earmark", "serve", "--database-url", url,
         "--database-wait-seconds", "0.5", "--listen", "127.0.0.1:0",
         "--metrics-listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--log-format", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert (1, 1) == (result.returncode, len(lines)), result.stderr
    assert "not reachable within 0.5s" in lines[0]
    assert SECRET not in result.stderr + result.stdout


async def test_a_second_sidecar_on_a_taken_data_dir(database_url: str, socket_dir: Path) -> None:
    """A second `earmark serve` on a data dir in use exits 1 with one line naming the pid
    that holds it; the first keeps its admin socket and serves Admin; once it stopped, the
    data dir can be taken again."""
    first = spawn_sidecar(socket_dir, "--database-url", database_url)
    try:
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "earmark", "serve", "--database-url", database_url,
             "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--data-dir", str(socket_dir)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        lines = result.stderr.strip().splitlines()
        assert (1, 1) == (result.returncode, len(lines)), result.stderr
        assert f"pid {first.process.pid}" in lines[0]
        assert (socket_dir / "admin.sock").exists()
        assert SERVING == await health(first.admin, "earmark.v1.Admin")
    finally:
        assert 0 == first.stop()
    again = spawn_sidecar(socket_dir, "--database-url", database_url)
    assert 0 == again.stop()


def test_an_unusable_data_dir_is_one_line(tmp_path: Path) -> None:
    """A data dir that cannot be made (here under a file) ends `earmark serve` with exit 1
    and one line naming the path, not a traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "earmark", "serve", "--data-dir", str(blocker / "data"),
         "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert (1, 1) == (result.returncode, len(lines)), result.stderr
    assert str(blocker / "data") in lines[0]
