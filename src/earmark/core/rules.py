"""The rules of admission, charging, settling and expiry, each a small pure function."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from earmark import limits
from earmark.core.model import (
    OPEN_STATES,
    Budget,
    Hold,
    HoldState,
    OveragePolicy,
    PeriodTotals,
    Phase,
)


@dataclass(frozen=True, slots=True)
class Admission:
    """admitted iff used + held + amount <= the budget's ceiling for the phase; remaining is
    what is left below its cap afterwards; over_limit says a SOFT budget admitted past its
    cap."""

    admitted: bool
    remaining: int | None
    message: str
    over_limit: bool = False
    policy: OveragePolicy = OveragePolicy.HARD


@dataclass(frozen=True, slots=True)
class ChargeStep:
    """charged = min(amount, what is left of the hold); capped means the worker must stop."""

    charged: int
    capped: bool
    total_charged: int
    hold_remaining: int


@dataclass(frozen=True, slots=True)
class SettleStep:
    """What a Settle charges and returns, and how it moves the budget's counters."""

    charged: int
    released: int
    overshoot: int
    used_delta: int
    held_delta: int


def admit(budget: Budget, amount: int, phase: Phase = Phase.WORK) -> Admission:
    """Decides whether a hold of amount fits in what the budget lets a hold of phase reach:
    under HARD its cap (the limit, less the output escrow for WORK); under SOFT the cap and
    then its overage limit, flagged as over_limit."""
    assert amount >= 0
    cap = budget.cap(phase)
    policy = budget.overage_policy
    if cap is None:
        return Admission(admitted=True, remaining=None, message="admitted: budget is unlimited")
    if amount == 0:
        # A call the price book says is free holds nothing, and so fits on any budget.
        room = max(0, cap - budget.used - budget.held)
        return Admission(
            admitted=True, remaining=room, message="admitted: priced at 0", policy=policy
        )
    after = budget.used + budget.held + amount
    if after <= cap:
        return Admission(admitted=True, remaining=cap - after, message="admitted", policy=policy)
    escrowed = phase is Phase.WORK and budget.escrow_bps > 0
    escrow = " (the rest is its output escrow, for PHASE_FINAL)" if escrowed else ""
    room = max(0, cap - budget.used - budget.held)
    ceiling = budget.ceiling(phase)
    if ceiling is None or after <= ceiling:
        return Admission(
            admitted=True,
            remaining=0,
            message=f"admitted past the limit by {after - cap} (overage policy SOFT)",
            over_limit=True,
            policy=policy,
        )
    if policy is OveragePolicy.SOFT:
        beyond = max(0, ceiling - budget.used - budget.held)
        message = (
            f"needs {amount}, {beyond} left of the {ceiling - cap} that the overage policy "
            f"SOFT admits past {cap}{escrow}"
        )
    else:
        message = f"needs {amount}, {room} left{escrow}"
    return Admission(admitted=False, remaining=room, message=message, policy=policy)


def counters_fit(budget: Budget | PeriodTotals, used_delta: int, held_delta: int) -> bool:
    """True if the budget's used + held stays within a 64-bit counter after the change.
    Only an unlimited budget, or one whose settles overshoot again and again, gets near."""
    return budget.used + used_delta + budget.held + held_delta <= limits.int64_max


def charge_step(hold: Hold, amount: int) -> ChargeStep:
    """Charges one step against an open hold (a live one, or one going into doubt with the
    usage it had), never beyond what the hold still has."""
    assert hold.state in OPEN_STATES
    # 0 is a usage that priced to nothing: nothing is charged, and nothing was capped.
    assert amount >= 0
    room = hold.amount - hold.charged
    charged = min(amount, room)
    return ChargeStep(
        charged=charged,
        capped=charged < amount,
        total_charged=hold.charged + charged,
        hold_remaining=room - charged,
    )


def settle_held(hold: Hold, used: int) -> SettleStep:
    """Settles an open hold (held or in doubt): the job is charged what it used, the rest of
    the hold returns."""
    assert hold.state in OPEN_STATES
    assert used >= 0
    return SettleStep(
        charged=used,
        released=hold.amount - min(used, hold.amount),
        overshoot=max(0, used - hold.amount),
        used_delta=used - hold.charged,
        held_delta=-(hold.amount - hold.charged),
    )


def settle_expired(hold: Hold, used: int) -> SettleStep:
    """Settles a hold the sweeper already closed: the spend beyond its charges is recorded,
    and nothing returns, since the sweeper returned the hold once already."""
    assert hold.state is HoldState.EXPIRED
    assert used >= 0
    extra = max(0, used - hold.charged)
    return SettleStep(
        charged=hold.charged + extra,
        released=0,
        overshoot=max(0, used - hold.amount),
        used_delta=extra,
        held_delta=0,
    )


def expire_held(hold: Hold) -> int:
    """Closes an open hold (its lease passed, or an operator released it): the job keeps
    what it charged; returns held_delta."""
    assert hold.state in OPEN_STATES
    return -(hold.amount - hold.charged)


def lease_passed(hold: Hold, now: datetime) -> bool:
    """A live hold whose lease has run out is expired, whether or not a sweeper saw it yet."""
    return hold.state is HoldState.HELD and now >= hold.expires_at


def renewed_deadline(hold: Hold, now: datetime, lease: timedelta) -> datetime:
    """A renewal extends the lease to now + lease; it never shortens it."""
    return max(hold.expires_at, now + lease)
