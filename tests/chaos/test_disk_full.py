"""A disk that fills under load: the embedded PostgreSQL's data dir on a tmpfs mounted for
the test, 30 workers, a file filling the disk until health turns NOT_SERVING, then freed.
No call is answered INTERNAL, health comes back by itself, the sweeper returns every hold
whose lease passed, and what callers were told holds."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import grpc
import psutil
import pytest

from earmark.spawn import SpawnedSidecar, spawn_sidecar
from earmark.store.audit import audit
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.chaos.load import (
    FAULT_CODES,
    Told,
    check_told,
    embedded_dsn,
    held_beyond_doubt,
    run_load,
)
from tests.chaos.test_faults import NOT_SERVING, SERVING, health_of
from tests.helpers import REQUIRE_SERVERS, eventually, postmaster_pid, stop_leftover_postgres

pytestmark = pytest.mark.slow

BUDGET = "hot"
# Room for the embedded PostgreSQL's files and some growth, as in the review that found
# the fault: small enough to fill in a moment.
TMPFS_SIZE = "160m"
FILL_CHUNK_BYTES = 1 << 20
EXPECTED_ERRORS = {
    ("UNAVAILABLE", "DATABASE_DISK_FULL"),
    ("FAILED_PRECONDITION", "HOLD_EXPIRED"),
    ("FAILED_PRECONDITION", "HOLD_IN_DOUBT"),
}
POSTGRES_STOP_SECONDS_MAX = 30.0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of TMPFS_SIZE mounted for the test, unmounted at its end (whatever
    PostgreSQL runs on it is stopped first). CI runs as root; elsewhere the test is
    skipped only when mount is not permitted, and never where .ci/run requires it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        why = f"mount -t tmpfs is not permitted here: {mounted.stderr.strip()}"
        if os.environ.get(REQUIRE_SERVERS):
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield disk
    finally:
        # A PostgreSQL left on the disk (the test failed before its sidecar stopped it) is
        # stopped and waited for, so that the disk is not busy when it is unmounted.
        pid = postmaster_pid(disk) if (disk / "pgdata" / "postmaster.pid").exists() else None
        stop_leftover_postgres(disk)
        if pid is not None:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.wait_procs([psutil.Process(pid)], timeout=POSTGRES_STOP_SECONDS_MAX)
        if subprocess.run(["umount", str(disk)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Writes one file until the disk has no byte left; returns it."""
    ballast = disk / "ballast"
    chunk = b"\0" * FILL_CHUNK_BYTES
    with ballast.open("wb", buffering=0) as sink:
        while True:
            try:
                sink.write(chunk)
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                break
    # What is left is smaller than a chunk: take it too, a page at a time.
    with ballast.open("ab", buffering=0) as sink, contextlib.suppress(OSError):
        while True:
            sink.write(b"\0" * 4096)
    return ballast


def events(sidecar: SpawnedSidecar) -> list[dict[str, object]]:
    return [json.loads(line) for line in sidecar.log.read_text().splitlines() if line]


async def test_disk_full_under_load(small_disk: Path, tmp_path: Path) -> None:
    """Fill the database's disk with 30 workers in flight: calls fail UNAVAILABLE
    (DATABASE_DISK_FULL), never INTERNAL; health turns NOT_SERVING and back once the space
    is freed; every hold whose lease passed is returned; every acknowledged Reserve and
    Settle is in the database; the audit is clean."""
    sidecar = spawn_sidecar(
        small_disk, "--sweep-interval-seconds", "0.2", "--shutdown-grace-seconds", "2",
        log=tmp_path / "sidecar.log",
    )  # fmt: skip
    told = Told()
    stop = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(sidecar.admin) as channel:
            await budget_pb2_grpc.AdminStub(channel).PutBudget(
                pb.PutBudgetRequest(budget_id=BUDGET, unit="t"), timeout=10
            )
        load = asyncio.create_task(run_load(sidecar.target, BUDGET, told, stop, workers=30))

        async def admitting() -> bool:
            return len(told.reserved) >= 200

        await eventually(admitting, within_seconds=30, what="the load admits holds")
        ballast = await asyncio.to_thread(fill, small_disk)
        try:

            async def not_serving() -> bool:
                return NOT_SERVING == await health_of(sidecar, "earmark.v1.Budget")

            await eventually(not_serving, within_seconds=30, what="NOT_SERVING on a full disk")

            async def sweeper_failed() -> bool:
                return any(
                    e.get("event") == "background_failed" and e.get("loop") == "sweeper"
                    for e in events(sidecar)
                )

            # The disk stays full until holds' leases passed and the sweeper failed to
            # return them: it must go on, and return them once the space is back.
            await eventually(sweeper_failed, within_seconds=30, what="the sweeper fails")
        finally:
            ballast.unlink()

        async def serving() -> bool:
            return SERVING == await health_of(sidecar, "earmark.v1.Budget")

        await eventually(serving, within_seconds=30, what="SERVING once the space is back")
        admitted_before = len(told.reserved)

        async def admitting_again() -> bool:
            return len(told.reserved) >= admitted_before + 100

        await eventually(admitting_again, within_seconds=30, what="admitting again")
        stop.set()
        await asyncio.wait_for(load, 30)
        dsn = embedded_dsn(small_disk)

        async def nothing_held() -> bool:
            return 0 == await held_beyond_doubt(dsn, BUDGET)

        await eventually(nothing_held, within_seconds=20, what="the sweeper returns every hold")
        assert [] == await check_told(dsn, told)
        conn = await asyncpg.connect(dsn)
        try:
            assert [] == await audit(conn)
        finally:
            await conn.close()
        assert set(told.codes) <= FAULT_CODES, told.codes
        assert grpc.StatusCode.UNAVAILABLE in told.codes
        seen = events(sidecar)
        # What the sidecar answered, by code and reason: the full disk, and holds the
        # sweeper closed meanwhile; nothing refused as the request's own fault, no bug.
        answered = {(e["code"], e["reason"]) for e in seen if e.get("event") == "rpc_error"}
        assert answered <= EXPECTED_ERRORS, answered
        assert ("UNAVAILABLE", "DATABASE_DISK_FULL") in answered
        faults = {e["reason"] for e in seen if e.get("event") == "database_cannot_write"}
        assert {"DATABASE_DISK_FULL"} == faults
        assert any(e.get("event") == "database_writes_again" for e in seen)
        assert not [e for e in seen if e.get("event") in ("rpc_bug", "operation_failed")]
    finally:
        stop.set()
        sidecar.stop()
