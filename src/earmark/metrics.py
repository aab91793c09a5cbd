"""Prometheus metrics: one registry per sidecar, so that several can share a process.

Every label takes values from a closed set (outcomes, reasons, methods, status codes,
units), except budget_id on the per-budget gauges, which are exported for at most
--metrics-budgets-max budgets: the most used relative to their limits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

import earmark
from earmark import logging as earmark_logging
from earmark.core.model import Budget, UnitTotals
from earmark.core.prices import MICROS_PER_DOLLAR, USD_MICROS

# The _created series double every counter for little use; Earmark exports none of them.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY_BUCKETS_SECONDS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.0,
)  # fmt: skip
_BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# used / held at settle: below 1 the estimate was generous, above 1 the job overshot.
_USED_RATIO_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 5.0)
# What came of a notice's attempt (earmark.notices.deliver); each series is exported from
# the start, at 0, so that a rate over it is defined before the first notice.
NOTICE_OUTCOMES = ("delivered", "retried", "failed")


class LogDrops(Collector):
    """earmark_log_records_dropped_total: the process's log lines that could not be
    written (earmark.logging), read at each scrape from the one sink a process has."""

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "earmark_log_records_dropped",
            "Log lines dropped because they could not be written (a full disk, a closed "
            "pipe); the calls that logged them went on.",
            value=earmark_logging.records_dropped(),
        )


class Metrics:
    """Every metric Earmark exports."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        # The series of each replaced gauge (_replace), for removing those that left.
        self._series: dict[Gauge, set[tuple[str, ...]]] = {}
        # The process's CPU, memory and file descriptors (process_*) and the Python it runs
        # on, beside the build's version: what a dashboard needs to tell sidecars apart.
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        Info("earmark_build", "The running sidecar's version.", registry=self.registry).info(
            {"version": earmark.__version__}
        )
        self._decisions(self.registry)
        self._internals(self.registry)
        self._outside(self.registry)
        self._gauges(self.registry)
        self._regions(self.registry)
        self.registry.register(LogDrops())
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Counter | Histogram, *values: str) -> Any:
        """metric.labels(*values), looked up once: labels() checks its values and takes a
        lock on every call (1.4 us, several per Reserve and Settle), a dict lookup does
        not. Label values come from closed sets (see the module's docstring), so this
        holds no more children than prometheus_client itself keeps."""
        key = (id(metric), values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def _decisions(self, r: CollectorRegistry) -> None:
        """What the sidecar decided: reservations, charges, settles, overshoot."""
        self.reservations = Counter(
            "earmark_reservations",
            "Reserve decisions by outcome (admitted, refused, duplicate) and refusal reason.",
            ["outcome", "reason"],
            registry=r,
        )
        self.would_refuse = Counter(
            "earmark_would_refuse",
            "Reserves admitted by a budget in OBSERVE mode that ENFORCE would have refused, "
            "by the reason it would have given.",
            ["reason"],
            registry=r,
        )
        for reason in ("insufficient_budget", "rate_limited"):
            self.would_refuse.labels(reason)
        # Counters of units carry the budget's unit (at most limits.units_max values), so
        # that tokens and micro-dollars are never added together.
        self.reserved_units = Counter(
            "earmark_reserved_units", "Units newly held by admitted reservations, by unit.",
            ["unit"], registry=r,
        )  # fmt: skip
        self.charges = Counter(
            "earmark_charges", "Charges decided, by whether they were capped.", ["capped"],
            registry=r,
        )  # fmt: skip
        self.charged_units = Counter(
            "earmark_charged_units",
            "Units spent, by unit: charged by Charge, and by Settle beyond what Charges took.",
            ["unit"], registry=r,
        )  # fmt: skip
        self.settles = Counter(
            "earmark_settles", "Settles by final state and the worker's outcome.",
            ["state", "outcome"], registry=r,
        )  # fmt: skip
        self.released_units = Counter(
            "earmark_released_units", "Units returned to budgets by Settle, by unit.",
            ["unit"], registry=r,
        )  # fmt: skip
        self.overshoot_events = Counter(
            "earmark_overshoot_events", "Settles whose usage ran past the hold.", registry=r
        )
        self.overshoot_units = Counter(
            "earmark_overshoot_units", "Units used beyond their holds, by unit.", ["unit"],
            registry=r,
        )  # fmt: skip
        self.used_ratio = Histogram(
            "earmark_settle_used_ratio",
            "used / held at settle: how good the estimates are.",
            buckets=_USED_RATIO_BUCKETS,
            registry=r,
        )
        self.estimate_ratio = Histogram(
            "earmark_estimate_used_ratio",
            "used / held at settle, by where the hold's amount came from (caller, shape, "
            "default, job_median, job_p75, job_max).",
            ["source"],
            buckets=_USED_RATIO_BUCKETS,
            registry=r,
        )

    def _internals(self, r: CollectorRegistry) -> None:
        """How it got there: sweeps, retries, batches, latency."""
        self.expired_holds = Counter(
            "earmark_sweeper_expired_holds", "Holds closed because their lease passed.",
            registry=r,
        )  # fmt: skip
        self.late_settles = Counter(
            "earmark_late_settles", "Settles that arrived after their hold expired.", registry=r
        )
        self.in_doubt_closed = Counter(
            "earmark_in_doubt_closed", "In-doubt holds closed, by how (settle, resolve, release).",
            ["how"], registry=r,
        )  # fmt: skip
        self.overage_admissions = Counter(
            "earmark_overage_admissions", "Holds a SOFT budget admitted past its limit.",
            registry=r,
        )  # fmt: skip
        self.tx_retries = Counter(
            "earmark_tx_serialization_retries", "Transactions run again after a conflict.",
            registry=r,
        )  # fmt: skip
        self.tx_retries_exhausted = Counter(
            "earmark_tx_retries_exhausted",
            "Transactions that lost every attempt to conflicts (answered UNAVAILABLE).",
            registry=r,
        )
        self.batch_size = Histogram(
            "earmark_group_admission_batch_size", "Operations decided per transaction.",
            buckets=_BATCH_SIZE_BUCKETS, registry=r,
        )  # fmt: skip
        self.rpc_rejected = Counter(
            "earmark_rpc_rejected",
            "Calls refused at the edge before a servicer ran, by reason "
            "(undecodable, unauthenticated, streams).",
            ["reason"],
            registry=r,
        )
        self.background_errors = Counter(
            "earmark_background_errors",
            "Passes of a background loop (sweeper, database-watch, gauges, repricer, reporter) "
            "that failed; each is logged as background_failed and retried after a backoff.",
            ["loop"],
            registry=r,
        )
        self.database_restarts = Counter(
            "earmark_embedded_database_restarts",
            "Times the sidecar restarted its embedded PostgreSQL after it died.",
            registry=r,
        )
        self.rpc_duration = Histogram(
            "earmark_rpc_duration_seconds", "RPC latency by method and status code.",
            ["method", "code"], buckets=_LATENCY_BUCKETS_SECONDS, registry=r,
        )  # fmt: skip

    def _outside(self, r: CollectorRegistry) -> None:
        """What went out of the sidecar: the provider's meter and answers, the plans file,
        and budget notices."""
        self.meter_reports = Counter(
            "earmark_meter_reports", "Usage totals sent to the provider's meter, by result.",
            ["result"], registry=r,
        )  # fmt: skip
        self.meter_rejected = Counter(
            "earmark_meter_rejected",
            "Usage totals the provider refused for good (Kinde's 400): parked, not retried; "
            "the provider's code is in the meter_report_rejected log.",
            registry=r,
        )
        self.provider_answers = Counter(
            "earmark_provider_answers",
            "Provider answers that were not a success, by call (token, entitlements, "
            "agreements, meter_usage) and status (bad_request, forbidden, rate_limited, "
            "server_error, other).",
            ["call", "status"],
            registry=r,
        )
        self.plans_file_reloads = Counter(
            "earmark_plans_file_reloads",
            "Changes of the plans file (--limits-provider file) read again, by result: loaded, "
            "or rejected (the last good plans kept).",
            ["result"], registry=r,
        )  # fmt: skip
        self.notices = Counter(
            "earmark_notices",
            "Budget notices posted to --notify-url, by outcome: delivered (answered 2xx), "
            "retried (an attempt failed; tried again later) or failed (given up).",
            ["outcome"],
            registry=r,
        )
        for outcome in NOTICE_OUTCOMES:
            self.notices.labels(outcome)
        self.notices_undelivered = Gauge(
            "earmark_notices_undelivered",
            "Budget notices neither delivered nor given up (database; set while --notify-url is).",
            registry=r,
        )
        self.meter_outbox_depth = Gauge(
            "earmark_meter_outbox_depth",
            "Cycle totals waiting to be reported to the provider's meter (database).",
            registry=r,
        )
        self.meter_report_lag = Gauge(
            "earmark_meter_report_lag_seconds",
            "Age of the oldest total not yet reported to the provider's meter (database).",
            registry=r,
        )

    def _gauges(self, r: CollectorRegistry) -> None:
        """The state of the database, refreshed in the background."""
        self.database_up = Gauge(
            "earmark_database_up", "1 while the database answers, else 0.", registry=r
        )
        self.open_holds = Gauge(
            "earmark_open_holds", "Open holds in the database, by unit.", ["unit"], registry=r
        )
        self.in_doubt_holds = Gauge(
            "earmark_in_doubt_holds", "Holds in doubt: dispatched, their lease passed, unsettled.",
            registry=r,
        )  # fmt: skip
        self.in_doubt_oldest_seconds = Gauge(
            "earmark_in_doubt_oldest_seconds",
            "How long the oldest in-doubt hold has been in doubt (0 without one).", registry=r,
        )  # fmt: skip
        self.budgets_in_overage = Gauge(
            "earmark_budgets_in_overage",
            "SOFT budgets that admitted past their limit since their last PutBudget.", registry=r,
        )  # fmt: skip
        self.open_held_units = Gauge(
            "earmark_open_held_units", "Units held by open holds, by unit.", ["unit"], registry=r
        )
        self.held_dollars = Gauge(
            "earmark_held_dollars", "Dollars held by open holds of usd_micros budgets.",
            registry=r,
        )  # fmt: skip
        self.spent_dollars = Gauge(
            "earmark_spent_dollars", "Dollars used (charged and settled) by usd_micros budgets.",
            registry=r,
        )  # fmt: skip
        self.budget_limit = Gauge(
            "earmark_budget_limit", "A budget's limit (exported budgets only).",
            ["budget_id", "unit"], registry=r,
        )  # fmt: skip
        self.budget_used = Gauge(
            "earmark_budget_used", "A budget's used units.", ["budget_id", "unit"], registry=r
        )
        self.budget_held = Gauge(
            "earmark_budget_held", "A budget's held units.", ["budget_id", "unit"], registry=r
        )
        self.budget_remaining = Gauge(
            "earmark_budget_remaining", "What a budget has left.", ["budget_id", "unit"],
            registry=r,
        )  # fmt: skip
        self.budget_refusals = Gauge(
            "earmark_budget_refusals",
            "Reserves a budget refused for want of room in its current period (0 again at "
            "its next; exported budgets only).",
            ["budget_id", "unit"], registry=r,
        )  # fmt: skip
        self.budgets_exported = Gauge(
            "earmark_budgets_exported", "Budgets with per-budget gauges (at most the cap).",
            registry=r,
        )  # fmt: skip

    def set_open_holds(self, by_unit: Sequence[UnitTotals]) -> None:
        """Replaces the per-unit gauges, and the dollar gauges from the usd_micros row."""
        self._replace(self.open_holds, {(t.unit,): t.open_holds for t in by_unit})
        self._replace(self.open_held_units, {(t.unit,): t.held for t in by_unit})
        dollars = next((t for t in by_unit if t.unit == USD_MICROS), None)
        self.held_dollars.set(dollars.held / MICROS_PER_DOLLAR if dollars else 0)
        self.spent_dollars.set(dollars.used / MICROS_PER_DOLLAR if dollars else 0)

    def _regions(self, r: CollectorRegistry) -> None:
        """Budgets across regions (issue 48, docs/regions.md), at a budget's home and in a
        region."""
        self.region_share_units = Gauge(
            "earmark_region_share_units",
            "At a budget's home: the escrow leased to each region and not yet used or given "
            "back, over all budgets.", ["region"], registry=r,
        )  # fmt: skip
        self.region_heard_seconds = Gauge(
            "earmark_region_heard_seconds",
            "At a budget's home: seconds since each region last reached it.", ["region"],
            registry=r,
        )  # fmt: skip
        self.region_reclaimed_units = Counter(
            "earmark_region_reclaimed_units",
            "At a budget's home: escrow taken back from shares whose lease ended.", registry=r,
        )  # fmt: skip
        self.region_home_silence_seconds = Gauge(
            "earmark_region_home_silence_seconds",
            "In a region: seconds since the home last answered it (since the start, before "
            "the first answer).", registry=r,
        )  # fmt: skip
        self.region_room_units = Gauge(
            "earmark_region_room_units",
            "In a region: what its shares may still admit alone, over all budgets.", registry=r,
        )  # fmt: skip
        self.region_asks = Counter(
            "earmark_region_asks",
            "In a region: calls to the home, by kind (background: renewals, top ups and "
            "reports; reserve: a Reserve waiting on what it needs) and outcome (answered, "
            "failed).", ["kind", "outcome"], registry=r,
        )  # fmt: skip

    def set_regions(self, seen: Sequence[tuple[str, int, float]]) -> None:
        """At a budget's home: each region's escrow and seconds since it was heard."""
        self._replace(self.region_share_units, {(name,): out for name, out, _ in seen})
        self._replace(self.region_heard_seconds, {(name,): ago for name, _, ago in seen})

    def set_budgets(self, budgets: Sequence[Budget]) -> None:
        """Replaces the per-budget gauges, so a budget that left the top drops out."""
        limited = [b for b in budgets if b.limit is not None]
        self._replace(self.budget_limit, {(b.budget_id, b.unit): b.limit or 0 for b in limited})
        self._replace(
            self.budget_remaining,
            {(b.budget_id, b.unit): b.remaining() or 0 for b in limited},
        )
        self._replace(self.budget_used, {(b.budget_id, b.unit): b.used for b in budgets})
        self._replace(self.budget_held, {(b.budget_id, b.unit): b.held for b in budgets})
        self._replace(self.budget_refusals, {(b.budget_id, b.unit): b.refusals for b in budgets})
        self.budgets_exported.set(len(budgets))

    def _replace(self, gauge: Gauge, values: dict[tuple[str, ...], float]) -> None:
        """Sets each of values' series, then removes the series the last replace set that
        values lacks. A scrape between two steps never sees a kept series missing or at 0
        (an alert's `for:` would start again), as it would if the gauge were cleared first."""
        for labels, value in values.items():
            gauge.labels(*labels).set(value)
        for gone in self._series.get(gauge, set()) - values.keys():
            gauge.remove(*gone)
        self._series[gauge] = set(values)
