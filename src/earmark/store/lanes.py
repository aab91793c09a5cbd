"""Group admission inside one sidecar: a lane per budget, one transaction per batch.

Naive admission runs one serializable transaction per request, and on a hot budget
the transactions mostly abort each other. A lane keeps one transaction per budget in
flight at a time; whatever arrives meanwhile waits in the lane's queue and goes into
the next transaction, decided in arrival order. Under load the batches grow by
themselves, with no timer and no added latency when the lane is idle.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from earmark import limits
from earmark.core.ops import Op, Result
from earmark.errors import EarmarkError, Unavailable

RunBatch = Callable[[str, list[Op]], Awaitable[list[Result | EarmarkError]]]


@dataclass(slots=True)
class _Lane:
    queue: deque[tuple[Op, asyncio.Future[Result | EarmarkError]]] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None


class Lanes:
    """Routes each operation to its budget's lane and returns that operation's answer."""

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        batch_size_max: int = limits.batch_size_max,
        queue_depth_max: int = limits.lane_queue_depth_max,
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        assert 1 <= batch_size_max <= queue_depth_max
        self._run_batch = run_batch
        self._batch_size_max = batch_size_max
        self._queue_depth_max = queue_depth_max
        self._on_batch = on_batch
        self._lanes: dict[str, _Lane] = {}
        self._closing = False

    async def submit(self, budget_id: str, op: Op) -> Result:
        """Queues op on its budget's lane and waits for its own answer."""
        if self._closing:
            raise Unavailable("the sidecar is shutting down")
        lane = self._lanes.get(budget_id)
        if lane is None:
            lane = self._lanes[budget_id] = _Lane()
        if len(lane.queue) >= self._queue_depth_max:
            raise Unavailable(
                f"budget {budget_id!r} has {len(lane.queue)} operations waiting; try again"
            )
        future: asyncio.Future[Result | EarmarkError] = asyncio.get_running_loop().create_future()
        lane.queue.append((op, future))
        if lane.task is None:
            lane.task = asyncio.create_task(self._drain(budget_id, lane))
        result = await future
        if isinstance(result, EarmarkError):
            raise result
        return result

    async def close(self) -> None:
        """Refuses new operations and waits for the queued ones to be decided."""
        self._closing = True
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    def pending(self) -> int:
        return sum(len(lane.queue) for lane in self._lanes.values())

    async def _drain(self, budget_id: str, lane: _Lane) -> None:
        try:
            while lane.queue:
                batch = self._take_batch(lane)
                if batch:
                    await self._decide(budget_id, batch)
        finally:
            # Whatever is still queued (the task was cancelled) must not wait forever.
            while lane.queue:
                _, future = lane.queue.popleft()
                if not future.done():
                    future.set_result(Unavailable("the sidecar is shutting down"))
            lane.task = None
            if self._lanes.get(budget_id) is lane:
                del self._lanes[budget_id]

    def _take_batch(self, lane: _Lane) -> list[tuple[Op, asyncio.Future[Result | EarmarkError]]]:
        batch: list[tuple[Op, asyncio.Future[Result | EarmarkError]]] = []
        while lane.queue and len(batch) < self._batch_size_max:
            op, future = lane.queue.popleft()
            # A caller that gave up (deadline, cancellation) no longer needs a decision.
            if not future.done():
                batch.append((op, future))
        return batch

    async def _decide(
        self, budget_id: str, batch: list[tuple[Op, asyncio.Future[Result | EarmarkError]]]
    ) -> None:
        if self._on_batch is not None:
            self._on_batch(len(batch))
        try:
            results = await self._run_batch(budget_id, [op for op, _ in batch])
        except EarmarkError as exc:
            # The whole transaction failed (database gone, conflicts exhausted): nothing
            # was committed, and every operation in it gets the same answer.
            outcomes: list[Result | EarmarkError] = [exc for _ in batch]
        except Exception as exc:
            # A bug: every caller in the batch learns of it, the lane goes on.
            for _, future in batch:
                if not future.done():
                    future.set_exception(RuntimeError(f"batch failed: {exc!r}"))
            return
        else:
            outcomes = results
        assert len(outcomes) == len(batch)
        for (_, future), outcome in zip(batch, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)
