"""Lanes on their own: arrival order, bounded queues, and callers that give up."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from earmark.core.ops import Op, RenewOp, RenewResult, Result
from earmark.errors import EarmarkError, Reason, Unavailable
from earmark.store.lanes import Lanes, Route, TopUp


class Recorder:
    """A run_batch that records each batch and waits for the test to let it finish."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        # The budgets whose later operations the batch takes in once its locks are held.
        self.locked: set[str] | None = None

    async def __call__(
        self, entries: list[tuple[Route, Op]], top_up: TopUp | None
    ) -> list[Result | EarmarkError]:
        await self.release.wait()
        if top_up is not None and self.locked is not None:
            top_up(lambda route: route[0] in self.locked)  # type: ignore[operator]
        self.batches.append([op.reservation_id for _, op in entries if isinstance(op, RenewOp)])
        return [RenewResult(expires_at=datetime.now(UTC)) for _ in entries]


def renew(name: str) -> RenewOp:
    return RenewOp(reservation_id=name, lease=timedelta(seconds=1))


async def test_waiting_operations_share_the_next_batch_in_arrival_order() -> None:
    """While one batch runs, later operations queue and go together into the next, in order."""
    run = Recorder()
    lanes = Lanes(run, lanes=1)
    first = asyncio.create_task(lanes.submit(("b",), renew("r0")))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(lanes.submit(("b",), renew(f"r{i}"))) for i in range(1, 4)]
    await asyncio.sleep(0)
    run.release.set()
    await asyncio.gather(first, *rest)
    assert [["r0"], ["r1", "r2", "r3"]] == run.batches


async def test_a_batch_takes_in_what_arrived_on_its_locked_budgets() -> None:
    """Operations that arrive while a batch waits for its locks join it if their budget is
    locked; the others wait for the next batch, each budget's in arrival order."""
    run = Recorder()
    run.locked = {"hot"}
    lanes = Lanes(run, lanes=1)
    first = asyncio.create_task(lanes.submit(("hot",), renew("h0")))
    await asyncio.sleep(0)
    later = [
        asyncio.create_task(lanes.submit((budget_id,), renew(name)))
        for budget_id, name in (("hot", "h1"), ("cold", "c1"), ("hot", "h2"), ("cold", "c2"))
    ]
    await asyncio.sleep(0)
    run.release.set()
    await asyncio.gather(first, *later)
    assert [["h0", "h1", "h2"], ["c1", "c2"]] == run.batches


async def test_a_full_queue_answers_unavailable() -> None:
    """Beyond the queue bound a submit fails UNAVAILABLE at once instead of waiting."""
    run = Recorder()
    lanes = Lanes(run, lanes=1, batch_size_max=1, queue_depth_max=2)
    running = asyncio.create_task(lanes.submit(("b",), renew("r0")))
    await asyncio.sleep(0)
    queued = [asyncio.create_task(lanes.submit(("b",), renew(f"r{i}"))) for i in (1, 2)]
    await asyncio.sleep(0)
    with pytest.raises(Unavailable):
        await lanes.submit(("b",), renew("r3"))
    run.release.set()
    await asyncio.gather(running, *queued)
    assert [["r0"], ["r1"], ["r2"]] == run.batches


async def test_a_caller_that_gave_up_is_not_decided() -> None:
    """An operation whose caller was cancelled while it queued never reaches a batch."""
    run = Recorder()
    lanes = Lanes(run, lanes=1)
    running = asyncio.create_task(lanes.submit(("b",), renew("r0")))
    await asyncio.sleep(0)
    gave_up = asyncio.create_task(lanes.submit(("b",), renew("r1")))
    kept = asyncio.create_task(lanes.submit(("b",), renew("r2")))
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
        await lanes.submit(("b",), renew("r0"))


class Poisoned:
    """A run_batch whose transaction fails as a whole when it holds a poisoned operation,
    as PostgreSQL fails a statement over one bad row; records every batch it is given."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.batches: list[list[str]] = []

    async def __call__(
        self, entries: list[tuple[Route, Op]], top_up: TopUp | None
    ) -> list[Result | EarmarkError]:
        names = [op.reservation_id for _, op in entries if isinstance(op, RenewOp)]
        self.batches.append(names)
        if any(name.startswith("poison") for name in names):
            raise self.error
        return [RenewResult(expires_at=datetime.now(UTC)) for _ in entries]


async def submit_all(lanes: Lanes, names: list[str]) -> list[object]:
    """Submits every name at once, so that they share batches; returns answers or errors."""
    tasks = [asyncio.create_task(lanes.submit(("b",), renew(name))) for name in names]
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def test_a_failed_batch_is_decided_again_in_halves() -> None:
    """When a batch's transaction fails, only the operation that made it fail gets the
    error; every other operation in the batch gets its own answer."""
    run = Poisoned(RuntimeError("invalid byte sequence"))
    names = [f"r{i}" for i in range(7)] + ["poison"] + [f"r{i}" for i in range(7, 15)]
    outcomes = await submit_all(Lanes(run, lanes=1), names)
    failed = [name for name, o in zip(names, outcomes, strict=True) if isinstance(o, Exception)]
    assert ["poison"] == failed
    assert all(
        isinstance(o, RenewResult) for n, o in zip(names, outcomes, strict=True) if n != "poison"
    )
    # The whole batch, then halves down to the culprit: at most 2 * log2(16) + 1 batches.
    assert len(run.batches) <= 9


async def test_an_unavailable_database_fails_the_batch_alike() -> None:
    """A database that is unreachable is every operation's answer: nothing is split."""
    run = Poisoned(Unavailable("database unavailable", Reason.DATABASE_UNAVAILABLE))
    outcomes = await submit_all(Lanes(run, lanes=1), ["poison", "r1", "r2"])
    assert [Unavailable, Unavailable, Unavailable] == [type(o) for o in outcomes]
