"""Fixtures that start real things: an embedded PostgreSQL per session, a fresh schema per
test, and a real gRPC sidecar on 127.0.0.1 port 0."""

from __future__ import annotations

import os

# As earmark.cli does for the sidecar, and for the same crash: tests run pg_ctl (an embedded
# PostgreSQL started or restarted, as another user, so by fork rather than vfork) while
# gRPC's threads run, and with gRPC's fork support on that child died with SIGSEGV before
# exec (tests/test_cli.py, a fresh-clone run). Nothing here forks a process that goes on to
# use gRPC; gRPC reads this when it loads, so before anything imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import grpc
import pytest

from earmark.server import Sidecar
from earmark.settings import KINDE_CLIENT_ID, KINDE_CLIENT_SECRET, Settings
from earmark.store import Store, operator
from earmark.store.embedded import EmbeddedPostgres, ensure_database
from earmark.store.migrate import migrate
from earmark.v1 import budget_pb2_grpc
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde
from tests.helpers import FakeClock, HeldListings
from tests.typescript_dist import dist_ready

TEST_DATABASE = "earmark_test"
REGION_DATABASE = "earmark_test_region"
TABLES = (
    "calls, ledger, charges, open_holds, in_doubt_holds, hold_scopes, reservations, budgets, "
    "units, prices, job_samples, tenant_samples, "
    "accounts, meter_outbox, meter_sent, budget_periods, event_deliveries, events, notify_lease, "
    "budget_templates, region_shares, region_share_state"
)


@pytest.fixture(scope="session")
def embedded_pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    """One real PostgreSQL for the whole session, stopped at its end even on failure."""
    pg = EmbeddedPostgres(tmp_path_factory.mktemp("pg"))
    pg.start()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(scope="session")
def database_url(embedded_pg: EmbeddedPostgres) -> str:
    """A migrated database on the session's server."""

    async def prepare() -> None:
        await ensure_database(embedded_pg.uri(), TEST_DATABASE)
        conn = await asyncpg.connect(embedded_pg.uri(TEST_DATABASE))
        try:
            await migrate(conn)
        finally:
            await conn.close()

    asyncio.run(prepare())
    return embedded_pg.uri(TEST_DATABASE)


@pytest.fixture(scope="session")
def region_database_url(embedded_pg: EmbeddedPostgres) -> str:
    """A second migrated database on the session's server: a region's, beside the home's
    (issue 48), for the store's tests; the relay tests start a server per region."""

    async def prepare() -> None:
        await ensure_database(embedded_pg.uri(), REGION_DATABASE)
        conn = await asyncpg.connect(embedded_pg.uri(REGION_DATABASE))
        try:
            await migrate(conn)
        finally:
            await conn.close()

    asyncio.run(prepare())
    return embedded_pg.uri(REGION_DATABASE)


@pytest.fixture
async def region_dsn(region_database_url: str) -> str:
    """The region's database, emptied before the test."""
    conn = await asyncpg.connect(region_database_url)
    try:
        await conn.execute(f"TRUNCATE {TABLES}")
    finally:
        await conn.close()
    return region_database_url


@pytest.fixture
async def dsn(database_url: str) -> str:
    """The test database, emptied before the test."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f"TRUNCATE {TABLES}")
    finally:
        await conn.close()
    return database_url


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[Store]:
    s = await Store.open(dsn)
    try:
        yield s
    finally:
        await s.close()


@dataclass
class Running:
    sidecar: Sidecar
    channel: grpc.aio.Channel
    budget: budget_pb2_grpc.BudgetStub
    admin: budget_pb2_grpc.AdminStub
    dsn: str

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.sidecar.port}"

    @property
    def admin_target(self) -> str:
        return self.sidecar.admin_address


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short folder for Unix sockets: a socket path may not pass 107 bytes, and pytest's
    tmp_path can be longer than that."""
    folder = Path(tempfile.mkdtemp(prefix="em-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def sidecar_settings(dsn: str, socket_dir: Path, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "admin_listen": f"unix:{socket_dir / 'admin.sock'}",
        "database_url": dsn,
        # Each sidecar's own data dir: the sidecar locks it (two sidecars never share one).
        "data_dir": socket_dir,
        "sweep_interval_seconds": 0.2,
        "metrics_refresh_seconds": 0.2,
        "shutdown_grace_seconds": 2.0,
        # Stopping does not wait for holds a test left open; tests/client/test_shutdown_order.py
        # runs the wait itself, on processes.
        "drain_holds_seconds": 0.0,
        # No call comes after a test's last: its sidecar stops without the quiet period.
        "drain_quiet_seconds": 0.0,
        "log_format": "json",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@asynccontextmanager
async def running(side: Sidecar, dsn: str) -> AsyncIterator[Running]:
    """Starts side and yields it with stubs: Budget on the workers' port, Admin on its own
    listener; stops both channels and the sidecar at the end, also on failure."""
    async with running_all([side], dsn) as (one,):
        yield one


@asynccontextmanager
async def running_all(sides: list[Sidecar], dsn: str) -> AsyncIterator[list[Running]]:
    """running() for several sidecars: started in order, stopped all at once at the end
    (a stop is mostly waiting), also on failure."""
    started: list[Sidecar] = []
    try:
        async with AsyncExitStack() as channels:
            out = []
            for side in sides:
                await side.start()
                started.append(side)
                channel = await channels.enter_async_context(
                    grpc.aio.insecure_channel(f"127.0.0.1:{side.port}")
                )
                admin_channel = await channels.enter_async_context(
                    grpc.aio.insecure_channel(side.admin_address)
                )
                out.append(
                    Running(
                        sidecar=side,
                        channel=channel,
                        budget=budget_pb2_grpc.BudgetStub(channel),
                        admin=budget_pb2_grpc.AdminStub(admin_channel),
                        dsn=dsn,
                    )
                )
            yield out
    finally:
        await asyncio.gather(*(side.stop() for side in started))


@pytest.fixture
async def sidecar(dsn: str, socket_dir: Path) -> AsyncIterator[Running]:
    """A real sidecar on 127.0.0.1:0 over the test database, Admin on a Unix socket."""
    async with running(Sidecar(sidecar_settings(dsn, socket_dir)), dsn) as s:
        yield s


# Where `clock` starts, unless the test's module says otherwise with CLOCK_START.
CLOCK_START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock(request: pytest.FixtureRequest) -> FakeClock:
    """The injected clock (of `clocked`, and of every sidecar a test gives it): time moves
    only when the test says. It starts at the test module's CLOCK_START, if it has one."""
    return FakeClock(getattr(request.module, "CLOCK_START", CLOCK_START))


@pytest.fixture
async def clocked(dsn: str, socket_dir: Path, clock: FakeClock) -> AsyncIterator[Running]:
    """The usual sidecar on the test's clock: leases pass when the clock is moved."""
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as s:
        yield s


@pytest.fixture
def held_listings(monkeypatch: pytest.MonkeyPatch) -> HeldListings:
    """operator.hold_rows replaced by a HeldListings around it, for this test."""
    held = HeldListings(operator.hold_rows)
    monkeypatch.setattr(operator, "hold_rows", held)
    return held


@pytest.fixture
def kinde(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKinde]:
    """A fake Kinde on 127.0.0.1, with the sidecar's client credentials in the environment
    and account "acct" on a plan of 100,000 tokens; a module needing another plan says so
    in a fixture of its own."""
    monkeypatch.setenv(KINDE_CLIENT_ID, CLIENT_ID)
    monkeypatch.setenv(KINDE_CLIENT_SECRET, CLIENT_SECRET)
    with fake_kinde() as fake:
        fake.state.limits["acct"] = {"tokens": 100_000}
        yield fake


@pytest.fixture
def ts_dist() -> Iterator[None]:
    """The TypeScript SDK's dist/, current and unchanged while the test runs Node against it
    (tests/typescript_dist.py)."""
    with dist_ready():
        yield
