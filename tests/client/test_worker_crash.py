"""A worker process killed with SIGKILL mid-job: the sweeper returns its hold."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from earmark.client import AsyncClient
from tests.conftest import Running
from tests.helpers import assert_invariants

WORKER = Path(__file__).with_name("holding_worker.py")
ROOT = Path(__file__).resolve().parents[2]
SWEEP_WAIT_SECONDS = 15.0


async def test_sigkilled_worker_hold_returns(sidecar: Running) -> None:
    """The killed worker's hold stays while it lives and renews, and returns (its charges
    kept) once the lease passes without it."""
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
            assert line.strip(), "the worker never took its hold"
            await asyncio.sleep(2.5)
            alive = await client.get_budget("crash")
            assert (20_000, 5_000, 1) == (alive.held, alive.used, alive.open_reservations)
            process.send_signal(signal.SIGKILL)
            assert -signal.SIGKILL == await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        deadline = asyncio.get_running_loop().time() + SWEEP_WAIT_SECONDS
        while (state := await client.get_budget("crash")).open_reservations:
            assert asyncio.get_running_loop().time() < deadline, "the hold was never swept"
            await asyncio.sleep(0.2)
    assert (0, 5_000, 95_000) == (state.held, state.used, state.remaining)
    await assert_invariants(sidecar.dsn)
