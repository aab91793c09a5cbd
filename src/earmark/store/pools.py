"""The store's two connection pools, made alike: the workers' (the lanes, the sweeper,
every write) and the operator's (Admin's scans and the gauges' reads), so that a scan
never holds a connection a batch waits for."""

from __future__ import annotations

import asyncpg

from earmark import limits
from earmark.store.migrate import migrate
from earmark.store.tx import mapped_db_errors, roll_back


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The pool's reset on release: Earmark keeps no session state (no LISTEN, no session
    advisory locks, no SET but SET LOCAL, no cursors), so asyncpg's default reset would be
    a round trip per transaction for nothing. Only a transaction left open (which
    tx.transaction never leaves) is ended, at no cost when there is none."""
    await roll_back(conn)


async def create_pool(
    dsn: str, *, min_size: int, max_size: int, prepared_statements: bool
) -> asyncpg.Pool:
    """A pool of at most max_size connections to dsn, min_size of them kept while idle.
    Without prepared_statements (behind PgBouncer's transaction pooling) every statement
    is prepared unnamed, within its own transaction, and planned each time: both pools
    are made here, so that neither can differ from the other in that."""
    return await asyncpg.create_pool(
        dsn,
        min_size=min_size,
        max_size=max_size,
        # Connections beyond min_size close after this long idle: a pod's idle sidecar
        # holds one connection (see docs/scaling.md).
        max_inactive_connection_lifetime=limits.pool_idle_seconds_max,
        timeout=limits.db_connect_timeout_seconds,
        command_timeout=limits.db_command_timeout_seconds,
        statement_cache_size=limits.statement_cache_size_default if prepared_statements else 0,
        reset=_keep_session,
    )


async def open_pools(
    dsn: str, *, pool_size_max: int, prepared_statements: bool
) -> tuple[asyncpg.Pool, asyncpg.Pool]:
    """The workers' pool and the operator's, on dsn, with the migrations the database
    lacks applied; if anything fails on the way, neither is left open."""
    opened: list[asyncpg.Pool] = []
    try:
        with mapped_db_errors():
            opened.append(
                await create_pool(
                    dsn,
                    min_size=min(limits.pool_size_min, pool_size_max),
                    max_size=pool_size_max,
                    prepared_statements=prepared_statements,
                )
            )
            opened.append(
                await create_pool(
                    dsn,
                    min_size=limits.admin_pool_size_min,
                    max_size=limits.admin_pool_size_max,
                    prepared_statements=prepared_statements,
                )
            )
            async with opened[0].acquire(timeout=limits.pool_acquire_timeout_seconds) as conn:
                await migrate(conn)
    except BaseException:
        for pool in opened:
            pool.terminate()
        raise
    return opened[0], opened[1]
