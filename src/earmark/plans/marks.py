"""The sidecar's side of plan changes pushed: it looks for new plan marks (left by
`earmark kinde-webhooks` when Kinde says an account's plan or agreement changed) and makes
each marked account's next admission read the plan again (PlanGate.forget), instead of
using the read it has for up to --limit-fresh-seconds.

The first pass takes only marks made after it: a sidecar that just started has read no
plan yet, so history has nothing to undo. Marks are read in (marked_at, account) order,
in pages of plan_marks_rows_max. A mark's time is taken inside its transaction, so a mark
that commits late may carry a time before marks already read: each pass therefore looks
back plan_marks_overlap_seconds (a transaction is shorter than a database command's
timeout) and skips the marks it has already applied.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from earmark import limits
from earmark.store.interface import PlanMarks
from earmark.store.marks import Mark

log = structlog.get_logger("earmark.plans")


class MarkWatcher:
    def __init__(
        self,
        store: PlanMarks,
        forget: Callable[[str], None],
        *,
        rows_max: int = limits.plan_marks_rows_max,
        pages_max: int = limits.plan_marks_pages_max,
        overlap_seconds: float = limits.plan_marks_overlap_seconds,
    ) -> None:
        self._store = store
        self._forget = forget
        self._rows_max = rows_max
        self._pages_max = pages_max
        self._overlap = timedelta(seconds=overlap_seconds)
        # None until the first pass: marks up to then are history.
        self._started: datetime | None = None
        # The newest mark applied, and the marks applied within the overlap before it.
        self._newest: datetime | None = None
        self._applied: dict[tuple[str, datetime], None] = {}

    async def poll_once(self) -> int:
        """Applies the marks made since the last pass (at most pages_max pages of
        rows_max); how many accounts it made forget their plans."""
        if self._started is None:
            self._started = await self._store.database_now()
            return 0
        newest = self._newest or self._started
        after = Mark(account="", marked_at=max(self._started, newest - self._overlap))
        forgotten = 0
        for _ in range(self._pages_max):
            page = await self._store.marks_after(after, self._rows_max)
            for mark in page:
                key = (mark.account, mark.marked_at)
                if key in self._applied:
                    continue
                self._forget(mark.account)
                self._applied[key] = None
                forgotten += 1
                log.info("plan_mark_applied", account=mark.account)
                if self._newest is None or mark.marked_at > self._newest:
                    self._newest = mark.marked_at
            if len(page) < self._rows_max:
                break
            after = page[-1]
        self._drop_old()
        return forgotten

    def _drop_old(self) -> None:
        """Forgets applied marks older than the overlap: no pass reads them again."""
        if self._newest is None:
            return
        horizon = self._newest - self._overlap
        for key in [k for k in self._applied if k[1] < horizon]:
            del self._applied[key]
