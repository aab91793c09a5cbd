"""The drain's rules: while draining, only calls on holds admitted here get in, the
holds it remembers are bounded, oldest forgotten first, and a stop says what it waits
for, which is never a hold in doubt."""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog
from google.protobuf.duration_pb2 import Duration

from earmark import limits
from earmark.errors import Unavailable
from earmark.server import STOP_OVERRAN_EXIT_CODE, Sidecar
from earmark.service.drain import Drain
from earmark.v1 import budget_pb2 as pb
from tests.conftest import running, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, child, eventually


def test_draining_admits_only_the_calls_of_open_holds() -> None:
    """After SIGTERM a tracked hold's call enters; a settled one's, or a new Reserve, is
    UNAVAILABLE."""
    drain = Drain()
    drain.track("open")
    drain.track("settled")
    drain.untrack("settled")
    drain.draining = True
    drain.enter("open")
    refused = []
    for reservation_id in ("settled", ""):
        with pytest.raises(Unavailable):
            drain.enter(reservation_id)
        refused.append(reservation_id)
    assert (1, ["settled", ""]) == (drain.active, refused)


def test_tracked_holds_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the bound the oldest hold is forgotten, so holds whose workers died cannot
    crowd out new ones."""
    monkeypatch.setattr(limits, "drain_tracked_holds_max", 2)
    drain = Drain()
    for reservation_id in ("a", "b", "c"):
        drain.track(reservation_id)
    assert ["b", "c"] == list(drain.holds)


async def test_a_stop_says_what_it_waits_for_and_not_for_holds_in_doubt(
    dsn: str, socket_dir: Path, clock: FakeClock
) -> None:
    """On stop one line names the hold still held and the deadline; a hold in doubt is not
    waited for, and the held one settled during the drain leaves nothing open."""
    settings = sidecar_settings(
        dsn, socket_dir, drain_holds_seconds=5.0, shutdown_grace_seconds=10.0
    )
    async with running(Sidecar(settings, clock=clock), dsn) as s:
        await s.admin.PutBudget(pb.PutBudgetRequest(budget_id="d", limit=1_000, unit="t"))
        short, long = Duration(seconds=10), Duration(seconds=3600)
        doubted = await s.budget.Reserve(
            pb.ReserveRequest(budget_id="d", amount=10, idempotency_key="doubt", lease=short)
        )
        await s.budget.Charge(
            pb.ChargeRequest(reservation_id=doubted.reservation_id, amount=1, idempotency_key="c")
        )
        held = await s.budget.Reserve(
            pb.ReserveRequest(budget_id="d", amount=10, idempotency_key="held", lease=long)
        )
        clock.advance(timedelta(seconds=11))

        async def in_doubt() -> bool:
            page = await s.admin.ListHolds(pb.ListHoldsRequest(budget_id="d"))
            return pb.RESERVATION_STATE_IN_DOUBT in {h.state for h in page.holds}

        await eventually(in_doubt, within_seconds=10, what="the charged hold in doubt")
        with structlog.testing.capture_logs() as logs:
            stopping = asyncio.create_task(s.sidecar.stop())

            async def said() -> bool:
                return any(e["event"] == "stopping" for e in logs)

            await eventually(said, within_seconds=10, what="the stopping line")
            await s.budget.Settle(pb.SettleRequest(reservation_id=held.reservation_id, used=4))
            await stopping
    line = next(e for e in logs if e["event"] == "stopping")
    drained = next(e for e in logs if e["event"] == "drained")
    assert (1, [held.reservation_id], True, 5.0) == (
        line["holds_open"],
        line["holds"],
        line["holds_known"],
        line["holds_waited_seconds"],
    )
    assert datetime.fromisoformat(line["drain_deadline"]) > datetime.now(UTC)
    assert (0, True) == (drained["open_holds_left"], drained["within_grace"])
    await assert_invariants(dsn)


async def test_a_stop_stuck_past_its_bound_ends_the_process(tmp_path: Path) -> None:
    """A process whose stop waits on something that never ends (here a read of a FIFO
    nobody writes) exits with STOP_OVERRAN_EXIT_CODE and one line once the bound passes."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    script = (
        "from earmark.server import exit_at_the_bound\n"
        "exit_at_the_bound(0.2)\n"
        f"open({str(fifo)!r}).read()\n"
    )
    async with child(
        sys.executable, "-c", script, stderr=asyncio.subprocess.PIPE
    ) as process:  # fmt: skip
        _, err = await asyncio.wait_for(process.communicate(), 60)
    assert (STOP_OVERRAN_EXIT_CODE, 1) == (process.returncode, len(err.splitlines()))
    assert err.startswith(b"earmark: the stop did not end within 0.2s of SIGTERM")
