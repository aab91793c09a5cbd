"""A worker and its sidecar as two processes, stopped as Kubernetes stops a pod: with a
native sidecar the worker gets SIGTERM first and the sidecar after it exits; without one,
both at once (here the sidecar first, the worst case). Either way the worker's call in
hand is charged and settled: nothing is lost."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from earmark.spawn import SpawnedSidecar, spawn_sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.helpers import assert_invariants, child, eventually, fetch_budget_row

WORKER = Path(__file__).with_name("stopping_worker.py")
ROOT = Path(__file__).resolve().parents[2]
# How long the worker's call in hand runs on after its SIGTERM: five times the sidecar's
# quiet period (limits.drain_quiet_seconds), so only the drain of open holds answers it.
CALL_SECONDS = "1.0"


async def health(sidecar: SpawnedSidecar) -> int:
    async with grpc.aio.insecure_channel(sidecar.target) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service="earmark.v1.Budget"), timeout=1
            )
        except grpc.aio.AioRpcError:
            return -1
    return int(reply.status)


@pytest.mark.parametrize("order", ["worker first (native sidecar)", "sidecar first"])
async def test_a_stopping_pod_loses_no_usage(order: str, dsn: str, tmp_path: Path) -> None:
    """The worker's hold is charged 100, then on SIGTERM 300 more and settled at 400: the
    budget shows used 400 and nothing held, in both orders, and both processes exit 0."""
    sidecar = spawn_sidecar(
        tmp_path, "--database-url", dsn,
        "--shutdown-grace-seconds", "20", "--drain-holds-seconds", "15",
    )  # fmt: skip
    try:
        async with grpc.aio.insecure_channel(sidecar.admin) as channel:
            await budget_pb2_grpc.AdminStub(channel).PutBudget(
                pb.PutBudgetRequest(budget_id="pod", limit=10_000, unit="t"), timeout=10
            )
        async with child(
            sys.executable, str(WORKER), sidecar.target, "pod", CALL_SECONDS,
            stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        ) as worker:  # fmt: skip
            assert worker.stdout is not None
            assert (await asyncio.wait_for(worker.stdout.readline(), timeout=60)).strip()
            if order == "sidecar first":
                sidecar.process.send_signal(signal.SIGTERM)

                async def draining() -> bool:
                    return await health(sidecar) != health_pb2.HealthCheckResponse.SERVING

                await eventually(draining, within_seconds=10, what="the sidecar draining")
            worker.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(worker.communicate(), timeout=60)
            assert (0, b"settled\n") == (worker.returncode, out)
        assert 0 == await asyncio.to_thread(sidecar.stop)
    finally:
        sidecar.stop()
    row = await fetch_budget_row(dsn, "pod")
    assert (400, 0, 0) == (row["used"], row["held"], row["open_reservations"])
    await assert_invariants(dsn)
