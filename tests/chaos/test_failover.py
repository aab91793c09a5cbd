"""Failover under load on an HA manager: two sidecars on a pg_auto_failover formation (a
monitor, a primary and a synchronous secondary), given the formation's multi-host URL.
The primary is killed; the monitor promotes the secondary, the sidecars reconnect by
themselves, and every Reserve, Charge and Settle that was acknowledged survives."""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import grpc
import pytest

from earmark.server import Sidecar
from earmark.store.audit import audit
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests import formation
from tests.chaos.load import FAULT_CODES, Told, acknowledged, check_told, run_load
from tests.conftest import Running, running_all, sidecar_settings
from tests.helpers import binary_missing, eventually

pytestmark = pytest.mark.slow

BUDGET = "hot"
FORMATION_SECONDS_MAX = 120.0
FAILOVER_SECONDS_MAX = 90.0
# The load runs this many acknowledged Reserves before the kill, and again after it.
LOAD_RESERVES = 200
# How often the formation's state is looked at while it forms: each look is a pg_autoctl
# process and a TLS connection to the monitor, which a look every POLL_SECONDS (0.05 s)
# would make hundreds of while PostgreSQL initializes and copies itself.
FORMATION_POLL_SECONDS = 0.5


async def formed(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Looks at the formation with check until it holds, every FORMATION_POLL_SECONDS, or
    fails naming what after FORMATION_SECONDS_MAX."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not await check():
        if loop.time() - started > FORMATION_SECONDS_MAX:
            raise AssertionError(f"{what}: not within {FORMATION_SECONDS_MAX}s")
        await asyncio.sleep(FORMATION_POLL_SECONDS)


@pytest.fixture
def made() -> Iterator[formation.Formation]:
    """A formation's folder and processes; everything started in it stops at the end."""
    why = binary_missing("pg_autoctl", "postgresql-15-auto-failover")
    if why:
        pytest.skip(why)
    with formation.formation() as started:
        yield started


async def start_formation(made: formation.Formation) -> str:
    """Monitor, then the primary, then the secondary; returns the formation's URL."""
    formation.create_monitor(made)
    monitor = f"postgresql://postgres@127.0.0.1:{made.monitor.port}/pg_auto_failover"
    conn: list[asyncpg.Connection] = []

    async def monitor_up() -> bool:
        try:
            conn.append(await asyncpg.connect(monitor, ssl="require", timeout=2))
        except (OSError, asyncpg.PostgresError):
            return False
        return True

    await eventually(monitor_up, within_seconds=FORMATION_SECONDS_MAX, what="the monitor")
    try:
        for name, value in formation.MONITOR_SETTINGS.items():
            await conn[0].execute(f"ALTER SYSTEM SET {name} = {value}")
        await conn[0].execute("SELECT pg_reload_conf()")
    finally:
        await conn[0].close()
    shown: list[str] = []

    async def monitor_uri_shown() -> bool:
        try:
            shown.append(made.monitor_uri())
        except RuntimeError:
            # pg_autoctl rewrites its configuration file in place while the monitor starts,
            # and "show uri" read it half written ("Failed to find section pg_autoctl").
            return False
        return True

    await eventually(monitor_uri_shown, within_seconds=FORMATION_SECONDS_MAX, what="its URI")
    monitor_uri = shown[0]
    for expected in (["single"], ["primary", "secondary"]):
        node = formation.create_node(made, monitor_uri)

        async def reached(expected: list[str] = expected) -> bool:
            try:
                return expected == sorted(made.states().values())
            except RuntimeError:
                return False  # the node is not registered yet

        try:
            await formed(reached, str(expected))
        except AssertionError as error:
            # The formation's logs go with its folder: the message keeps why it stalled.
            raise AssertionError(f"{error}\n{made.log_tails()}") from None
        for setting, text in formation.NODE_SETTINGS.items():

            async def kept(
                node: formation.Node = node, setting: str = setting, text: str = text
            ) -> bool:
                return formation.config_set(made, node, setting, text)

            await formed(kept, setting)
    return made.uri()


@pytest.fixture
async def sidecars(made: formation.Formation, socket_dir: Path) -> AsyncIterator[list[Running]]:
    url = await start_formation(made)
    sides = []
    for index in range(2):
        folder = socket_dir / f"s{index}"
        folder.mkdir()
        sides.append(Sidecar(sidecar_settings(url, folder, shutdown_grace_seconds=2.0)))
    async with running_all(sides, url) as started:
        yield started


async def test_killing_the_primary_loses_nothing_acknowledged(
    made: formation.Formation, sidecars: list[Running]
) -> None:
    """Under load on two sidecars, SIGKILL of the primary's PostgreSQL and keeper: the
    secondary is promoted, both sidecars serve again on their own, every acknowledged
    call is in the new primary, and the audit is clean."""
    url = sidecars[0].dsn
    primary = made.nodes[0]
    assert "primary" == made.states()[primary.port]
    await sidecars[0].admin.PutBudget(pb.PutBudgetRequest(budget_id=BUDGET, unit="t"))
    told = Told()
    stop = asyncio.Event()
    loads = [
        asyncio.create_task(run_load(s.target, BUDGET, told, stop, workers=10)) for s in sidecars
    ]
    try:
        await acknowledged(told, LOAD_RESERVES, "the load under way")
        reserved_before = len(told.reserved)
        killed_at = time.monotonic()
        made.kill(primary)

        async def serving_again(s: Running) -> bool:
            key = uuid.uuid4().hex
            request = pb.ReserveRequest(budget_id=BUDGET, amount=1, idempotency_key=key)
            async with grpc.aio.insecure_channel(s.target) as channel:
                try:
                    reply = await budget_pb2_grpc.BudgetStub(channel).Reserve(request, timeout=2)
                except grpc.aio.AioRpcError:
                    return False
            if reply.admitted:
                told.reserved[reply.reservation_id] = key
            return reply.admitted

        for s in sidecars:
            await eventually(
                functools.partial(serving_again, s),
                within_seconds=FAILOVER_SECONDS_MAX,
                what="a sidecar admitting again after the failover",
            )
        recovered_at = time.monotonic()
        await acknowledged(told, LOAD_RESERVES, "the load after the failover")
    finally:
        stop.set()
        await asyncio.gather(*loads)
    assert reserved_before > 0
    assert set(told.codes) <= FAULT_CODES, told.codes
    assert [] == await check_told(url, told)
    conn = await asyncpg.connect(url)
    try:
        assert [] == await audit(conn)
        assert not await conn.fetchval("SELECT pg_is_in_recovery()")
    finally:
        await conn.close()
    window = (told.unavailable_to or recovered_at) - (told.unavailable_from or killed_at)
    print(
        f"failover: serving again {recovered_at - killed_at:.1f} s after the kill; "
        f"UNAVAILABLE told for {window:.1f} s; {told.codes}"
    )
