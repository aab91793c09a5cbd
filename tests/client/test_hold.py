"""The worker SDK against a live sidecar: hold() on normal exit, exception, cancellation,
long blocks, lost holds, refusals, and the synchronous Client."""

from __future__ import annotations

import asyncio
import time
import urllib.parse
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import grpc
import pytest

from earmark.client import (
    AsyncClient,
    Client,
    HoldLostError,
    HoldState,
    Outcome,
    RefusalReason,
    RefusedError,
    Reservation,
    RetryPolicy,
)
from earmark.server import Sidecar
from earmark.store import Store
from earmark.v1 import budget_pb2 as pb
from tests.chaos.test_start import forwarder, refusing_port, unix_socket_of
from tests.conftest import Running, sidecar_settings
from tests.helpers import assert_invariants, eventually, fetch_budget_row, free_port


@pytest.fixture
async def client(sidecar: Running) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as c:
        await c.put_budget("acme/tokens", 100_000, "tokens")
        yield c


async def test_hold_settles_with_used_on_normal_exit(client: AsyncClient, sidecar: Running) -> None:
    """A block that sets h.used settles with it and returns the rest of the hold."""
    async with client.hold("acme/tokens", 40_000) as h:
        step = await h.charge(12_000)
        assert (12_000, False) == (step.charged, step.capped)
        h.used = 31_200
    assert h.settled is not None
    assert (31_200, 8_800, HoldState.SETTLED) == (
        h.settled.charged,
        h.settled.released,
        h.settled.state,
    )
    budget = await client.get_budget("acme/tokens")
    assert (31_200, 0, 68_800) == (budget.used, budget.held, budget.remaining)
    await assert_invariants(sidecar.dsn)


async def test_hold_settles_charges_when_used_is_not_set(client: AsyncClient) -> None:
    """Without h.used the job is settled at what it charged."""
    async with client.hold("acme/tokens", 10_000) as h:
        await h.charge(3_000)
        await h.charge(2_000)
    assert h.settled is not None
    assert (5_000, 5_000) == (h.settled.charged, h.settled.released)


async def test_exception_settles_failed_before_it_propagates(
    client: AsyncClient, sidecar: Running
) -> None:
    """An exception in the block settles FAILED at what was charged, then reaches the caller."""

    class Boom(Exception):
        pass

    holds = []

    async def job() -> None:
        async with client.hold("acme/tokens", 10_000) as h:
            holds.append(h)
            await h.charge(4_000)
            raise Boom

    with pytest.raises(Boom):
        await job()
    h = holds[0]
    assert h.settled is not None
    assert (4_000, 6_000) == (h.settled.charged, h.settled.released)
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (4_000, 0) == (row["used"], row["held"])
    await assert_invariants(sidecar.dsn)


async def test_cancellation_mid_block_settles_cancelled(
    client: AsyncClient, sidecar: Running
) -> None:
    """A task cancelled inside the block settles the hold (CANCELLED) and stays cancelled."""
    entered = asyncio.Event()
    holds = []

    async def job() -> None:
        async with client.hold("acme/tokens", 10_000) as h:
            holds.append(h)
            await h.charge(1_500)
            entered.set()
            await asyncio.Event().wait()  # Work that only the cancellation ends.

    task = asyncio.create_task(job())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert holds[0].settled is not None
    assert 1_500 == holds[0].settled.charged
    row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
    assert (1_500, 0, 0) == (row["used"], row["held"], row["open_reservations"])
    async_outcome = await _settled_outcome(sidecar, holds[0].reservation_id)
    assert Outcome.CANCELLED == async_outcome


async def _settled_outcome(sidecar: Running, reservation_id: str) -> Outcome:
    import asyncpg

    conn = await asyncpg.connect(sidecar.dsn)
    try:
        value = await conn.fetchval(
            "SELECT settled_outcome FROM reservations WHERE reservation_id = $1", reservation_id
        )
    finally:
        await conn.close()
    return Outcome(value)


async def test_block_outliving_several_leases_keeps_its_hold(
    client: AsyncClient, sidecar: Running
) -> None:
    """A block that runs for more than three lease lengths keeps its hold: the background
    renewal beats the sweeper."""
    async with client.hold("acme/tokens", 10_000, lease_seconds=1) as h:

        async def outlived_three_leases() -> bool:
            page = await sidecar.admin.ListHolds(pb.ListHoldsRequest(budget_id="acme/tokens"))
            (hold,) = page.holds
            life = hold.expires_at.ToDatetime() - hold.created_at.ToDatetime()
            return life > timedelta(seconds=3)

        await eventually(outlived_three_leases, within_seconds=30, what="three leases renewed")
        step = await h.charge(1_000)
        assert not step.capped
        row = await fetch_budget_row(sidecar.dsn, "acme/tokens")
        assert (1, 9_000) == (row["open_reservations"], row["held"])
        h.used = 1_000
    assert h.settled is not None
    assert HoldState.SETTLED == h.settled.state


async def test_lost_hold_makes_the_next_charge_raise(client: AsyncClient) -> None:
    """When a renewal finds the hold gone (settled elsewhere), the next charge raises."""

    async def job() -> None:
        async with client.hold("acme/tokens", 10_000, lease_seconds=1) as h:
            await client.settle(h.reservation_id, 0, Outcome.CANCELLED)

            async def renewal_found_it_gone() -> bool:
                return h.lost

            await eventually(renewal_found_it_gone, within_seconds=10, what="the hold lost")
            await h.charge(1)

    with pytest.raises(HoldLostError):
        await job()


async def test_refusal_raises_or_is_returned(client: AsyncClient) -> None:
    """A refusal raises RefusedError with reason and remaining, or comes back on request."""

    async def job() -> None:
        async with client.hold("acme/tokens", 200_000):
            raise AssertionError("a refused block must not run")

    with pytest.raises(RefusedError) as caught:
        await job()
    refusal = caught.value.refusal
    assert (RefusalReason.INSUFFICIENT_BUDGET, 100_000) == (refusal.reason, refusal.remaining)
    assert "needs 200000, 100000 left" == refusal.message
    async with client.hold("acme/tokens", 200_000, raise_on_refusal=False) as h:
        assert not h.admitted
        assert h.refusal is not None
        assert 100_000 == h.refusal.remaining


async def test_charge_capping_through_the_sdk(client: AsyncClient) -> None:
    """A step beyond the hold comes back capped, so the worker can stop."""
    async with client.hold("acme/tokens", 5_000) as h:
        assert not (await h.charge(4_000)).capped
        last = await h.charge(4_000)
        assert (1_000, True, 0) == (last.charged, last.capped, last.hold_remaining)


class Attempts(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """Records each attempt a client makes, by method, with the code it ended on."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, grpc.StatusCode]] = []

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        call = await continuation(details, request)
        code = await call.code()
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        self.seen.append((method.rsplit("/", 1)[-1], code))
        return call


async def test_a_call_before_the_sidecar_listens_waits_for_it(dsn: str, socket_dir: Path) -> None:
    """A call sent before the sidecar listens waits for it within its deadline (wait for
    ready, then UNAVAILABLE retried while it connects its database) and is answered."""
    port = free_port()
    side = Sidecar(sidecar_settings(dsn, socket_dir, listen=f"127.0.0.1:{port}"))
    admin = f"unix:{socket_dir / 'admin.sock'}"
    attempts = Attempts()
    async with AsyncClient(
        f"127.0.0.1:{port}",
        admin_target=admin,
        timeout_seconds=30,
        interceptors=[cast(Any, attempts)],
    ) as c:
        early = asyncio.create_task(c.put_budget("late", 1_000, "t"))
        await asyncio.sleep(0)  # The call is on its way before the sidecar listens.
        await side.start()
        try:
            await early
            result = await c.reserve("late", 10)
        finally:
            await side.stop()
    assert isinstance(result, Reservation)
    assert ("PutBudget", grpc.StatusCode.OK) == attempts.seen[-2]


async def test_unavailable_is_retried_until_the_database_answers(
    database_url: str, dsn: str, socket_dir: Path
) -> None:
    """A sidecar that listens but still waits for its database answers UNAVAILABLE
    (DATABASE_STARTING): the client tries again with backoff, and the Reserve is admitted
    once the database answers."""
    # The budget is there before the sidecar reaches its database: the retried Reserve may
    # be answered the moment it does.
    store = await Store.open(dsn)
    try:
        await store.put_budget("retried", 1_000, "t")
    finally:
        await store.close()
    with refusing_port() as bound:
        db_port = bound.getsockname()[1]
        url = dsn.replace(urllib.parse.urlsplit(dsn).netloc, f"postgres@127.0.0.1:{db_port}", 1)
        url = url.split("?", 1)[0]
        side = Sidecar(sidecar_settings(url, socket_dir, database_wait_seconds=60))
        starting = asyncio.create_task(side.start())
        retry = RetryPolicy(attempts_max=50, backoff_seconds_base=0.05, backoff_seconds_max=0.2)
        attempts = Attempts()
        try:

            async def listening() -> bool:
                return side.port != 0

            await eventually(listening, within_seconds=30, what="the sidecar listens")
            async with AsyncClient(
                f"127.0.0.1:{side.port}", admin_target=side.admin_address, retry=retry,
                timeout_seconds=30, interceptors=[cast(Any, attempts)],
            ) as c:  # fmt: skip
                reserving = asyncio.create_task(c.reserve("retried", 10))

                async def refused_once() -> bool:
                    return ("Reserve", grpc.StatusCode.UNAVAILABLE) in attempts.seen

                await eventually(refused_once, within_seconds=30, what="a Reserve told UNAVAILABLE")
                async with forwarder(bound, unix_socket_of(database_url)):
                    await starting
                    result = await reserving
                    await side.stop()
        finally:
            if not starting.done():
                starting.cancel()
            await side.stop()
    reserves = [code for method, code in attempts.seen if method == "Reserve"]
    assert isinstance(result, Reservation)
    assert (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK) == (reserves[0], reserves[-1])


async def test_sync_client_hold(sidecar: Running) -> None:
    """The synchronous Client reserves, charges and settles through a plain `with` block,
    keeping its hold while the calling thread sleeps past the lease."""

    def worker() -> tuple[int, int, int]:
        with Client(sidecar.target, admin_target=sidecar.admin_target) as c:
            c.put_budget("sync", 10_000, "t")
            with c.hold("sync", 4_000, lease_seconds=1) as h:
                assert 1_000 == h.charge(1_000).charged
                time.sleep(2.5)
                assert 1_000 == h.charge(1_000).charged
                h.used = 2_500
            assert h.settled is not None
            return h.settled.charged, h.settled.released, c.get_budget("sync").used

    # The sidecar runs on this test's event loop, so the blocking worker gets a thread.
    assert (2_500, 1_500, 2_500) == await asyncio.to_thread(worker)
