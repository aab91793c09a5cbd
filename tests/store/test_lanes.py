"""Lanes on their own: arrival order, bounded queues, and callers that give up."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from earmark.core.ops import Op, RenewOp, RenewResult, Result
from earmark.errors import EarmarkError, Unavailable
from earmark.store.lanes import Lanes


class Recorder:
    """A run_batch that records each batch and waits for the test to let it finish."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()

    async def __call__(self, entries: list[tuple[str, Op]]) -> list[Result | EarmarkError]:
        self.batches.append([op.reservation_id for _, op in entries if isinstance(op, RenewOp)])
        await self.release.wait()
        return [RenewResult(expires_at=datetime.now(UTC)) for _ in entries]


def renew(name: str) -> RenewOp:
    return RenewOp(reservation_id=name, lease=timedelta(seconds=1))


async def test_waiting_operations_share_the_next_batch_in_arrival_order() -> None:
    """While one batch runs, later operations queue and go together into the next, in order."""
    run = Recorder()
    lanes = Lanes(run, lanes=1)
    first = asyncio.create_task(lanes.submit("b", renew("r0")))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(lanes.submit("b", renew(f"r{i}"))) for i in range(1, 4)]
    await asyncio.sleep(0)
    run.release.set()
    await asyncio.gather(first, *rest)
    assert [["r0"], ["r1", "r2", "r3"]] == run.batches


async def test_a_full_queue_answers_unavailable() -> None:
    """Beyond the queue bound a submit fails UNAVAILABLE at once instead of waiting."""
    run = Recorder()
    lanes = Lanes(run, lanes=1, batch_size_max=1, queue_depth_max=2)
    running = asyncio.create_task(lanes.submit("b", renew("r0")))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(lanes.submit("b", renew(f"r{i}"))) for i in (1, 2)]
    await asyncio.sleep(0)
    with pytest.raises(Unavailable):
        await lanes.submit("b", renew("r3"))
    run.release.set()
    await asyncio.gather(running, *queued)
    assert [["r0"], ["r1"], ["r2"]] == run.batches


async def test_a_caller_that_gave_up_is_not_decided() -> None:
    """An operation whose caller was cancelled while it queued never reaches a batch."""
    run = Recorder()
    lanes = Lanes(run, lanes=1)
    running = asyncio.create_task(lanes.submit("b", renew("r0")))
    await asyncio.sleep(0)
    gave_up = asyncio.create_task(lanes.submit("b", renew("r1")))
    kept = asyncio.create_task(lanes.submit("b", renew("r2")))
    await asyncio.sleep(0)
    gave_up.cancel()
    run.release.set()
    await asyncio.gather(running, kept)
    assert [["r0"], ["r2"]] == run.batches


async def test_closing_refuses_new_operations() -> None:
    """After close() a submit is UNAVAILABLE: the sidecar is shutting down."""
    run = Recorder()
    run.release.set()
    lanes = Lanes(run, lanes=1)
    await lanes.close()
    with pytest.raises(Unavailable, match="shutting down"):
        await lanes.submit("b", renew("r0"))
