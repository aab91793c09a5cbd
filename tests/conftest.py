"""Fixtures that start real things: an embedded PostgreSQL per session, a fresh schema per
test, and a real gRPC sidecar on 127.0.0.1 port 0."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import grpc
import pytest

from earmark.server import Sidecar
from earmark.settings import Settings
from earmark.store import Store
from earmark.store.embedded import EmbeddedPostgres, ensure_database
from earmark.store.migrate import migrate
from earmark.v1 import budget_pb2_grpc

TEST_DATABASE = "earmark_test"
TABLES = "ledger, charges, open_holds, reservations, budgets"


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


def sidecar_settings(dsn: str, **overrides: object) -> Settings:
    values: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "metrics_listen": "127.0.0.1:0",
        "database_url": dsn,
        "sweep_interval_seconds": 0.2,
        "metrics_refresh_seconds": 0.2,
        "shutdown_grace_seconds": 2.0,
        "log_format": "json",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
async def sidecar(dsn: str, tmp_path: Path) -> AsyncIterator[Running]:
    """A real sidecar on 127.0.0.1:0 over the test database, with stubs on one channel."""
    side = Sidecar(sidecar_settings(dsn))
    await side.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{side.port}")
    try:
        yield Running(
            sidecar=side,
            channel=channel,
            budget=budget_pb2_grpc.BudgetStub(channel),
            admin=budget_pb2_grpc.AdminStub(channel),
            dsn=dsn,
        )
    finally:
        await channel.close()
        await side.stop()
