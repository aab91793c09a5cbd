"""The store's interface made explicit, and a model of it in memory.

`Holds` is what the service asks of a store for holds and budgets. `Model` answers it with
plain dictionaries and the same pure decisions (core.batch) the PostgreSQL store runs, so a
test can run one sequence of operations on both and compare every budget, hold and ledger
row after each step: what the model holds is what the decisions say, and what PostgreSQL
holds is what the store's loading, SQL and writes made of them. The model covers budgets
by id and the job samples of their roots (not accounts' cycles or admission rates).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from earmark.core.batch import BatchDecision, BatchState, decide_batch, expire_due, sample_keys
from earmark.core.calls import RESERVE_CHARGE_KEY
from earmark.core.estimates import SampleKey
from earmark.core.model import (
    Budget,
    ChargeRecord,
    EstimatePolicy,
    Hold,
    HoldState,
    LedgerEntry,
    OveragePolicy,
)
from earmark.core.ops import ChargeOp, Op, ReserveOp, Result
from earmark.core.prices import Price, PriceBook
from earmark.errors import EarmarkError, budget_not_found, reservation_not_found


class Holds(Protocol):
    """What the service asks of a store for budgets, prices and holds."""

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
    ) -> Budget: ...

    async def get_budget(self, budget_id: str) -> Budget: ...

    async def put_price(self, price: Price) -> Price: ...

    async def submit(self, op: Op) -> Result: ...

    async def sweep_once(self, batch_size: int = ...) -> int: ...


@dataclass
class Model:
    """The store in memory: every write a decision makes, applied to dictionaries."""

    clock: Callable[[], datetime]
    budgets: dict[str, Budget]
    holds: dict[str, Hold]
    charges: dict[tuple[str, str], ChargeRecord]
    ledger: list[LedgerEntry]
    prices: list[Price]
    # Keyed as tenant_samples is, (unit, root, job, model): loaded and written back as the
    # store does, only the keys a decision names.
    samples: dict[SampleKey, list[int]] = field(default_factory=dict)

    @classmethod
    def empty(cls, clock: Callable[[], datetime]) -> Model:
        return cls(clock, {}, {}, {}, [], [])

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
    ) -> Budget:
        """Creates the budget, or sets what an operator sets and clears its overage flag;
        the counters stay (the model keeps a budget's unit as it was made)."""
        budget = self.budgets.get(budget_id)
        if budget is None:
            budget = self.budgets[budget_id] = Budget(budget_id=budget_id, limit=limit, unit=unit)
        budget.limit = limit
        budget.default_estimate = default_estimate
        budget.estimate_policy = estimate_policy
        budget.escrow_bps = escrow_bps
        budget.overage_policy = overage_policy
        budget.overage_limit = overage_limit
        budget.overage_since = None
        return copy.deepcopy(budget)

    async def get_budget(self, budget_id: str) -> Budget:
        budget = self.budgets.get(budget_id)
        if budget is None:
            raise budget_not_found(budget_id)
        return copy.deepcopy(budget)

    async def put_price(self, price: Price) -> Price:
        """Appends price as its model's next version."""
        model = (price.provider, price.model)
        versions = [p.version for p in self.prices if (p.provider, p.model) == model]
        stored = replace(price, version=max(versions, default=0) + 1)
        self.prices.append(stored)
        return stored

    async def submit(self, op: Op) -> Result:
        """Decides op alone against copies of what it names, then applies the writes."""
        if isinstance(op, ReserveOp):
            route: tuple[str, ...] = (op.budget_id, *op.also_budget_ids)
        else:
            hold = self.holds.get(op.reservation_id)
            if hold is None:
                raise reservation_not_found(op.reservation_id)
            route = hold.budget_ids()
        budgets = {b: copy.deepcopy(self.budgets[b]) for b in route if b in self.budgets}
        state = BatchState(budget_id=route[0], budget=budgets.get(route[0]), budgets=budgets)
        state.prices = PriceBook(self.prices, seq=len(self.prices))
        for hold in self.holds.values():
            if hold.budget_id != route[0]:
                continue
            named = (
                (hold.owner, hold.idempotency_key) == (op.owner, op.idempotency_key)
                if isinstance(op, ReserveOp)
                else hold.reservation_id == op.reservation_id
            )
            if named:
                copied = copy.deepcopy(hold)
                state.holds_by_id[copied.reservation_id] = copied
                state.holds_by_key[(copied.owner, copied.idempotency_key)] = copied
        # The charges a retry answers from: a Charge's own, a Reserve's prompt charge.
        keys = []
        if isinstance(op, ChargeOp):
            keys.append((op.reservation_id, op.idempotency_key))
        elif isinstance(op, ReserveOp) and op.charge is not None:
            keys += [(h.reservation_id, RESERVE_CHARGE_KEY) for h in state.holds_by_id.values()]
        for key in keys:
            earlier = self.charges.get(key)
            if earlier is not None:
                state.charges[key] = earlier
        state.samples = {k: list(self.samples.get(k, [])) for k in sample_keys(state, [op])}
        decision = decide_batch(state, [op], self.clock())
        self._apply(decision)
        for sampled in decision.samples:
            self.samples[sampled] = state.samples[sampled]
        (result,) = decision.results
        if isinstance(result, EarmarkError):
            raise result
        return result

    async def sweep_once(self, batch_size: int = 1_000) -> int:
        """Closes (or puts in doubt) the live holds whose lease passed, the earliest first."""
        now = self.clock()
        due = sorted(
            (h for h in self.holds.values() if h.state is HoldState.HELD and h.expires_at <= now),
            key=lambda h: h.expires_at,
        )[:batch_size]
        changed = 0
        for budget_id in sorted({h.budget_id for h in due}):
            mine = [copy.deepcopy(h) for h in due if h.budget_id == budget_id]
            named = {b for h in mine for b in h.budget_ids()}
            budgets = {b: copy.deepcopy(self.budgets[b]) for b in named if b in self.budgets}
            state = BatchState(budget_id=budget_id, budget=budgets.get(budget_id), budgets=budgets)
            state.holds_by_id = {h.reservation_id: h for h in mine}
            decision = expire_due(state, now)
            self._apply(decision)
            changed += len(decision.changed_holds)
        return changed

    def _apply(self, decision: BatchDecision) -> None:
        for budget in decision.touched.values():
            self.budgets[budget.budget_id] = budget
        for hold in decision.new_holds:
            self.holds[hold.reservation_id] = hold
        for hold in decision.changed_holds.values():
            self.holds[hold.reservation_id] = hold
        for record in decision.new_charges:
            self.charges[(record.reservation_id, record.idempotency_key)] = record
        self.ledger.extend(decision.ledger)
