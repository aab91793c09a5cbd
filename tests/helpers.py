"""Shared test helpers: invariant checks straight from the tables."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import google.rpc.error_details_pb2 as error_details_pb2
import grpc
import psutil
import pytest
from grpc_status import rpc_status
from prometheus_client.parser import text_string_to_metric_families

from earmark.store.audit import audit

# The clock tests inject, from the test doubles Earmark ships to workers' authors.
from earmark.testing import FakeClock as FakeClock
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc


def reason_of(error: grpc.RpcError) -> tuple[str, dict[str, str]]:
    """The ErrorInfo reason and metadata of a failed call, read with grpcio-status as any
    gRPC client would (the SDK's own reader is what is under test elsewhere)."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, f"no status details on {error}"
    infos = []
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            infos.append(info)
    assert 1 == len(infos), f"expected one ErrorInfo, got {infos}"
    assert "earmark" == infos[0].domain
    return infos[0].reason, dict(infos[0].metadata)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample on a sidecar's /metrics, keyed by name and sorted labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def assert_invariants(dsn: str) -> None:
    """held = sum of open holds = sum of ledger held deltas, used = sum of ledger charges,
    and nothing beyond the limit but what settles reported past their holds."""
    conn = await asyncpg.connect(dsn)
    try:
        problems = await audit(conn)
    finally:
        await conn.close()
    assert [] == problems


async def fetch_budget_row(dsn: str, budget_id: str) -> asyncpg.Record:
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow("SELECT * FROM budgets WHERE budget_id = $1", budget_id)
    finally:
        await conn.close()
    assert row is not None
    return row


async def charge_or_renew_error(
    budget: budget_pb2_grpc.BudgetStub, rpc: str, reservation_id: str
) -> grpc.aio.AioRpcError:
    """Sends a Charge of 1 or a Renew on reservation_id and returns the error it must fail with."""
    try:
        if rpc == "charge":
            await budget.Charge(
                pb.ChargeRequest(reservation_id=reservation_id, amount=1, idempotency_key="late")
            )
        else:
            await budget.Renew(pb.RenewRequest(reservation_id=reservation_id))
    except grpc.aio.AioRpcError as error:
        return error
    raise AssertionError(f"{rpc} on {reservation_id} succeeded")


@contextlib.asynccontextmanager
async def child(*argv: str, **options: Any) -> AsyncIterator[asyncio.subprocess.Process]:
    """A process started for a test (a worker, say), killed if it still runs when the
    block ends, also when the test fails."""
    process = await asyncio.create_subprocess_exec(*argv, **options)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


POLL_SECONDS = 0.05


async def eventually(
    check: Callable[[], Awaitable[bool]], *, within_seconds: float, what: str
) -> float:
    """Polls check until it holds; returns how long that took, or fails naming what."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while loop.time() - started < within_seconds:
        if await check():
            return loop.time() - started
        await asyncio.sleep(POLL_SECONDS)
    raise AssertionError(f"{what}: not within {within_seconds}s")


async def stop_by_repeating(
    process: asyncio.subprocess.Process, signum: int = signal.SIGTERM, *, within_seconds: float
) -> int:
    """Sends signum to process until it has exited, as a supervisor that repeats its stop
    does; returns its exit code."""

    async def gone() -> bool:
        if process.returncode is None:
            # os.kill, not process.send_signal: Popen.send_signal polls first, and that
            # waitpid can reap the child before asyncio's child watcher does, which then
            # reports returncode 255 ("Unknown child process pid"). A pid exited but not yet
            # reaped is a zombie, never reused, so the signal cannot reach another process.
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signum)
        return process.returncode is not None

    await eventually(gone, within_seconds=within_seconds, what="the process's exit")
    return await process.wait()


def eventually_sync(check: Callable[[], bool], *, within_seconds: float, what: str) -> float:
    """eventually() for code outside an event loop (a fixture, a thread)."""
    started = time.monotonic()
    while time.monotonic() - started < within_seconds:
        if check():
            return time.monotonic() - started
        time.sleep(POLL_SECONDS)
    raise AssertionError(f"{what}: not within {within_seconds}s")


def postmaster_pid(data_dir: Path) -> int:
    """The pid of the embedded PostgreSQL on data_dir, from its postmaster.pid."""
    return int((data_dir / "pgdata" / "postmaster.pid").read_text().split()[0])


def stop_leftover_postgres(data_dir: Path) -> None:
    """Stops an embedded PostgreSQL still running on data_dir (a test's sidecar was killed,
    or the database was stalled), so that no test leaves one behind."""
    if not (data_dir / "pgdata" / "postmaster.pid").exists():
        return
    pid = postmaster_pid(data_dir)
    if psutil.pid_exists(pid):
        os.kill(pid, signal.SIGCONT)
        psutil.Process(pid).terminate()


# Set by .ci/run: there a server binary the tests need is installed, and its absence is a
# failure, not a skip.
REQUIRE_SERVERS = "EARMARK_TEST_REQUIRE_SERVERS"


def binary_missing(name: str, package: str) -> str | None:
    """Why a test cannot run without the Debian package's binary name (None if it can);
    fails the test instead where .ci/run requires every server."""
    if shutil.which(name) is not None:
        return None
    why = f"{name}: .ci/run installs Debian's {package}"
    if os.environ.get(REQUIRE_SERVERS):
        pytest.fail(why)
    return why


# free_port hands out ports below the kernel's ephemeral range (32768-60999 by default),
# whose ports an outgoing connection of any test may take between the probe and the
# child's own bind (a LiteLLM proxy failed to start so, "address already in use"); each
# xdist worker its own slice of them, so that two workers never hand out the same one.
FREE_PORTS_FIRST = 16_000
FREE_PORTS_PER_WORKER = 1_000
FREE_PORTS_WORKERS_MAX = 16
_next_free_port: dict[int, int] = {}


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at this moment, from this worker's
    slice below the ephemeral range (any port the kernel picks, where that cannot be)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    first = FREE_PORTS_FIRST + index * FREE_PORTS_PER_WORKER
    if index < FREE_PORTS_WORKERS_MAX and first + FREE_PORTS_PER_WORKER <= _ephemeral_low():
        start = _next_free_port.get(index, 0)
        for step in range(FREE_PORTS_PER_WORKER):
            port = first + (start + step) % FREE_PORTS_PER_WORKER
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _next_free_port[index] = (port - first + 1) % FREE_PORTS_PER_WORKER
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def started(*calls: Awaitable[Any]) -> AsyncIterator[list[asyncio.Task[Any]]]:
    """calls as tasks, cancelled if any still runs when the block ends (a failed test)."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class HeldListings:
    """Stands in for operator.hold_rows, the scan's collaborator: it takes the real
    connection the listing was given and holds it, as a long scan would, until released;
    then it reads for real."""

    def __init__(self, real: Callable[..., Awaitable[Any]]) -> None:
        self.real = real
        self.holding = 0
        self.release = asyncio.Event()

    async def __call__(self, conn: Any, *args: Any) -> Any:
        self.holding += 1
        await self.release.wait()
        return await self.real(conn, *args)

    async def holding_exactly(self, count: int) -> None:
        async def check() -> bool:
            return count == self.holding

        await eventually(check, within_seconds=10, what=f"{count} listings holding connections")


@contextlib.asynccontextmanager
async def canned_budget(servicer: budget_pb2_grpc.BudgetServicer) -> AsyncIterator[str]:
    """A real gRPC server on 127.0.0.1 port 0 serving servicer as the Budget service (a
    canned sidecar whose answers a test chooses); yields its target, stops at the end."""
    server = grpc.aio.server()
    budget_pb2_grpc.add_BudgetServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)
