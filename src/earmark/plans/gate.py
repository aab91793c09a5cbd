"""The gate in front of Reserve by account: which budget an (account, feature) Reserve
counts against now, with the limit of the account's plan.

The budget is the account's current billing cycle for the feature, named
ACCOUNT/FEATURE/CYCLE-START and created by the first Reserve of the cycle: the period the
provider gives for (account, feature), or, when it gives none, the month from the sidecar's
--cycle-anchor-day. Its limit is the plan's maximum as the limit cache last read it; the
row keeps the read's time, so that a restarted or second sidecar starts from it instead of
from nothing. A newer read is written to the row once per read, not once per Reserve.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

from earmark import limits
from earmark.core.bounds import limit_problem
from earmark.core.cycles import Cycle, cycle_at, cycle_budget_id
from earmark.core.model import Budget
from earmark.errors import FailedPrecondition, Reason
from earmark.plans.cache import LimitCache, LimitRead, LimitUnavailable
from earmark.plans.provider import ProviderUnavailable
from earmark.store import Store


class PlanGate:
    def __init__(
        self,
        store: Store,
        cache: LimitCache,
        clock: Callable[[], datetime],
        *,
        anchor_day: int,
        unit: str,
        admissions_per_minute: int,
        default_feature: str,
    ) -> None:
        self._store = store
        self._cache = cache
        self._clock = clock
        self._anchor_day = anchor_day
        self._unit = unit
        self.admissions_per_minute = admissions_per_minute
        self.default_feature = default_feature
        # budget id -> the read_at this sidecar last wrote to it.
        self._written: OrderedDict[str, datetime] = OrderedDict()
        # One write per budget at a time: the Reserves that find a cycle new all wait on it.
        self._writing: dict[str, asyncio.Lock] = {}
        # (account, feature) -> the provider's period last read, so that the id checked
        # before the read (cycle_budget_id) is the one the read will most likely give.
        self._periods: OrderedDict[tuple[str, str], Cycle] = OrderedDict()

    def forget(self, account: str) -> None:
        """The account's plan or agreement changed (a webhook said so): its next admission
        reads the provider again before it is decided."""
        self._cache.forget(account)
        self._cache.provider.forget(account)

    def cycle_budget_id(self, account: str, feature: str) -> str:
        """The id budget_for would answer now, found without a read or a write: the
        service checks the caller's permission on it first (and again on the id budget_for
        answers, in case the provider's period turned out otherwise)."""
        now = self._clock()
        known = self._periods.get((account, feature))
        if known is not None and known.start <= now < known.end:
            return cycle_budget_id(account, feature, known)
        return cycle_budget_id(account, feature, cycle_at(now, self._anchor_day))

    async def cycle(self, account: str, feature: str) -> Cycle:
        """The (account, feature)'s current billing cycle: the provider's period, or the
        month from the anchor day when it gives none; LimitUnavailable when it cannot say."""
        try:
            period = await self._cache.provider.read_period(account, feature)
        except ProviderUnavailable as error:
            raise LimitUnavailable(f"account {account!r}: no billing period ({error})") from None
        if period is None:
            return cycle_at(self._clock(), self._anchor_day)
        found = Cycle(start=period.start, end=period.end)
        self._periods[(account, feature)] = found
        self._periods.move_to_end((account, feature))
        while len(self._periods) > limits.limit_cache_accounts_max:
            self._periods.popitem(last=False)
        return found

    async def budget_for(self, account: str, feature: str) -> str:
        """The id of the account's current cycle budget for feature, made or updated from
        the plan; LimitUnavailable when no read is recent enough."""
        if not self._cache.knows(account):
            await self._seed(account)
        read = await self._cache.get(account)
        if feature not in read.limits:
            # A read seeded from rows knows only the features used so far: ask the provider.
            read = await self._cache.get(account, force=True)
        if feature not in read.limits:
            raise FailedPrecondition(
                f"feature: the plan of account {account!r} has no feature {feature!r}",
                Reason.FEATURE_NOT_IN_PLAN,
                field="feature",
                account=account,
            )
        return await self._apply(account, feature, read)

    async def refresh(self, account: str) -> list[Budget]:
        """Reads the account's plan now and applies it to the features it has used."""
        read = await self._cache.get(account, force=True)
        for budget in await self._store.cycles_of(account):
            feature = budget.feature
            if feature is None or feature not in read.limits:
                continue
            if budget.cycle_start == (await self.cycle(account, feature)).start:
                await self._apply(account, feature, read, force=True)
        return await self._store.cycles_of(account)

    async def _apply(
        self, account: str, feature: str, read: LimitRead, *, force: bool = False
    ) -> str:
        cycle = await self.cycle(account, feature)
        budget_id = cycle_budget_id(account, feature, cycle)
        if not force and self._is_written(budget_id, read):
            return budget_id
        lock = self._writing.setdefault(budget_id, asyncio.Lock())
        async with lock:
            if force or not self._is_written(budget_id, read):
                await self._store.ensure_cycle(
                    Budget(
                        budget_id=budget_id,
                        limit=read.limits[feature],
                        unit=self._unit,
                        account=account,
                        feature=feature,
                        cycle_start=cycle.start,
                        cycle_end=cycle.end,
                        limit_read_at=read.read_at,
                    )
                )
                self._written[budget_id] = read.read_at
                self._written.move_to_end(budget_id)
                while len(self._written) > limits.limit_cache_accounts_max:
                    self._written.popitem(last=False)
        if not lock.locked():
            self._writing.pop(budget_id, None)
        return budget_id

    def _is_written(self, budget_id: str, read: LimitRead) -> bool:
        written = self._written.get(budget_id)
        return written is not None and written >= read.read_at

    async def _seed(self, account: str) -> None:
        """Starts from the limits the current cycle's rows hold, with their age."""
        found = await self._store.cycles_of(account)
        # Each feature's current cycle: the provider may give each its own period.
        current: dict[str, datetime] = {}
        for feature in {b.feature for b in found if b.feature}:
            current[feature] = (await self.cycle(account, feature)).start
        rows = [b for b in found if b.feature and _seeds(b, current[b.feature])]
        if rows:
            read_at = min(b.limit_read_at for b in rows if b.limit_read_at is not None)
            self._cache.seed(
                account, LimitRead({b.feature: b.limit for b in rows if b.feature}, read_at)
            )


def _seeds(budget: Budget, current: datetime) -> bool:
    """Whether a cycle row's limit may seed the cache: a read of the current cycle, and
    within the bound (a limit stored past it, by hand or by an older sidecar, is not
    trusted; the provider is asked instead, and its answer is checked)."""
    if budget.cycle_start != current or budget.limit_read_at is None or not budget.feature:
        return False
    return budget.limit is None or limit_problem(budget.limit) is None
