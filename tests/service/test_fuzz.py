"""Fuzzing every RPC of a live sidecar process, the health and reflection streams among
them: Hypothesis strategies over the request messages, and raw bytes. No answer is INTERNAL
or UNKNOWN, a rejected request changes nothing, and the audit is clean at the end."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from earmark.core import updates
from earmark.spawn import SpawnedSidecar, spawn_sidecar
from earmark.store.audit import audit
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.chaos.load import embedded_dsn
from tests.helpers import stop_leftover_postgres

pytestmark = pytest.mark.slow

MESSAGE_EXAMPLES = 500
RAW_EXAMPLES = 200
# Health and reflection: calls of each kind, and at most this many messages on one stream.
STREAM_EXAMPLES = 150
STREAM_MESSAGES_MAX = 4
EXPECTED = {
    grpc.StatusCode.OK,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION,
}
BUDGETS = ("fz/a", "fz/b", "fz/usd")
ADMIN_METHODS = (
    "PutBudget", "GetBudget", "PutPrice", "ListPrices", "ListCycles", "RefreshLimits",
    "ListBudgets", "UpdateBudget",
)  # fmt: skip
PROVIDERS = ("openai", "anthropic")
MODELS = ("gpt-4o", "claude")


class Fuzzed:
    """A live sidecar, sync stubs on it, and the ids of holds it made."""

    def __init__(self, sidecar: SpawnedSidecar) -> None:
        self.sidecar = sidecar
        self.channel = grpc.insecure_channel(sidecar.target)
        self.admin_channel = grpc.insecure_channel(sidecar.admin)
        self.budget = budget_pb2_grpc.BudgetStub(self.channel)
        self.admin = budget_pb2_grpc.AdminStub(self.admin_channel)
        self.dsn = embedded_dsn(sidecar.data_dir)
        self.reservations: list[str] = []
        self.calls = 0
        # One connection on a loop of its own for every snapshot of the run: a connection
        # per snapshot cost more than the call it checks.
        self._loop = asyncio.new_event_loop()
        self._conn: asyncpg.Connection[Any] | None = None

    def snapshot(self) -> list[Any]:
        """What the database holds now (read_snapshot)."""
        if self._conn is None:
            self._conn = self._loop.run_until_complete(asyncpg.connect(self.dsn))
        return self._loop.run_until_complete(read_snapshot(self._conn))

    def close(self) -> None:
        """Closes the channels and the snapshots' connection and loop."""
        self.channel.close()
        self.admin_channel.close()
        if self._conn is not None:
            self._loop.run_until_complete(self._conn.close())
        self._loop.close()


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    folder = tmp_path_factory.mktemp("fuzz")
    # Its stop does not wait for the holds the fuzzing leaves open.
    sidecar = spawn_sidecar(folder, "--drain-holds-seconds", "0")
    f = Fuzzed(sidecar)
    try:
        for budget_id in BUDGETS:
            unit = "usd_micros" if budget_id.endswith("usd") else "t"
            f.admin.PutBudget(pb.PutBudgetRequest(budget_id=budget_id, limit=10**6, unit=unit))
        f.admin.PutPrice(
            pb.PutPriceRequest(
                price=pb.Price(
                    provider="openai",
                    model="gpt-4o",
                    effective_from=Timestamp(seconds=0),
                    input_usd_micros_per_mtok=2_500_000,
                    output_usd_micros_per_mtok=10_000_000,
                )
            )
        )
        for i in range(4):
            reply = f.budget.Reserve(
                pb.ReserveRequest(budget_id=BUDGETS[0], amount=100, idempotency_key=f"seed{i}")
            )
            f.reservations.append(reply.reservation_id)
        yield f
    finally:
        f.close()
        assert 0 == sidecar.stop()
        stop_leftover_postgres(folder)


async def read_snapshot(conn: asyncpg.Connection[Any]) -> list[Any]:
    """Every row a refused request must leave as it was (counted where only the count can
    change)."""
    return [
        await conn.fetch("SELECT * FROM budgets ORDER BY budget_id"),
        await conn.fetchval("SELECT count(*) FROM reservations"),
        await conn.fetchval("SELECT count(*) FROM ledger"),
        await conn.fetchval("SELECT count(*) FROM charges"),
        await conn.fetch("SELECT * FROM reservations ORDER BY reservation_id"),
        await conn.fetch("SELECT * FROM prices ORDER BY price_id"),
        await conn.fetch("SELECT * FROM tenant_samples ORDER BY unit, root, job, model"),
    ]


text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=140)
int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
int32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
# A valid lease is at least 10 minutes: a hold that lapsed during the run would be expired
# by the sweeper (or by the next call naming it) between a request and its check.
durations = st.builds(
    Duration,
    seconds=st.one_of(st.integers(600, 5000), st.integers(-5, 0), int64),
    nanos=st.one_of(st.integers(0, 999_999_999), int32),
)


def budget_ids() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(BUDGETS), text)


tokens = st.one_of(st.integers(-2, 20_000), int64)
providers = st.one_of(st.sampled_from(PROVIDERS), text)
models = st.one_of(st.sampled_from(MODELS), text)
timestamps = st.builds(
    Timestamp, seconds=st.one_of(st.integers(0, 2_000_000_000), int64), nanos=int32
)
shapes = st.builds(
    pb.UsageShape,
    provider=providers,
    model=models,
    input_tokens=tokens,
    max_output_tokens=tokens,
    cached_input_tokens=tokens,
    attempts=st.one_of(st.integers(-1, 5), int64),
)
usages = st.builds(
    pb.TokenUsage,
    input_tokens=tokens,
    output_tokens=tokens,
    cached_input_tokens=tokens,
    requests=st.one_of(st.integers(-1, 5), int64),
    provider=st.one_of(st.just(""), providers),
    model=st.one_of(st.just(""), models),
)
prices = st.builds(
    pb.Price,
    provider=providers,
    model=models,
    effective_from=st.one_of(st.none(), timestamps),
    effective_to=st.one_of(st.none(), timestamps),
    input_usd_micros_per_mtok=int64,
    output_usd_micros_per_mtok=int64,
    cached_input_usd_micros_per_mtok=int64,
    request_usd_micros=int64,
    source=text,
    version=st.one_of(st.just(0), int64),
    daily_from_minute=st.one_of(st.integers(0, 1500), int32),
    daily_to_minute=st.one_of(st.integers(0, 1500), int32),
)


def requests(f: Fuzzed) -> st.SearchStrategy[tuple[str, Any]]:
    reservation_ids = st.one_of(st.sampled_from(f.reservations), text)
    amounts = st.one_of(st.integers(-2, 2000), int64)
    keys = st.one_of(st.sampled_from(["k1", "k2", "seed0"]), text)
    return st.one_of(
        st.tuples(st.just("Reserve"), st.builds(
            pb.ReserveRequest, budget_id=budget_ids(), amount=amounts, idempotency_key=keys,
            lease=st.one_of(st.none(), durations),
            labels=st.dictionaries(text, text, max_size=20),
            shape=st.one_of(st.none(), shapes), job=st.one_of(st.just("job"), text),
            account=st.one_of(st.just(""), st.just("acct"), text),
            feature=st.one_of(st.just(""), text),
        )),
        st.tuples(st.just("Charge"), st.builds(
            pb.ChargeRequest, reservation_id=reservation_ids, amount=amounts, idempotency_key=keys,
            usage=st.one_of(st.none(), usages),
        )),
        st.tuples(st.just("Renew"), st.builds(
            pb.RenewRequest, reservation_id=reservation_ids, lease=st.one_of(st.none(), durations),
        )),
        st.tuples(st.just("Settle"), st.builds(
            pb.SettleRequest, reservation_id=reservation_ids, used=amounts, outcome=int32,
            usage=st.one_of(st.none(), usages),
        )),
        st.tuples(st.just("PutBudget"), st.builds(
            pb.PutBudgetRequest, budget_id=budget_ids(),
            limit=st.one_of(st.none(), int64), unit=st.one_of(st.just("t"), text),
            default_estimate=st.one_of(st.none(), int64), estimate_policy=int32,
        )),
        st.tuples(st.just("UpdateBudget"), st.builds(
            pb.UpdateBudgetRequest,
            budget=st.builds(
                pb.PutBudgetRequest, budget_id=budget_ids(),
                limit=st.one_of(st.none(), int64), unit=st.one_of(st.just(""), st.just("t"), text),
                escrow_bps=int32, threshold_bps=st.lists(int32, max_size=3),
                threshold_basis=int32, mode=int32, period=int32,
            ),
            update_mask=st.one_of(st.none(), st.builds(FieldMask, paths=st.lists(
                st.one_of(st.sampled_from([*updates.PATHS, "*", "budget_id"]), text), max_size=4,
            ))),
        )),
        st.tuples(st.just("PutPrice"), st.builds(
            pb.PutPriceRequest, price=st.one_of(st.none(), prices),
        )),
        st.tuples(st.just("ListCycles"), st.builds(pb.ListCyclesRequest, account=text)),
        st.tuples(st.just("RefreshLimits"), st.builds(pb.RefreshLimitsRequest, account=text)),
        st.tuples(st.just("ListPrices"), st.builds(
            pb.ListPricesRequest, provider=st.one_of(st.just(""), providers),
            model=st.one_of(st.just(""), models),
        )),
        st.tuples(st.just("GetBudget"), st.builds(pb.GetBudgetRequest, budget_id=budget_ids())),
    )  # fmt: skip


def call(f: Fuzzed, method: str, request: Any) -> grpc.StatusCode:
    stub = f.admin if method in ADMIN_METHODS else f.budget
    f.calls += 1
    try:
        getattr(stub, method)(request, timeout=10)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_fuzzed_messages_never_fail_inside(fuzzed: Fuzzed) -> None:
    """400 generated requests over every RPC: each answer is a designed status, and a
    request that is refused changes nothing."""

    @settings(
        max_examples=MESSAGE_EXAMPLES,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(requests(fuzzed))
    def one(method_request: tuple[str, Any]) -> None:
        method, request = method_request
        before = fuzzed.snapshot()
        code = call(fuzzed, method, request)
        assert code in EXPECTED, (method, request, code)
        if code != grpc.StatusCode.OK:
            assert before == fuzzed.snapshot(), (method, request, code)

    one()
    assert fuzzed.calls >= MESSAGE_EXAMPLES
    assert [] == asyncio.run(run_audit(fuzzed.dsn))


METHODS = [f"/earmark.v1.Budget/{m}" for m in ("Reserve", "Charge", "Renew", "Settle")] + [
    f"/earmark.v1.Admin/{m}" for m in ADMIN_METHODS
]


def test_raw_bytes_never_fail_inside(fuzzed: Fuzzed) -> None:
    """200 arbitrary byte strings sent to every method answer designed statuses only."""

    @settings(
        max_examples=RAW_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    @given(st.sampled_from(METHODS), st.binary(max_size=512))
    def one(method: str, body: bytes) -> None:
        admin = method.startswith("/earmark.v1.Admin/")
        channel = fuzzed.admin_channel if admin else fuzzed.channel
        raw = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            raw(body, timeout=10)
            code = grpc.StatusCode.OK
        except grpc.RpcError as error:
            code = error.code()
        assert code in EXPECTED, (method, body, code)

    one()
    assert [] == asyncio.run(run_audit(fuzzed.dsn))


async def run_audit(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return await audit(conn)
    finally:
        await conn.close()


CHECK = "/grpc.health.v1.Health/Check"
WATCH = "/grpc.health.v1.Health/Watch"
REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
SERVICES = ("", "earmark.v1.Budget", "earmark.v1.Admin", "grpc.health.v1.Health")
SYMBOLS = ("earmark.v1.Budget", "earmark.v1.ReserveRequest", "grpc.health.v1.Health")

health_requests = st.builds(
    health_pb2.HealthCheckRequest, service=st.one_of(st.sampled_from(SERVICES), text)
)
reflection_requests = st.one_of(
    st.builds(
        reflection_pb2.ServerReflectionRequest,
        host=text,
        file_by_filename=st.one_of(st.just("earmark/v1/budget.proto"), text),
    ),
    st.builds(
        reflection_pb2.ServerReflectionRequest,
        file_containing_symbol=st.one_of(st.sampled_from(SYMBOLS), text),
    ),
    st.builds(
        reflection_pb2.ServerReflectionRequest,
        file_containing_extension=st.builds(
            reflection_pb2.ExtensionRequest,
            containing_type=st.one_of(st.sampled_from(SYMBOLS), text),
            extension_number=int32,
        ),
    ),
    st.builds(
        reflection_pb2.ServerReflectionRequest,
        all_extension_numbers_of_type=st.one_of(st.sampled_from(SYMBOLS), text),
    ),
    st.builds(reflection_pb2.ServerReflectionRequest, list_services=text),
    st.builds(reflection_pb2.ServerReflectionRequest, host=text),
)


def stream_call(channel: grpc.Channel, method: str, bodies: list[bytes]) -> grpc.StatusCode:
    """One call of method with raw bodies: Check and Watch take the first, reflection takes
    them all as its stream. A Watch, which never ends by itself, is cancelled once it has
    answered the current status."""
    # grpc-stubs make the (optional) serializers required: the raw bytes go as they are.
    raw: Any = channel
    try:
        if method == CHECK:
            raw.unary_unary(method)(bodies[0], timeout=10)
        elif method == WATCH:
            watch = raw.unary_stream(method)(bodies[0], timeout=10)
            try:
                next(watch)
            finally:
                watch.cancel()
        else:
            for _ in raw.stream_stream(method)(iter(bodies), timeout=10):
                pass
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


stream_settings = settings(
    max_examples=STREAM_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_fuzzed_stream_messages_never_fail_inside(fuzzed: Fuzzed) -> None:
    """Generated health requests (Check and Watch) and reflection streams of generated
    messages, on both listeners, answer designed statuses only and change nothing."""

    @stream_settings
    @given(
        st.booleans(),
        st.one_of(
            st.tuples(st.sampled_from([CHECK, WATCH]), st.lists(health_requests, min_size=1)),
            st.tuples(
                st.just(REFLECTION),
                st.lists(reflection_requests, min_size=1, max_size=STREAM_MESSAGES_MAX),
            ),
        ),
    )
    def one(admin: bool, method_messages: tuple[str, list[Any]]) -> None:
        method, messages = method_messages
        channel = fuzzed.admin_channel if admin else fuzzed.channel
        bodies = [m.SerializeToString() for m in messages[:STREAM_MESSAGES_MAX]]
        before = fuzzed.snapshot()
        code = stream_call(channel, method, bodies)
        assert code in EXPECTED, (method, messages, code)
        assert before == fuzzed.snapshot(), (method, messages, code)

    one()
    assert [] == asyncio.run(run_audit(fuzzed.dsn))


def test_raw_bytes_on_streams_never_fail_inside(fuzzed: Fuzzed) -> None:
    """Arbitrary bytes as health requests and as the messages of a reflection stream answer
    designed statuses only (a body that does not decode is INVALID_ARGUMENT) and change
    nothing."""

    @stream_settings
    @given(
        st.booleans(),
        st.sampled_from([CHECK, WATCH, REFLECTION]),
        st.lists(st.binary(max_size=512), min_size=1, max_size=STREAM_MESSAGES_MAX),
    )
    def one(admin: bool, method: str, bodies: list[bytes]) -> None:
        channel = fuzzed.admin_channel if admin else fuzzed.channel
        before = fuzzed.snapshot()
        code = stream_call(channel, method, bodies)
        assert code in EXPECTED, (method, bodies, code)
        assert before == fuzzed.snapshot(), (method, bodies, code)

    one()
    assert [] == asyncio.run(run_audit(fuzzed.dsn))
