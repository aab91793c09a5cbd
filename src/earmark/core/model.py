"""The plain data the rules decide on: budgets, holds, charge records and ledger entries."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from earmark import limits
from earmark.core.periods import Calendar, Period
from earmark.core.prices import Shape


class HoldState(enum.IntEnum):
    """A hold's life; the numbers are the wire enum's."""

    HELD = 1
    SETTLED = 2
    EXPIRED = 3
    # The lease passed after a Charge: the provider may have accepted the call, so the hold
    # stays held until the worker settles it late or an operator resolves or releases it.
    IN_DOUBT = 4


# The states in which a hold still keeps its amount (less its charges) from its budgets.
OPEN_STATES = frozenset({HoldState.HELD, HoldState.IN_DOUBT})


class Phase(enum.IntEnum):
    """Which part of a job a hold pays for; the numbers are the wire enum's (unspecified is
    WORK). Only FINAL holds may reach a budget's output escrow."""

    WORK = 1
    FINAL = 2


class OveragePolicy(enum.IntEnum):
    """What a budget does past its limit; the numbers are the wire enum's (unspecified is
    HARD)."""

    HARD = 1
    SOFT = 2


class Outcome(enum.IntEnum):
    """How the worker says its job ended; the numbers are the wire enum's."""

    UNSPECIFIED = 0
    SUCCEEDED = 1
    FAILED = 2
    CANCELLED = 3
    # The caller cannot tell whether the work ran: the hold goes into doubt at once.
    UNKNOWN = 4


class RefusalReason(enum.IntEnum):
    """Why a Reserve was refused; the numbers are the wire enum's."""

    UNSPECIFIED = 0
    INSUFFICIENT_BUDGET = 1
    LIMIT_UNAVAILABLE = 2
    RATE_LIMITED = 3
    # Issue 47's run limits: holds open at once, admissions spent, closed.
    TOO_MANY_OPEN = 4
    ADMISSIONS_SPENT = 5
    CLOSED = 6
    # In a region (issue 48): its share's lease ended, or ends too soon for the hold.
    SHARE_LEASE_ENDED = 7
    HOLD_OUTLIVES_SHARE = 8


class BudgetMode(enum.IntEnum):
    """Whether a budget refuses what it has no room for; the numbers are the wire enum's
    (unspecified is ENFORCE). OBSERVE admits it and says it would have refused."""

    ENFORCE = 1
    OBSERVE = 2


class ThresholdBasis(enum.IntEnum):
    """What a budget's thresholds are shares of the limit of; the numbers are the wire
    enum's (unspecified is COMMITTED). COMMITTED: used + held, money spent and money held
    for calls still running; USED: settled spend only."""

    COMMITTED = 1
    USED = 2


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
    # A dispatched hold's lease passed: nothing moves, the row marks when.
    IN_DOUBT = "in_doubt"
    # An operator settled an in-doubt hold, or released a stuck one.
    RESOLVE = "resolve"
    RELEASE = "release"
    # An operator changed the limit, or a temporary one ended (core.raises): nothing moves.
    LIMIT = "limit"
    # At a budget's home (issue 48): a region's share granted, returned or reported on, and
    # an expired share taken back.
    SHARE = "share"
    RECLAIM = "reclaim"


@dataclass(slots=True)
class RateCounts:
    """A budget's sliding rate window, kept on its row: what the minute that began at start
    admitted (admissions, and held amount as units), and what the minute before it did."""

    start: datetime | None = None
    admissions: int = 0
    units: int = 0
    prev_admissions: int = 0
    prev_units: int = 0


@dataclass(slots=True)
class PeriodTotals:
    """A closed period of a budget: the counters the holds reserved in it still move (one
    open across the boundary settles here), and its limit."""

    budget_id: str
    period_no: int
    period_start: datetime | None
    period_end: datetime
    limit: int | None
    used: int = 0
    held: int = 0
    open_reservations: int = 0


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
    # The share of the limit (basis points) that only FINAL holds may reach.
    escrow_bps: int = 0
    overage_policy: OveragePolicy = OveragePolicy.HARD
    # With SOFT: how far past the limit holds may go (None: without bound).
    overage_limit: int | None = None
    # When a SOFT admission first went past the limit (cleared by PutBudget).
    overage_since: datetime | None = None
    archived_at: datetime | None = None
    # The calendar its periods follow (issue 34), and the period its counters are of:
    # number period_no, [period_start, period_end) (both None: it never resets; only
    # period_end: a period was given and starts at that boundary).
    period: Period = Period.NEVER
    timezone: str = ""
    period_anchor: int = 0
    period_no: int = 0
    period_start: datetime | None = None
    period_end: datetime | None = None
    # Notices at these shares of the limit (basis points), and those already noticed in
    # the current period; exceeded_noticed: a SOFT budget's pass of its limit was.
    threshold_bps: tuple[int, ...] = ()
    noticed_bps: tuple[int, ...] = ()
    exceeded_noticed: bool = False
    threshold_basis: ThresholdBasis = ThresholdBasis.COMMITTED
    # Reserves refused for want of room in the current period, the first and the latest;
    # refusing_noticed: budget.refusing was written since the period began or the limit
    # last changed (core.refusals).
    refusals: int = 0
    first_refused_at: datetime | None = None
    last_refused_at: datetime | None = None
    refusing_noticed: bool = False
    mode: BudgetMode = BudgetMode.ENFORCE
    # Rate windows: at most so many admissions, and so much held amount, a minute.
    admissions_per_minute: int | None = None
    units_per_minute: int | None = None
    rate: RateCounts = field(default_factory=lambda: RateCounts())
    # Run limits (issue 47): at most so many holds open at once, so many Reserves admitted
    # (in the period, with one), and nothing admitted from closes_at on. admissions counts
    # the current period's (or the life's) admitted Reserves.
    max_open_holds: int | None = None
    max_admissions: int | None = None
    closes_at: datetime | None = None
    admissions: int = 0
    # Holds still open that were reserved in its closed periods (each period's own count is
    # its open_reservations): max_open_holds counts them with the current period's.
    open_earlier: int = 0
    # A temporary limit (issue 47): limit is in force until limit_until, then limit_after
    # (None: unlimited); limit_reason says why it was set.
    limit_until: datetime | None = None
    limit_after: int | None = None
    limit_reason: str = ""
    # In a region (issue 48): the budget is a share of one homed elsewhere, its limit the
    # share's level, and this the share's lease (the region's view); None: not a share.
    share_until: datetime | None = None
    # The template it was made from and the template's version it has; changed_by_hand: an
    # operator put or updated it since, so the template's changes no longer reach it.
    template_id: str | None = None
    template_version: int = 0
    changed_by_hand: bool = False

    def calendar(self) -> Calendar:
        return Calendar(self.period, self.timezone, self.period_anchor)

    def exceeded(self) -> bool:
        """Spend past the limit is recorded in full; this says it happened."""
        return self.limit is not None and self.used > self.limit

    def remaining(self) -> int | None:
        """What a new hold may still take; None for an unlimited budget."""
        if self.limit is None:
            return None
        return max(0, self.limit - self.used - self.held)

    def cap(self, phase: Phase) -> int | None:
        """What used + held may reach for a hold of phase under a HARD policy: the limit,
        less the output escrow for WORK; None for an unlimited budget."""
        if self.limit is None:
            return None
        if phase is Phase.FINAL or not self.escrow_bps:
            return self.limit
        return self.limit * (limits.bps_per_unit - self.escrow_bps) // limits.bps_per_unit

    def ceiling(self, phase: Phase) -> int | None:
        """What used + held may reach for a hold of phase: the cap, and under SOFT the
        overage beyond it; None when nothing bounds it."""
        cap = self.cap(phase)
        if cap is None or self.overage_policy is OveragePolicy.HARD:
            return cap
        return None if self.overage_limit is None else cap + self.overage_limit


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
    # The other budgets it holds the same amount on, in the order the Reserve named them.
    also_budget_ids: tuple[str, ...] = ()
    # A Charge was made: from then on the provider may have accepted the call.
    dispatched: bool = False
    phase: Phase = Phase.WORK
    # The period of each of budget_ids() it was reserved in (empty: period 0 of each).
    periods: tuple[int, ...] = ()

    def period_on(self, index: int) -> int:
        """The period of budget_ids()[index] this hold belongs to."""
        return self.periods[index] if self.periods else 0

    def held(self) -> int:
        """What this hold still keeps from each of its budgets."""
        return self.amount - self.charged if self.state in OPEN_STATES else 0

    def budget_ids(self) -> tuple[str, ...]:
        """Every budget this hold holds on: its own first."""
        return (self.budget_id, *self.also_budget_ids)


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
    # The budget's period the change counts in.
    period_no: int = 0
    # A limit entry's (core.raises): the limits before and after, until when the new one is
    # in force (None: from now on), and why.
    limit_before: int | None = None
    limit_after: int | None = None
    limit_until: datetime | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Policies:
    """What PutBudget sets of a budget's policies (issue 34): the calendar its periods
    follow, its threshold notices, its mode and its rate windows."""

    calendar: Calendar = field(default_factory=lambda: Calendar(Period.NEVER))
    threshold_bps: tuple[int, ...] = ()
    mode: BudgetMode = BudgetMode.ENFORCE
    admissions_per_minute: int | None = None
    units_per_minute: int | None = None
    threshold_basis: ThresholdBasis = ThresholdBasis.COMMITTED
    # Run limits (issue 47).
    max_open_holds: int | None = None
    max_admissions: int | None = None
    closes_at: datetime | None = None

    def applied(self, spec: Budget) -> Budget:
        """spec with these policies."""
        return replace(
            spec,
            period=self.calendar.period,
            timezone=self.calendar.timezone,
            period_anchor=self.calendar.anchor,
            threshold_bps=self.threshold_bps,
            mode=self.mode,
            admissions_per_minute=self.admissions_per_minute,
            units_per_minute=self.units_per_minute,
            threshold_basis=self.threshold_basis,
            max_open_holds=self.max_open_holds,
            max_admissions=self.max_admissions,
            closes_at=self.closes_at,
        )
