"""The pure rules: admit, charge, settle, expire."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from earmark.core import rules
from earmark.core.model import Budget, Hold, HoldState

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def hold(amount: int = 10_000, charged: int = 0, state: HoldState = HoldState.HELD) -> Hold:
    return Hold(
        reservation_id="r",
        budget_id="b",
        idempotency_key="k",
        amount=amount,
        charged=charged,
        state=state,
        lease=timedelta(seconds=120),
        expires_at=NOW + timedelta(seconds=120),
        created_at=NOW,
    )


def test_admit_fits_exactly() -> None:
    """A hold that takes exactly what is left is admitted and leaves zero."""
    decision = rules.admit(Budget("b", 100_000, "t", used=20_000, held=40_000), 40_000)
    assert (True, 0) == (decision.admitted, decision.remaining)


def test_admit_refuses_one_unit_over() -> None:
    """One unit more than what is left is refused, naming both numbers."""
    decision = rules.admit(Budget("b", 100_000, "t", used=20_000, held=40_000), 40_001)
    assert (False, 40_000, "needs 40001, 40000 left") == (
        decision.admitted,
        decision.remaining,
        decision.message,
    )


def test_admit_over_spent_budget_reports_zero_left() -> None:
    """A budget already past its limit (overshoot, a lowered limit) reports 0 left, not less."""
    decision = rules.admit(Budget("b", 100, "t", used=150), 1)
    assert (False, 0) == (decision.admitted, decision.remaining)


def test_admit_unlimited() -> None:
    """An unlimited budget admits anything and has no remaining."""
    decision = rules.admit(Budget("b", None, "t", used=10**15), 10**15)
    assert (True, None) == (decision.admitted, decision.remaining)


@pytest.mark.parametrize(
    ("charged", "amount", "expected"),
    [
        (0, 4_000, (4_000, False, 4_000, 6_000)),
        (8_000, 4_000, (2_000, True, 10_000, 0)),
        (10_000, 1, (0, True, 10_000, 0)),
    ],
)
def test_charge_step_caps(charged: int, amount: int, expected: tuple[int, bool, int, int]) -> None:
    """A step is charged up to what is left of the hold and capped beyond it."""
    step = rules.charge_step(hold(charged=charged), amount)
    assert expected == (step.charged, step.capped, step.total_charged, step.hold_remaining)


@pytest.mark.parametrize(
    ("charged", "used", "expected"),
    [
        (0, 7_200, (7_200, 2_800, 0, 7_200, -10_000)),
        (4_000, 5_000, (5_000, 5_000, 0, 1_000, -6_000)),
        (0, 0, (0, 10_000, 0, 0, -10_000)),
        (0, 15_000, (15_000, 0, 5_000, 15_000, -10_000)),
        (8_000, 2_000, (2_000, 8_000, 0, -6_000, -2_000)),
    ],
)
def test_settle_held(charged: int, used: int, expected: tuple[int, ...]) -> None:
    """charged = used, released = held - min(used, held), overshoot = max(0, used - held)."""
    step = rules.settle_held(hold(charged=charged), used)
    assert expected == (
        step.charged,
        step.released,
        step.overshoot,
        step.used_delta,
        step.held_delta,
    )


def test_settle_expired_charges_only_the_extra() -> None:
    """After expiry a settle adds what was used beyond the charges and returns nothing."""
    step = rules.settle_expired(hold(charged=3_000, state=HoldState.EXPIRED), 12_000)
    assert (12_000, 0, 2_000, 9_000, 0) == (
        step.charged,
        step.released,
        step.overshoot,
        step.used_delta,
        step.held_delta,
    )


def test_expire_returns_what_was_not_charged() -> None:
    """Expiry gives back the hold minus its charges."""
    assert -7_000 == rules.expire_held(hold(charged=3_000))


def test_lease_passes_at_the_deadline() -> None:
    """A lease has passed at its deadline, not a moment after."""
    h = hold()
    assert not rules.lease_passed(h, h.expires_at - timedelta(microseconds=1))
    assert rules.lease_passed(h, h.expires_at)


def test_renewal_never_shortens() -> None:
    """Renewing with a shorter lease keeps the later deadline."""
    h = hold()
    assert h.expires_at == rules.renewed_deadline(h, NOW, timedelta(seconds=5))
    assert NOW + timedelta(seconds=500) == rules.renewed_deadline(h, NOW, timedelta(seconds=500))
