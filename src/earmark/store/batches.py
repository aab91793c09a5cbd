"""Group admission: every operation on holds goes through its budget's lane, and a lane's
batch is decided in one serializable transaction (the route cache says which budgets a
reservation's operation names; the price book is kept between batches)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Literal, Protocol, TypeVar

import asyncpg

from earmark import limits
from earmark.core.batch import BatchDecision, BatchState, decide_batch
from earmark.core.model import Budget
from earmark.core.ops import Op, ReserveOp, Result, SettleOp, SettleResult
from earmark.core.prices import PriceBook
from earmark.errors import EarmarkError
from earmark.store import queries, routes, stripes, templates, writes
from earmark.store.lanes import Lanes, Route, TopUp
from earmark.store.tx import Conn

T = TypeVar("T")
# grouped: a lane per budget, one transaction per batch; naive: one per request.
Admission = Literal["grouped", "naive"]


class Serializable(Protocol):
    """The store's serializable transaction with bounded retry; first is its first
    statement (the stripe locks)."""

    def __call__(
        self, work: Callable[[Conn], Awaitable[T]], first: str | None = None
    ) -> Awaitable[T]: ...


class Read(Protocol):
    """A read outside any batch, on the workers' pool."""

    def __call__(self, query: Callable[[Conn], Awaitable[T]]) -> Awaitable[T]: ...


class Batches:
    """The lanes, the route cache and the price book, over the store's transactions."""

    def __init__(
        self,
        serializable: Serializable,
        read: Read,
        clock: Callable[[], datetime],
        *,
        admission: Admission = "grouped",
        lanes: int = limits.lanes_default,
        batch_size_max: int = limits.batch_size_max,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        self._serializable = serializable
        self._read = read
        self._clock = clock
        self._admission = admission
        # Every price version, reloaded by a batch that finds a newer one in the database.
        self._prices = PriceBook()
        self._routes = routes.RouteCache()
        self._lanes = Lanes(
            self._run_batch, lanes=lanes, batch_size_max=batch_size_max, on_batch=on_batch
        )

    async def close(self) -> None:
        """Decides what is queued."""
        await self._lanes.close()

    async def submit(self, op: Op) -> Result:
        """Decides op with whatever else is waiting on its budget, in one transaction."""
        if isinstance(op, ReserveOp):
            route = (op.budget_id, *op.also_budget_ids)
        else:
            route = await self._route_of(op.reservation_id)
        if self._admission == "naive":
            return await self._decide_alone(route, op)
        return await self._lanes.submit(route, op)

    async def _decide_alone(self, route: Route, op: Op) -> Result:
        """Naive admission: one serializable transaction per request, retried on conflict,
        nothing coalesced. Kept as the baseline that group admission is measured against."""
        (result,) = await self._run_batch([(route, op)])
        if isinstance(result, EarmarkError):
            raise result
        return result

    async def _route_of(self, reservation_id: str) -> Route:
        """The reservation's budget, then those it also holds on."""
        route = self._routes.get(reservation_id)
        if route is None:
            route = await self._read(lambda conn: routes.route_of(conn, reservation_id))
            self._routes.remember(reservation_id, route)
        return route

    async def _run_batch(
        self, entries: list[tuple[Route, Op]], top_up: TopUp | None = None
    ) -> list[Result | EarmarkError]:
        """Decides entries, per budget in their order, in one serializable transaction.
        Its first statement locks the stripes of every budget the entries' routes name,
        before the snapshot (migration 0006): another sidecar's batch on these budgets is
        waited for, not aborted against; once they are held, top_up adds what arrived on
        them meanwhile, so that the wait grows the batch instead of the queue."""
        named = {budget_id for route, _ in entries for budget_id in route}
        locked = {stripes.stripe_of(budget_id) for budget_id in named}
        by_budget: dict[str, list[int]] = {}
        # Whether the Reserves' idempotency keys are looked up before deciding: not at
        # first (see decide).
        by_key = False

        async def decide(conn: Conn) -> list[tuple[BatchState, BatchDecision]]:
            states, self._prices = await queries.load_batches(
                conn, entries, self._prices, by_key=by_key
            )
            missing = _missing(entries, states)
            if missing and await templates.make_missing(conn, missing, self._clock()):
                # A budget made from its template on first sight, in this transaction and
                # under its stripe lock (issue 47): loaded again with the budgets made.
                states, self._prices = await queries.load_batches(
                    conn, entries, self._prices, by_key=by_key
                )
            now = self._clock()
            found = await templates.for_rolls(conn, _budgets(states).values(), now)
            for state in states.values():
                state.templates = found
            return [
                (states[b], decide_batch(states[b], [entries[i][1] for i in indices], now))
                for b, indices in by_budget.items()
            ]

        async def work(conn: Conn) -> list[tuple[BatchState, BatchDecision]]:
            nonlocal by_key
            if top_up is not None:
                top_up(lambda route: all(stripes.stripe_of(b) in locked for b in route))
            by_budget.clear()
            for index, (route, _) in enumerate(entries):
                by_budget.setdefault(route[0], []).append(index)
            # A Reserve is decided first as if its key were new, without reading
            # reservations_idempotency, whose leaf pages budgets with neighbouring ids
            # share and every new hold inserts into: under SERIALIZABLE that read made
            # batches of different budgets conflict (issue 35). Exact all the same: a
            # Reserve whose key names a hold and that the decision admits fails its insert
            # on the unique key, and the transaction runs again looking keys up; one it
            # does not admit is looked up before its answer stands.
            decided = await decide(conn)
            if not by_key and await queries.keys_taken(conn, _not_made(entries, decided)):
                by_key = True
                decided = await decide(conn)
            try:
                await writes.write_decisions(conn, decided)
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name == IDEMPOTENCY_KEY:
                    by_key = True
                raise
            await templates.write_refreshed(conn, _refreshed(decided))
            return decided

        decided = await self._serializable(work, first=stripes.first_statement(named))
        slots: list[Result | EarmarkError | None] = [None] * len(entries)
        for (_, decision), indices in zip(decided, by_budget.values(), strict=True):
            for index, result in zip(indices, decision.results, strict=True):
                slots[index] = result
            for hold in decision.new_holds:
                self._routes.remember(hold.reservation_id, hold.budget_ids())
        outcomes = [slot for slot in slots if slot is not None]
        assert len(outcomes) == len(entries)
        for (_, op), outcome in zip(entries, outcomes, strict=True):
            # A settled hold is done: its route goes, so the cache holds only live holds
            # (a late retry of the Settle looks its budget up again).
            if isinstance(op, SettleOp) and isinstance(outcome, SettleResult):
                self._routes.forget(op.reservation_id)
        return outcomes


def _budgets(states: dict[str, BatchState]) -> dict[str, Budget]:
    """The budgets a transaction locked (shared by its states)."""
    return next(iter(states.values())).budgets if states else {}


def _refreshed(decided: list[tuple[BatchState, BatchDecision]]) -> list[Budget]:
    """The budgets the decisions gave their template's newer settings, each once."""
    return list({b.budget_id: b for _, d in decided for b in d.refreshed.values()}.values())


def _missing(entries: list[tuple[Route, Op]], states: dict[str, BatchState]) -> set[str]:
    """The budgets the Reserves name that the batch found no row of."""
    named = {budget_id for route, op in entries if isinstance(op, ReserveOp) for budget_id in route}
    if not named:
        return set()
    return named - set(_budgets(states))


# The unique index of reservations' idempotency keys (migration 0003).
IDEMPOTENCY_KEY = "reservations_idempotency"


def _not_made(
    entries: list[tuple[Route, Op]], decided: list[tuple[BatchState, BatchDecision]]
) -> list[ReserveOp]:
    """The Reserves whose decision made no new hold for their key."""
    made = {(h.budget_id, h.owner, h.idempotency_key) for _, d in decided for h in d.new_holds}
    return [
        op
        for _, op in entries
        if isinstance(op, ReserveOp) and (op.budget_id, op.owner, op.idempotency_key) not in made
    ]
