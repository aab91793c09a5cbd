"""What the SDK's calls take and answer: plain values, and their conversions to and from the
wire's messages.

They live apart from the clients and from hold() so that aio.py, sync.py and hold.py all
import them and none imports another for its types.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from earmark import limits
from earmark.core.model import (
    BudgetMode,
    EstimatePolicy,
    EstimateSource,
    HoldState,
    OveragePolicy,
    RefusalReason,
    ThresholdBasis,
)
from earmark.core.periods import Period
from earmark.core.prices import Shape, Usage
from earmark.v1 import budget_pb2 as pb


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How UNAVAILABLE and DEADLINE_EXCEEDED are retried: at most attempts_max calls in
    all, with full-jitter exponential backoff between backoff_seconds_base and
    backoff_seconds_max."""

    attempts_max: int = 5
    backoff_seconds_base: float = 0.05
    backoff_seconds_max: float = 2.0

    def __post_init__(self) -> None:
        if not 1 <= self.attempts_max <= limits.client_attempts_max:
            raise ValueError(
                f"attempts_max must be from 1 to {limits.client_attempts_max}, "
                f"not {self.attempts_max}"
            )
        if not 0 < self.backoff_seconds_base <= limits.client_backoff_seconds_max:
            raise ValueError(
                f"backoff_seconds_base must be over 0 and at most "
                f"{limits.client_backoff_seconds_max}, not {self.backoff_seconds_base}"
            )
        if not self.backoff_seconds_base <= self.backoff_seconds_max:
            raise ValueError(
                f"backoff_seconds_max must be at least backoff_seconds_base "
                f"({self.backoff_seconds_base}), not {self.backoff_seconds_max}"
            )
        if not self.backoff_seconds_max <= limits.client_backoff_seconds_max:
            raise ValueError(
                f"backoff_seconds_max must be at most {limits.client_backoff_seconds_max}, "
                f"not {self.backoff_seconds_max}"
            )

    def backoff(self, attempt: int, rng: random.Random) -> float:
        ceiling = min(self.backoff_seconds_max, self.backoff_seconds_base * 2**attempt)
        return rng.uniform(0.0, ceiling)


def check_timeout(timeout_seconds: float) -> float:
    """timeout_seconds, if it is a deadline a client may have; else a ValueError naming it."""
    if not 0 < timeout_seconds <= limits.client_timeout_seconds_max:
        raise ValueError(
            f"timeout_seconds must be over 0 and at most {limits.client_timeout_seconds_max}, "
            f"not {timeout_seconds}"
        )
    return timeout_seconds


@dataclass(frozen=True, slots=True)
class Reservation:
    """Reserve said yes: the hold's id, amount and lease deadline."""

    reservation_id: str
    budget_id: str
    amount: int
    remaining: int | None
    expires_at: datetime
    message: str
    estimate_source: EstimateSource = EstimateSource.CALLER
    # The price version a shape was priced at; 0 when none was.
    price_version: int = 0
    # Admitted past a SOFT budget's limit (overage_policy is then SOFT).
    over_limit: bool = False
    overage_policy: OveragePolicy = OveragePolicy.HARD
    # What the Reserve's charge charged at once.
    charged: int = 0
    # A hold by shape: the most output tokens to tell the provider, and whether degrade
    # lowered it below what the shape asked.
    max_output_tokens: int = 0
    degraded: bool = False
    # When the budget's period ends and it starts again at zero (None: it never resets).
    resets_at: datetime | None = None
    # Admitted by a budget in OBSERVE mode that would have refused it in ENFORCE, and why
    # (UNSPECIFIED when it would not have).
    would_refuse: bool = False
    would_refuse_reason: RefusalReason = RefusalReason.UNSPECIFIED

    admitted = True


@dataclass(frozen=True, slots=True)
class Refusal:
    """Reserve said no: a normal answer, with why and what is left."""

    budget_id: str
    amount: int
    reason: RefusalReason
    remaining: int | None
    message: str
    # Which budget refused: budget_id, or one of a nested Reserve's also_budget_ids.
    refused_budget_id: str = ""
    # With RATE_LIMITED: how long until the account's window has room again.
    retry_after: timedelta | None = None
    # The policy of the budget that refused.
    overage_policy: OveragePolicy = OveragePolicy.HARD
    # When the budget's period ends and it starts again at zero (None: it never resets).
    resets_at: datetime | None = None

    admitted = False


@dataclass(frozen=True, slots=True)
class Charged:
    """Charge's answer: what was debited, and whether the worker must stop (capped)."""

    charged: int
    capped: bool
    total_charged: int
    hold_remaining: int
    expires_at: datetime
    price_version: int = 0
    # What the Charge asked for: its amount, or its usage priced.
    requested: int = 0
    # A Charge by usage on a money budget: the output rate it was priced at (micro-dollars
    # per million output tokens); with hold_remaining, the output tokens the hold still buys.
    output_per_mtok: int = 0


@dataclass(frozen=True, slots=True)
class Settled:
    """Settle's answer: what was charged in all, returned, and used past the hold."""

    charged: int
    released: int
    overshoot: int
    state: HoldState
    price_version: int = 0


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A budget as Admin answers it; the cycle fields are set on an account's budget, and
    period_start and resets_at (the current period) on a budget that resets."""

    budget_id: str
    limit: int | None
    used: int
    held: int
    remaining: int | None
    unit: str
    open_reservations: int
    default_estimate: int | None = None
    estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN
    exceeded: bool = False
    account: str = ""
    feature: str = ""
    cycle_start: datetime | None = None
    cycle_end: datetime | None = None
    limit_read_at: datetime | None = None
    escrow_bps: int = 0
    overage_policy: OveragePolicy = OveragePolicy.HARD
    overage_limit: int | None = None
    overage_since: datetime | None = None
    archived_at: datetime | None = None
    # Its policies (issue 34): how often it starts again at zero, at the local midnight of
    # the period's first day in timezone ("" is UTC), anchor the weekday (WEEK, 1 Monday to
    # 7 Sunday) or day of the month (MONTH, QUARTER, YEAR) the period starts on (0: the
    # first); the current period, [period_start, resets_at); notices at these shares of
    # the limit in basis points; its mode; and its rate windows (None: no bound).
    period: Period = Period.NEVER
    timezone: str = ""
    period_anchor: int = 0
    period_start: datetime | None = None
    resets_at: datetime | None = None
    mode: BudgetMode = BudgetMode.ENFORCE
    threshold_bps: tuple[int, ...] = ()
    admissions_per_minute: int | None = None
    units_per_minute: int | None = None
    # What the thresholds measure (COMMITTED: used + held; USED: settled spend only), and
    # the Reserves refused for want of room this period, the first and the latest.
    threshold_basis: ThresholdBasis = ThresholdBasis.COMMITTED
    refusals: int = 0
    first_refused_at: datetime | None = None
    last_refused_at: datetime | None = None
    # Its run limits (issue 47): at most max_open_holds holds open at once, at most
    # max_admissions Reserves admitted a period (None: no bound), none admitted from
    # closes_at on; and the Reserves admitted this period. template_id names the template
    # it was made from ("" if none); changed_by_hand, a setting since changed by hand.
    max_open_holds: int | None = None
    max_admissions: int | None = None
    closes_at: datetime | None = None
    admissions: int = 0
    template_id: str = ""
    changed_by_hand: bool = False
    # A temporary limit (issue 47): limit is in force until limit_until, then limit_after
    # (None: unlimited); limit_reason says why. None and "" when there is none.
    limit_until: datetime | None = None
    limit_after: int | None = None
    limit_reason: str = ""


@dataclass(frozen=True, slots=True)
class BudgetTemplate:
    """A budget template as Admin answers it (issue 47): the settings a budget whose id
    matches pattern (one '/'-separated segment '*' alone, as end-user/*) is made with on
    its first Reserve, as put_budget names them; its version, which grows with each put
    (one sequence for every template, so it is not counted from 1), and when it was last
    put; deleted_at once deleted (the budgets made from it stay)."""

    template_id: str
    pattern: str
    limit: int | None
    unit: str
    version: int
    updated_at: datetime | None = None
    deleted_at: datetime | None = None
    default_estimate: int | None = None
    estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN
    escrow_bps: int = 0
    overage_policy: OveragePolicy = OveragePolicy.HARD
    overage_limit: int | None = None
    period: Period = Period.NEVER
    timezone: str = ""
    period_anchor: int = 0
    threshold_bps: tuple[int, ...] = ()
    mode: BudgetMode = BudgetMode.ENFORCE
    admissions_per_minute: int | None = None
    units_per_minute: int | None = None
    threshold_basis: ThresholdBasis = ThresholdBasis.COMMITTED
    max_open_holds: int | None = None
    max_admissions: int | None = None
    closes_at: datetime | None = None


# To the wire.


def shape_message(shape: Shape) -> pb.UsageShape:
    return pb.UsageShape(
        provider=shape.provider,
        model=shape.model,
        input_tokens=shape.input_tokens,
        max_output_tokens=shape.max_output_tokens,
        cached_input_tokens=shape.cached_input_tokens,
        attempts=shape.attempts,
        cache_write_input_tokens=shape.cache_write_input_tokens,
        cache_write_long_input_tokens=shape.cache_write_long_input_tokens,
        service_tier=shape.service_tier,
        max_tool_calls=dict(shape.max_tool_calls),
        output_ceiling=shape.output_ceiling,
    )


def usage_message(usage: Usage) -> pb.TokenUsage:
    return pb.TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        requests=usage.requests,
        provider=usage.provider,
        model=usage.model,
        cache_write_input_tokens=usage.cache_write_input_tokens,
        cache_write_long_input_tokens=usage.cache_write_long_input_tokens,
        service_tier=usage.service_tier,
        tool_calls=dict(usage.tool_calls),
    )


def duration_message(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


# From the wire.


def _time(
    message: pb.BudgetState | pb.ReserveResponse | pb.PutBudgetRequest | pb.BudgetTemplate,
    name: str,
) -> datetime | None:
    """A Timestamp field as an aware datetime, or None when it is not set."""
    if not message.HasField(name):
        return None
    stamp: Timestamp = getattr(message, name)
    return stamp.ToDatetime(tzinfo=UTC)


def _policy(value: int) -> OveragePolicy:
    """The wire's OveragePolicy; unspecified is HARD."""
    return OveragePolicy(value or OveragePolicy.HARD)


def _mode(value: int) -> BudgetMode:
    """The wire's BudgetMode; unspecified is ENFORCE."""
    return BudgetMode(value or BudgetMode.ENFORCE)


def reserve_answer(reply: pb.ReserveResponse, budget_id: str) -> Reservation | Refusal:
    """Reserve's answer: a Reservation, or a Refusal (a normal answer, not an error)."""
    remaining = reply.remaining if reply.HasField("remaining") else None
    if not reply.admitted:
        retry_after = reply.retry_after.ToTimedelta() if reply.HasField("retry_after") else None
        return Refusal(
            reply.budget_id or budget_id,
            reply.amount,
            RefusalReason(reply.reason),
            remaining,
            reply.message,
            reply.refused_budget_id,
            retry_after,
            _policy(reply.overage_policy),
            _time(reply, "resets_at"),
        )
    return Reservation(
        reservation_id=reply.reservation_id,
        budget_id=reply.budget_id or budget_id,
        amount=reply.amount,
        remaining=remaining,
        expires_at=reply.expires_at.ToDatetime(tzinfo=UTC),
        message=reply.message,
        estimate_source=EstimateSource(reply.estimate_source),
        price_version=reply.price_version,
        over_limit=reply.over_limit,
        overage_policy=_policy(reply.overage_policy),
        charged=reply.charged,
        max_output_tokens=reply.max_output_tokens,
        degraded=reply.degraded,
        resets_at=_time(reply, "resets_at"),
        would_refuse=reply.would_refuse,
        would_refuse_reason=RefusalReason(reply.would_refuse_reason),
    )


def charged_of(reply: pb.ChargeResponse) -> Charged:
    return Charged(
        charged=reply.charged,
        capped=reply.capped,
        total_charged=reply.total_charged,
        hold_remaining=reply.hold_remaining,
        expires_at=reply.expires_at.ToDatetime(tzinfo=UTC),
        price_version=reply.price_version,
        requested=reply.requested,
        output_per_mtok=reply.output_usd_micros_per_mtok,
    )


def settled_of(reply: pb.SettleResponse) -> Settled:
    return Settled(
        reply.charged,
        reply.released,
        reply.overshoot,
        HoldState(reply.state),
        reply.price_version,
    )


def budget_state_of(reply: pb.BudgetState) -> BudgetState:
    def optional(name: str) -> int | None:
        return getattr(reply, name) if reply.HasField(name) else None

    return BudgetState(
        budget_id=reply.budget_id,
        limit=optional("limit"),
        used=reply.used,
        held=reply.held,
        remaining=optional("remaining"),
        unit=reply.unit,
        open_reservations=reply.open_reservations,
        default_estimate=optional("default_estimate"),
        estimate_policy=EstimatePolicy(reply.estimate_policy or EstimatePolicy.MEDIAN),
        exceeded=reply.exceeded,
        account=reply.account,
        feature=reply.feature,
        cycle_start=_time(reply, "cycle_start"),
        cycle_end=_time(reply, "cycle_end"),
        limit_read_at=_time(reply, "limit_read_at"),
        escrow_bps=reply.escrow_bps,
        overage_policy=_policy(reply.overage_policy),
        overage_limit=optional("overage_limit"),
        overage_since=_time(reply, "overage_since"),
        archived_at=_time(reply, "archived_at"),
        period=Period(reply.period),
        timezone=reply.timezone,
        period_anchor=reply.period_anchor,
        period_start=_time(reply, "period_start"),
        resets_at=_time(reply, "resets_at"),
        mode=_mode(reply.mode),
        threshold_bps=tuple(reply.threshold_bps),
        admissions_per_minute=optional("admissions_per_minute"),
        units_per_minute=optional("units_per_minute"),
        threshold_basis=ThresholdBasis(reply.threshold_basis or ThresholdBasis.COMMITTED),
        refusals=reply.refusals,
        first_refused_at=_time(reply, "first_refused_at"),
        last_refused_at=_time(reply, "last_refused_at"),
        max_open_holds=optional("max_open_holds"),
        max_admissions=optional("max_admissions"),
        closes_at=_time(reply, "closes_at"),
        admissions=reply.admissions,
        template_id=reply.template_id,
        changed_by_hand=reply.changed_by_hand,
        limit_until=_time(reply, "limit_until"),
        limit_after=optional("limit_after"),
        limit_reason=reply.limit_reason,
    )


def template_of(reply: pb.BudgetTemplate) -> BudgetTemplate:
    budget = reply.budget

    def optional(name: str) -> int | None:
        return getattr(budget, name) if budget.HasField(name) else None

    return BudgetTemplate(
        template_id=reply.template_id,
        pattern=reply.pattern,
        limit=optional("limit"),
        unit=budget.unit,
        version=reply.version,
        updated_at=_time(reply, "updated_at"),
        deleted_at=_time(reply, "deleted_at"),
        default_estimate=optional("default_estimate"),
        estimate_policy=EstimatePolicy(budget.estimate_policy or EstimatePolicy.MEDIAN),
        escrow_bps=budget.escrow_bps,
        overage_policy=_policy(budget.overage_policy),
        overage_limit=optional("overage_limit"),
        period=Period(budget.period),
        timezone=budget.timezone,
        period_anchor=budget.period_anchor,
        threshold_bps=tuple(budget.threshold_bps),
        mode=_mode(budget.mode),
        admissions_per_minute=optional("admissions_per_minute"),
        units_per_minute=optional("units_per_minute"),
        threshold_basis=ThresholdBasis(budget.threshold_basis or ThresholdBasis.COMMITTED),
        max_open_holds=optional("max_open_holds"),
        max_admissions=optional("max_admissions"),
        closes_at=_time(budget, "closes_at"),
    )
