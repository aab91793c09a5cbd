"""The SDK as a worker in a pod meets it: started before its sidecar, configured by the
environment, with the sidecar's lease, and a deadline that passes mid-call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest

from earmark.client import AsyncClient, Client, Reservation
from earmark.client.aio import ADMIN_TARGET_ENV, TARGET_ENV, RetryPolicy
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import canned_budget, free_port


async def test_a_worker_started_before_its_sidecar_waits_for_it(dsn: str, socket_dir: Path) -> None:
    """A call made while nothing listens yet waits for the sidecar, within its deadline,
    instead of failing UNAVAILABLE at once, and is answered once the sidecar is up."""
    port = free_port()
    settings = sidecar_settings(dsn, socket_dir, listen=f"127.0.0.1:{port}")
    async with AsyncClient(
        f"127.0.0.1:{port}", admin_target=settings.admin_address, timeout_seconds=60
    ) as client:
        early = asyncio.create_task(client.put_budget("early", 1_000, "t"))
        # Without waiting for ready, the call failed in under half a second.
        done, _ = await asyncio.wait([early], timeout=1.0)
        assert set() == done
        async with running(Sidecar(settings), dsn):
            budget = await early
            held = await client.reserve("early", 10)
    assert (1_000, True) == (budget.limit, held.admitted)


async def test_the_environment_names_the_sidecar(
    sidecar: Running, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EARMARK_TARGET and EARMARK_ADMIN_TARGET are the defaults; answers' times carry UTC."""
    monkeypatch.setenv(TARGET_ENV, sidecar.target)
    monkeypatch.setenv(ADMIN_TARGET_ENV, sidecar.admin_target)
    async with AsyncClient() as client:
        await client.put_budget("env", 100, "t")
        held = await client.reserve("env", 10)
        assert isinstance(held, Reservation)
        renewed = await client.renew(held.reservation_id)
    assert (sidecar.target, UTC, UTC) == (
        client.target,
        held.expires_at.tzinfo,
        renewed.tzinfo,
    )


async def test_hold_takes_the_sidecars_lease(dsn: str, socket_dir: Path) -> None:
    """hold() without a lease asks for none, so a sidecar whose maximum is below the
    default admits it with its own (here 60 s), and the block renews and settles."""
    settings = sidecar_settings(dsn, socket_dir, lease_seconds_max=60.0)
    async with (
        running(Sidecar(settings), dsn) as s,
        AsyncClient(s.target, admin_target=s.admin_target) as client,
    ):
        await client.put_budget("short", 100, "t")
        async with client.hold("short", 10) as h:
            h.used = 7
            assert h.reservation is not None
            left = h.reservation.expires_at - datetime.now(UTC)
        state = await client.get_budget("short")
    assert timedelta(0) < left <= timedelta(seconds=60)
    assert (7, 0) == (state.used, state.held)


class SlowFirstReserve(pb_grpc.BudgetServicer):
    """A canned sidecar whose first Reserve never answers (the caller's deadline passes)
    and whose later ones admit; it records every idempotency key it is sent."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.never = asyncio.Event()

    async def Reserve(
        self, request: pb.ReserveRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReserveResponse:
        self.keys.append(request.idempotency_key)
        if len(self.keys) == 1:
            await self.never.wait()
        return pb.ReserveResponse(
            admitted=True, reservation_id="r-1", amount=request.amount, budget_id="b"
        )


@pytest.fixture
async def slow_first() -> AsyncIterator[tuple[SlowFirstReserve, str]]:
    servicer = SlowFirstReserve()
    async with canned_budget(servicer) as target:
        yield servicer, target


async def test_a_deadline_exceeded_is_retried_with_the_same_key(
    slow_first: tuple[SlowFirstReserve, str],
) -> None:
    """A Reserve whose deadline passes is sent again with the same idempotency key, so a
    sidecar that decided the first one answers the same hold."""
    servicer, target = slow_first
    retry = RetryPolicy(attempts_max=3, backoff_seconds_base=0.01, backoff_seconds_max=0.01)
    async with AsyncClient(target, timeout_seconds=0.5, retry=retry) as client:
        held = await client.reserve("b", 5)
    assert (True, 2, 1) == (held.admitted, len(servicer.keys), len(set(servicer.keys)))


SERVICE_CONFIG = Path(__file__).resolve().parents[2] / "protos/earmark/v1/service_config.json"


async def test_the_published_service_config_is_one_grpc_takes(sidecar: Running) -> None:
    """protos/earmark/v1/service_config.json, the retry and wait-for-ready policy for other
    languages' clients, is accepted by a gRPC channel that then reserves through it."""
    options = [("grpc.service_config", SERVICE_CONFIG.read_text())]
    async with grpc.aio.insecure_channel(sidecar.target, options=options) as channel:
        await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="cfg", limit=10, unit="t"))
        reply = await pb_grpc.BudgetStub(channel).Reserve(
            pb.ReserveRequest(budget_id="cfg", amount=3, idempotency_key="k")
        )
    assert (True, 7) == (reply.admitted, reply.remaining)


class Recording(pb_grpc.BudgetServicer):
    """A canned sidecar that admits every Reserve and records what each call carried: its
    metadata and how long it had left."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], float]] = []

    async def Reserve(
        self, request: pb.ReserveRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReserveResponse:
        metadata = {k: str(v) for k, v in context.invocation_metadata() or ()}
        self.calls.append((metadata, context.time_remaining() or 0.0))
        return pb.ReserveResponse(admitted=True, reservation_id="r", amount=request.amount)


async def test_a_call_takes_its_own_deadline_and_metadata() -> None:
    """options() gives some calls a deadline of their own and metadata (x-request-id,
    traceparent) beside the client's token, while the client's other calls keep theirs;
    the synchronous client's views do the same."""
    server = grpc.aio.server()
    recording = Recording()
    pb_grpc.add_BudgetServicer_to_server(recording, server)
    target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    traced = [("x-request-id", "job-7-step-2"), ("traceparent", f"00-{'a' * 32}-{'b' * 16}-01")]
    try:
        async with AsyncClient(target, token="t" * 20, timeout_seconds=5) as client:
            await client.options(timeout_seconds=120, metadata=traced).reserve("b", 1)
            await client.reserve("b", 1)

        def sync_calls() -> None:
            with Client(target, timeout_seconds=5) as sync:
                sync.options(metadata=traced[:1]).reserve("b", 1)

        await asyncio.to_thread(sync_calls)
    finally:
        await server.stop(grace=None)
    (viewed, viewed_left), (plain, plain_left), (synced, _) = recording.calls
    assert ("job-7-step-2", f"Bearer {'t' * 20}") == (
        viewed["x-request-id"],
        viewed["authorization"],
    )
    assert viewed["traceparent"].startswith("00-")
    assert ("x-request-id" in plain, "job-7-step-2") == (False, synced["x-request-id"])
    # The deadlines as the server saw them: about 120 s and about 5 s.
    assert (True, True) == (60 < viewed_left <= 121, 0 < plain_left < 60)
