"""The gate in front of Reserve by account: which budget an (account, feature) Reserve
counts against now, with the limit of the account's plan.

The budget is the account's current billing cycle for the feature, named
ACCOUNT/FEATURE/CYCLE-START and created by the first Reserve of the cycle. The cycle is the
billing period of the account's agreement for the feature, as the provider gives it;
--cycle-anchor-day applies only where the provider gives none. Its limit is the plan's
maximum as the limit cache last read it; the row keeps the read's time (and its period), so
that a restarted or second sidecar starts from it instead of from nothing. A newer read is
written to the row once per read, not once per Reserve.

A period is asked of the provider once and used until it ends. At its end the provider is
asked again, and an admission waits for that at most the cache's wait_seconds; when
the provider cannot tell, the next period is taken to follow the last one back to back
(rolled_to), the guess is logged and the provider is asked again after
limits.limit_retry_seconds.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from earmark import limits
from earmark.core.bounds import limit_problem
from earmark.core.cycles import Cycle, cycle_at, cycle_budget_id
from earmark.core.model import Budget
from earmark.errors import FailedPrecondition, Reason
from earmark.plans.cache import LimitCache, LimitRead, LimitUnavailable
from earmark.plans.provider import Period, ProviderUnavailable
from earmark.store.interface import Cycles

log = structlog.get_logger("earmark.plans")


@dataclass(frozen=True, slots=True)
class _Known:
    """What is known of an (account, feature)'s period: the provider's (or a row's) period,
    None when the provider gives none (the anchor day applies), or a guess rolled forward
    while the provider could not tell."""

    cycle: Cycle | None
    confirmed: bool
    checked_at: datetime


class PlanGate:
    def __init__(
        self,
        store: Cycles,
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
        # budget id -> the read this sidecar last wrote to it.
        self._written: OrderedDict[str, LimitRead] = OrderedDict()
        # One write per budget at a time: the Reserves that find a cycle new all wait on it.
        self._writing: dict[str, asyncio.Lock] = {}
        # account -> feature -> its period as last known; accounts kept in LRU order.
        self._periods: OrderedDict[str, dict[str, _Known]] = OrderedDict()
        # (account, feature) -> the provider's period read running now, shared by callers.
        self._period_reads: dict[tuple[str, str], asyncio.Task[Period | None]] = {}

    def forget(self, account: str) -> None:
        """The account's plan or agreement changed (a webhook said so): its next admission
        reads the provider again before it is decided."""
        self._cache.forget(account)
        self._cache.provider.forget(account)
        self._periods.pop(account, None)

    def forget_all(self) -> None:
        """Every account's plan or periods may have changed (the plans file was edited)."""
        self._cache.forget_all()
        self._periods.clear()

    async def close(self) -> None:
        """Stops the period reads still running, before the provider closes."""
        tasks = list(self._period_reads.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def cycle_budget_id(self, account: str, feature: str) -> str:
        """The id budget_for would answer now as far as is known without a read or a
        write: the service checks the caller's permission on it first (and again on the id
        budget_for answers)."""
        now = self._clock()
        known = self._periods.get(account, {}).get(feature)
        if known is not None and known.cycle is not None and known.cycle.contains(now):
            return cycle_budget_id(account, feature, known.cycle)
        return cycle_budget_id(account, feature, cycle_at(now, self._anchor_day))

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
        """Reads the account's plan and periods now and applies them to the features it has
        used."""
        self._periods.pop(account, None)
        read = await self._cache.get(account, force=True)
        now = self._clock()
        features = {b.feature for b in await self._store.cycles_of(account) if _current(b, now)}
        for feature in sorted(f for f in features if f is not None and f in read.limits):
            await self._apply(account, feature, read, force=True)
        return await self._store.cycles_of(account)

    async def cycle_of(self, account: str, feature: str) -> Cycle:
        """The (account, feature)'s billing cycle now: its agreement's period, or the anchor
        day's cycle where the provider gives none; LimitUnavailable when neither the
        provider nor anything remembered can tell."""
        now = self._clock()
        known = self._periods.get(account, {}).get(feature)
        if known is not None and _usable(known, now):
            return known.cycle if known.cycle is not None else cycle_at(now, self._anchor_day)
        try:
            period = await asyncio.wait_for(
                asyncio.shield(self._period_task(account, feature)), self._cache.wait_seconds
            )
        except (ProviderUnavailable, TimeoutError) as error:
            reason = str(error) or "the provider did not answer in time"
            if known is None or known.cycle is None:
                raise LimitUnavailable(
                    f"account {account!r}: feature {feature!r}: its billing period is unknown "
                    f"({reason})"
                ) from None
            guess = known.cycle.rolled_to(now)
            log.warning(
                "period_assumed",
                account=account,
                feature=feature,
                start=guess.start.isoformat(),
                end=guess.end.isoformat(),
                error=reason,
            )
            self._know(account, feature, _Known(guess, confirmed=False, checked_at=now))
            return guess
        if period is None:
            self._know(account, feature, _Known(None, confirmed=True, checked_at=now))
            return cycle_at(now, self._anchor_day)
        cycle = Cycle(period.start, period.end)
        if not cycle.contains(now):
            # The provider still answers with a period that has ended (Kinde's roll or sync
            # lagging) or not begun: the guess follows from it, and the provider is asked
            # again after the retry time. Logged when the guess is new, not on every ask:
            # a roll that lags for every account at once would otherwise flood the log.
            guess = cycle.rolled_to(now) if now >= cycle.end else cycle
            if known is None or known.cycle != guess:
                log.warning("period_not_current", account=account, feature=feature,
                            start=cycle.start.isoformat(), end=cycle.end.isoformat())  # fmt: skip
            if not guess.contains(now):
                raise LimitUnavailable(
                    f"account {account!r}: feature {feature!r}: its agreement's period "
                    f"starts at {cycle.start.isoformat()}"
                )
            self._know(account, feature, _Known(guess, confirmed=False, checked_at=now))
            return guess
        self._know(account, feature, _Known(cycle, confirmed=True, checked_at=now))
        return cycle

    def reading_period(self, account: str, feature: str) -> bool:
        """Whether a provider read of the (account, feature)'s period runs now."""
        return (account, feature) in self._period_reads

    def _period_task(self, account: str, feature: str) -> asyncio.Task[Period | None]:
        """The provider's read of the period, one at a time per (account, feature) and
        shared; a task of its own, so that a caller that gives up does not cancel it."""
        key = (account, feature)
        task = self._period_reads.get(key)
        if task is None:
            task = asyncio.create_task(
                self._read_period(account, feature), name=f"earmark-period-{account}-{feature}"
            )
            self._period_reads[key] = task
            task.add_done_callback(lambda done: self._period_read_done(key, done))
        return task

    async def _read_period(self, account: str, feature: str) -> Period | None:
        async with self._cache.reading_slots:
            return await self._cache.provider.read_period(account, feature)

    def _period_read_done(self, key: tuple[str, str], task: asyncio.Task[Period | None]) -> None:
        if self._period_reads.get(key) is task:
            del self._period_reads[key]
        if not task.cancelled():
            task.exception()

    def _know(self, account: str, feature: str, known: _Known) -> None:
        self._periods.setdefault(account, {})[feature] = known
        self._periods.move_to_end(account)
        while len(self._periods) > limits.limit_cache_accounts_max:
            self._periods.popitem(last=False)

    async def _apply(
        self, account: str, feature: str, read: LimitRead, *, force: bool = False
    ) -> str:
        cycle = await self.cycle_of(account, feature)
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
                self._written[budget_id] = read
                self._written.move_to_end(budget_id)
                while len(self._written) > limits.limit_cache_accounts_max:
                    self._written.popitem(last=False)
        if not lock.locked():
            self._writing.pop(budget_id, None)
        return budget_id

    def _is_written(self, budget_id: str, read: LimitRead) -> bool:
        # The read itself, not only its time: a new read made at the same moment (a clock
        # that has not moved since, a plan change pushed right after a read) is written.
        written = self._written.get(budget_id)
        return written is not None and (written is read or written.read_at > read.read_at)

    async def _seed(self, account: str) -> None:
        """Starts from the limits and periods the current cycles' rows hold, with their
        age."""
        now = self._clock()
        rows = [b for b in await self._store.cycles_of(account) if _seeds(b, now)]
        if rows:
            read_at = min(b.limit_read_at for b in rows if b.limit_read_at is not None)
            self._cache.seed(
                account, LimitRead({b.feature: b.limit for b in rows if b.feature}, read_at)
            )
            for b in rows:
                assert b.feature is not None
                if b.feature not in self._periods.get(account, {}):
                    self._know(account, b.feature, _Known(_period_of(b), True, now))


def _period_of(budget: Budget) -> Cycle | None:
    if budget.cycle_start is None or budget.cycle_end is None:
        return None
    return Cycle(budget.cycle_start, budget.cycle_end)


def _current(budget: Budget, now: datetime) -> str | None:
    """The feature of a cycle row whose period contains now, else None."""
    period = _period_of(budget)
    return budget.feature if period is not None and period.contains(now) else None


def _usable(known: _Known, now: datetime) -> bool:
    """Whether what is known of a period answers without asking the provider: a confirmed
    period until it ends; the provider's "no period" for limit_fresh_seconds_default; a
    guess for limit_retry_seconds."""
    if known.cycle is None:
        return now - known.checked_at < timedelta(seconds=limits.limit_fresh_seconds_default)
    if not known.cycle.contains(now):
        return False
    return known.confirmed or now - known.checked_at < timedelta(seconds=limits.limit_retry_seconds)


def _seeds(budget: Budget, now: datetime) -> bool:
    """Whether a cycle row's limit may seed the cache: a read of a cycle that contains now,
    and within the bound (a limit stored past it, by hand or by an older sidecar, is not
    trusted; the provider is asked instead, and its answer is checked)."""
    period = _period_of(budget)
    if period is None or not period.contains(now):
        return False
    if budget.limit_read_at is None or not budget.feature:
        return False
    return budget.limit is None or limit_problem(budget.limit) is None
