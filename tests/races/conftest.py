"""The race tests run three ways: against one sidecar, against four sidecars on one
PostgreSQL, and against four sidecars behind one PgBouncer in transaction pooling (the mode
the README recommends). Four sidecars take the calls in turn, as workers in four pods would."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from earmark.server import Sidecar
from earmark.store.embedded import EmbeddedPostgres
from tests.conftest import TEST_DATABASE, Running, running, running_all, sidecar_settings
from tests.helpers import binary_missing
from tests.pgbouncer import Bouncer, pgbouncer

SIDECARS = 4


class RoundRobin:
    """A stub whose every call goes to the next of several sidecars' stubs."""

    def __init__(self, stubs: list[Any]) -> None:
        self._stubs = stubs
        self._turn = itertools.count()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stubs[next(self._turn) % len(self._stubs)], name)


@pytest.fixture(scope="session")
def bouncer(embedded_pg: EmbeddedPostgres, database_url: str) -> Iterator[Bouncer | None]:
    """One PgBouncer for the session, in transaction pooling, in front of the test database
    (None where pgbouncer is not installed)."""
    if binary_missing("pgbouncer", "pgbouncer"):
        yield None
        return
    with pgbouncer(embedded_pg.uri(TEST_DATABASE), TEST_DATABASE) as started:
        yield started


@pytest.fixture(params=["one sidecar", "four sidecars", "four behind pgbouncer"])
async def sidecar(
    request: pytest.FixtureRequest, dsn: str, bouncer: Bouncer | None, socket_dir: Path
) -> AsyncIterator[Running]:
    """One sidecar, or four taking calls in turn, directly or through PgBouncer; dsn stays
    the direct URL, for the checks."""
    if request.param == "one sidecar":
        async with running(Sidecar(sidecar_settings(dsn, socket_dir)), dsn) as one:
            yield one
        return
    url, pooler = dsn, "none"
    if request.param == "four behind pgbouncer":
        if bouncer is None:
            pytest.skip(str(binary_missing("pgbouncer", "pgbouncer")))
        url, pooler = bouncer.url(TEST_DATABASE), "pgbouncer"
    sides = []
    for index in range(SIDECARS):
        folder = socket_dir / f"s{index}"
        folder.mkdir()
        sides.append(Sidecar(sidecar_settings(url, folder, database_pooler=pooler)))
    async with running_all(sides, dsn) as started:
        yield Running(
            sidecar=started[0].sidecar,
            channel=started[0].channel,
            budget=RoundRobin([s.budget for s in started]),  # type: ignore[arg-type]
            admin=RoundRobin([s.admin for s in started]),  # type: ignore[arg-type]
            dsn=dsn,
        )
