"""A database that stops taking writes under a running sidecar, as a primary does when a
failover or switchover demotes it: calls fail UNAVAILABLE (never INTERNAL), the
connections to it are dropped, and the sidecar admits again once writes are back."""

from __future__ import annotations

import uuid

import asyncpg
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from earmark.server import BUDGET_SERVICE
from earmark.v1 import budget_pb2 as pb
from tests.chaos.test_faults import NOT_SERVING, SERVING
from tests.conftest import TEST_DATABASE, Running
from tests.helpers import assert_invariants, eventually, reason_of


async def set_read_only(dsn: str, on: bool) -> None:
    """Makes every new session of the test database read-only (or not), and ends the
    sidecar's sessions so that its pool connects anew."""
    conn = await asyncpg.connect(dsn)
    try:
        # This session may itself have begun read-only: it may write all the same.
        await conn.execute("SET default_transaction_read_only = off")
        await conn.execute(
            f"ALTER DATABASE {TEST_DATABASE} SET default_transaction_read_only = "
            + ("on" if on else "off")
        )
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = $1 AND pid <> pg_backend_pid()",
            TEST_DATABASE,
        )
    finally:
        await conn.close()


async def test_a_read_only_database_is_unavailable_then_recovers(sidecar: Running) -> None:
    """Every Reserve against a database that takes no writes answers UNAVAILABLE with reason
    DATABASE_READ_ONLY and health turns NOT_SERVING; once writes are back, Reserves are
    admitted again and health is SERVING."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="ro", unit="t"))
    codes: list[grpc.StatusCode] = []

    async def reserve() -> pb.ReserveResponse | grpc.aio.AioRpcError:
        request = pb.ReserveRequest(budget_id="ro", amount=1, idempotency_key=uuid.uuid4().hex)
        try:
            return await sidecar.budget.Reserve(request, timeout=5)
        except grpc.aio.AioRpcError as error:
            codes.append(error.code())
            return error

    read_only_errors: list[grpc.aio.AioRpcError] = []

    async def refused_as_read_only() -> bool:
        answer = await reserve()
        if isinstance(answer, grpc.aio.AioRpcError) and "ReadOnly" in (answer.details() or ""):
            read_only_errors.append(answer)
        return bool(read_only_errors)

    async def admitted() -> bool:
        answer = await reserve()
        return isinstance(answer, pb.ReserveResponse) and answer.admitted

    health = health_pb2_grpc.HealthStub(sidecar.channel)

    async def budget_health_is(status: int) -> bool:
        reply = await health.Check(health_pb2.HealthCheckRequest(service=BUDGET_SERVICE))
        return status == reply.status

    await set_read_only(sidecar.dsn, True)
    try:
        await eventually(refused_as_read_only, within_seconds=30, what="a read-only refusal")
        await eventually(lambda: budget_health_is(NOT_SERVING), within_seconds=10,
                         what="health NOT_SERVING while the database takes no writes")  # fmt: skip
    finally:
        await set_read_only(sidecar.dsn, False)
    await eventually(lambda: budget_health_is(SERVING), within_seconds=10,
                     what="health SERVING once writes are back")  # fmt: skip
    await eventually(admitted, within_seconds=30, what="a Reserve admitted again")
    assert {grpc.StatusCode.UNAVAILABLE} == set(codes)
    assert grpc.StatusCode.UNAVAILABLE == read_only_errors[0].code()
    assert "DATABASE_READ_ONLY" == reason_of(read_only_errors[0])[0]
    await assert_invariants(sidecar.dsn)
