"""The Concurrency Lab as the console runs it: one run at a time on a real sidecar (the
same jobs with a plain check, then with holds, on scratch budgets archived afterwards),
each job's bar kept as it charges, and the last few runs kept for the page to read."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog

from earmark import limits
from earmark.client import AsyncClient
from earmark.client.errors import EarmarkClientError
from earmark.console.errors import described
from earmark.workloads.lab import JobEvent, JobStatus, LabParams, ModeResult, run_modes

log = structlog.get_logger("earmark.console")

MODES = ("check", "hold")


class LabBusy(Exception):
    """A run is already going: the Lab runs one at a time."""


@dataclass(slots=True)
class JobBar:
    status: JobStatus = JobStatus.WAITING
    charged: int = 0
    left: int | None = None


@dataclass(slots=True)
class Run:
    run_id: str
    params: LabParams
    jobs: dict[str, list[JobBar]]
    status: str = "running"
    error: str = ""
    results: dict[str, ModeResult] = field(default_factory=dict)

    def observe(self, event: JobEvent) -> None:
        bar = self.jobs[event.mode][event.index]
        bar.status, bar.charged, bar.left = event.status, event.charged, event.left

    def to_json(self) -> dict[str, Any]:
        modes: dict[str, Any] = {}
        for mode in MODES:
            bars = self.jobs[mode]
            result = self.results.get(mode)
            modes[mode] = {
                "jobs": [
                    {
                        "status": bar.status.value,
                        "charged": bar.charged,
                        "left": bar.left,
                        "pct": round(100 * min(bar.charged, self.params.cost) / self.params.cost),
                    }
                    for bar in bars
                ],
                "admitted": sum(
                    b.status not in (JobStatus.WAITING, JobStatus.REFUSED) for b in bars
                ),
                "refused": sum(b.status == JobStatus.REFUSED for b in bars),
                "result": asdict(result) if result is not None else None,
            }
        return {
            "run_id": self.run_id,
            "status": self.status,
            "error": self.error,
            "params": asdict(self.params),
            "modes": modes,
        }


class LabRuns:
    """The console's Lab: start() begins a run in the background (LabBusy while one goes),
    get() reads one of the last limits.console_lab_runs_kept runs."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._task: asyncio.Task[None] | None = None

    def start(self, params: LabParams) -> Run:
        if self._task is not None and not self._task.done():
            raise LabBusy("a Lab run is going; wait for it to end")
        run = Run(
            uuid.uuid4().hex[:12],
            params,
            {mode: [JobBar() for _ in range(params.jobs)] for mode in MODES},
        )
        self._runs[run.run_id] = run
        while len(self._runs) > limits.console_lab_runs_kept:
            self._runs.popitem(last=False)
        self._task = asyncio.create_task(self._run(run), name=f"lab-{run.run_id}")
        return run

    async def _run(self, run: Run) -> None:
        try:
            run.results = await run_modes(self._client, run.params, run.observe, show=False)
            run.status = "done"
        except EarmarkClientError as error:
            run.status, run.error = "failed", described(error)[1]
            log.warning("lab_failed", run_id=run.run_id, error=run.error)
        except Exception as error:
            # Any other failure ends the run too, so that its page stops waiting for it.
            run.status, run.error = "failed", f"{type(error).__name__}: {error}"
            log.exception("lab_failed", run_id=run.run_id)

    def get(self, run_id: str) -> Run | None:
        return self._runs.get(run_id)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
