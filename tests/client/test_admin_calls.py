"""Admin through the SDK: prices, an account's cycles, holds and the ledger, page by page,
and an operator's resolve and release, from the synchronous Client (whose calls are the
AsyncClient's)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from earmark.client import (
    AsyncClient,
    Client,
    FailedPreconditionError,
    HoldState,
    Reservation,
    Shape,
)
from earmark.client.admin import LedgerEntry
from earmark.core.model import LedgerKind
from tests.conftest import Running
from tests.helpers import FakeClock, eventually


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
