"""A worker process killed with SIGKILL mid-job: the sweeper returns its undispatched hold,
and keeps the dispatched one in doubt until an operator resolves it."""

from __future__ import annotations

import asyncio
import signal
import sys
from datetime import timedelta
from pathlib import Path

from earmark.client import AsyncClient
from earmark.v1 import budget_pb2 as pb
from tests.client.holding_worker import LEASE_SECONDS
from tests.conftest import Running
from tests.helpers import assert_invariants, child, eventually

WORKER = Path(__file__).with_name("holding_worker.py")
ROOT = Path(__file__).resolve().parents[2]


async def test_sigkilled_worker_holds_are_swept_or_in_doubt(sidecar: Running) -> None:
    """The killed worker's holds stay while it lives and renews; once their leases pass the
    undispatched one returns, the charged one stays held IN_DOUBT through every sweep, and
    ResolveHold charges what the operator says and returns the rest."""
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        await client.put_budget("crash", 100_000, "tokens")
        async with child(
            sys.executable, str(WORKER), sidecar.target, "crash",
            stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        ) as process:  # fmt: skip
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
            dispatched, idle = line.decode().split()

            async def renewed_twice() -> bool:
                # A renewal every third of the lease: a hold whose life passes the lease by
                # half of it was renewed twice.
                page = await sidecar.admin.ListHolds(
                    pb.ListHoldsRequest(budget_id="crash", state=pb.RESERVATION_STATE_HELD)
                )
                lives = [h.expires_at.ToDatetime() - h.created_at.ToDatetime() for h in page.holds]
                renewed = timedelta(seconds=LEASE_SECONDS * 1.5)
                return 2 == len(lives) and all(life > renewed for life in lives)

            await eventually(renewed_twice, within_seconds=15, what="both holds renewed twice")
            alive = await client.get_budget("crash")
            assert (30_000, 5_000, 2) == (alive.held, alive.used, alive.open_reservations)
            process.send_signal(signal.SIGKILL)
            assert -signal.SIGKILL == await process.wait()

        async def in_state(state: pb.ReservationState) -> list[str]:
            page = await sidecar.admin.ListHolds(
                pb.ListHoldsRequest(budget_id="crash", state=state)
            )
            return [h.reservation_id for h in page.holds]

        async def both_leases_passed() -> bool:
            # The two leases were renewed at different moments, so one sweep may pass only
            # one of them: wait for both before judging either.
            return [dispatched, idle] == [
                *await in_state(pb.RESERVATION_STATE_IN_DOUBT),
                *await in_state(pb.RESERVATION_STATE_EXPIRED),
            ]

        await eventually(both_leases_passed, within_seconds=15, what="both leases swept")
        assert [] == await in_state(pb.RESERVATION_STATE_HELD)
        state = await client.get_budget("crash")
        assert (20_000, 5_000, 1) == (state.held, state.used, state.open_reservations)
        resolved = await sidecar.admin.ResolveHold(
            pb.ResolveHoldRequest(reservation_id=dispatched, used=12_000)
        )
        assert (12_000, 13_000, pb.RESERVATION_STATE_SETTLED) == (
            resolved.charged,
            resolved.released,
            resolved.state,
        )
        state = await client.get_budget("crash")
    assert (0, 12_000, 0, 88_000) == (
        state.held,
        state.used,
        state.open_reservations,
        state.remaining,
    )
    await assert_invariants(sidecar.dsn)
