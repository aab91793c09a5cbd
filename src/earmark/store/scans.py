"""Admin's listings, on a connection pool of their own: pages of a budget's holds and
ledger, and the price book. However many run and however long they take, the workers'
pool (the lanes, the sweeper) never waits for one."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import asyncpg

from earmark import limits
from earmark.core.model import Budget, Hold, HoldState
from earmark.core.prices import Price
from earmark.errors import Reason, Unavailable
from earmark.pacing import Pacer
from earmark.store import calls, operator, pricebook, spend
from earmark.store.rows import budget_from_row, hold_from_row, price_from_row
from earmark.store.tx import Conn, mapped_db_errors

T = TypeVar("T")


class Scans:
    """Listings pass a gate, limits.admin_scans_max at once; limits.admin_scans_waiting_max
    more wait their turn, and any beyond those are UNAVAILABLE (OVERLOADED) at once. Their
    rows are read, the connection given back, and then converted through pacer, which
    keeps the conversion to its share of the event loop; the service converts the
    listings' messages through it too."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self.pacer = Pacer()
        self._turns = asyncio.Semaphore(limits.admin_scans_max)
        self.waiting = 0

    async def close(self) -> None:
        await self._pool.close()

    async def expire_connections(self) -> None:
        await self._pool.expire_connections()

    async def list_holds(
        self, budget_id: str, state: HoldState | None, size: int, token: str
    ) -> operator.Page[Hold]:
        async def read(conn: Conn) -> tuple[list[asyncpg.Record], set[str]]:
            rows = await operator.hold_rows(conn, budget_id, state, size, token)
            # A release closes a hold as its lease's lapse does (EXPIRED): only the
            # ledger's release entry tells them apart, looked up on the same connection.
            expired = [str(r["reservation_id"]) for r in rows if r["state"] == HoldState.EXPIRED]
            return rows, await spend.released_among(conn, expired)

        async with self._turn():
            rows, released = await self._read(read)
            page = operator.hold_page(await self.pacer.map(hold_from_row, rows), size)
            return dataclasses.replace(page, released=frozenset(released))

    async def list_holds_across(
        self, state: HoldState, size: int, token: str
    ) -> operator.Page[Hold]:
        """Every budget's holds in state (HELD or IN_DOUBT), oldest first."""
        async with self._turn():
            rows = await self._read(lambda c: operator.holds_across_rows(c, state, size, token))
            return operator.holds_across_page(await self.pacer.map(hold_from_row, rows), size)

    async def list_ledger(
        self, budget_id: str, size: int, token: str
    ) -> operator.Page[operator.LedgerRow]:
        async with self._turn():
            rows = await self._read(lambda c: operator.ledger_rows(c, budget_id, size, token))
            return operator.ledger_page(await self.pacer.map(operator.ledger_row, rows), size)

    async def list_calls(self, query: calls.CallsQuery) -> operator.Page[calls.CallRow]:
        """One provider's calls over a time range, oldest first (earmark reconcile)."""
        q = query
        async with self._turn():
            rows = await self._read(
                lambda c: calls.call_rows(
                    c, q.provider, q.since, q.until, q.key_label, q.size, q.token
                )
            )
            return calls.call_page(await self.pacer.map(calls.call_from_row, rows), q.size)

    async def spend(self, query: spend.SpendQuery) -> spend.Spend:
        """A budget's spend from its ledger, summed by model, job or day (GetSpend)."""
        async with self._turn():
            unit, rows = await self._read(lambda c: spend.spend_rows(c, query))
            return spend.spend_of(unit, rows)

    async def released_among(self, reservation_ids: list[str]) -> set[str]:
        """Which of the (expired) holds an operator released: one probe each of the
        ledger's release entries (migration 0017), behind the gate as every read here."""
        if not reservation_ids:
            return set()
        async with self._turn():
            return await self._read(lambda c: spend.released_among(c, reservation_ids))

    async def list_budgets(self, prefix: str, size: int, token: str) -> operator.Page[Budget]:
        async with self._turn():
            rows = await self._read(lambda c: operator.budget_rows(c, prefix, size, token))
            return operator.budget_page(await self.pacer.map(budget_from_row, rows), size)

    async def list_prices(self, provider: str = "", model: str = "") -> list[Price]:
        async with self._turn():
            rows = await self._read(lambda c: pricebook.price_rows(c, provider, model))
            return await self.pacer.map(price_from_row, rows)

    @contextlib.asynccontextmanager
    async def _turn(self) -> AsyncIterator[None]:
        """Waits for one of the gate's turns, or refuses at once when the line is full."""
        if self._turns.locked() and self.waiting >= limits.admin_scans_waiting_max:
            raise Unavailable(
                f"admin scans: {limits.admin_scans_max} run and {self.waiting} wait, as many "
                "as may; try again",
                Reason.OVERLOADED,
            )
        self.waiting += 1
        try:
            await self._turns.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._turns.release()

    async def _read(self, query: Callable[[Conn], Awaitable[T]]) -> T:
        with mapped_db_errors():
            async with self._pool.acquire(timeout=limits.pool_acquire_timeout_seconds) as conn:
                return await query(conn)
