"""Bad input gets a clear status naming the field, never INTERNAL, and changes nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from earmark import limits
from earmark.service.edge import EdgeInterceptor, StreamSlots
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import reason_of, scrape

BUDGET = "acme/tokens"
MISSING_UUID = "00000000-0000-4000-8000-000000000000"


def reserve(**fields: Any) -> tuple[str, pb.ReserveRequest]:
    base: dict[str, Any] = {"budget_id": BUDGET, "amount": 10, "idempotency_key": "k"}
    base.update(fields)
    return "Reserve", pb.ReserveRequest(**base)


INVALID: list[tuple[str, tuple[str, Any]]] = [
    ("budget_id", reserve(budget_id="")),
    ("budget_id", reserve(budget_id="x" * 129)),
    ("budget_id", reserve(budget_id="has space")),
    ("amount", reserve(amount=0)),
    ("amount", reserve(amount=-5)),
    ("amount", reserve(amount=10**15 + 1)),
    ("idempotency_key", reserve(idempotency_key="")),
    ("idempotency_key", reserve(idempotency_key="k" * 129)),
    ("lease", reserve(lease=Duration(seconds=0))),
    ("lease", reserve(lease=Duration(seconds=-3))),
    ("lease", reserve(lease=Duration(seconds=10**6))),
    ("labels", reserve(labels={f"k{i}": "v" for i in range(17)})),
    ("labels", reserve(labels={"bad key": "v"})),
    ("labels", reserve(labels={"k": "v" * 257})),
    ("labels", reserve(labels={"k": "nul\x00here"})),
    ("labels", reserve(labels={"key\n": "v"})),
    ("budget_id", reserve(budget_id="acme/tokens\n")),
    ("idempotency_key", reserve(idempotency_key="k\n")),
    ("lease", reserve(lease=Duration(seconds=5, nanos=1_000_000_000))),
    ("lease", reserve(lease=Duration(seconds=5, nanos=-1))),
    ("lease", reserve(lease=Duration(seconds=10**12))),
    ("reservation_id", ("Charge", pb.ChargeRequest(amount=1, idempotency_key="k"))),
    (
        "reservation_id",
        ("Charge", pb.ChargeRequest(reservation_id="nope", amount=1, idempotency_key="k")),
    ),
    (
        "amount",
        ("Charge", pb.ChargeRequest(reservation_id=MISSING_UUID, amount=0, idempotency_key="k")),
    ),
    ("idempotency_key", ("Charge", pb.ChargeRequest(reservation_id=MISSING_UUID, amount=1))),
    ("reservation_id", ("Renew", pb.RenewRequest(reservation_id="12345"))),
    (
        "lease",
        ("Renew", pb.RenewRequest(reservation_id=MISSING_UUID, lease=Duration(seconds=10**6))),
    ),
    ("reservation_id", ("Settle", pb.SettleRequest(reservation_id="x" * 200))),
    ("used", ("Settle", pb.SettleRequest(reservation_id=MISSING_UUID, used=-1))),
    ("outcome", ("Settle", pb.SettleRequest(reservation_id=MISSING_UUID, outcome=99))),  # type: ignore[arg-type]
    ("budget_id", ("PutBudget", pb.PutBudgetRequest(budget_id="", unit="tokens"))),
    ("limit", ("PutBudget", pb.PutBudgetRequest(budget_id=BUDGET, limit=-1, unit="tokens"))),
    ("unit", ("PutBudget", pb.PutBudgetRequest(budget_id=BUDGET, unit="Tokens!"))),
    ("unit", ("PutBudget", pb.PutBudgetRequest(budget_id=BUDGET, unit="tokens\n"))),
    ("unit", ("PutBudget", pb.PutBudgetRequest(budget_id="brand-new"))),
    ("budget_id", ("GetBudget", pb.GetBudgetRequest(budget_id=""))),
]

NOT_FOUND: list[tuple[str, Any]] = [
    ("Reserve", pb.ReserveRequest(budget_id="nobody", amount=1, idempotency_key="k")),
    ("Charge", pb.ChargeRequest(reservation_id=MISSING_UUID, amount=1, idempotency_key="k")),
    ("Renew", pb.RenewRequest(reservation_id=MISSING_UUID)),
    ("Settle", pb.SettleRequest(reservation_id=MISSING_UUID, used=1)),
    ("GetBudget", pb.GetBudgetRequest(budget_id="nobody")),
]


def method(s: Running, name: str) -> Callable[[Any], Awaitable[Any]]:
    stub = s.admin if name in {"PutBudget", "GetBudget"} else s.budget
    return getattr(stub, name)


async def snapshot(dsn: str) -> list[Any]:
    conn = await asyncpg.connect(dsn)
    try:
        return [
            await conn.fetch(f"SELECT * FROM {table} ORDER BY 1")
            for table in ("budgets", "reservations", "charges", "ledger")
        ]
    finally:
        await conn.close()


@pytest.fixture
async def seeded(sidecar: Running) -> Running:
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id=BUDGET, limit=1000, unit="tokens"))
    await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id=BUDGET, amount=100, idempotency_key="a")
    )
    return sidecar


@pytest.mark.parametrize(("field", "call"), INVALID, ids=[f"{c[0]}-{f}" for f, c in INVALID])
async def test_invalid_argument_names_the_field(
    seeded: Running, field: str, call: tuple[str, Any]
) -> None:
    """A malformed field is INVALID_ARGUMENT, the message starts with its name, nothing changes."""
    name, request = call
    before = await snapshot(seeded.dsn)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await method(seeded, name)(request)
    assert grpc.StatusCode.INVALID_ARGUMENT == caught.value.code()
    assert (caught.value.details() or "").startswith(f"{field}:")
    assert ("INVALID_FIELD", {"field": field}) == reason_of(caught.value)
    assert before == await snapshot(seeded.dsn)


@pytest.mark.parametrize(("name", "request_"), NOT_FOUND, ids=[n for n, _ in NOT_FOUND])
async def test_unknown_budget_or_reservation_is_not_found(
    seeded: Running, name: str, request_: Any
) -> None:
    """An unknown budget or reservation is NOT_FOUND and changes nothing."""
    before = await snapshot(seeded.dsn)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await method(seeded, name)(request_)
    assert grpc.StatusCode.NOT_FOUND == caught.value.code()
    assert reason_of(caught.value)[0] in {"BUDGET_NOT_FOUND", "RESERVATION_NOT_FOUND"}
    assert before == await snapshot(seeded.dsn)


async def test_unit_cannot_change_under_use(seeded: Running) -> None:
    """Changing the unit of a budget with holds is FAILED_PRECONDITION."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await seeded.admin.PutBudget(pb.PutBudgetRequest(budget_id=BUDGET, unit="usd_micros"))
    assert grpc.StatusCode.FAILED_PRECONDITION == caught.value.code()


@pytest.mark.parametrize("method_name", ["/earmark.v1.Budget/Reserve", "/earmark.v1.Budget/Settle"])
async def test_an_undecodable_body_is_invalid_argument(seeded: Running, method_name: str) -> None:
    """Bytes that are not the method's message answer INVALID_ARGUMENT naming the request,
    not UNKNOWN with a class name, and change nothing."""
    before = await snapshot(seeded.dsn)
    call = seeded.channel.unary_unary(
        method_name, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(b"\xff\xff\xff")
    assert grpc.StatusCode.INVALID_ARGUMENT == caught.value.code()
    assert f"request: the body is not a valid message for {method_name}" == (caught.value.details())
    assert ("INVALID_FIELD", {"field": "request"}) == reason_of(caught.value)
    assert before == await snapshot(seeded.dsn)


REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
LIST_SERVICES = reflection_pb2.ServerReflectionRequest(list_services="").SerializeToString()


def undecodable_count(s: Running) -> float:
    return scrape(s.sidecar.metrics_port).get(
        ("earmark_rpc_rejected_total", (("reason", "undecodable"),)), 0.0
    )


async def test_garbage_on_the_reflection_stream_is_invalid_argument(seeded: Running) -> None:
    """A message on the reflection stream that does not decode ends the call INVALID_ARGUMENT
    naming the request, as a unary body does, after the valid message before it was answered."""
    before = undecodable_count(seeded)
    stream = seeded.channel.stream_stream(
        REFLECTION, request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    call = stream(iter([LIST_SERVICES, b"\xff\xff\xff"]))
    first = reflection_pb2.ServerReflectionResponse.FromString(await call.read())
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call.read()
    assert first.HasField("list_services_response")
    assert grpc.StatusCode.INVALID_ARGUMENT == caught.value.code()
    assert f"request: the body is not a valid message for {REFLECTION}" == caught.value.details()
    assert ("INVALID_FIELD", {"field": "request"}) == reason_of(caught.value)
    assert before + 1 == undecodable_count(seeded)


async def test_garbage_on_a_client_stream_is_invalid_argument() -> None:
    """A client-streaming method behind the edge refuses a message that does not decode
    with INVALID_ARGUMENT naming the request, like every other kind of call."""
    rejected: list[str] = []
    edge = EdgeInterceptor(
        tokens=None, protected=(), streams=StreamSlots(), on_reject=rejected.append
    )

    async def count(requests: AsyncIterator[Any], context: Any) -> Any:
        return health_pb2.HealthCheckResponse(status=len([r async for r in requests]))

    method = grpc.stream_unary_rpc_method_handler(
        count,
        request_deserializer=health_pb2.HealthCheckRequest.FromString,
        response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
    )
    server = grpc.aio.server(interceptors=[edge])
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler("t.T", {"Count": method})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_unary(
                "/t.T/Count", request_serializer=lambda b: b, response_deserializer=lambda b: b
            )
            assert b"\x08\x01" == await call(iter([b""]))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(iter([b"", b"\xff\xff\xff"]))
    finally:
        await server.stop(None)
    assert grpc.StatusCode.INVALID_ARGUMENT == caught.value.code()
    assert ("INVALID_FIELD", {"field": "request"}) == reason_of(caught.value)
    assert ["undecodable"] == rejected


async def test_already_exists_names_no_other_amount(seeded: Running) -> None:
    """A key reused with another amount is ALREADY_EXISTS without the first amount."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await seeded.budget.Reserve(
            pb.ReserveRequest(budget_id=BUDGET, amount=7, idempotency_key="a")
        )
    assert grpc.StatusCode.ALREADY_EXISTS == caught.value.code()
    assert "100" not in (caught.value.details() or "")
    assert "KEY_REUSED" == reason_of(caught.value)[0]


async def test_units_are_bounded(sidecar: Running) -> None:
    """Past limits.units_max distinct units, a new unit is FAILED_PRECONDITION naming the
    field; a unit already in use is still accepted."""
    for i in range(limits.units_max):
        await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id=f"b{i}", unit=f"u{i}"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="one-more", unit="fresh"))
    assert grpc.StatusCode.FAILED_PRECONDITION == caught.value.code()
    assert (caught.value.details() or "").startswith("unit:")
    assert ("UNITS_FULL", {"field": "unit"}) == reason_of(caught.value)
    state = await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="one-more", unit="u0"))
    assert "u0" == state.unit
