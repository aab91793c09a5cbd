"""The plain data the rules decide on: budgets, holds, charge records and ledger entries."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from earmark.core.prices import Shape


class HoldState(enum.IntEnum):
    """A hold's life; the numbers are the wire enum's."""

    HELD = 1
    SETTLED = 2
    EXPIRED = 3


class Outcome(enum.IntEnum):
    """How the worker says its job ended; the numbers are the wire enum's."""

    UNSPECIFIED = 0
    SUCCEEDED = 1
    FAILED = 2
    CANCELLED = 3


class RefusalReason(enum.IntEnum):
    """Why a Reserve was refused; the numbers are the wire enum's."""

    UNSPECIFIED = 0
    INSUFFICIENT_BUDGET = 1
    LIMIT_UNAVAILABLE = 2
    RATE_LIMITED = 3


class EstimateSource(enum.IntEnum):
    """Where a hold's amount came from; the numbers are the wire enum's."""

    UNSPECIFIED = 0
    CALLER = 1
    SHAPE = 2
    DEFAULT = 3
    JOB_MEDIAN = 4
    JOB_P75 = 5
    JOB_MAX = 6


# The sources a Reserve with neither amount nor shape may get.
ESTIMATED = frozenset(
    {
        EstimateSource.DEFAULT,
        EstimateSource.JOB_MEDIAN,
        EstimateSource.JOB_P75,
        EstimateSource.JOB_MAX,
    }
)


class EstimatePolicy(enum.IntEnum):
    """How an estimate is learned from a job's samples; the wire's UNSPECIFIED is MEDIAN."""

    MEDIAN = 1
    P75 = 2


class LedgerKind(enum.StrEnum):
    """What moved a budget's used or held."""

    HOLD = "hold"
    CHARGE = "charge"
    SETTLE = "settle"
    EXPIRE = "expire"
    LATE_SETTLE = "late_settle"
    # A hold reserved by shape, moved to the price in effect at its first Charge.
    REPRICE = "reprice"


@dataclass(slots=True)
class Budget:
    """One budget row: the limit (None is unlimited), final usage and open holds."""

    budget_id: str
    limit: int | None
    unit: str
    used: int = 0
    held: int = 0
    open_reservations: int = 0
    default_estimate: int | None = None
    estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN
    # Set on an account's billing-cycle budget: whose, for what, when, and when its limit
    # was last read from the limits provider.
    account: str | None = None
    feature: str | None = None
    cycle_start: datetime | None = None
    cycle_end: datetime | None = None
    limit_read_at: datetime | None = None

    def exceeded(self) -> bool:
        """Spend past the limit is recorded in full; this says it happened."""
        return self.limit is not None and self.used > self.limit

    def remaining(self) -> int | None:
        """What a new hold may still take; None for an unlimited budget."""
        if self.limit is None:
            return None
        return max(0, self.limit - self.used - self.held)


@dataclass(frozen=True, slots=True)
class UnitTotals:
    """Sums over every budget of one unit. Floats: a sum over many budgets can pass a
    64-bit integer, and the gauges they feed are floats anyway."""

    unit: str
    open_holds: float
    held: float
    used: float


@dataclass(slots=True)
class Settlement:
    """What a Settle decided, kept so that a repeated Settle answers the same."""

    used: int
    outcome: Outcome
    charged: int
    released: int
    overshoot: int
    # The price version usage was priced at; 0 when the Settle named an amount.
    price_version: int = 0


@dataclass(slots=True)
class Hold:
    """One reservation. While HELD it holds amount - charged of its budget."""

    reservation_id: str
    budget_id: str
    idempotency_key: str
    amount: int
    lease: timedelta
    expires_at: datetime
    created_at: datetime
    charged: int = 0
    state: HoldState = HoldState.HELD
    labels: dict[str, str] = field(default_factory=dict)
    closed_at: datetime | None = None
    settlement: Settlement | None = None
    # The name of the worker token that made it; "" when the sidecar has no tokens.
    owner: str = ""
    source: EstimateSource = EstimateSource.CALLER
    # The price version the amount was priced at (0: none); a repriced hold's is the new.
    price_version: int = 0
    # What a hold reserved by shape may consume, kept so that it can be repriced.
    shape: Shape | None = None
    job: str = ""

    def held(self) -> int:
        """What this hold still keeps from its budget."""
        return self.amount - self.charged if self.state is HoldState.HELD else 0


@dataclass(frozen=True, slots=True)
class ChargeRecord:
    """The answer to one Charge, keyed by (reservation_id, idempotency_key) for retries."""

    reservation_id: str
    idempotency_key: str
    amount: int
    charged: int
    capped: bool
    total_charged: int
    hold_remaining: int
    # The price version a Charge by usage was priced at; 0 for an amount.
    price_version: int = 0


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One append-only change to a budget's used and held."""

    budget_id: str
    reservation_id: str | None
    kind: LedgerKind
    held_delta: int
    used_delta: int
    at: datetime
