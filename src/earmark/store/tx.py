"""Serializable transactions with bounded, jittered retries, and the one place where
asyncpg's exceptions become Earmark's."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Literal, TypeAlias, TypeVar

import asyncpg

from earmark import limits
from earmark.errors import FailedPrecondition, Reason, Unavailable

T = TypeVar("T")

# What a transaction's work receives: a pooled connection (or a plain one, in tests).
Conn: TypeAlias = (
    "asyncpg.pool.PoolConnectionProxy[asyncpg.Record] | asyncpg.Connection[asyncpg.Record]"
)

# A conflicting key insert from another sidecar is a conflict like any other: the
# retry reads the row that won and answers with it.
_RETRY_CONSTRAINTS = frozenset({"reservations_idempotency", "charges_pkey", "units_pkey"})


class RetryExhausted(Unavailable):
    """Every attempt hit a serialization conflict; nothing was committed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, Reason.CONFLICT_RETRIES_EXHAUSTED)


def is_conflict(exc: BaseException) -> bool:
    """Serialization failures, deadlocks and lost key races: safe to run again."""
    if isinstance(exc, asyncpg.SerializationError | asyncpg.DeadlockDetectedError):
        return True
    if isinstance(exc, asyncpg.UniqueViolationError):
        return getattr(exc, "constraint_name", None) in _RETRY_CONSTRAINTS
    return False


@contextlib.contextmanager
def mapped_db_errors() -> Iterator[None]:
    """Turns a broken or refusing database into Unavailable, an overflow into
    FailedPrecondition; anything else is a bug and propagates as it is."""
    try:
        yield
    except (
        OSError,
        TimeoutError,
        asyncpg.PostgresConnectionError,
        asyncpg.InterfaceError,
        asyncpg.CannotConnectNowError,
        asyncpg.TooManyConnectionsError,
        asyncpg.AdminShutdownError,
        asyncpg.CrashShutdownError,
        asyncpg.QueryCanceledError,
        # The server refused who we are (a wrong or revoked password, an unknown role or
        # database): the message names the user and the database, never the password.
        asyncpg.InvalidAuthorizationSpecificationError,
        asyncpg.InvalidCatalogNameError,
        # A server that takes no writes: a standby, or a primary demoted by a failover or a
        # switchover while the pool's connection to it stayed open.
        asyncpg.ReadOnlySQLTransactionError,
    ) as exc:
        raise Unavailable(
            f"database unavailable: {type(exc).__name__}: {exc}", Reason.DATABASE_UNAVAILABLE
        ) from exc
    except asyncpg.NumericValueOutOfRangeError as exc:
        raise FailedPrecondition(
            "the change would overflow a 64-bit counter", Reason.COUNTER_OVERFLOW
        ) from exc


def backoff_seconds(attempt: int, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
    ceiling = min(limits.tx_backoff_seconds_max, limits.tx_backoff_seconds_base * 2**attempt)
    return rng.uniform(0.0, ceiling)


Isolation = Literal["serializable", "read_committed"]
_BEGIN: dict[Isolation, str] = {
    "serializable": "BEGIN ISOLATION LEVEL SERIALIZABLE",
    "read_committed": "BEGIN ISOLATION LEVEL READ COMMITTED",
}


# A transaction that ended in one of these is on a connection not worth keeping: to a
# server that no longer answers (a killed or stalled PostgreSQL), where a ROLLBACK would
# only wait out another command timeout, or to one that takes no writes. It is closed.
SUSPECT_CONNECTION = (
    TimeoutError,
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    # The connection leads to a server that takes no writes: the pool must connect anew,
    # through the URL's target_session_attrs, to find the one that does.
    asyncpg.ReadOnlySQLTransactionError,
)


async def roll_back(conn: Conn, cause: BaseException | None = None) -> None:
    """Ends the connection's open transaction, if any; a connection that cannot, or that
    cause makes suspect, is closed (the pool replaces it), so that none goes back to the
    pool inside a transaction."""
    if conn.is_closed() or not conn.is_in_transaction():
        return
    if isinstance(cause, SUSPECT_CONNECTION):
        conn.terminate()
        return
    try:
        await conn.execute("ROLLBACK")
    except (Exception, asyncio.CancelledError):
        conn.terminate()


@contextlib.asynccontextmanager
async def transaction(conn: Conn, isolation: Isolation, first: str | None) -> AsyncIterator[None]:
    """BEGIN and first in one round trip (the simple query protocol runs several statements
    without parameters), the body, then COMMIT; ROLLBACK if anything fails on the way."""
    try:
        await conn.execute(_BEGIN[isolation] if first is None else f"{_BEGIN[isolation]}; {first}")
        yield
    except BaseException as failed:
        await roll_back(conn, failed)
        raise
    await conn.execute("COMMIT")


async def run_serializable(
    pool: asyncpg.Pool,
    work: Callable[[Conn], Awaitable[T]],
    *,
    attempts_max: int = limits.tx_attempts_max,
    rng: random.Random | None = None,
    on_retry: Callable[[], None] | None = None,
    on_exhausted: Callable[[], None] | None = None,
    first: str | None = None,
) -> T:
    """Runs work in one serializable transaction, again after a conflict, at most
    attempts_max times; then raises RetryExhausted having committed nothing."""
    return await run_transaction(
        pool,
        work,
        isolation="serializable",
        first=first,
        attempts_max=attempts_max,
        rng=rng,
        on_retry=on_retry,
        on_exhausted=on_exhausted,
    )


async def run_transaction(
    pool: asyncpg.Pool,
    work: Callable[[Conn], Awaitable[T]],
    *,
    isolation: Isolation,
    attempts_max: int = limits.tx_attempts_max,
    rng: random.Random | None = None,
    on_retry: Callable[[], None] | None = None,
    on_exhausted: Callable[[], None] | None = None,
    first: str | None = None,
) -> T:
    """Runs work in one transaction at isolation, again after a conflict (a deadlock or a
    lost key race at any level), at most attempts_max times. first, statements that take no
    snapshot (SET LOCAL, LOCK TABLE), run before work in BEGIN's round trip: what they wait
    for, the transaction's snapshot sees."""
    assert attempts_max >= 1
    rng = rng or random.Random()
    for attempt in range(attempts_max):
        try:
            with mapped_db_errors():
                async with (
                    pool.acquire(timeout=limits.pool_acquire_timeout_seconds) as conn,
                    transaction(conn, isolation, first),
                ):
                    return await work(conn)
        except asyncpg.PostgresError as exc:
            if not is_conflict(exc):
                raise
            if on_retry is not None:
                on_retry()
            if attempt + 1 < attempts_max:
                await asyncio.sleep(backoff_seconds(attempt, rng))
    if on_exhausted is not None:
        on_exhausted()
    raise RetryExhausted(f"gave up after {attempts_max} serialization conflicts; nothing changed")
