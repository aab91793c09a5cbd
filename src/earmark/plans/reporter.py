"""The meter reporter: sends each account's newest used total per feature and cycle to the
provider's meter, from the outbox the batches write.

Every sidecar runs one. A claim is a lease on the reporter's own row in meter_sent (a
conditional upsert in a short transaction, for limits.report_claim_seconds), so that no
transaction stays open across an HTTP call, two reporters never send one total at once,
and the batches that write meter_outbox never conflict with a report. A report is
absolute, so sending one twice (after a crash between the call and its record) changes
nothing. A failed report is tried again with full-jitter backoff, and never before the
provider's own retry time (a 429's RateLimit-Reset). A report the provider refused for
good (ProviderRejected) is parked: that version is not sent again, a newer total is.

The meter converges on the database's total: a report that timed out after it was sent
may still be applied by the provider, late, over a newer total sent in between. Its
deadline (now + provider_timeout_seconds) is recorded as unknown_until, and the newest
total is sent once more after it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta

import structlog

from earmark import limits
from earmark.metrics import Metrics
from earmark.plans.provider import LimitsProvider, ProviderRejected, ProviderUnavailable
from earmark.store.cycles import Report
from earmark.store.interface import Meter

log = structlog.get_logger("earmark.reporter")

# The code a total is parked with when its period ended before it was sent.
PERIOD_CLOSED = "PERIOD_CLOSED"


class Reporter:
    def __init__(
        self,
        store: Meter,
        provider: LimitsProvider,
        metrics: Metrics,
        clock: Callable[[], datetime],
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._provider = provider
        self._metrics = metrics
        self._clock = clock
        self._rng = rng or random.Random()

    def backoff(self, attempts: int) -> timedelta:
        ceiling = min(
            limits.report_backoff_seconds_max,
            limits.report_backoff_seconds_base * 2 ** min(attempts, 30),
        )
        return timedelta(seconds=self._rng.uniform(0.0, ceiling))

    async def report_once(self) -> int:
        """Sends what is due, at most limits.report_batch_size_max totals; returns how many
        were sent."""
        sent = 0
        for report in await self._store.claim_reports():
            sent += await self._report(report)
        await self.refresh_gauges()
        return sent

    async def _report(self, report: Report) -> int:
        """Sends one claimed total and records what came of it; 1 when it was sent."""
        about = {
            "account": report.account,
            "feature": report.feature,
            "cycle_start": report.cycle_start.isoformat(),
            "total": report.total,
        }
        if report.period_end is not None and report.period_end <= self._clock():
            # The provider books a report to the period open when it arrives: a closed
            # period's total sent now would overwrite the open period's. It is parked as
            # the provider last heard it, and counted.
            self._metrics.meter_reports.labels("period_closed").inc()
            log.warning("meter_period_closed", **about)
            await self._store.park_report(report, PERIOD_CLOSED)
            return 0
        try:
            await self._provider.report_usage(
                report.account, report.feature, report.total, report.at
            )
        except ProviderRejected as error:
            self._metrics.meter_reports.labels("rejected").inc()
            self._metrics.meter_rejected.inc()
            log.error("meter_report_rejected", **about, code=error.code, error=str(error))
            await self._store.park_report(report, error.code)
            return 0
        except ProviderUnavailable as error:
            self._metrics.meter_reports.labels("failed").inc()
            log.warning(
                "meter_report_failed",
                **about,
                attempts=report.attempts + 1,
                outcome_unknown=error.outcome_unknown,
                error=str(error),
            )
            now = self._clock()
            next_attempt_at = now + self.backoff(report.attempts)
            if error.retry_at is not None:
                next_attempt_at = max(next_attempt_at, error.retry_at)
            unknown_until = None
            if error.outcome_unknown:
                unknown_until = now + timedelta(seconds=limits.provider_timeout_seconds)
            await self._store.mark_report(report, next_attempt_at, unknown_until=unknown_until)
            return 0
        self._metrics.meter_reports.labels("sent").inc()
        log.info("meter_reported", **about)
        await self._store.mark_report(report, None)
        return 1

    async def refresh_gauges(self) -> None:
        depth, oldest = await self._store.outbox_state()
        self._metrics.meter_outbox_depth.set(depth)
        lag = 0.0 if oldest is None else (self._clock() - oldest).total_seconds()
        self._metrics.meter_report_lag.set(max(0.0, lag))
