"""Admin through the SDK: prices, an account's cycles, holds and the ledger, page by page,
and an operator's resolve and release, from the synchronous Client (whose calls are the
AsyncClient's); a budget's policies, put and read back, and what a Reserve says of them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from earmark.client import (
    AsyncClient,
    BudgetMode,
    Client,
    FailedPreconditionError,
    HoldState,
    Period,
    Refusal,
    RefusalReason,
    Reservation,
    Shape,
    ThresholdBasis,
)
from earmark.client.admin import LedgerEntry
from earmark.core.model import LedgerKind
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, eventually


async def test_prices_and_cycles_through_the_client(sidecar: Running) -> None:
    """A price put through the SDK is listed with its version and prices a Reserve by
    shape; an account with no cycles lists none, and a sidecar without a limits provider
    refuses a refresh by name."""
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)

    def work() -> tuple[object, ...]:
        with Client(sidecar.target, admin_target=sidecar.admin_target) as client:
            put = client.put_price(
                "openai",
                "gpt-4o",
                input_usd_micros_per_mtok=2_500_000,
                output_usd_micros_per_mtok=10_000_000,
                effective_from=an_hour_ago,
                source="https://openai.com/api/pricing",
            )
            listed = client.list_prices("openai")
            client.put_budget("priced", 5_000_000, "usd_micros")
            held = client.reserve("priced", shape=Shape("openai", "gpt-4o", 10_000, 2_000))
            assert isinstance(held, Reservation)
            cycles = client.list_cycles("nobody")
            with pytest.raises(FailedPreconditionError) as refused:
                client.refresh_limits("nobody")
        return (
            put.version,
            len(listed),
            held.amount,
            held.price_version,
            cycles,
            refused.value.reason,
        )

    observed = await asyncio.to_thread(work)
    # 10,000 input tokens at $2.50 and 2,000 output at $10.00 per million: $0.045.
    assert (1, 1, 45_000, 1, [], "NO_LIMITS_PROVIDER") == observed


async def test_holds_and_the_ledger_page_by_page(clocked: Running, clock: FakeClock) -> None:
    """Holds and ledger entries are listed across pages of one (or left after one item),
    filtered by state; an in-doubt hold is resolved at what was billed, a held one
    released."""
    with Client(clocked.target, admin_target=clocked.admin_target) as client:
        await asyncio.to_thread(client.put_budget, "ops", 100_000, "t")
        doubted = await asyncio.to_thread(client.reserve, "ops", 1_000, lease_seconds=10)
        assert isinstance(doubted, Reservation)
        await asyncio.to_thread(client.charge, doubted.reservation_id, 100)
        clock.advance(timedelta(seconds=11))

        async def in_doubt() -> bool:
            async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as view:
                found = [h async for h in view.list_holds("ops", state=HoldState.IN_DOUBT)]
            return 1 == len(found)

        await eventually(in_doubt, within_seconds=10, what="the sweeper's pass")

        def operate() -> tuple[object, ...]:
            stuck = client.reserve("ops", 3_000, lease_seconds=60)
            assert isinstance(stuck, Reservation)
            held = [h.reservation_id for h in client.list_holds("ops", state=HoldState.HELD)]
            every = list(client.list_holds("ops", page_size=1))
            # Left after one item: the listing is closed on the Client's loop.
            first = next(client.list_holds("ops", page_size=1))
            resolved = client.resolve_hold(doubted.reservation_id, 450)
            released = client.release_hold(stuck.reservation_id)
            ledger: list[LedgerEntry] = list(client.list_ledger("ops", page_size=1))
            return (
                held == [stuck.reservation_id],
                len(every),
                first == every[0],
                (resolved.charged, resolved.state),
                (released.released, released.state),
                [(e.kind, e.held_delta, e.used_delta) for e in ledger],
            )

        observed = await asyncio.to_thread(operate)
    assert (
        True,
        2,
        True,
        (450, HoldState.SETTLED),
        (3_000, HoldState.EXPIRED),
        [
            (LedgerKind.HOLD, 1_000, 0),
            (LedgerKind.CHARGE, -100, 100),
            (LedgerKind.IN_DOUBT, 0, 0),
            (LedgerKind.HOLD, 3_000, 0),
            (LedgerKind.RESOLVE, -900, 350),
            (LedgerKind.RELEASE, -3_000, 0),
        ],
    ) == observed


async def test_a_budgets_policies_through_the_client(clocked: Running) -> None:
    """put_budget sets a budget's period, timezone, anchor, thresholds, mode and rate
    windows, and every BudgetState answers them with the current period; an OBSERVE
    budget's Reservation says it would have refused and when the period resets, a rate
    window's Refusal when the day does; a put without them takes their defaults."""
    async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as client:
        put = await client.put_budget(
            "team", 1_000, "tokens", period=Period.MONTH, timezone="Europe/Berlin",
            period_anchor=15, threshold_bps=[9_500, 8_000], mode=BudgetMode.OBSERVE,
            admissions_per_minute=100, units_per_minute=5_000,
        )  # fmt: skip
        fits = await client.reserve("team", 600)
        over = await client.reserve("team", 600)
        got = await client.get_budget("team")
        listed = [b async for b in client.list_budgets("team")]
        plain = await client.put_budget("plain", 1_000, "tokens")
        day = await client.put_budget(
            "rated", 1_000, "tokens", period=Period.DAY, admissions_per_minute=1
        )
        first = await client.reserve("rated", 10)
        second = await client.reserve("rated", 10)
    assert isinstance(fits, Reservation)
    assert isinstance(over, Reservation)
    assert isinstance(first, Reservation)
    assert isinstance(second, Refusal)
    # The clock reads 2026-12-01 12:00 UTC: Berlin's month from the 15th began on November
    # 15th at its midnight (23:00 UTC the day before) and ends on December 15th's.
    start, end = datetime(2026, 11, 14, 23, tzinfo=UTC), datetime(2026, 12, 14, 23, tzinfo=UTC)
    assert (
        Period.MONTH, "Europe/Berlin", 15, start, end, BudgetMode.OBSERVE, (8_000, 9_500),
        100, 5_000,
    ) == (
        put.period, put.timezone, put.period_anchor, put.period_start, put.resets_at, put.mode,
        put.threshold_bps, put.admissions_per_minute, put.units_per_minute,
    )  # fmt: skip
    assert (
        (False, RefusalReason.UNSPECIFIED, end),
        (True, RefusalReason.INSUFFICIENT_BUDGET, end),
    ) == (
        (fits.would_refuse, fits.would_refuse_reason, fits.resets_at),
        (over.would_refuse, over.would_refuse_reason, over.resets_at),
    )
    policies = (
        "period", "timezone", "period_anchor", "period_start", "resets_at", "mode",
        "threshold_bps", "admissions_per_minute", "units_per_minute",
    )  # fmt: skip
    assert [[getattr(put, name) for name in policies]] * 2 == [
        [getattr(state, name) for name in policies] for state in (got, *listed)
    ]
    assert (Period.NEVER, "", 0, None, None, BudgetMode.ENFORCE, (), None, None) == tuple(
        getattr(plain, name) for name in policies
    )
    tomorrow = datetime(2026, 12, 2, tzinfo=UTC)
    assert (tomorrow, tomorrow, False) == (day.resets_at, first.resets_at, first.would_refuse)
    assert (RefusalReason.RATE_LIMITED, tomorrow, True) == (
        second.reason,
        second.resets_at,
        second.retry_after is not None and second.retry_after > timedelta(0),
    )


async def test_update_budget_changes_only_what_it_names(clocked: Running, clock: FakeClock) -> None:
    """update_budget sends the settings given and names them in the mask: the limit raised
    keeps the period, thresholds, basis, mode and windows; None clears an optional; an
    explicit mask of `*` resets what it does not give; a budget refused by its limit
    reads back its refusals, and nothing named is a ValueError before any call."""
    async with AsyncClient(clocked.target, admin_target=clocked.admin_target) as client:
        put = await client.put_budget(
            "grow", 1_000, "tokens", period=Period.MONTH, threshold_bps=[8_000],
            threshold_basis=ThresholdBasis.USED, mode=BudgetMode.OBSERVE,
            admissions_per_minute=60,
        )  # fmt: skip
        raised = await client.update_budget("grow", limit=5_000)
        unbound = await client.update_budget("grow", admissions_per_minute=None)
        starred = await client.update_budget("grow", update_mask=["*"], limit=10, unit="tokens")
        refused = await client.reserve("grow", 11)
        read = await client.get_budget("grow")
        with pytest.raises(ValueError, match="update_budget"):
            await client.update_budget("grow")
    policies = ("period", "threshold_bps", "threshold_basis", "mode", "admissions_per_minute")
    assert isinstance(refused, Refusal)
    assert (
        [getattr(put, name) for name in policies],
        (5_000, 1_000),
        (None, 5_000, (8_000,)),
        (10, Period.NEVER, (), ThresholdBasis.COMMITTED, BudgetMode.ENFORCE),
        (1, clock(), clock()),
    ) == (
        [getattr(raised, name) for name in policies],
        (raised.limit, put.limit),
        (unbound.admissions_per_minute, unbound.limit, unbound.threshold_bps),
        (starred.limit, starred.period, starred.threshold_bps, starred.threshold_basis,
         starred.mode),
        (read.refusals, read.first_refused_at, read.last_refused_at),
    )  # fmt: skip
    assert (Period.MONTH, ThresholdBasis.USED) == (put.period, put.threshold_basis)
    await assert_invariants(clocked.dsn)
