"""Prometheus metrics, one registry per server so that several servers can share a process."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

# The _created series double every counter for little use; Earmark exports none of them.
disable_created_metrics()  # type: ignore[no-untyped-call]

_LATENCY_BUCKETS_SECONDS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.0,
)
_BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """Every metric Earmark exports; label values come from closed sets only."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.reservations = Counter(
            "earmark_reservations",
            "Reserve decisions by outcome (admitted, refused, duplicate) and refusal reason.",
            ["outcome", "reason"],
            registry=r,
        )
        self.reserved_units = Counter(
            "earmark_reserved_units", "Units newly held by admitted reservations.", registry=r
        )
        self.charges = Counter(
            "earmark_charges",
            "Charges decided, by whether they were capped.",
            ["capped"],
            registry=r,
        )
        self.charged_units = Counter(
            "earmark_charged_units", "Units charged by Charge and Settle.", registry=r
        )
        self.settles = Counter(
            "earmark_settles",
            "Settles by final state and the worker's outcome.",
            ["state", "outcome"],
            registry=r,
        )
        self.released_units = Counter(
            "earmark_released_units", "Units returned to budgets by Settle.", registry=r
        )
        self.overshoot_events = Counter(
            "earmark_overshoot_events", "Settles whose usage ran past the hold.", registry=r
        )
        self.overshoot_units = Counter(
            "earmark_overshoot_units", "Units used beyond their holds.", registry=r
        )
        self.expired_holds = Counter(
            "earmark_sweeper_expired_holds",
            "Holds closed because their lease passed.",
            registry=r,
        )
        self.tx_retries = Counter(
            "earmark_tx_serialization_retries",
            "Transactions run again after a conflict.",
            registry=r,
        )
        self.batch_size = Histogram(
            "earmark_group_admission_batch_size",
            "Operations decided per transaction.",
            buckets=_BATCH_SIZE_BUCKETS,
            registry=r,
        )
        self.rpc_duration = Histogram(
            "earmark_rpc_duration_seconds",
            "RPC latency by method and status code.",
            ["method", "code"],
            buckets=_LATENCY_BUCKETS_SECONDS,
            registry=r,
        )
