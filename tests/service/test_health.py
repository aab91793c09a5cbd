"""Health follows the database: NOT_SERVING while it is unreachable, SERVING when it returns."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from earmark.server import Sidecar
from earmark.store.embedded import EmbeddedPostgres
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.conftest import sidecar_settings
from tests.helpers import assert_invariants, eventually

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
STATUS_WAIT_SECONDS = 15.0


async def wait_for_status(health: health_pb2_grpc.HealthStub, service: str, status: int) -> None:
    """Polls Check until it reports status; the sidecar probes its database every second."""

    async def reports() -> bool:
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
        return bool(reply.status == status)

    await eventually(
        reports, within_seconds=STATUS_WAIT_SECONDS, what=f"health of {service!r} is {status}"
    )


async def test_database_outage_flips_health_and_refuses(tmp_path: Path, socket_dir: Path) -> None:
    """With its database stopped the sidecar reports its services NOT_SERVING (the server
    itself stays SERVING) and answers UNAVAILABLE, admitting nothing; once the database is
    back it reports SERVING and admits again."""
    pg = EmbeddedPostgres(tmp_path)
    pg.start()
    side = Sidecar(sidecar_settings(pg.uri(), socket_dir))
    try:
        await side.start()
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{side.port}") as channel,
            grpc.aio.insecure_channel(side.admin_address) as admin_channel,
        ):
            health = health_pb2_grpc.HealthStub(channel)
            budget = budget_pb2_grpc.BudgetStub(channel)
            admin = budget_pb2_grpc.AdminStub(admin_channel)
            await wait_for_status(health, "earmark.v1.Budget", SERVING)
            await admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="t"))

            pg.stop()
            await wait_for_status(health, "earmark.v1.Budget", NOT_SERVING)
            await wait_for_status(health, "earmark.v1.Admin", NOT_SERVING)
            # The process is alive: liveness (the server as a whole) stays SERVING.
            await wait_for_status(health, "", SERVING)
            for key in ("k1", "k2"):
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await budget.Reserve(
                        pb.ReserveRequest(budget_id="b", amount=10, idempotency_key=key)
                    )
                assert grpc.StatusCode.UNAVAILABLE == caught.value.code()

            pg.start()
            await wait_for_status(health, "earmark.v1.Budget", SERVING)
            reply = await budget.Reserve(
                pb.ReserveRequest(budget_id="b", amount=10, idempotency_key="k3")
            )
            assert reply.admitted
            state = await admin.GetBudget(pb.GetBudgetRequest(budget_id="b"))
            assert (10, 1) == (state.held, state.open_reservations)
        await assert_invariants(pg.uri())
    finally:
        await side.stop()
        pg.stop()
