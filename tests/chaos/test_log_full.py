"""A full disk under the log: the sidecar's stdout and stderr are a file on a tmpfs
mounted for the test, which is then filled while 20 workers reserve, charge and settle.
No call fails because a log line could not be written: lines are dropped and counted, the
sweeper goes on returning expired holds, and once space is back the log says where its gap
was and goes on."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from earmark.spawn import log_events, spawn_sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.chaos.load import Told, acknowledged, check_told, held, run_load
from tests.chaos.test_disk_full import fill, small_disk  # noqa: F401 (a fixture)
from tests.helpers import assert_invariants, eventually, scrape

pytestmark = pytest.mark.slow

BUDGET = "logged"
DROPPED = ("earmark_log_records_dropped_total", ())
ORPHANS = 5


def dropped(metrics_port: int) -> float:
    return scrape(metrics_port).get(DROPPED, 0.0)


async def test_a_full_disk_under_the_log_fails_no_call(
    small_disk: Path,  # noqa: F811
    tmp_path: Path,
    dsn: str,
) -> None:
    """With the log's disk full, 20 workers' calls are all answered as if it were not, the
    drop counter moves, holds whose lease passes are returned by the sweeper, and after
    space returns the log goes on with one line saying how many lines were dropped."""
    log = small_disk / "earmark.log"
    sidecar = await asyncio.to_thread(
        spawn_sidecar, tmp_path, "--database-url", dsn, "--sweep-interval-seconds", "0.2",
        "--shutdown-grace-seconds", "2", log=log, stderr_to_log=True,
    )  # fmt: skip
    told = Told()
    stop = asyncio.Event()
    try:
        async with grpc.aio.insecure_channel(sidecar.admin) as admin_channel:
            await budget_pb2_grpc.AdminStub(admin_channel).PutBudget(
                pb.PutBudgetRequest(budget_id=BUDGET, unit="t"), timeout=10
            )
        load = asyncio.create_task(run_load(sidecar.target, BUDGET, told, stop, workers=20))
        await acknowledged(told, 100, "the load admits holds")
        ballast = await asyncio.to_thread(fill, small_disk)
        try:

            async def dropping() -> bool:
                return dropped(sidecar.metrics_port) > 0

            await eventually(dropping, within_seconds=30, what="log lines counted as dropped")
            await acknowledged(told, 300, "the load goes on with the log's disk full")
            # Holds whose workers vanish: their lease passes while the log cannot be
            # written, and the sweeper must return them all the same.
            async with grpc.aio.insecure_channel(sidecar.target) as channel:
                budget = budget_pb2_grpc.BudgetStub(channel)
                for _ in range(ORPHANS):
                    orphan = await budget.Reserve(
                        pb.ReserveRequest(
                            budget_id=BUDGET, amount=10, idempotency_key=uuid.uuid4().hex,
                            lease=Duration(seconds=1),
                        ),
                        timeout=10,
                    )  # fmt: skip
                    assert orphan.admitted
            stop.set()
            await asyncio.wait_for(load, 30)

            async def nothing_held() -> bool:
                return 0 == await held(dsn, BUDGET)

            await eventually(nothing_held, within_seconds=20, what="expired holds returned")
            lost = dropped(sidecar.metrics_port)
        finally:
            await asyncio.to_thread(ballast.unlink)

        def written_again() -> bool:
            return "earmark: the log is written again" in log.read_text(errors="replace")

        async def reserve_one() -> None:
            async with grpc.aio.insecure_channel(sidecar.target) as channel:
                await budget_pb2_grpc.BudgetStub(channel).Reserve(
                    pb.ReserveRequest(budget_id=BUDGET, amount=1, idempotency_key="after"),
                    timeout=10,
                )

        async def says_so() -> bool:
            # Any call logs a line; the first that is written says where the gap was.
            await reserve_one()
            return written_again()

        await eventually(says_so, within_seconds=20, what="the log written again")
        await reserve_one()
        assert [] == await check_told(dsn, told)
        await assert_invariants(dsn)
        assert ({}, True) == (told.codes, lost >= 1)
        events = log_events(log)
        assert not [e for e in events if e.get("event") in ("rpc_bug", "background_failed")]
        # After the gap every line is whole JSON again, a torn one ended on its own line.
        lines = log.read_bytes().splitlines()
        notice = next(i for i, line in enumerate(lines) if b"written again" in line)
        after = [json.loads(line) for line in lines[notice + 1 :] if line]
        assert "reserve" in {event["event"] for event in after}
    finally:
        stop.set()
        await asyncio.to_thread(sidecar.stop)
