"""The operations a lane decides together, and their answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from earmark.core.model import (
    EstimateSource,
    HoldState,
    Outcome,
    OveragePolicy,
    Phase,
    RefusalReason,
)
from earmark.core.prices import Shape, Usage


@dataclass(frozen=True, slots=True)
class ReserveOp:
    budget_id: str
    idempotency_key: str
    # > 0: the caller's amount. 0: priced from shape, or estimated when shape is None.
    amount: int
    lease: timedelta
    # Chosen by the caller so that the rules stay deterministic.
    new_reservation_id: str
    labels: dict[str, str] = field(default_factory=dict)
    # The caller's token name ("" without tokens): keys are scoped to it, and so are holds.
    owner: str = ""
    shape: Shape | None = None
    job: str = ""
    # An account's Reserve counts against its admission rate (0: no rate limit).
    account: str = ""
    admissions_per_minute: int = 0
    # Hold the same amount on these budgets too, all or nothing.
    also_budget_ids: tuple[str, ...] = ()
    phase: Phase = Phase.WORK
    # Charged at once on the new hold, in the same transaction (a call's prompt).
    charge: Usage | None = None
    # With a shape: admit the largest output the budgets cover rather than refuse.
    degrade: bool = False


@dataclass(frozen=True, slots=True)
class ChargeOp:
    reservation_id: str
    idempotency_key: str
    # 0 when usage is given: the usage priced is the amount.
    amount: int
    owner: str = ""
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class RenewOp:
    reservation_id: str
    lease: timedelta
    owner: str = ""
    # Added to the hold's labels (a key it has keeps its value: a different one is refused).
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SettleOp:
    reservation_id: str
    # 0 when usage is given: the usage priced is what was used.
    used: int
    outcome: Outcome
    owner: str = ""
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class ResolveOp:
    """An operator settles an in-doubt hold at what the provider billed."""

    reservation_id: str
    used: int
    usage: Usage | None = None
    # What proved the outcome (earmark reconcile's bucket), kept with the call's record.
    evidence: str = ""


@dataclass(frozen=True, slots=True)
class ReleaseOp:
    """An operator closes a stuck hold: it keeps its charges, the rest returns."""

    reservation_id: str


@dataclass(frozen=True, slots=True)
class RepriceOp:
    """The background's repricing of a hold reserved by shape and not yet charged, once the
    price in effect for its model is no longer the version it was priced at (a cutover)."""

    reservation_id: str


Op = ReserveOp | ChargeOp | RenewOp | SettleOp | ResolveOp | ReleaseOp | RepriceOp


@dataclass(frozen=True, slots=True)
class ReserveResult:
    admitted: bool
    reservation_id: str
    amount: int
    remaining: int | None
    reason: RefusalReason
    message: str
    expires_at: datetime | None
    # True when the idempotency key matched an existing reservation.
    duplicate: bool = False
    source: EstimateSource = EstimateSource.CALLER
    price_version: int = 0
    # With RefusalReason.RATE_LIMITED: how long until the account's window has room.
    retry_after: timedelta | None = None
    # The budget that refused (the Reserve's own, or one of its also_budget_ids).
    refused_budget_id: str = ""
    # The refusing budget's policy; on an admission, SOFT when it went past a limit.
    policy: OveragePolicy = OveragePolicy.HARD
    over_limit: bool = False
    # The budget's unit, which the units counters are labelled with.
    unit: str = ""
    # What the Reserve's charge charged.
    charged: int = 0
    # A hold reserved by shape: the most output tokens to tell the provider, and whether
    # degrade lowered it.
    max_output_tokens: int = 0
    degraded: bool = False
    # When the budget's period ends (None: it never resets).
    resets_at: datetime | None = None
    # Admitted by an OBSERVE budget that would have refused it in ENFORCE: why, and which.
    would_refuse: RefusalReason | None = None
    would_refuse_budget_id: str = ""


@dataclass(frozen=True, slots=True)
class ChargeResult:
    charged: int
    capped: bool
    total_charged: int
    hold_remaining: int
    expires_at: datetime
    duplicate: bool = False
    price_version: int = 0
    # What the Charge asked for: its amount, or its usage priced.
    requested: int = 0
    unit: str = ""
    # A Charge by usage on a money budget: the output rate of the price it was priced at.
    output_per_mtok: int = 0


@dataclass(frozen=True, slots=True)
class RenewResult:
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class RepriceResult:
    """Whether the hold moved to the new price (False: nothing changed, or the new price
    does not fit its budgets and it keeps the old one), and its amount and version now."""

    repriced: bool
    amount: int
    price_version: int
    unit: str = ""


@dataclass(frozen=True, slots=True)
class SettleResult:
    # The hold's amount, for the used / held ratio.
    amount: int
    charged: int
    released: int
    overshoot: int
    state: HoldState
    duplicate: bool = False
    # What the job used: the Settle's amount, or its usage priced.
    used: int = 0
    price_version: int = 0
    # Where the hold's amount came from, for estimate quality by source.
    source: EstimateSource = EstimateSource.CALLER
    # The hold was in doubt until this answer.
    was_in_doubt: bool = False
    # What this answer moved the budgets' used by: the spend beyond earlier charges
    # (negative when a Settle reports less than was charged).
    used_delta: int = 0
    unit: str = ""


Result = ReserveResult | ChargeResult | RenewResult | SettleResult | RepriceResult
