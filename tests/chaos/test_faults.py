"""Faults under load with real processes and signals: the sidecar killed and restarted,
its embedded PostgreSQL killed, and stalled. Each case is bounded in time, stops all it
started, and ends on what callers were told and on the invariant audit."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from earmark.spawn import SpawnedSidecar, spawn_sidecar
from earmark.store.audit import audit
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.chaos.load import (
    FAULT_CODES,
    Told,
    acknowledged,
    check_told,
    embedded_dsn,
    held_beyond_doubt,
    run_load,
)
from tests.helpers import eventually, postmaster_pid, stop_leftover_postgres

pytestmark = pytest.mark.slow

BUDGET = "hot"
SIDECAR_ARGS = ("--sweep-interval-seconds", "0.2", "--shutdown-grace-seconds", "2")
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """The sidecars' data dir; whatever PostgreSQL is left on it at the end is stopped."""
    yield tmp_path
    stop_leftover_postgres(tmp_path)


def spawn(data_dir: Path) -> SpawnedSidecar:
    return spawn_sidecar(data_dir, *SIDECAR_ARGS)


async def put_budget(sidecar: SpawnedSidecar) -> None:
    async with grpc.aio.insecure_channel(sidecar.admin) as channel:
        await budget_pb2_grpc.AdminStub(channel).PutBudget(
            pb.PutBudgetRequest(budget_id=BUDGET, unit="t"), timeout=10
        )


async def health_of(sidecar: SpawnedSidecar, service: str) -> int:
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=1
            )
        except grpc.aio.AioRpcError:
            return -1
    return int(reply.status)


async def settle_and_audit(dsn: str, told: Told) -> None:
    """The end of every case: what callers were told holds, the sweeper returns every
    undispatched hold (a charged one whose worker died stays held, in doubt), and the audit
    is clean."""
    assert [] == await check_told(dsn, told)

    async def nothing_held() -> bool:
        return 0 == await held_beyond_doubt(dsn, BUDGET)

    await eventually(nothing_held, within_seconds=20, what="the sweeper returns every hold")
    conn = await asyncpg.connect(dsn)
    try:
        assert [] == await audit(conn)
    finally:
        await conn.close()
    assert set(told.codes) <= FAULT_CODES, told.codes


async def load_for(
    target: str, told: Told, reserves: int
) -> tuple[asyncio.Event, asyncio.Task[None]]:
    """Starts the load and returns once it has had `reserves` Reserves acknowledged."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_load(target, BUDGET, told, stop))
    await acknowledged(told, reserves, "the load under way")
    return stop, task


async def test_sidecar_killed_three_times_under_load(data_dir: Path) -> None:
    """SIGKILL the sidecar with 50 workers in flight, three times, restarting it each time:
    every acknowledged Reserve exists once, every acknowledged Settle is recorded, the
    sweeper returns what the dead sidecars held, and a clean stop leaves no PostgreSQL."""
    told = Told()
    for round_ in range(3):
        sidecar = spawn(data_dir)
        try:
            if round_ == 0:
                await put_budget(sidecar)
            stop, load = await load_for(sidecar.target, told, 150)
            sidecar.process.kill()
            sidecar.process.wait(timeout=30)
            stop.set()
            await asyncio.wait_for(load, 30)
        finally:
            if sidecar.process.poll() is None:
                sidecar.process.kill()
                sidecar.process.wait(timeout=30)
    final = spawn(data_dir)
    try:
        await settle_and_audit(embedded_dsn(data_dir), told)
        pg = postmaster_pid(data_dir)
    finally:
        assert 0 == final.stop()
    assert len(told.reserved) > 100
    assert not psutil.pid_exists(pg) or psutil.Process(pg).status() == psutil.STATUS_ZOMBIE


async def test_embedded_postgres_killed_under_load(data_dir: Path) -> None:
    """SIGKILL the embedded PostgreSQL under load: the sidecar starts it again by itself,
    counts the restart, returns to SERVING, and nothing acknowledged is lost."""
    sidecar = spawn(data_dir)
    told = Told()
    try:
        await put_budget(sidecar)
        stop, load = await load_for(sidecar.target, told, 100)
        os.kill(postmaster_pid(data_dir), signal.SIGKILL)

        async def not_serving() -> bool:
            return NOT_SERVING == await health_of(sidecar, "earmark.v1.Budget")

        async def serving_again() -> bool:
            return SERVING == await health_of(sidecar, "earmark.v1.Budget")

        # A deadline, not a wait: on a loaded machine the health loop notices later.
        await eventually(not_serving, within_seconds=15, what="NOT_SERVING after the kill")
        await eventually(serving_again, within_seconds=30, what="SERVING after the restart")
        assert SERVING == await health_of(sidecar, "")
        await acknowledged(told, 100, "Reserves acknowledged after the restart")
        stop.set()
        await asyncio.wait_for(load, 30)
        log = sidecar.log.read_text()
        assert '"embedded_database_restart"' in log
        await settle_and_audit(embedded_dsn(data_dir), told)
    finally:
        sidecar.stop()


async def test_embedded_postgres_stalled_under_load(data_dir: Path) -> None:
    """SIGSTOP the embedded PostgreSQL for 5 s under load: health turns NOT_SERVING within
    about 3 s and SERVING within about 3 s of SIGCONT; nothing acknowledged is lost."""
    sidecar = spawn(data_dir)
    told = Told()
    try:
        await put_budget(sidecar)
        stop, load = await load_for(sidecar.target, told, 100)
        pid = postmaster_pid(data_dir)
        stalled = [psutil.Process(pid), *psutil.Process(pid).children()]
        for process in stalled:
            process.send_signal(signal.SIGSTOP)
        try:

            async def not_serving() -> bool:
                return NOT_SERVING == await health_of(sidecar, "earmark.v1.Budget")

            noticed = await eventually(not_serving, within_seconds=4, what="NOT_SERVING")
            await asyncio.sleep(max(0.0, 5.0 - noticed))
        finally:
            for process in stalled:
                process.send_signal(signal.SIGCONT)

        async def serving() -> bool:
            return SERVING == await health_of(sidecar, "earmark.v1.Budget")

        await eventually(serving, within_seconds=4, what="SERVING after SIGCONT")
        stop.set()
        await asyncio.wait_for(load, 30)
        assert pid == postmaster_pid(data_dir), "a stalled database must not be restarted"
        await settle_and_audit(embedded_dsn(data_dir), told)
    finally:
        sidecar.stop()
