"""The store: its pools and transactions, and what each part of Earmark reads and writes
through them; holds go through the batches (store/batches.py)."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import asyncpg

from earmark import limits
from earmark.core import raises, resets, specs
from earmark.core.model import Budget, EstimatePolicy, OveragePolicy, Policies, UnitTotals
from earmark.core.ops import Op, RepriceOp, RepriceResult, Result
from earmark.core.prices import Price, PriceBook
from earmark.core.regions import Region
from earmark.core.templates import Template, TemplateInput
from earmark.errors import (
    EarmarkError,
    Reason,
    Unavailable,
    budget_not_found,
)
from earmark.store import (
    budgets,
    cycles,
    marks,
    operator,
    price_notices,
    pricebook,
    probe,
    queries,
    regions,
    repricing,
    stripes,
    sweeper,
    templates,
)
from earmark.store.batches import Admission, Batches
from earmark.store.cycles import Report
from earmark.store.pools import open_pools
from earmark.store.regions import ShareOutcome
from earmark.store.scans import Scans
from earmark.store.tx import (
    WRITE_FAULTS,
    Conn,
    Isolation,
    mapped_db_errors,
    run_transaction,
)

Clock = Callable[[], datetime]
T = TypeVar("T")


def _starting() -> Unavailable:
    return Unavailable("the sidecar is still waiting for its database", Reason.DATABASE_STARTING)


def _seconds_since(at: datetime | None, now: datetime) -> float:
    return 0.0 if at is None else max(0.0, (now - at).total_seconds())


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(slots=True)
class StoreObserver:
    """Hooks through which the store reports what metrics want, without knowing of them."""

    on_retry: Callable[[], None] | None = None
    on_exhausted: Callable[[], None] | None = None
    on_batch: Callable[[int], None] | None = None
    on_expired: Callable[[int], None] | None = None
    # A transaction failed because the database cannot write (disk full, read-only...).
    on_write_fault: Callable[[Unavailable], None] | None = None


class Store:
    """Everything Earmark keeps in PostgreSQL. Open with Store.open() (or build one and
    connect() it later: a sidecar waiting for its database serves health meanwhile), close
    with close()."""

    def __init__(
        self,
        dsn: str,
        *,
        pool_size_max: int = limits.pool_size_max_default,
        clock: Clock = utc_now,
        observer: StoreObserver | None = None,
        batch_size_max: int = limits.batch_size_max,
        lanes: int = limits.lanes_default,
        admission: Admission = "grouped",
        prepared_statements: bool = True,
    ) -> None:
        assert admission in ("grouped", "naive")
        self._dsn = dsn
        self._pool_size_max = pool_size_max
        self._prepared_statements = prepared_statements
        self._connected: asyncpg.Pool | None = None
        self._scans: Scans | None = None
        self._clock = clock
        self._observer = observer or StoreObserver()
        self._rng = random.Random()
        # The price book the repricer last read (reloaded when a price was added).
        self._reprice_book = PriceBook()
        # The prices in effect at the repricer's last pass that saw every due hold (None:
        # no pass yet), so that a pass with nothing moved costs no scan of the open holds.
        self._repriced_for: list[repricing.InEffect] | None = None
        # Where the repricer's scan of the due holds goes on from at its next pass (None:
        # from the oldest), and the prices in effect the scan began with: one that moved
        # starts the scan over.
        self._reprice_after: repricing.After | None = None
        self._reprice_scanning: list[repricing.InEffect] | None = None
        self._batches = Batches(
            self._serializable,
            self._read,
            clock,
            admission=admission,
            lanes=lanes,
            batch_size_max=batch_size_max,
            on_batch=self._observer.on_batch,
        )

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        pool_size_max: int = limits.pool_size_max_default,
        clock: Clock = utc_now,
        observer: StoreObserver | None = None,
        batch_size_max: int = limits.batch_size_max,
        lanes: int = limits.lanes_default,
        admission: Admission = "grouped",
        prepared_statements: bool = True,
    ) -> Store:
        """A store connected to dsn, its migrations applied (see connect())."""
        store = cls(
            dsn,
            pool_size_max=pool_size_max,
            clock=clock,
            observer=observer,
            batch_size_max=batch_size_max,
            lanes=lanes,
            admission=admission,
            prepared_statements=prepared_statements,
        )
        await store.connect()
        return store

    async def connect(self) -> None:
        """Connects the workers' pool and the operator's and applies the migrations the
        database lacks; raises Unavailable (having kept nothing open) when the database
        cannot be reached. Without prepared statements (behind PgBouncer's transaction
        pooling) neither pool prepares a statement by name (see pools.create_pool)."""
        assert self._connected is None
        pool, admin_pool = await open_pools(
            self._dsn,
            pool_size_max=self._pool_size_max,
            prepared_statements=self._prepared_statements,
        )
        self._scans = Scans(admin_pool)
        self._connected = pool

    @property
    def _pool(self) -> asyncpg.Pool:
        if self._connected is None:
            raise _starting()
        return self._connected

    @property
    def scans(self) -> Scans:
        """Admin's listings, on the operator's pool: never on the workers' (see Scans)."""
        if self._scans is None:
            raise _starting()
        return self._scans

    async def expire_connections(self) -> None:
        """Replaces every pooled connection on its next use: after the database was down
        (restarted, failed over), a connection from before may lead to a server that is gone
        and would only answer at its command timeout."""
        await self._pool.expire_connections()
        await self.scans.expire_connections()

    async def close(self) -> None:
        """Decides what is queued, then closes both pools."""
        await self._batches.close()
        if self._connected is not None:
            await self._connected.close()
            self._connected = None
        if self._scans is not None:
            await self._scans.close()
            self._scans = None

    # Budgets.

    async def put_budget(
        self,
        budget_id: str,
        limit: int | None,
        unit: str,
        *,
        default_estimate: int | None = None,
        estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN,
        escrow_bps: int = 0,
        overage_policy: OveragePolicy = OveragePolicy.HARD,
        overage_limit: int | None = None,
        policies: Policies | None = None,
    ) -> Budget:
        """Creates the budget or sets what an operator sets (limit, estimates, escrow,
        policy, and its period, notices, mode and rate windows) and clears its overage
        flag; unit ("" keeps it) may change only while the budget is unused. An archived
        budget is not put again.

        READ COMMITTED with row locks, not SERIALIZABLE: creates of distinct budgets
        insert into the same index pages, and under SSI they aborted one another (15% of
        100 concurrent creates failed after every retry). The budget row is locked FOR
        UPDATE, which waits for (and makes serializable batches wait for, or retry after)
        anything else that holds it, so a concurrent Reserve still sees one limit or the
        other, never a mixture."""

        spec = Budget(
            budget_id=budget_id,
            limit=limit,
            unit=unit,
            default_estimate=default_estimate,
            estimate_policy=estimate_policy,
            escrow_bps=escrow_bps,
            overage_policy=overage_policy,
            overage_limit=overage_limit,
        )
        if policies is not None:
            spec = policies.applied(spec)

        async def work(conn: Conn) -> Budget:
            return await budgets.put(conn, spec, self._clock())

        return resets.current(await self._transaction(work, "read_committed"), self._clock())

    async def update_budget(
        self,
        given: specs.Fields,
        named: frozenset[str],
        *,
        raised: raises.Raise = raises.NONE,
    ) -> Budget:
        """Sets only the fields named (core.updates) of an existing budget, as PutBudget
        would set them all, with raised's temporary limit (core.raises): one READ COMMITTED
        transaction locks the row FOR UPDATE, merges the named fields into what it holds,
        checks the whole with PutBudget's rules and writes it, so an update of another
        field that runs at the same time waits and is never lost. NOT_FOUND for a budget
        that does not exist."""

        async def work(conn: Conn) -> Budget:
            return await budgets.update(conn, given, named, self._clock(), raised)

        return resets.current(await self._transaction(work, "read_committed"), self._clock())

    # Templates (issue 47).

    async def put_template(self, given: TemplateInput) -> Template:
        """Creates or replaces a template, checked against every other under the table's
        lock (store/templates.py)."""

        async def work(conn: Conn) -> Template:
            return await templates.put(conn, given, self._clock())

        return await self._transaction(work, "read_committed")

    async def list_templates(self) -> list[Template]:
        """Every template, in template id order."""
        return await self._read(templates.list_all)

    async def delete_template(self, template_id: str) -> Template:
        """Removes a template; the budgets made from it stay. NOT_FOUND when there is none."""

        async def work(conn: Conn) -> Template:
            return await templates.delete(conn, template_id)

        return await self._transaction(work, "read_committed")

    async def get_budget(self, budget_id: str) -> Budget:
        """The budget as of now: one whose period has ended reads as the next, at zero."""
        found = await self._read(lambda conn: queries.get_budget(conn, budget_id))
        if found is None:
            raise budget_not_found(budget_id)
        return resets.current(found, self._clock())

    def now(self) -> datetime:
        """The store's clock (the injected one in tests)."""
        return self._clock()

    # Prices.

    async def put_price(self, price: Price) -> Price:
        """Appends price as the next version of its model; the stored version is returned.
        READ COMMITTED under an advisory lock: appends of one model queue, they never abort.
        A version in effect at once writes its price.changed notice with it; one dated in
        the future is noticed by notice_prices once its effective_from has passed."""
        now = self._clock()

        async def work(conn: Conn) -> Price:
            stored = await pricebook.insert_price(conn, price)
            if stored.effective_from <= now:
                await price_notices.write(conn, [stored], now)
            return stored

        return await self._transaction(work, "read_committed")

    async def notice_prices(self, limit: int = limits.price_notices_per_pass_max) -> int:
        """Writes price.changed for at most limit versions whose effective_from has passed
        and that were not noticed (no other sidecar's pass holds them); returns how many
        notices were written."""
        assert 1 <= limit <= limits.price_notices_per_pass_max
        now = self._clock()

        async def work(conn: Conn) -> int:
            return await price_notices.notice_due(conn, now, limit)

        return await self._transaction(work, "read_committed")

    # Accounts' billing cycles and the meter outbox.

    async def ensure_cycle(self, spec: Budget) -> Budget | None:
        """Creates an account's cycle budget, or gives it a newer limit read; None when the
        row already held a newer read. READ COMMITTED, like PutBudget, and outside the
        batches: it runs about once per account and minute."""

        async def work(conn: Conn) -> Budget | None:
            await queries.admit_unit(conn, spec.unit)
            return await cycles.upsert_cycle(conn, spec)

        return await self._transaction(work, "read_committed")

    async def cycles_of(self, account: str) -> list[Budget]:
        return await self._read(lambda conn: cycles.cycles_of(conn, account))

    async def database_now(self) -> datetime:
        """The database's clock, which plan marks carry (see store/marks.py)."""
        return await self._read(marks.database_now)

    async def marks_after(self, after: marks.Mark, count: int) -> list[marks.Mark]:
        """At most count plan marks after `after`, oldest first."""
        return await self._read(lambda conn: marks.marks_after(conn, after, count))

    async def claim_reports(self, count: int = limits.report_batch_size_max) -> list[Report]:
        """Totals due for the meter, claimed for limits.report_claim_seconds (leaving
        those another reporter holds), so that sidecars never send one at the same time."""

        async def work(conn: Conn) -> list[Report]:
            return await cycles.claim_reports(conn, self._clock(), count)

        return await self._transaction(work, "read_committed")

    async def mark_report(
        self,
        report: Report,
        next_attempt_at: datetime | None,
        *,
        unknown_until: datetime | None = None,
    ) -> None:
        """Records a report as sent (next_attempt_at None) or failed (tried again then);
        unknown_until: the failed report may still be applied by the provider until then."""

        async def work(conn: Conn) -> None:
            if next_attempt_at is None:
                await cycles.mark_sent(conn, report, self._clock())
            else:
                await cycles.mark_failed(conn, report, next_attempt_at, unknown_until)

        await self._transaction(work, "read_committed")

    async def park_report(self, report: Report, code: str) -> None:
        """Records a report the provider refused for good: its version is not sent again."""

        async def work(conn: Conn) -> None:
            await cycles.mark_parked(conn, report, code)

        await self._transaction(work, "read_committed")

    async def outbox_state(self) -> tuple[int, datetime | None]:
        return await self._read(lambda conn: cycles.outbox_state(conn))

    # What operators do and watch (Admin's listings are self.scans').

    async def archive_budget(self, budget_id: str) -> Budget:
        async def work(conn: Conn) -> Budget:
            return await operator.archive_budget(conn, budget_id, self._clock())

        return await self._transaction(work, "read_committed")

    # The gauges' reads: one at a time, every refresh, on the workers' pool, so that an
    # idle sidecar keeps the one connection it had.

    async def watch_totals(self) -> operator.WatchTotals:
        return await self._read(lambda conn: operator.watch_totals(conn, self._clock()))

    async def open_holds_by_unit(self) -> list[UnitTotals]:
        return await self._read(operator.open_holds_by_unit)

    async def most_used_budgets(self, count: int) -> list[Budget]:
        assert 0 <= count <= limits.metrics_budgets_max_ceiling
        return await self._read(lambda conn: operator.most_used_budgets(conn, count, self._clock()))

    async def held_among(self, reservation_ids: list[str]) -> list[str]:
        """Which of reservation_ids are still held with their lease running (see
        operator.held_among)."""
        assert len(reservation_ids) <= limits.drain_tracked_holds_max
        return await self._read(
            lambda conn: operator.held_among(conn, reservation_ids, self._clock())
        )

    async def reprice_due(self, limit: int = limits.reprice_holds_per_pass_max) -> int:
        """Reprices at most limit holds priced by shape and not yet charged whose price in
        effect moved (a cutover passed, a version took effect), each in its budget's lane;
        returns how many moved to the new price. A pass goes on where the one before left
        off: a page of holds that cannot move (no room for the new price) never keeps the
        next pass from the holds behind them; the scan starts over once it reached the
        newest, or when a price in effect moved."""
        assert 1 <= limit <= limits.reprice_holds_per_pass_max
        now = self._clock()

        async def read(conn: Conn) -> list[str]:
            seq = await conn.fetchval("SELECT coalesce(max(price_id), 0) FROM prices")
            self._reprice_book = await queries.load_price_book(conn, self._reprice_book, seq)
            now_in = repricing.in_effect(self._reprice_book, now)
            if now_in == self._repriced_for:
                # No price in effect moved since a scan that saw every due hold: a hold is
                # priced at the version in effect when it is reserved, so none is due.
                return []
            if now_in != self._reprice_scanning:
                self._reprice_scanning, self._reprice_after = now_in, None
            found = await repricing.due(conn, now_in, limit, self._reprice_after)
            if len(found) < limit:
                # The scan reached the newest due hold: it saw them all at these prices.
                self._repriced_for, self._reprice_after = now_in, None
            else:
                self._reprice_after = found[-1]
            return [reservation_id for _, reservation_id in found]

        moved = 0
        for reservation_id in await self._read(read):
            result = await self.submit(RepriceOp(reservation_id))
            moved += isinstance(result, RepriceResult) and result.repriced
        return moved

    # Regions (issue 48, store/regions.py): each transaction takes its budget's stripe lock.

    async def answer_shares(self, asks: list[regions.ShareAskInput]) -> list[ShareOutcome]:
        """At a budget's home: answers a region's asks, each in a transaction of its own."""
        outcomes = []
        for given in asks:

            async def work(conn: Conn, given: regions.ShareAskInput = given) -> ShareOutcome:
                return await regions.answer_share(conn, given, self._clock())

            first = stripes.first_statement([given.budget_id])
            try:
                outcomes.append(await self._serializable(work, first=first))
            except Unavailable:
                raise
            except EarmarkError as error:
                # An ask fails itself alone: the others of the call are answered.
                outcomes.append(ShareOutcome(given.budget_id, found=False, message=error.message))
        return outcomes

    async def reclaim_shares(self, count: int = limits.sweep_batch_size_max) -> int:
        """At a budget's home: takes back at most count expired shares; what they held."""

        async def read(conn: Conn) -> list[tuple[str, str]]:
            return await regions.reclaim_candidates(conn, self._clock(), count)

        taken = 0
        for budget_id, region in await self._read(read):

            async def work(conn: Conn, budget_id: str = budget_id, region: str = region) -> int:
                return await regions.reclaim_share(conn, budget_id, region, self._clock())

            taken += await self._serializable(work, first=stripes.first_statement([budget_id]))
        return taken

    async def regions_seen(self) -> list[tuple[str, int, float]]:
        """At a budget's home: each region's outstanding escrow and the seconds since it
        last reached the home (limits.regions_max regions at most)."""
        now = self._clock()
        seen = await self._read(regions.regions_seen)
        return [
            (
                r.region,
                r.outstanding,
                0.0 if r.heard_at is None else (now - r.heard_at).total_seconds(),
            )
            for r in seen
        ]

    async def list_shares(
        self, budget_id: str = "", after: str = ""
    ) -> tuple[list[regions.ShareView], str]:
        """Admin.ListShares: shares by budget then region, a page at a time."""
        return await self._read(lambda conn: regions.list_shares(conn, budget_id, after))

    async def region_shares(
        self, after: str = "", count: int = limits.region_shares_per_tick_max
    ) -> list[regions.RegionShare]:
        """In a region: its shares, by budget id after `after`."""
        return await self._read(lambda conn: regions.region_shares(conn, after, count))

    async def region_share(self, budget_id: str) -> regions.RegionShare | None:
        """In a region: its share of the budget, if it has one."""
        return await self._read(lambda conn: regions.region_share(conn, budget_id, lock=False))

    async def apply_share_answer(self, name: str, outcome: ShareOutcome) -> Region | None:
        """In a region: applies the home's answer to its share of the budget (made on the
        first), under the budget's stripe lock."""

        async def work(conn: Conn) -> Region | None:
            return await regions.apply_answer(conn, name, outcome, self._clock())

        first = stripes.first_statement([outcome.budget_id])
        return await self._serializable(work, first=first)

    async def give_back_share(self, name: str, budget_id: str, keep: int, short: bool) -> int:
        """In a region: gives back the share's idle room beyond keep (all if short)."""

        async def work(conn: Conn) -> int:
            return await regions.give_back(conn, name, budget_id, keep, short)

        return await self._serializable(work, first=stripes.first_statement([budget_id]))

    # Holds: every operation goes through its budget's lane (store/batches.py).

    async def submit(self, op: Op) -> Result:
        """Decides op with whatever else is waiting on its budget, in one transaction."""
        return await self._batches.submit(op)

    # The sweeper.

    async def sweep_once(self, batch_size: int = limits.sweep_batch_size_max) -> int:
        """Closes at most batch_size holds whose lease passed, in one transaction; holds
        another transaction has locked are skipped, so sweepers never close one twice.
        Then deletes the rows of open_holds that batches closed (sweeper.forget_closed)."""
        assert 1 <= batch_size <= limits.sweep_batch_size_max

        async def work(conn: Conn) -> int:
            return await sweeper.sweep(conn, self._clock(), batch_size)

        closed = await self._serializable(work)
        if closed and self._observer.on_expired is not None:
            self._observer.on_expired(closed)
        await self._transaction(sweeper.forget_closed, "read_committed")
        await self.lapse_raises()
        return closed

    async def lapse_raises(self, batch_size: int = limits.limit_lapses_per_sweep_max) -> int:
        """Ends at most batch_size idle budgets' temporary limits whose time came, in one
        transaction (sweeper.lapse_raises), so that their notices are written on time; a
        batch on a budget ends its own first. How many it ended."""

        async def work(conn: Conn) -> int:
            return await sweeper.lapse_raises(conn, self._clock(), batch_size)

        return await self._transaction(work, "read_committed")

    async def _read(self, query: Callable[[Conn], Awaitable[T]]) -> T:
        """A read outside any batch that a worker's call may need, on the workers' pool."""
        with mapped_db_errors():
            async with self._pool.acquire(timeout=limits.pool_acquire_timeout_seconds) as conn:
                return await query(conn)

    async def _serializable(
        self, work: Callable[[Conn], Awaitable[T]], first: str | None = None
    ) -> T:
        return await self._transaction(work, "serializable", first or stripes.first_statement())

    async def _transaction(
        self,
        work: Callable[[Conn], Awaitable[T]],
        isolation: Isolation,
        first: str | None = None,
    ) -> T:
        try:
            return await run_transaction(
                self._pool,
                work,
                isolation=isolation,
                first=first,
                rng=self._rng,
                on_retry=self._observer.on_retry,
                on_exhausted=self._observer.on_exhausted,
            )
        except Unavailable as error:
            if error.reason in WRITE_FAULTS and self._observer.on_write_fault is not None:
                self._observer.on_write_fault(error)
            raise

    async def write_probe(self) -> Unavailable | None:
        """Whether the database can write again (see probe.probe_writes)."""
        return await probe.probe_writes(self._pool)
