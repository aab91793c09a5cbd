"""Group admission inside one sidecar: lanes, one transaction per batch.

Naive admission runs one serializable transaction per request, and on a hot budget the
transactions mostly abort each other. Here every budget belongs to one lane (by a hash of
its id; one lane by default, see limits.lanes_default), and each lane keeps one
transaction in flight at a time: whatever
arrives meanwhile waits in the lane's queue and goes into the next transaction, decided
per budget in arrival order, each operation with its own answer. Under load the batches
grow by themselves, with no timer and no added latency when a lane is idle; a batch may
span many budgets, so traffic spread over many budgets shares commits too.

A request fails only itself: when a batch's transaction fails for any reason but an
unavailable database (unreachable, or conflicts exhausted), nothing was committed, and
its operations are decided again in halves until the culprit stands alone.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import structlog

from earmark import limits
from earmark.core.ops import Op, Result
from earmark.errors import Reason, Unavailable

log = structlog.get_logger("earmark.lanes")

# An operation's answer, or the error that is its alone (an EarmarkError, or a bug's).
Outcome = Result | Exception
# The budgets an operation acts on: the one it is decided with (its lane's key) first, then
# those a nested hold also holds on.
Route = tuple[str, ...]
Entry = tuple[Route, Op, "asyncio.Future[Outcome]"]
# Given which routes a transaction has locked every budget of, moves the operations on
# them that arrived since the batch was taken from the lane's queue to the end of the
# batch; returns how many.
TopUp = Callable[[Callable[[Route], bool]], int]
# Decides [(route, op), ...] in one transaction, one outcome per entry, in order; it may
# call the TopUp (when given) once its locks are held, and then decides the longer list.
RunBatch = Callable[[list[tuple[Route, Op]], TopUp | None], Awaitable[Sequence[Outcome]]]


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

    async def submit(self, route: Route, op: Op) -> Result:
        """Queues op on its budget's lane (route[0]'s) and waits for its own answer."""
        if self._closing:
            raise Unavailable("the sidecar is shutting down", Reason.SHUTTING_DOWN)
        # Python's string hash is stable within a process, which is all a lane needs: one
        # budget's operations always meet in the same lane, in arrival order.
        assert route, "an operation acts on at least one budget"
        lane = self._lanes[hash(route[0]) % len(self._lanes)]
        if len(lane.queue) >= self._queue_depth_max:
            raise Unavailable(
                f"{len(lane.queue)} operations are waiting; try again", Reason.OVERLOADED
            )
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        lane.queue.append((route, op, future))
        if lane.task is None:
            lane.task = asyncio.create_task(self._drain(lane))
        outcome = await future
        if isinstance(outcome, Exception):
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
                    await self._decide(lane, batch)
        finally:
            # Whatever is still queued (the task was cancelled) must not wait forever.
            while lane.queue:
                _, _, future = lane.queue.popleft()
                if not future.done():
                    future.set_result(
                        Unavailable("the sidecar is shutting down", Reason.SHUTTING_DOWN)
                    )
            lane.task = None

    def _take_batch(self, lane: _Lane) -> list[Entry]:
        batch: list[Entry] = []
        while lane.queue and len(batch) < self._batch_size_max:
            entry = lane.queue.popleft()
            # A caller that gave up (deadline, cancellation) no longer needs a decision.
            if not entry[2].done():
                batch.append(entry)
        return batch

    def _top_up(self, lane: _Lane, batch: list[Entry], entries: list[tuple[Route, Op]]) -> TopUp:
        """A batch's TopUp: it takes from the lane's queue, in order, the operations on the
        budgets the transaction locked (a budget's operations stay in arrival order: all
        of them are taken or none), up to the batch's size bound."""

        def top_up(locked: Callable[[Route], bool]) -> int:
            kept: deque[Entry] = deque()
            added = 0
            while lane.queue:
                entry = lane.queue.popleft()
                if entry[2].done():
                    continue  # its caller gave up
                if len(batch) < self._batch_size_max and locked(entry[0]):
                    batch.append(entry)
                    entries.append((entry[0], entry[1]))
                    added += 1
                else:
                    kept.append(entry)
            lane.queue.extendleft(reversed(kept))
            return added

        return top_up

    async def _decide(self, lane: _Lane, batch: list[Entry]) -> None:
        entries = [(route, op) for route, op, _ in batch]
        outcomes = await self._outcomes(entries, self._top_up(lane, batch, entries))
        if self._on_batch is not None:
            self._on_batch(len(batch))
        assert len(outcomes) == len(batch)
        for (_, _, future), outcome in zip(batch, outcomes, strict=True):
            if not future.done():
                future.set_result(outcome)

    async def _outcomes(
        self, entries: list[tuple[Route, Op]], top_up: TopUp | None = None
    ) -> list[Outcome]:
        """Every entry's answer (entries may grow by top_up first). A transaction that
        fails as a whole is split in halves and each decided again (at most log2(batch)
        deep), unless the database itself is unavailable: then every operation in it
        shares that answer."""
        try:
            return list(await self._run_batch(entries, top_up))
        except Unavailable as exc:
            return [exc for _ in entries]
        except Exception as exc:
            if len(entries) == 1:
                route, op = entries[0]
                log.exception("operation_failed", budget_id=route[0], op=type(op).__name__)
                return [exc]
            half = len(entries) // 2
            return await self._outcomes(entries[:half]) + await self._outcomes(entries[half:])
