"""Kinde as its published API behaves, end to end through a live sidecar on an injected
clock and a fake Kinde over real HTTP: billing periods from the agreement with a late
settle across their boundary, and Kinde's documented 400, 403 and 429 answers."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf.duration_pb2 import Duration

from earmark.settings import KINDE_CLIENT_ID, KINDE_CLIENT_SECRET
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde
from tests.fake_kinde_state import Agreement
from tests.helpers import FakeClock, assert_invariants, eventually, fetch_budget_row
from tests.service.test_plans import plans_sidecar, reserve

# An agreement that renews every 30 days from November 15th.
ANCHOR = datetime(2026, 11, 15, tzinfo=UTC)
P1, P2 = ANCHOR, ANCHOR + timedelta(days=30)
AGREEMENT = "agreement_acct_pro"


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = P2 - timedelta(minutes=10)


@pytest.fixture
def kinde(monkeypatch: pytest.MonkeyPatch, clock: FakeClock) -> Iterator[FakeKinde]:
    monkeypatch.setenv(KINDE_CLIENT_ID, CLIENT_ID)
    monkeypatch.setenv(KINDE_CLIENT_SECRET, CLIENT_SECRET)
    with fake_kinde() as fake:
        fake.state.now = clock
        fake.state.limits["acct"] = {"tokens": 100_000}
        fake.state.agreements["acct"] = [
            Agreement(AGREEMENT, features=("tokens",), anchor=ANCHOR, period=timedelta(days=30))
        ]
        yield fake


@pytest.fixture
async def side(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> AsyncIterator[Running]:
    async with running(plans_sidecar(dsn, socket_dir, kinde, clock), dsn) as s:
        yield s


def sample(side: Running, name: str, labels: dict[str, str] | None = None) -> float:
    return side.sidecar.metrics.registry.get_sample_value(name, labels or {}) or 0.0


async def booked(kinde: FakeKinde, period: datetime, total: int) -> None:
    """Waits until the fake Kinde holds total for the agreement's period."""

    async def holds() -> bool:
        return kinde.state.booked.get((AGREEMENT, "tokens", period)) == total

    await eventually(holds, within_seconds=10, what=f"Kinde holding {total} for {period}")


async def settle(side: Running, reply: pb.ReserveResponse, used: int) -> None:
    await side.budget.Settle(pb.SettleRequest(reservation_id=reply.reservation_id, used=used))


async def test_a_late_settle_is_booked_to_the_open_period(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """The docs' example: holds A and B in the period from Nov 15; A settles at 500 there;
    after Dec 15 a Reserve opens the new period and C settles at 300, then B settles late
    at 700. Kinde holds 500 for the first period and 1,000 for the second, while B's 700
    counts against the first period's budget."""
    lease = Duration(seconds=3600)
    a = await side.budget.Reserve(reserve("acct", 1_000, "a", lease=lease))
    b = await side.budget.Reserve(reserve("acct", 1_000, "b", lease=lease))
    await settle(side, a, 500)
    await booked(kinde, P1, 500)
    clock.set(P2 + timedelta(minutes=10))
    c = await side.budget.Reserve(reserve("acct", 1_000, "c", lease=lease))
    await settle(side, c, 300)
    await settle(side, b, 700)
    await booked(kinde, P2, 1_000)
    first = await fetch_budget_row(side.dsn, "acct/tokens/2026-11-15")
    second = await fetch_budget_row(side.dsn, "acct/tokens/2026-12-15")
    assert ["acct/tokens/2026-11-15"] * 2 + ["acct/tokens/2026-12-15"] == [
        r.budget_id for r in (a, b, c)
    ]
    assert {(AGREEMENT, "tokens", P1): 500, (AGREEMENT, "tokens", P2): 1_000} == (
        kinde.state.booked
    )
    assert ((P1, P2, 1_200), (P2, P2 + timedelta(days=30), 300)) == (
        (first["cycle_start"], first["cycle_end"], first["used"]),
        (second["cycle_start"], second["cycle_end"], second["used"]),
    )
    await assert_invariants(side.dsn)


async def test_a_new_account_on_a_lagging_period_is_admitted_on_the_period_rolled_forward(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """With Kinde's cycle roll a day late (current_period_end in the past), a new account's
    Reserve is admitted on the period rolled forward rather than refused LIMIT_UNAVAILABLE,
    and its settle is reported to the agreement, which Kinde books to the current period."""
    kinde.state.limits["fresh"] = {"tokens": 50_000}
    kinde.state.agreements["fresh"] = [
        Agreement("agreement_fresh", features=("tokens",), anchor=ANCHOR, lag=timedelta(days=2))
    ]
    clock.set(P2 + timedelta(days=1))
    reply = await side.budget.Reserve(reserve("fresh", 1_000, "fresh-1"))
    await settle(side, reply, 400)

    async def booked_fresh() -> bool:
        return kinde.state.booked.get(("agreement_fresh", "tokens", P2)) == 400

    await eventually(booked_fresh, within_seconds=10, what="Kinde holding 400 for fresh")
    row = await fetch_budget_row(side.dsn, "fresh/tokens/2026-12-15")
    assert (True, "fresh/tokens/2026-12-15", 49_000) == (
        reply.admitted,
        reply.budget_id,
        reply.remaining,
    )
    # [P1, P2) is Nov 15 to Dec 15, a whole month: rolled forward, the next is one too.
    assert (P2, datetime(2027, 1, 15, tzinfo=UTC), 50_000, 400) == (
        row["cycle_start"],
        row["cycle_end"],
        row["limit_units"],
        row["used"],
    )
    await assert_invariants(side.dsn)


async def test_a_report_kinde_refuses_is_parked_and_a_newer_one_sent(
    side: Running, kinde: FakeKinde
) -> None:
    """Kinde answers a report 400: it is parked (sent once, not again), counted and the
    outbox is empty; once Kinde takes reports again, the next settle's newer total is
    sent."""
    kinde.state.refuse_reports[AGREEMENT] = "INVALID_AGREEMENT"
    first = await side.budget.Reserve(reserve("acct", 1_000, "first"))
    await settle(side, first, 400)

    async def parked() -> bool:
        return 1.0 == sample(side, "earmark_meter_rejected_total")

    await eventually(parked, within_seconds=10, what="the report parked")
    tried = kinde.state.requests["meter_usage"]
    del kinde.state.refuse_reports[AGREEMENT]
    second = await side.budget.Reserve(reserve("acct", 1_000, "second"))
    await settle(side, second, 100)
    await booked(kinde, P1, 500)
    assert (1, 2, 0.0) == (
        tried,
        kinde.state.requests["meter_usage"],
        sample(side, "earmark_meter_outbox_depth"),
    )
    await assert_invariants(side.dsn)


async def test_a_missing_scope_fails_closed_without_new_tokens(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """A token without read:billing_entitlements answers 403: with the token fetched
    moments ago (within limits.provider_token_refetch_seconds_min) that is a missing scope,
    and Reserves are refused LIMIT_UNAVAILABLE naming the scope, with no new token fetched
    however many Reserves ask (each counts against the customer's Kinde plan)."""
    kinde.state.missing_scopes.add("read:billing_entitlements")
    replies = []
    for _ in range(3):
        replies.append(await side.budget.Reserve(reserve("acct", 1_000, uuid.uuid4().hex)))
        clock.advance(timedelta(seconds=6))
    assert {(False, pb.REFUSAL_REASON_LIMIT_UNAVAILABLE)} == {
        (r.admitted, r.reason) for r in replies
    }
    assert "read:billing_entitlements" in replies[0].message
    assert 1 == kinde.state.requests["token"]
    await assert_invariants(side.dsn)


async def test_a_rate_limited_kinde_is_not_called_before_its_reset(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """Kinde answers 429 with RateLimit-Reset 30: the Reserve is refused LIMIT_UNAVAILABLE,
    no call reaches Kinde until 30 s have passed on the sidecar's clock, and then the
    Reserve is admitted."""
    kinde.state.rate_limited = 1
    kinde.state.rate_limit_reset = "30"
    refused = await side.budget.Reserve(reserve("acct", 1_000, "refused"))
    calls = sum(kinde.state.requests.values())
    clock.advance(timedelta(seconds=10))
    early = await side.budget.Reserve(reserve("acct", 1_000, "early"))
    calls_before_reset = sum(kinde.state.requests.values())
    clock.advance(timedelta(seconds=21))
    admitted = await side.budget.Reserve(reserve("acct", 1_000, "admitted"))
    assert (False, False, True) == (refused.admitted, early.admitted, admitted.admitted)
    assert calls == calls_before_reset
    await assert_invariants(side.dsn)
