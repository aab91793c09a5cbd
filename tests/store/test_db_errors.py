"""What a real PostgreSQL (and the driver) raise, mapped once to what a caller is told:
a fault of the database is Unavailable with a reason naming it, a value the database
refused is FailedPrecondition for that request alone; nothing is left unmapped."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

from earmark.errors import FailedPrecondition, Reason, Unavailable
from earmark.store import Store
from earmark.store.tx import Conn, run_transaction


async def test_a_role_out_of_connections_is_connections_full(dsn: str) -> None:
    """A role at its connection limit is UNAVAILABLE with DATABASE_CONNECTIONS_FULL."""
    role = f"capped_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 0")
        capped = dsn.replace("postgresql://postgres", f"postgresql://{role}", 1)
        assert capped != dsn
        with pytest.raises(Unavailable) as caught:
            await Store.open(capped)
        assert Reason.DATABASE_CONNECTIONS_FULL == caught.value.reason
    finally:
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()


@pytest.mark.parametrize(
    ("statement", "argument", "sqlstate"),
    [
        # The server refuses a value: division by zero (class 22).
        ("SELECT 1 / $1::int", 0, "22012"),
        # The driver refuses to encode a value past int64, with data exception's class.
        ("SELECT $1::int8", 2**63, "22000"),
        # A constraint no validation knew of (class 23).
        ("INSERT INTO units (unit) VALUES ($1)", None, "23502"),
    ],
)
async def test_a_refused_value_is_a_failed_precondition(
    store: Store, dsn: str, statement: str, argument: object, sqlstate: str
) -> None:
    """A value or constraint PostgreSQL (or asyncpg) refuses is FAILED_PRECONDITION with
    DATABASE_REFUSED and its sqlstate, not a bug's INTERNAL; nothing is written."""
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:

        async def work(conn: Conn) -> None:
            await conn.execute(statement, argument)

        with pytest.raises(FailedPrecondition) as caught:
            await run_transaction(pool, work, isolation="read_committed")
    finally:
        await pool.close()
    assert (Reason.DATABASE_REFUSED, sqlstate) == (
        caught.value.reason,
        caught.value.about["sqlstate"],
    )


async def test_a_lock_not_had_in_time_is_busy(dsn: str) -> None:
    """A lock PostgreSQL does not grant within its lock_timeout is UNAVAILABLE with
    DATABASE_BUSY (retry), not a refusal of the request."""
    holder = await asyncpg.connect(dsn)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=1)
    try:
        await holder.execute("BEGIN; LOCK TABLE units IN ACCESS EXCLUSIVE MODE")

        async def work(conn: Conn) -> None:
            await conn.execute("LOCK TABLE units IN SHARE MODE")

        with pytest.raises(Unavailable) as caught:
            await run_transaction(
                pool, work, isolation="read_committed", first="SET LOCAL lock_timeout = 50"
            )
    finally:
        await pool.close()
        await holder.close()
    assert Reason.DATABASE_BUSY == caught.value.reason
