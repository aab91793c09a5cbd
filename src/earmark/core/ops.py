"""The operations a lane decides together, and their answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from earmark.core.model import HoldState, Outcome, RefusalReason


@dataclass(frozen=True, slots=True)
class ReserveOp:
    budget_id: str
    idempotency_key: str
    amount: int
    lease: timedelta
    # Chosen by the caller so that the rules stay deterministic.
    new_reservation_id: str
    labels: dict[str, str] = field(default_factory=dict)
    # The caller's token name ("" without tokens): keys are scoped to it, and so are holds.
    owner: str = ""


@dataclass(frozen=True, slots=True)
class ChargeOp:
    reservation_id: str
    idempotency_key: str
    amount: int
    owner: str = ""


@dataclass(frozen=True, slots=True)
class RenewOp:
    reservation_id: str
    lease: timedelta
    owner: str = ""


@dataclass(frozen=True, slots=True)
class SettleOp:
    reservation_id: str
    used: int
    outcome: Outcome
    owner: str = ""


Op = ReserveOp | ChargeOp | RenewOp | SettleOp


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


@dataclass(frozen=True, slots=True)
class ChargeResult:
    charged: int
    capped: bool
    total_charged: int
    hold_remaining: int
    expires_at: datetime
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class RenewResult:
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class SettleResult:
    # The hold's amount, for the used / held ratio.
    amount: int
    charged: int
    released: int
    overshoot: int
    state: HoldState
    duplicate: bool = False


Result = ReserveResult | ChargeResult | RenewResult | SettleResult
