"""The limit cache: the article's "fail closed when the limit is unknown".

A limit read is used as it is for fresh_seconds (one provider read per account per
interval, however many Reserves ask: concurrent askers share one read). Past that, while it
is younger than stale_seconds, it is still used at once and a new read runs behind it, so a
slow provider never holds up an admission that has a usable limit. With none usable, an
admission waits for the read at most wait_seconds; LimitUnavailable is raised when it fails
or does not come, so that new work is refused. A failed read is not tried again for
retry_seconds, so a provider that is down is not hammered.

Reads carry their time, and a caller may seed the cache with a read it found elsewhere (the
budget row keeps the last read and its time), so a restarted or second sidecar knows how
stale a limit is.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from earmark import limits
from earmark.core.bounds import limit_problem, shown
from earmark.plans.provider import Limits, LimitsProvider, ProviderUnavailable

log = structlog.get_logger("earmark.plans")


@dataclass(frozen=True, slots=True)
class LimitRead:
    limits: Limits
    read_at: datetime


class LimitUnavailable(Exception):
    """No limit read is recent enough to admit on."""


class LimitCache:
    def __init__(
        self,
        provider: LimitsProvider,
        clock: Callable[[], datetime],
        *,
        fresh_seconds: float = limits.limit_fresh_seconds_default,
        stale_seconds: float = limits.limit_stale_seconds_default,
        retry_seconds: float = limits.limit_retry_seconds,
        accounts_max: int = limits.limit_cache_accounts_max,
        wait_seconds: float = limits.limit_wait_seconds_max,
    ) -> None:
        assert 0 < fresh_seconds <= stale_seconds
        self.provider = self._provider = provider
        self._clock = clock
        self._fresh = timedelta(seconds=fresh_seconds)
        self._stale = timedelta(seconds=stale_seconds)
        self._retry = timedelta(seconds=retry_seconds)
        self._accounts_max = accounts_max
        assert 0 < wait_seconds <= limits.limit_wait_seconds_max
        self.wait_seconds = self._wait_seconds = wait_seconds
        self._reads: OrderedDict[str, LimitRead] = OrderedDict()
        self._failed_at: dict[str, datetime] = {}
        self._inflight: dict[str, asyncio.Task[LimitRead]] = {}
        # Every provider read of this sidecar (the gate's period reads too) takes a slot.
        self.reading_slots = asyncio.Semaphore(limits.provider_reads_concurrent_max)
        # Accounts whose plan is known to have changed (a webhook): their next admission
        # waits for a new read instead of using the one remembered.
        self._changed: set[str] = set()

    def seed(self, account: str, read: LimitRead) -> None:
        """Remembers a read made elsewhere, unless a newer one is known."""
        known = self._reads.get(account)
        if known is None or known.read_at < read.read_at:
            self._remember(account, read)

    def forget(self, account: str) -> None:
        """The account's plan changed: its next admission waits (at most wait_seconds) for a
        new read; the remembered one answers only if that read fails."""
        if account in self._reads:
            self._changed.add(account)

    def forget_all(self) -> None:
        """Every account's plan may have changed (the plans file was edited): each one's
        next admission waits for a new read."""
        self._changed = set(self._reads)

    def knows(self, account: str) -> bool:
        return account in self._reads

    async def close(self) -> None:
        """Stops the reads still running (behind admissions), before the provider closes."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def last_read(self, account: str) -> LimitRead | None:
        """The newest read known for account, whatever its age."""
        return self._reads.get(account)

    def reading(self, account: str) -> bool:
        """Whether a provider read of account runs now (behind an admission, say)."""
        return account in self._inflight

    async def get(self, account: str, *, force: bool = False) -> LimitRead:
        """A read young enough to admit on. Fresh (younger than fresh_seconds): as it is.
        Past that but younger than stale_seconds: as it is too, while a read of the
        provider runs behind it, so that an admission never waits on a slow provider while
        a usable value exists. None usable (or force): the provider's read is waited for, at
        most wait_seconds; LimitUnavailable when it fails or does not come in time."""
        now = self._clock()
        known = self._reads.get(account)
        force = force or account in self._changed
        if not force and known is not None and now - known.read_at < self._fresh:
            return known
        failed = self._failed_at.get(account)
        retry = failed is None or now - failed >= self._retry or account in self._inflight
        if not force and known is not None and now - known.read_at < self._stale:
            if retry:
                self._read_task(account)
            return known
        if force or retry:
            try:
                return await asyncio.wait_for(
                    asyncio.shield(self._read_task(account)), self._wait_seconds
                )
            except ProviderUnavailable as error:
                reason = str(error)
            except TimeoutError:
                # The read goes on behind; the next admission may find it done.
                reason = f"the provider did not answer within {self._wait_seconds:g}s"
        else:
            reason = "the provider failed moments ago"
        known = self._reads.get(account)
        if known is not None and self._clock() - known.read_at < self._stale:
            return known
        raise LimitUnavailable(
            f"account {account!r}: no limit read in the last {self._stale.total_seconds():g}s "
            f"({reason})"
        )

    def _read_task(self, account: str) -> asyncio.Task[LimitRead]:
        """The account's provider read, started unless one runs: one at a time, shared by
        every caller. It is a task of its own, so that a caller that gives up (a deadline,
        a cancellation) does not cancel it for the others."""
        task = self._inflight.get(account)
        if task is None:
            task = asyncio.create_task(self._read(account), name=f"earmark-limits-{account}")
            self._inflight[account] = task
            task.add_done_callback(lambda done: self._finished(account, done))
        return task

    async def _read(self, account: str) -> LimitRead:
        try:
            async with self.reading_slots:
                found = await self._provider.read_limits(account)
            # Whichever provider answered, a limit keeps PutBudget's bound before it is used
            # or written: one that does not is a failed read, never a stored or INTERNAL one.
            for feature, maximum in found.items():
                problem = None if maximum is None else limit_problem(maximum)
                if problem is not None:
                    raise ProviderUnavailable(
                        f"{self._provider.name}: feature {shown(feature)}: the maximum {problem}"
                    )
        except ProviderUnavailable as error:
            # Once per failed read, which is at most once per retry_seconds and account:
            # the message names the call and what was wrong (a value cut short), never a
            # credential.
            log.warning("limit_read_failed", account=account, error=str(error))
            self._failed_at.pop(account, None)
            self._failed_at[account] = self._clock()
            while len(self._failed_at) > self._accounts_max:
                self._failed_at.pop(next(iter(self._failed_at)))
            raise
        read = LimitRead(found, self._clock())
        self._remember(account, read)
        self._failed_at.pop(account, None)
        self._changed.discard(account)
        return read

    def _finished(self, account: str, task: asyncio.Task[LimitRead]) -> None:
        if self._inflight.get(account) is task:
            del self._inflight[account]
        # Retrieved here, so that a failure every caller gave up on is not reported as
        # never retrieved; the callers that waited get it re-raised from shield().
        if not task.cancelled():
            task.exception()

    def _remember(self, account: str, read: LimitRead) -> None:
        self._reads[account] = read
        self._reads.move_to_end(account)
        while len(self._reads) > self._accounts_max:
            evicted, _ = self._reads.popitem(last=False)
            self._changed.discard(evicted)
