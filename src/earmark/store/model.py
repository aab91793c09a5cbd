"""The store's hold/budget interface (store/interface.py's `Holds`) answered in memory.

`Model` keeps plain dictionaries and applies the same pure decisions (core.batch's
`decide_batch` and `expire_due`) the PostgreSQL store runs, loading into each decision what
the store would load: the budgets its route names, the holds it names, earlier charges,
the job samples it needs, the admission counters of a rate-limited account, and the
closed periods (issue 34) its holds belong to. So a test can run one sequence of
operations on both and compare every answer and row: what the model holds is what the
decisions say, and what PostgreSQL holds is what the store's loading, SQL and writes
made of them (tests/store/test_model.py, tests/store/test_contract.py).

It covers budgets with their policies (periods rolling on the calendar, closed periods
kept, thresholds' notices, OBSERVE mode, rate windows), prices, holds, the sweeper,
accounts' billing cycles and admission rates, and archiving. It does not model what is
SQL by nature and decides no hold (interface.py says which): Admin's listings, the meter
outbox (a cycle's usage is in its ledger here, not in an outbox), plan marks, the gauges,
connections. It is one process's dictionaries: what the store promises under concurrency
(serializable transactions, stripe locks, sidecars racing) the model does not.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from earmark import limits
from earmark.core import bookkeeping, notices, puts, raises, resets, specs, templates, updates
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
    PeriodTotals,
    Policies,
)
from earmark.core.notices import Event
from earmark.core.ops import ChargeOp, Op, ReserveOp, Result
from earmark.core.prices import Price, PriceBook
from earmark.core.ratelimit import AdmissionWindow
from earmark.core.templates import Template, TemplateInput
from earmark.errors import (
    EarmarkError,
    FailedPrecondition,
    Reason,
    budget_not_found,
    reservation_not_found,
)
from earmark.store.interface import Holds

__all__ = ["Holds", "Model"]


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
    # Closed periods (budget_periods), by (budget_id, period_no).
    periods: dict[tuple[str, int], PeriodTotals] = field(default_factory=dict)
    # Accounts' admission counters (accounts), by account.
    windows: dict[str, AdmissionWindow] = field(default_factory=dict)
    # The notices the decisions caused (events), in order.
    events: list[Event] = field(default_factory=list)
    # Budget templates (budget_templates), by id, and the version sequence's last value.
    templates: dict[str, Template] = field(default_factory=dict)
    template_versions: int = 0
    # How many budgets each template made (budget_templates.made).
    templates_made: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls, clock: Callable[[], datetime]) -> Model:
        return cls(clock, {}, {}, {}, [], [])

    def now(self) -> datetime:
        return self.clock()

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
        """Creates the budget or sets what an operator sets, as store/budgets.py does."""
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
        now = self.clock()
        open_closed, used_closed = self._closed_use(budget_id)
        stored = self.budgets.get(budget_id)
        if stored is None:
            made = puts.put(puts.PutInput(None, spec, now))
            self.budgets[budget_id] = made
            return resets.current(copy.deepcopy(made), now)
        budget = copy.deepcopy(stored)
        ended = raises.lapse(budget, now)
        in_use_closed = bool(open_closed or used_closed)
        made = puts.put(puts.PutInput(budget, spec, now, in_use_closed))
        return self._put_on(budget, made, now, ended, raises.NONE)

    async def update_budget(
        self,
        given: specs.Fields,
        named: frozenset[str],
        *,
        raised: raises.Raise = raises.NONE,
    ) -> Budget:
        """Sets only the fields named of an existing budget, as store/budgets.py does: the
        named fields merged into what it holds, checked whole, put as PutBudget puts, with
        raised's temporary limit (core.raises)."""
        now = self.clock()
        raises.check(raised, named, now)
        stored = self.budgets.get(given.budget_id)
        if stored is None:
            raise budget_not_found(given.budget_id)
        budget = copy.deepcopy(stored)
        ended = raises.lapse(budget, now)
        spec = specs.checked(updates.merged(specs.fields_of(budget), given, named)).budget
        open_closed, used_closed = self._closed_use(given.budget_id)
        in_use_closed = bool(open_closed or used_closed)
        made = puts.put(
            puts.PutInput(budget, updates.kept(budget, spec, named), now, in_use_closed)
        )
        return self._put_on(budget, made, now, ended, raised)

    def _put_on(
        self,
        budget: Budget,
        made: Budget,
        now: datetime,
        ended: raises.LimitChange | None,
        raised: raises.Raise,
    ) -> Budget:
        """Stores made, put on budget (whose ended temporary limit was ended), with raised's
        temporary limit, and records the changes of its limit, as store/budgets.py does."""
        made, change = raises.applied(budget, made, raised, now)
        self.budgets[made.budget_id] = made
        for done, after in ((ended, budget), (change, made)):
            if done is not None:
                self.ledger.append(done.entry())
                self._record([done.event(after)])
        return resets.current(copy.deepcopy(made), now)

    async def get_budget(self, budget_id: str) -> Budget:
        """The budget as of now: one whose period has ended reads as the next, at zero."""
        budget = self.budgets.get(budget_id)
        if budget is None:
            raise budget_not_found(budget_id)
        return resets.current(copy.deepcopy(budget), self.clock())

    async def archive_budget(self, budget_id: str) -> Budget:
        """Archives a budget without open holds (in any period); twice answers the first."""
        budget = self.budgets.get(budget_id)
        if budget is None:
            raise budget_not_found(budget_id)
        if budget.archived_at is None:
            open_holds = budget.open_reservations + self._closed_use(budget_id)[0]
            if open_holds:
                raise FailedPrecondition(
                    f"budget {budget_id!r} has {open_holds} open holds; settle, "
                    "resolve or release them first",
                    Reason.BUDGET_HAS_OPEN_HOLDS,
                    budget_id=budget_id,
                )
            budget.archived_at = self.clock()
        return copy.deepcopy(budget)

    def _closed_use(self, budget_id: str) -> tuple[int, bool]:
        """(holds open in the budget's closed periods, whether any closed period was used)."""
        closed = [p for (b, _), p in self.periods.items() if b == budget_id]
        return sum(p.open_reservations for p in closed), any(p.used or p.held for p in closed)

    # Accounts' billing cycles.

    async def ensure_cycle(self, spec: Budget) -> Budget | None:
        """Creates the account's cycle budget, or gives it a newer limit read; None when
        the row had a newer read or is not this account's cycle (store/cycles.py)."""
        assert spec.account is not None
        assert spec.limit_read_at is not None
        self.windows.setdefault(spec.account, AdmissionWindow(spec.account))
        budget = self.budgets.get(spec.budget_id)
        if budget is None:
            budget = self.budgets[spec.budget_id] = Budget(
                budget_id=spec.budget_id,
                limit=spec.limit,
                unit=spec.unit,
                account=spec.account,
                feature=spec.feature,
                cycle_start=spec.cycle_start,
                cycle_end=spec.cycle_end,
                limit_read_at=spec.limit_read_at,
            )
            return copy.deepcopy(budget)
        read_at = budget.limit_read_at
        if budget.account != spec.account or (read_at is not None and read_at > spec.limit_read_at):
            return None
        budget.limit, budget.limit_read_at = spec.limit, spec.limit_read_at
        return copy.deepcopy(budget)

    async def cycles_of(self, account: str) -> list[Budget]:
        """The account's cycle budgets, the newest cycle first, then by feature."""
        mine = [b for b in self.budgets.values() if b.account == account]
        mine.sort(key=lambda b: b.feature or "")
        mine.sort(key=lambda b: b.cycle_start or datetime.min, reverse=True)
        return [copy.deepcopy(b) for b in mine[: limits.cycles_listed_max]]

    # Prices.

    async def put_price(self, price: Price) -> Price:
        """Appends price as its model's next version."""
        if len(self.prices) >= limits.price_versions_max:
            raise FailedPrecondition(
                f"price: the price book holds {len(self.prices)} versions, the most it may "
                f"(limits.price_versions_max = {limits.price_versions_max})",
                Reason.PRICE_BOOK_FULL,
            )
        model = (price.provider, price.model)
        versions = [p.version for p in self.prices if (p.provider, p.model) == model]
        stored = replace(price, version=max(versions, default=0) + 1)
        self.prices.append(stored)
        # In effect at once: noticed with the put, as store/price_notices.py does (one dated
        # in the future is noticed by the store's pass, which is SQL by nature).
        now = self.clock()
        if stored.effective_from <= now:
            before = notices.replaced(self.prices, stored)
            self.events.append(notices.price_event(stored, before, now))
        return stored

    # Holds.

    # Templates.

    async def put_template(self, given: TemplateInput) -> Template:
        """Creates or replaces a template, as store/templates.py does."""
        existing = sorted(self.templates.values(), key=lambda t: t.template_id)
        templates.check_put(existing, given)
        self.template_versions += 1
        template = templates.put(given, self.template_versions, self.clock())
        self.templates[template.template_id] = template
        return template

    async def list_templates(self) -> list[Template]:
        return sorted(self.templates.values(), key=lambda t: t.template_id)

    async def delete_template(self, template_id: str) -> Template:
        template = self.templates.pop(template_id, None)
        self.templates_made.pop(template_id, None)
        if template is None:
            raise templates.not_found(template_id)
        return template

    def _make_missing(self, route: tuple[str, ...]) -> None:
        """Makes the budgets of route that do not exist but a template matches, as the
        store's batch does in its transaction before deciding."""
        for budget_id in sorted(set(route) - self.budgets.keys()):
            template = templates.matching(self.templates.values(), budget_id)
            if template is None:
                continue
            made = self.templates_made.get(template.template_id, 0)
            if templates.may_make(made):
                self.templates_made[template.template_id] = made + 1
                self.budgets[budget_id] = templates.budget_from(template, budget_id, self.clock())

    async def submit(self, op: Op) -> Result:
        """Decides op alone against copies of what it names, then applies the writes."""
        if isinstance(op, ReserveOp):
            route: tuple[str, ...] = (op.budget_id, *op.also_budget_ids)
            self._make_missing(route)
        else:
            hold = self.holds.get(op.reservation_id)
            if hold is None:
                raise reservation_not_found(op.reservation_id)
            route = hold.budget_ids()
        state = self._state(route[0], route, [h for h in self.holds.values() if _names(op, h)])
        self._load_charges(state, op)
        state.samples = {k: list(self.samples.get(k, [])) for k in sample_keys(state, [op])}
        if isinstance(op, ReserveOp) and op.admissions_per_minute:
            window = self.windows.get(op.account) or AdmissionWindow(op.account)
            state.windows = {op.account: copy.deepcopy(window)}
        decision = decide_batch(state, [op], self.clock())
        self._apply(state, decision)
        (result,) = decision.results
        if isinstance(result, EarmarkError):
            raise result
        return result

    async def sweep_once(self, batch_size: int = limits.sweep_batch_size_max) -> int:
        """Closes (or puts in doubt) the live holds whose lease passed, the earliest first;
        then ends idle budgets' temporary limits whose time came (lapse_raises)."""
        changed = self._expire(batch_size)
        await self.lapse_raises()
        return changed

    async def lapse_raises(self, batch_size: int = limits.limit_lapses_per_sweep_max) -> int:
        """Ends at most batch_size budgets' temporary limits whose time came, the earliest
        first, as store/sweeper.py does. How many it ended."""
        now = self.clock()
        due = sorted(
            (b for b in self.budgets.values() if raises.due(b, now)),
            key=lambda b: (b.limit_until, b.budget_id),
        )[:batch_size]
        ended = 0
        for budget_id in sorted(b.budget_id for b in due):
            state = self._state(budget_id, (budget_id,), [])
            decision = BatchDecision()
            bookkeeping.roll_due(state, decision, now)
            self._apply(state, decision)
            ended += len(decision.lapsed)
        return ended

    def _expire(self, batch_size: int) -> int:
        now = self.clock()
        due = sorted(
            (h for h in self.holds.values() if h.state is HoldState.HELD and h.expires_at <= now),
            key=lambda h: (h.expires_at, h.reservation_id),
        )[:batch_size]
        changed = 0
        for budget_id in sorted({h.budget_id for h in due}):
            mine = [h for h in due if h.budget_id == budget_id]
            named = tuple(sorted({b for h in mine for b in h.budget_ids()}))
            state = self._state(budget_id, named, mine)
            decision = expire_due(state, now)
            self._apply(state, decision)
            changed += len(decision.changed_holds)
        return changed

    async def held_among(self, reservation_ids: list[str]) -> list[str]:
        """Which of reservation_ids are still held with their lease running, soonest
        deadline first."""
        now = self.clock()
        held = [self.holds[r] for r in set(reservation_ids) if r in self.holds]
        held = [h for h in held if h.state is HoldState.HELD and h.expires_at > now]
        return [h.reservation_id for h in sorted(held, key=lambda h: h.expires_at)]

    def _state(self, budget_id: str, named: tuple[str, ...], holds: list[Hold]) -> BatchState:
        """Copies of what a decision on budget_id loads: the budgets named, the holds (of
        budget_id), the price book, and the closed periods the holds belong to."""
        budgets = {b: copy.deepcopy(self.budgets[b]) for b in named if b in self.budgets}
        state = BatchState(budget_id=budget_id, budget=budgets.get(budget_id), budgets=budgets)
        state.templates = {
            t: self.templates[t]
            for b in budgets.values()
            if (t := b.template_id or "") in self.templates
        }
        state.prices = PriceBook(self.prices, seq=len(self.prices))
        for hold in holds:
            if hold.budget_id != budget_id:
                continue
            copied = copy.deepcopy(hold)
            state.holds_by_id[copied.reservation_id] = copied
            state.holds_by_key[(copied.owner, copied.idempotency_key)] = copied
            for index, each in enumerate(copied.budget_ids()):
                key = (each, copied.period_on(index))
                if each in budgets and key[1] != budgets[each].period_no:
                    state.closed[key] = copy.deepcopy(self.periods[key])
        return state

    def _load_charges(self, state: BatchState, op: Op) -> None:
        """The charges a retry answers from: a Charge's own, a Reserve's prompt charge."""
        keys = []
        if isinstance(op, ChargeOp):
            keys.append((op.reservation_id, op.idempotency_key))
        elif isinstance(op, ReserveOp) and op.charge is not None:
            keys += [(h.reservation_id, RESERVE_CHARGE_KEY) for h in state.holds_by_id.values()]
        for key in keys:
            earlier = self.charges.get(key)
            if earlier is not None:
                state.charges[key] = earlier

    def _apply(self, state: BatchState, decision: BatchDecision) -> None:
        for budget in decision.touched.values():
            self.budgets[budget.budget_id] = budget
        for hold in [*decision.new_holds, *decision.changed_holds.values()]:
            self.holds[hold.reservation_id] = hold
        for record in decision.new_charges:
            self.charges[(record.reservation_id, record.idempotency_key)] = record
        self.ledger.extend(decision.ledger)
        for sampled in decision.samples:
            self.samples[sampled] = state.samples[sampled]
        for account in decision.windows:
            self.windows[account] = state.windows[account]
        self.periods.update(decision.closed_new)
        self.periods.update(decision.closed_moved)
        self._record(decision.events)

    def _record(self, events: list[Event]) -> None:
        """Appends events, but not one whose id or dedupe key is already written."""
        known = {e.event_id for e in self.events} | {e.dedupe_key for e in self.events}
        for event in events:
            if not known & {event.event_id, event.dedupe_key}:
                self.events.append(event)
                known |= {event.event_id, event.dedupe_key}


def _names(op: Op, hold: Hold) -> bool:
    """Whether op names hold: a Reserve by its owner's idempotency key, others by id."""
    if isinstance(op, ReserveOp):
        return (hold.owner, hold.idempotency_key) == (op.owner, op.idempotency_key)
    return hold.reservation_id == op.reservation_id
