"""The links of scenario 15 (bench/regions.py): a TCP bridge to an embedded PostgreSQL's
Unix socket, so that a relay (tests.relay.Relay, TCP only) can stand between a far sidecar
and the home's database; and the three regions' processes, stopped in any case."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from types import TracebackType
from typing import Self

from earmark.spawn import SpawnedSidecar, log_events

# How long start() and stop() wait for the bridge's loop.
CONTROL_SECONDS = 10.0
CHUNK_BYTES = 65_536


def socket_path(pgdata: Path) -> str:
    """The Unix socket of the embedded PostgreSQL running on pgdata (its postmaster.pid
    names the port and the socket folder)."""
    lines = (pgdata / "postmaster.pid").read_text().splitlines()
    port, folder = int(lines[3]), lines[4].strip()
    return f"{folder}/.s.PGSQL.{port}"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK_BYTES):
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()


class UnixBridge:
    """Forwards TCP connections on 127.0.0.1:PORT to a Unix socket, at once, on its own
    event loop in a daemon thread (so that the load driver's loop does not carry it)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"bridge to {path}", daemon=True
        )

    async def _serve(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        try:
            reader, writer = await asyncio.open_unix_connection(self.path)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, writer), _pipe(reader, client_writer))

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()

    def start(self) -> None:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        future.result(timeout=CONTROL_SECONDS)

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        future = asyncio.run_coroutine_threadsafe(self._close(), self._loop)
        with contextlib.suppress(Exception):
            future.result(timeout=CONTROL_SECONDS)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=CONTROL_SECONDS)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def region_port(home: SpawnedSidecar) -> int:
    """The port of the home's region listener, as its log reported it."""
    for event in log_events(home.log):
        if event.get("event") == "home":
            return int(event["region_port"])
    raise RuntimeError(f"the home sidecar reported no region listener: {home.log}")
