"""`earmark serve` as a user runs it: a real process, the embedded database, grpcurl, SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import earmark
from earmark.spawn import SpawnedSidecar, spawn_sidecar
from earmark.store.audit import audit
from earmark.store.embedded import EmbeddedPostgres
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.helpers import eventually_sync, postmaster_pid, stop_leftover_postgres

GRPCURL = shutil.which("grpcurl", path=str(Path(sys.executable).parent)) or shutil.which("grpcurl")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[SpawnedSidecar]:
    """`python -m earmark serve` with an embedded database in tmp_path, stopped at the end;
    its stop does not wait for the holds a test leaves open (test_shutdown_order does)."""
    sidecar = spawn_sidecar(tmp_path, "--drain-holds-seconds", "0")
    try:
        yield sidecar
    finally:
        if sidecar.process.poll() is None:
            sidecar.process.kill()
            sidecar.process.wait(timeout=30)
        stop_leftover_postgres(tmp_path)


def grpcurl_list(*address: str) -> set[str]:
    assert GRPCURL is not None
    return set(
        subprocess.run(
            [GRPCURL, "-plaintext", *address, "list"],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.split()
    )


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl is installed by `make venv`")
def test_grpcurl_lists_each_listeners_services(served: SpawnedSidecar) -> None:
    """Reflection shows Budget on the workers' port and Admin on the admin socket only."""
    workers = grpcurl_list(served.target)
    admin = grpcurl_list("-unix", served.admin.removeprefix("unix:"))
    assert {"earmark.v1.Budget", "grpc.health.v1.Health"} <= workers
    assert "earmark.v1.Admin" not in workers
    assert {"earmark.v1.Admin", "grpc.health.v1.Health"} <= admin
    assert "earmark.v1.Budget" not in admin
    assert 0o600 == Path(served.admin.removeprefix("unix:")).stat().st_mode & 0o777


def test_serve_runs_on_uvloop(served: SpawnedSidecar) -> None:
    """`earmark serve` runs on uvloop, which the server extra installs, and says so."""
    events = [json.loads(line) for line in served.log.read_text().splitlines()]
    (serving,) = [e for e in events if e.get("event") == "serving"]
    assert "uvloop" == serving["event_loop"]


def test_sigterm_drains_then_stops_the_database(served: SpawnedSidecar) -> None:
    """SIGTERM during a burst of Reserves: no call answers INTERNAL, the process exits 0, its
    embedded PostgreSQL stops, and reopened, the database holds exactly the admitted calls."""
    pg_pid = postmaster_pid(served.data_dir)
    assert psutil.pid_exists(pg_pid)

    async def burst() -> list[grpc.StatusCode]:
        async with (
            grpc.aio.insecure_channel(served.target) as channel,
            grpc.aio.insecure_channel(served.admin) as admin_channel,
        ):
            admin = budget_pb2_grpc.AdminStub(admin_channel)
            budget = budget_pb2_grpc.BudgetStub(channel)
            await admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=10**9, unit="t"))

            async def one() -> grpc.StatusCode:
                try:
                    reply = await budget.Reserve(
                        pb.ReserveRequest(
                            budget_id="b", amount=1, idempotency_key=uuid.uuid4().hex
                        ),
                        timeout=30,
                    )
                except grpc.aio.AioRpcError as error:
                    return error.code()
                assert reply.admitted
                first_admitted.set()
                return grpc.StatusCode.OK

            # SIGTERM goes once the burst is being served, not after a fixed delay: on a
            # loaded machine the first call can take longer than any delay chosen here.
            first_admitted = asyncio.Event()
            calls = [asyncio.create_task(one()) for _ in range(200)]
            await asyncio.wait_for(first_admitted.wait(), timeout=30)
            served.process.send_signal(signal.SIGTERM)
            return list(await asyncio.gather(*calls))

    codes = asyncio.run(burst())
    # Calls that reach a draining sidecar are UNAVAILABLE; a call still on the wire when the
    # server stops is CANCELLED by gRPC (it never reached Earmark). Never INTERNAL.
    assert set(codes) <= {
        grpc.StatusCode.OK,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
    }
    assert grpc.StatusCode.OK in codes
    assert 0 == served.process.wait(timeout=60)

    def postgres_gone() -> bool:
        return not psutil.pid_exists(pg_pid) or psutil.Process(pg_pid).status() == "zombie"

    eventually_sync(postgres_gone, within_seconds=10, what="the embedded PostgreSQL stopped")
    # Every OK holds a unit; a call cut off on the wire may have committed too, never more.
    held = asyncio.run(held_after_restart(served.data_dir))
    ok, cancelled = codes.count(grpc.StatusCode.OK), codes.count(grpc.StatusCode.CANCELLED)
    assert ok <= held <= ok + cancelled


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_repeated_until_the_exit_still_exits_0(
    served: SpawnedSidecar, signum: signal.Signals
) -> None:
    """A supervisor that repeats SIGTERM, or a user who presses Ctrl-C again, until the
    process is gone: the stop ends as it does on one signal, with exit 0."""

    def gone() -> bool:
        if served.process.poll() is None:
            served.process.send_signal(signum)
        return served.process.poll() is not None

    eventually_sync(gone, within_seconds=60, what="the sidecar's exit")
    assert 0 == served.process.wait(timeout=60)


async def held_after_restart(data_dir: Path) -> int:
    """Reopens the stopped sidecar's embedded database, audits it, returns what b holds."""
    pg = EmbeddedPostgres(data_dir)
    await asyncio.to_thread(pg.start)
    try:
        conn = await asyncpg.connect(pg.uri("earmark"))
        try:
            assert [] == await audit(conn)
            held = await conn.fetchval("SELECT held FROM budgets WHERE budget_id = 'b'")
        finally:
            await conn.close()
    finally:
        await asyncio.to_thread(pg.stop)
    return int(held)


def test_bad_setting_exits_with_its_name(tmp_path: Path) -> None:
    """A malformed setting stops the command at once with a message naming it."""
    result = subprocess.run(
        [sys.executable, "-m", "earmark", "serve", "--listen", "nowhere"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "EARMARK_DATA_DIR": str(tmp_path)},
    )
    assert 0 != result.returncode
    assert "listen" in result.stderr


def test_sigterm_flips_health_before_stopping(served: SpawnedSidecar) -> None:
    """A health Watch open during SIGTERM sees SERVING, then NOT_SERVING, before the stream ends."""

    async def watch() -> tuple[list[int], grpc.StatusCode]:
        statuses: list[int] = []
        ended = grpc.StatusCode.OK
        async with grpc.aio.insecure_channel(served.target) as channel:
            stream = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service="earmark.v1.Budget"), timeout=60
            )
            try:
                async for reply in stream:
                    statuses.append(reply.status)
                    if len(statuses) == 1:
                        served.process.send_signal(signal.SIGTERM)
            except grpc.aio.AioRpcError as error:
                ended = error.code()
        return statuses, ended

    statuses, ended = asyncio.run(watch())
    # The server cuts the stream when it stops.
    assert ended in {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED}
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    assert [serving, not_serving] == statuses[:2]
    assert 0 == served.process.wait(timeout=60)


@pytest.mark.parametrize("flag", ["--listen", "--metrics-listen"])
def test_a_port_in_use_is_one_line(flag: str, database_url: str, tmp_path: Path) -> None:
    """A port another process listens on stops `earmark serve` with one line naming the
    setting and the address, not a traceback, and exit status 1."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        listen = {"--listen": "127.0.0.1:0", "--metrics-listen": "127.0.0.1:0"}
        listen[flag] = f"127.0.0.1:{port}"
        result = subprocess.run(
            [sys.executable, "-m", "earmark", "serve", "--database-url", database_url,
             "--listen", listen["--listen"], "--metrics-listen", listen["--metrics-listen"],
             "--admin-listen", f"unix:{tmp_path / 'a.sock'}", "--data-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert (1, 1) == (result.returncode, len(lines)), result.stderr
    assert (
        f"{flag.removeprefix('--').replace('-', '_')}: cannot listen on 127.0.0.1:{port}"
        in lines[0]
    )


def test_version() -> None:
    """`earmark --version` prints the package's version."""
    result = subprocess.run(
        [sys.executable, "-m", "earmark", "--version"], capture_output=True, text=True, timeout=60
    )
    assert (0, f"earmark {earmark.__version__}\n") == (result.returncode, result.stdout)


def test_a_database_that_refuses_is_one_line(database_url: str, tmp_path: Path) -> None:
    """A database that refuses the sidecar's role stops `earmark serve` with one line naming
    the refusal, never the URL's password, and exit status 1."""
    secret = "sekrit-pw-0123456789"
    user, rest = database_url.split("@", 1)
    refused_url = f"postgresql://nobody:{secret}@{rest}"
    assert user.startswith("postgresql://")
    result = subprocess.run(
        [sys.executable, "-m", "earmark", "serve", "--database-url", refused_url,
         "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
         "--admin-listen", f"unix:{tmp_path / 'a.sock'}", "--data-dir", str(tmp_path),
         "--database-wait-seconds", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert (1, 1) == (result.returncode, len(lines)), result.stderr
    assert "InvalidAuthorizationSpecificationError" in lines[0]
    assert secret not in result.stderr + result.stdout
