"""The database probes behind health: whether it answers, and whether it can write.

The first has one connection of its own, and a hard timeout.

A probe through the pool did not see a stalled database: asyncpg's query timeout sends a
cancel request over a new connection and then waits for the stalled server to confirm
it, so the probe hung as long as the stall. Here a probe that overstays abandons its
connection (terminate() closes the socket at once, without the protocol) and answers
"down"; the next probe connects afresh, with the same timeout.
"""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg

from earmark import limits
from earmark.errors import EarmarkError, Unavailable
from earmark.store.tx import Conn, run_transaction

# The write probe waits at most this long for another sidecar's probe of the same table.
WRITE_PROBE_FIRST = f"SET LOCAL lock_timeout = {limits.write_probe_lock_timeout_ms}"

# A new file for the probe's table (TRUNCATE in a transaction makes one), filled with
# enough rows to need fresh blocks (limits.write_probe_rows of write_probe_row_bytes and a
# row header): PostgreSQL
# extends a file by writing to it at once, so a full disk refuses this as it refuses the
# workers' inserts. The transaction is then rolled back, and the new file removed.
_WRITE = "TRUNCATE write_probe"
_FILL = "INSERT INTO write_probe (n, pad) SELECT g, repeat('x', $2) FROM generate_series(1, $1) g"


class Discarded(Exception):
    """The write went through; raised to roll it back."""


async def _write_and_discard(conn: Conn) -> None:
    await conn.execute(_WRITE)
    await conn.execute(_FILL, limits.write_probe_rows, limits.write_probe_row_bytes)
    raise Discarded


async def probe_writes(pool: asyncpg.Pool) -> Unavailable | None:
    """Whether the database can write again: None once a write that needs fresh space
    went through (and was rolled back), else the fault that stopped it. A lock or a
    conflict with another sidecar's probe counts as not known yet: the fault stays."""
    try:
        await run_transaction(
            pool, _write_and_discard, isolation="read_committed", first=WRITE_PROBE_FIRST
        )
    except Discarded:
        return None
    except Unavailable as error:
        return error
    except EarmarkError as error:
        return Unavailable(f"the write probe failed: {error.message}", error.reason)
    raise AssertionError("the write probe committed")


class DatabaseProbe:
    def __init__(self, dsn: str, timeout_seconds: float = limits.db_probe_timeout_seconds) -> None:
        assert 0 < timeout_seconds
        self._dsn = dsn
        self._timeout_seconds = timeout_seconds
        self._conn: asyncpg.Connection | None = None

    async def check(self) -> str | None:
        """None if the database answered SELECT 1 within the timeout, else why not."""
        try:
            if self._conn is None or self._conn.is_closed():
                self._conn = None
                # No prepared statement outlives its query: the probe works the same
                # through PgBouncer's transaction pooling.
                self._conn = await asyncpg.connect(
                    self._dsn, timeout=self._timeout_seconds, statement_cache_size=0
                )
            query = asyncio.ensure_future(self._conn.fetchval("SELECT 1"))
            done, _ = await asyncio.wait({query}, timeout=self._timeout_seconds)
            if not done:
                self._abandon()
                with contextlib.suppress(Exception):
                    await query
                return f"no answer within {self._timeout_seconds:g}s"
            query.result()
            return None
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            self._abandon()
            return f"{type(exc).__name__}: {exc}"

    def _abandon(self) -> None:
        if self._conn is not None:
            self._conn.terminate()
            self._conn = None

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                await asyncio.wait_for(conn.close(), self._timeout_seconds)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                conn.terminate()
