"""Group admission inside one sidecar: lanes, one transaction per batch.

Naive admission runs one serializable transaction per request, and on a hot budget the
transactions mostly abort each other. Here every budget belongs to one lane (by a hash of
its id; one lane by default, see limits.lanes_default), and each lane keeps one
transaction in flight at a time: whatever
arrives meanwhile waits in the lane's queue and goes into the next transaction, decided
per budget in arrival order, each operation with its own answer. Under load the batches
grow by themselves, with no timer and no added latency when a lane is idle; a batch may
span many budgets, so traffic spread over many budgets shares commits too.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from earmark import limits
from earmark.core.ops import Op, Result
from earmark.errors import EarmarkError, Unavailable

Outcome = Result | EarmarkError
Entry = tuple[str, Op, "asyncio.Future[Outcome]"]
# Decides [(budget_id, op), ...] in one transaction; one outcome per entry, in order.
RunBatch = Callable[[list[tuple[str, Op]]], Awaitable[list[Outcome]]]


@dataclass(slots=True)
class _Lane:
    queue: deque[Entry] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class Lanes:
    """Routes each operation to its budget's lane and returns that operation's answer."""

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        lanes: int = limits.lanes_default,
        batch_size_max: int = limits.batch_size_max,
        queue_depth_max: int = limits.lane_queue_depth_max,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        assert 1 <= lanes <= limits.lanes_max
        assert 1 <= batch_size_max <= queue_depth_max
        self._run_batch = run_batch
        self._batch_size_max = batch_size_max
        self._queue_depth_max = queue_depth_max
        self._on_batch = on_batch
        self._lanes = [_Lane() for _ in range(lanes)]
        self._closing = False

    async def submit(self, budget_id: str, op: Op) -> Result:
        """Queues op on its budget's lane and waits for its own answer."""
        if self._closing:
            raise Unavailable("the sidecar is shutting down")
        # Python's string hash is stable within a process, which is all a lane needs: one
        # budget's operations always meet in the same lane, in arrival order.
        lane = self._lanes[hash(budget_id) % len(self._lanes)]
        if len(lane.queue) >= self._queue_depth_max:
            raise Unavailable(f"{len(lane.queue)} operations are waiting; try again")
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        lane.queue.append((budget_id, op, future))
        if lane.task is None:
            lane.task = asyncio.create_task(self._drain(lane))
        outcome = await future
        if isinstance(outcome, EarmarkError):
            raise outcome
        return outcome

    async def close(self) -> None:
        """Refuses new operations and waits for the queued ones to be decided."""
        self._closing = True
        tasks = [lane.task for lane in self._lanes if lane.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _drain(self, lane: _Lane) -> None:
        try:
            while lane.queue:
                batch = self._take_batch(lane)
                if batch:
                    await self._decide(batch)
        finally:
            # Whatever is still queued (the task was cancelled) must not wait forever.
            while lane.queue:
                _, _, future = lane.queue.popleft()
                if not future.done():
                    future.set_result(Unavailable("the sidecar is shutting down"))
            lane.task = None

    def _take_batch(self, lane: _Lane) -> list[Entry]:
        batch: list[Entry] = []
        while lane.queue and len(batch) < self._batch_size_max:
            entry = lane.queue.popleft()
            # A caller that gave up (deadline, cancellation) no longer needs a decision.
            if not entry[2].done():
                batch.append(entry)
        return batch

    async def _decide(self, batch: list[Entry]) -> None:
        if self._on_batch is not None:
            self._on_batch(len(batch))
        try:
            outcomes = await self._run_batch([(budget_id, op) for budget_id, op, _ in batch])
        except EarmarkError as exc:
            # The whole transaction failed (database gone, conflicts exhausted): nothing
            # was committed, and every operation in it gets the same answer.
            outcomes = [exc for _ in batch]
        except Exception as exc:
            # A bug: every caller in the batch learns of it, the lane goes on.
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(RuntimeError(f"batch failed: {exc!r}"))
            return
        assert len(outcomes) == len(batch)
        for (_, _, future), outcome in zip(batch, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)
