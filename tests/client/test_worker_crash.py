"""A worker process killed with SIGKILL mid-job: the sweeper returns its undispatched hold,
and keeps the dispatched one in doubt until an operator resolves it."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from earmark.client import AsyncClient
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants, eventually

WORKER = Path(__file__).with_name("holding_worker.py")
ROOT = Path(__file__).resolve().parents[2]


async def test_sigkilled_worker_holds_are_swept_or_in_doubt(sidecar: Running) -> None:
    """The killed worker's holds stay while it lives and renews; once their leases pass the
    undispatched one returns, the charged one stays held IN_DOUBT through every sweep, and
    ResolveHold charges what the operator says and returns the rest."""
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        await client.put_budget("crash", 100_000, "tokens")
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(WORKER), sidecar.target, "crash",
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )  # fmt: skip
        try:
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
            dispatched, idle = line.decode().split()
            await asyncio.sleep(2.5)  # past two leases: only renewals keep the holds
            alive = await client.get_budget("crash")
            assert (30_000, 5_000, 2) == (alive.held, alive.used, alive.open_reservations)
            process.send_signal(signal.SIGKILL)
            assert -signal.SIGKILL == await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()

        async def doubted() -> bool:
            page = await sidecar.admin.ListHolds(
                pb.ListHoldsRequest(budget_id="crash", state=pb.RESERVATION_STATE_IN_DOUBT)
            )
            return [dispatched] == [h.reservation_id for h in page.holds]

        await eventually(doubted, within_seconds=15, what="the charged hold in doubt")
        swept = await sidecar.admin.ListHolds(
            pb.ListHoldsRequest(budget_id="crash", state=pb.RESERVATION_STATE_EXPIRED)
        )
        assert [idle] == [h.reservation_id for h in swept.holds]
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
