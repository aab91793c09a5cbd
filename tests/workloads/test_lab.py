"""The Lab's modes run in process against one live sidecar."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, cast

import grpc

from earmark.client import AsyncClient
from earmark.workloads.lab import LabParams, plain_check
from tests.conftest import Running
from tests.helpers import assert_invariants

RUNS = 200
JOBS = 5
# How long the slowed reader waits for another job's record before it reads anyway: a
# bound on the wait, not a timing the test asserts.
SLOW_READ_SECONDS = 1.0


class SlowLastReader(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """Holds back each run's last job's read until two other jobs have recorded (settled:
    with the Lab's defaults, what is left no longer fits a job) or SLOW_READ_SECONDS pass:
    the slow reader that fast jobs overtook on a loaded machine."""

    def __init__(self) -> None:
        self.next_run()

    def next_run(self) -> None:
        self.reads = self.settles = 0
        self.recorded = asyncio.Event()

    async def intercept_unary_unary(
        self, continuation: Any, details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else details.method
        if method.endswith("/GetBudget"):
            self.reads += 1
            if self.reads == JOBS:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.recorded.wait(), SLOW_READ_SECONDS)
        call = await continuation(details, request)
        if method.endswith("/Settle"):
            await call
            self.settles += 1
            if self.settles == 2:
                self.recorded.set()
        return call


async def test_the_plain_check_starts_every_job_every_time(sidecar: Running) -> None:
    """With 5 jobs and no step time, every job reads what is left before any records, so
    all 5 start in each of 200 runs, as the article's Lab shows."""
    params = LabParams(jobs=JOBS, step_seconds=0)
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        started = [(await plain_check(client, params, show=False)).started for _ in range(RUNS)]
    assert [JOBS] * RUNS == started
    await assert_invariants(sidecar.dsn)


async def test_a_slow_reader_is_not_overtaken_by_a_fast_job(sidecar: Running) -> None:
    """A job whose read is answered last still reads before any job records: the plain
    check's row never depends on which job the machine ran first."""
    params = LabParams(jobs=JOBS, step_seconds=0)
    slow = SlowLastReader()
    async with AsyncClient(
        sidecar.target, admin_target=sidecar.admin_target, interceptors=[cast(Any, slow)]
    ) as client:
        started = []
        for _ in range(3):
            slow.next_run()
            started.append((await plain_check(client, params, show=False)).started)
    assert [JOBS] * 3 == started
    await assert_invariants(sidecar.dsn)
