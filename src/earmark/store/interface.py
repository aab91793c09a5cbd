"""What the rest of Earmark asks of the store, as Protocols that its callers take instead of
the concrete PostgreSQL `Store` (which satisfies every one, checked by mypy below).

The interface is split where the model in memory (store/model.py) stops:

- `Holds`: budgets (with their policies, periods and rate windows), prices, every operation
  on holds, the sweeper, accounts' billing cycles, archiving and the held holds a stopping
  sidecar waits for. It is what a hold's admission depends on, decided by the pure core
  (core.batch) on both sides, so `Model` answers all of it and the contract suite
  (tests/store/test_contract.py) holds the two equal.
- `Listings` (Admin's paged scans), `Meter` (the meter outbox's claims), `PlanMarks` (the
  database's clock and the plan marks webhooks leave) and `Upkeep` (the gauges' reads, the
  repricer's scan, the pools and the write probe) stay on `Store`: they are SQL by nature
  (keyset pages on the operator's pool, claims that sidecars race for with leases, the
  database's own clock, connections), none decides a hold, and a model of them would
  check nothing but itself.

Each caller takes the narrowest of these it needs: the Budget service `Holds`, Admin
`AdminStore`, the plan gate `Cycles`, the reporter `Meter`, the mark watcher
`PlanMarks`, the background loops `Upkeep`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from earmark.core.model import Budget, EstimatePolicy, OveragePolicy, Policies, UnitTotals
from earmark.core.ops import Op, Result
from earmark.core.prices import Price
from earmark.core.raises import Raise
from earmark.core.specs import Fields
from earmark.core.templates import Template, TemplateInput
from earmark.errors import Unavailable
from earmark.store.cycles import Report
from earmark.store.marks import Mark
from earmark.store.operator import WatchTotals
from earmark.store.regions import ShareView
from earmark.store.scans import Scans


class Budgets(Protocol):
    """Budgets as operators put and read them, and the store's clock."""

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
    ) -> Budget: ...

    async def update_budget(
        self, given: Fields, named: frozenset[str], *, raised: Raise = ...
    ) -> Budget: ...

    async def get_budget(self, budget_id: str) -> Budget: ...

    async def archive_budget(self, budget_id: str) -> Budget: ...

    def now(self) -> datetime: ...


class Templates(Protocol):
    """Budget templates (issue 47): a Reserve naming a budget that does not exist but that a
    template's pattern matches makes it, in the transaction deciding the admission."""

    async def put_template(self, given: TemplateInput) -> Template: ...

    async def list_templates(self) -> list[Template]: ...

    async def delete_template(self, template_id: str) -> Template: ...


class Cycles(Protocol):
    """Accounts' billing-cycle budgets, which the plan gate makes and reads."""

    async def ensure_cycle(self, spec: Budget) -> Budget | None: ...

    async def cycles_of(self, account: str) -> list[Budget]: ...


class Holds(Budgets, Templates, Cycles, Protocol):
    """Everything a hold's admission depends on: budgets, cycles, prices, the operations on
    holds (core.ops), the sweeper, and which holds are still held."""

    async def put_price(self, price: Price) -> Price: ...

    async def submit(self, op: Op) -> Result: ...

    async def sweep_once(self, batch_size: int = ...) -> int: ...

    async def held_among(self, reservation_ids: list[str]) -> list[str]: ...


class Listings(Protocol):
    """Admin's paged listings, on the operator's pool (store/scans.py)."""

    @property
    def scans(self) -> Scans: ...


class Shares(Protocol):
    """Budgets across regions as operators see them (issue 48)."""

    async def list_shares(
        self, budget_id: str = ..., after: str = ...
    ) -> tuple[list[ShareView], str]: ...


class AdminStore(Holds, Listings, Shares, Protocol):
    """What the Admin service calls."""


class Meter(Protocol):
    """The meter outbox: totals claimed by one reporter among the sidecars, then marked."""

    async def claim_reports(self, count: int = ...) -> list[Report]: ...

    async def mark_report(
        self,
        report: Report,
        next_attempt_at: datetime | None,
        *,
        unknown_until: datetime | None = None,
    ) -> None: ...

    async def park_report(self, report: Report, code: str) -> None: ...

    async def outbox_state(self) -> tuple[int, datetime | None]: ...


class PlanMarks(Protocol):
    """The plan marks webhooks leave, read against the database's own clock."""

    async def database_now(self) -> datetime: ...

    async def marks_after(self, after: Mark, count: int) -> list[Mark]: ...


class Upkeep(Protocol):
    """What the background loops run: the sweeper, the repricer (and the price notices
    beside it), the gauges' reads, the pools' renewal and the write probe."""

    async def sweep_once(self, batch_size: int = ...) -> int: ...

    async def reprice_due(self, limit: int = ...) -> int: ...

    async def notice_prices(self, limit: int = ...) -> int: ...

    async def expire_connections(self) -> None: ...

    async def write_probe(self) -> Unavailable | None: ...

    async def watch_totals(self) -> WatchTotals: ...

    async def open_holds_by_unit(self) -> list[UnitTotals]: ...

    async def most_used_budgets(self, count: int) -> list[Budget]: ...

    async def reclaim_shares(self, count: int = ...) -> int: ...

    async def regions_seen(self) -> list[tuple[str, int, float]]: ...


class Everything(AdminStore, Meter, PlanMarks, Upkeep, Protocol):
    """The whole interface: what the PostgreSQL store answers."""


if TYPE_CHECKING:
    from earmark.store.model import Model
    from earmark.store.store import Store

    # mypy checks these: Store answers all of it, the model the hold/budget part.
    _store: type[Everything] = Store
    _model: type[Holds] = Model
