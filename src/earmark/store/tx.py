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
from earmark.errors import EarmarkError, FailedPrecondition, Reason, Unavailable

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


# What the database (or the driver) can answer besides a result, mapped once: each family
# to the error a caller is told, with a reason that says what happened. Faults of the
# database itself (unreachable, out of space or memory, read-only, failing I/O, corrupt)
# are Unavailable: the request may be retried with the same idempotency key, here or on
# another sidecar. What the database refused about this request's own values is
# FailedPrecondition: retrying it unchanged cannot help. The order matters: the first
# matching row wins, so specific classes stand before their families.
_DATABASE_FAULTS: tuple[tuple[tuple[type[BaseException], ...], Reason, str], ...] = (
    ((asyncpg.DiskFullError,), Reason.DATABASE_DISK_FULL, "the database's disk is full"),
    ((asyncpg.OutOfMemoryError,), Reason.DATABASE_OUT_OF_MEMORY, "the database is out of memory"),
    (
        (asyncpg.TooManyConnectionsError, asyncpg.ConfigurationLimitExceededError),
        Reason.DATABASE_CONNECTIONS_FULL,
        "the database takes no more connections",
    ),
    (
        # A server that takes no writes: a standby, or a primary demoted by a failover or
        # a switchover while the pool's connection to it stayed open.
        (asyncpg.ReadOnlySQLTransactionError,),
        Reason.DATABASE_READ_ONLY,
        "the database takes no writes",
    ),
    (
        (asyncpg.PostgresSystemError, asyncpg.DataCorruptedError, asyncpg.IndexCorruptedError),
        Reason.DATABASE_IO_ERROR,
        "the database failed to read or write its files",
    ),
    (
        # A lock not had within a lock_timeout (the database's or a role's setting), or
        # an object in use: the same request may go through in a moment.
        (asyncpg.LockNotAvailableError, asyncpg.ObjectInUseError),
        Reason.DATABASE_BUSY,
        "the database is busy",
    ),
    (
        (
            OSError,
            TimeoutError,
            asyncpg.PostgresConnectionError,
            asyncpg.InsufficientResourcesError,
            # Shut down, crashed, starting, in recovery, a statement or session timeout.
            asyncpg.OperatorInterventionError,
            asyncpg.InvalidTransactionStateError,
            asyncpg.TransactionRollbackError,
            asyncpg.SnapshotTooOldError,
            # The server's own "internal error" (XX000): not known to be about this
            # request, nor about writing.
            asyncpg.InternalServerError,
            asyncpg.ConfigFileError,
            # The server refused who we are (a wrong or revoked password, an unknown role or
            # database): the message names the user and the database, never the password.
            asyncpg.InvalidAuthorizationSpecificationError,
            asyncpg.InvalidCatalogNameError,
            # The driver's own: a broken protocol, a server of the wrong kind, a schema
            # changed under a cached statement.
            asyncpg.InternalClientError,
            # Used after the connection broke ("connection is closed"). The driver's
            # InterfaceErrors that are ValueErrors too are about a value: refused, below.
            asyncpg.InterfaceError,
        ),
        Reason.DATABASE_UNAVAILABLE,
        "database unavailable",
    ),
)

# Faults after which the database cannot write what it is asked to: health says so until
# a write goes through again (see Store.write_probe).
WRITE_FAULTS = frozenset(
    {
        Reason.DATABASE_DISK_FULL,
        Reason.DATABASE_OUT_OF_MEMORY,
        Reason.DATABASE_READ_ONLY,
        Reason.DATABASE_IO_ERROR,
    }
)


def _refused_value(exc: BaseException) -> bool:
    """The driver could not encode a value (an int past int64, say): its DataError and
    ClientConfigurationError are InterfaceErrors that are ValueErrors too."""
    return isinstance(exc, asyncpg.InterfaceError) and isinstance(exc, ValueError)


def map_db_error(exc: BaseException) -> EarmarkError | None:
    """The error a caller is told for what the database or the driver raised; None for
    anything else (a conflict, which is retried, or a bug). The message names the
    exception's class and its text, which never carries the URL's password."""
    for types, reason, what in _DATABASE_FAULTS:
        if isinstance(exc, types) and not _refused_value(exc):
            return Unavailable(f"{what}: {type(exc).__name__}: {exc}", reason)
    if isinstance(exc, asyncpg.NumericValueOutOfRangeError):
        return FailedPrecondition(
            "the change would overflow a 64-bit counter", Reason.COUNTER_OVERFLOW
        )
    if isinstance(exc, asyncpg.PostgresError) or _refused_value(exc):
        # A value or constraint the database refused, or a statement it would not run:
        # about this request alone (a batch splits until it stands alone).
        sqlstate = getattr(exc, "sqlstate", None) or ""
        return FailedPrecondition(
            f"the database refused the change: {type(exc).__name__}: {exc}",
            Reason.DATABASE_REFUSED,
            sqlstate=sqlstate,
        )
    return None


@contextlib.contextmanager
def mapped_db_errors() -> Iterator[None]:
    """Turns what the database or the driver raised into Earmark's errors (map_db_error);
    a conflict passes through as it is, for run_transaction to retry, and so does a bug."""
    try:
        yield
    except Exception as exc:
        if is_conflict(exc):
            raise
        mapped = map_db_error(exc)
        if mapped is None:
            raise
        raise mapped from exc


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


async def _attempt(
    pool: asyncpg.Pool,
    work: Callable[[Conn], Awaitable[T]],
    isolation: Isolation,
    first: str | None,
) -> T:
    """One attempt of run_transaction: a connection, the transaction, the connection back.
    The wait for a connection is bounded by asyncio.timeout rather than acquire's timeout,
    which wraps the wait in a task of its own (asyncio.wait_for, before Python 3.12): a
    task made and scheduled on every transaction, though a connection is almost always
    free at once. Running out of time raises TimeoutError all the same."""
    async with asyncio.timeout(limits.pool_acquire_timeout_seconds):
        conn = await pool.acquire()
    try:
        async with transaction(conn, isolation, first):
            return await work(conn)
    finally:
        await pool.release(conn)


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
                return await _attempt(pool, work, isolation, first)
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


async def read_snapshot(url: str, work: Callable[[Conn], Awaitable[T]]) -> T:
    """work on a connection of its own to url, in one read-only REPEATABLE READ
    transaction, so that a live sidecar's writes cannot make one table disagree with
    another mid-read (the operator's audit and usage read this way)."""
    with mapped_db_errors():
        try:
            conn = await asyncpg.connect(url, timeout=limits.db_connect_timeout_seconds)
        except asyncpg.PostgresError as refused:
            raise Unavailable(
                f"the database refused: {type(refused).__name__}", Reason.DATABASE_UNAVAILABLE
            ) from None
        try:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                return await work(conn)
        finally:
            await conn.close()
