"""The Concurrency Lab: why a check is not a limit, in one command.

N jobs that each expect to cost X start at the same moment against a plan of L, twice:
- plain check: each job reads what is left, runs if its estimate fits, and its usage is
  recorded when it ends (the broken pattern: every job reads the same remaining);
- Earmark hold: each job reserves its estimate, charges every step before running it
  (stopping when capped), and settles what it used.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass

from earmark.client import AsyncClient
from earmark.client.errors import EarmarkClientError, Refusal
from earmark.ops.connect import AdminAccess
from earmark.workloads.progress import Progress
from earmark.workloads.target import Target, sidecar_target


@dataclass(frozen=True, slots=True)
class LabParams:
    jobs: int = 5
    estimate: int = 40_000
    limit: int = 100_000
    concurrency: int = 0  # 0: every job at once
    actual: int = 0  # 0: each job costs its estimate
    steps: int = 4
    step_seconds: float = 0.05
    # Set: the hold mode runs on the account's current billing cycle, whose limit is the
    # plan's at the limits provider (then `limit` is the plain check's plan only).
    account: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.jobs <= 100_000:
            raise ValueError("jobs: must be between 1 and 100000")
        if self.estimate < 1 or self.limit < 0 or self.actual < 0:
            raise ValueError("estimate must be > 0, limit and actual >= 0")
        if not 1 <= self.steps <= 1_000 or not 0 <= self.step_seconds <= 60:
            raise ValueError("steps: 1 to 1000; step-seconds: 0 to 60")

    @property
    def cost(self) -> int:
        return self.actual or self.estimate

    @property
    def in_flight(self) -> int:
        return self.concurrency or self.jobs


@dataclass(slots=True)
class ModeResult:
    started: int = 0
    refused: int = 0
    capped: int = 0
    spent: int = 0
    over_plan: int = 0


class JobStatus(enum.StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    REFUSED = "refused"
    CAPPED = "capped"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class JobEvent:
    """What one job of one mode did last: a page draws a bar of it."""

    mode: str
    index: int
    status: JobStatus
    # What the job has spent so far (the plain check records it only when the job ends,
    # so its bar fills with the work it has done).
    charged: int = 0
    # A refused job: what the budget had left when it was refused (None: no limit).
    left: int | None = None


# Called with every job's every step; the command line passes none.
Observer = Callable[[JobEvent], None]


def _ignore(event: JobEvent) -> None:
    pass


def step_costs(total: int, steps: int) -> list[int]:
    """total split into steps parts that add up exactly."""
    base, extra = divmod(total, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


async def _run_jobs(
    params: LabParams, job: Callable[[int], Awaitable[None]], label: str, show: bool
) -> None:
    gate = asyncio.Semaphore(params.in_flight)
    start = asyncio.Event()
    progress = Progress(label, params.jobs) if show else None

    async def one(index: int) -> None:
        await start.wait()
        async with gate:
            await job(index)
        if progress is not None:
            progress.step()

    # A task group: a job that fails cancels the others, so that none is left holding
    # when the run reports the failure.
    try:
        async with asyncio.TaskGroup() as jobs:
            for index in range(params.jobs):
                jobs.create_task(one(index))
            # Every job is waiting on the same event: they start at the same moment.
            await asyncio.sleep(0)
            start.set()
    except* EarmarkClientError as failed:
        raise failed.exceptions[0] from None
    finally:
        if progress is not None:
            progress.close()


def scratch_id(mode: str) -> str:
    """A budget id of the Lab's own, archived when its run ends."""
    return f"lab-{mode}-{uuid.uuid4().hex[:8]}"


async def plain_check(
    client: AsyncClient, params: LabParams, observe: Observer = _ignore, show: bool = True
) -> ModeResult:
    """Read remaining, run, record usage at the end: every job sees the same number."""
    meter = scratch_id("check")
    # The meter records usage; its own limit stays unset, as a usage counter's would.
    await client.put_budget(meter, None, "units")
    result = ModeResult()
    # The broken pattern the article shows: every job of the first wave reads what is left
    # before any of them records. Without this barrier a fast job could record before a
    # slow one reads, and the row would depend on scheduling (a later wave, past
    # --concurrency, reads after the first recorded, as it would in production).
    first_wave = min(params.jobs, params.in_flight)
    reads = 0
    all_read = asyncio.Event()

    async def job(index: int) -> None:
        nonlocal reads
        state = await client.get_budget(meter)
        reads += 1
        if reads >= first_wave:
            all_read.set()
        left = params.limit - state.used
        if left < params.estimate:
            result.refused += 1
            observe(JobEvent("check", index, JobStatus.REFUSED, left=max(0, left)))
            return
        result.started += 1
        done = 0
        observe(JobEvent("check", index, JobStatus.RUNNING))
        for cost in step_costs(params.cost, params.steps):
            await asyncio.sleep(params.step_seconds)
            done += cost
            observe(JobEvent("check", index, JobStatus.RUNNING, done))
        await all_read.wait()
        recorded = await client.reserve(meter, params.cost)
        assert not isinstance(recorded, Refusal)
        await client.settle(recorded.reservation_id, params.cost)
        observe(JobEvent("check", index, JobStatus.DONE, params.cost))

    async with _archived(client, meter):
        await _run_jobs(params, job, "plain check", show)
        result.spent = (await client.get_budget(meter)).used
    result.over_plan = max(0, result.spent - params.limit)
    return result


async def earmark_hold(
    client: AsyncClient, params: LabParams, observe: Observer = _ignore, show: bool = True
) -> ModeResult:
    """Reserve the estimate, charge each step before it runs, settle what was used."""
    budget = "" if params.account else scratch_id("hold")
    if not params.account:
        await client.put_budget(budget, params.limit, "units")
    result = ModeResult()
    held_on: set[str] = set()

    async def job(index: int) -> None:
        async with client.hold(
            budget, params.estimate, raise_on_refusal=False, account=params.account
        ) as h:
            if h.reservation is None:
                result.refused += 1
                left = None
                if h.refusal is not None:
                    left = h.refusal.remaining
                    if h.refusal.budget_id:
                        held_on.add(h.refusal.budget_id)
                observe(JobEvent("hold", index, JobStatus.REFUSED, left=left))
                return
            held_on.add(h.reservation.budget_id)
            result.started += 1
            status, charged = JobStatus.DONE, 0
            observe(JobEvent("hold", index, JobStatus.RUNNING))
            for cost in step_costs(params.cost, params.steps):
                step = await h.charge(cost)
                charged = step.total_charged
                if step.capped:
                    result.capped += 1
                    status = JobStatus.CAPPED
                    break
                observe(JobEvent("hold", index, JobStatus.RUNNING, charged))
                await asyncio.sleep(params.step_seconds)
        observe(JobEvent("hold", index, status, charged))

    async with _archived(client, budget if not params.account else ""):
        await _run_jobs(params, job, "earmark hold", show)
        (held,) = held_on or {budget}
        state = await client.get_budget(held)
    result.spent = state.used
    result.over_plan = max(0, result.spent - (state.limit if state.limit is not None else 0))
    return result


@contextlib.asynccontextmanager
async def _archived(client: AsyncClient, budget_id: str) -> AsyncIterator[None]:
    """Archives a scratch budget (none: "") when its jobs are over, also when they failed;
    its ledger stays readable. An archive that fails after the jobs did is let go, so that
    the jobs' own error is the one raised."""
    try:
        yield
    except BaseException:
        if budget_id:
            with contextlib.suppress(EarmarkClientError):
                await client.delete_budget(budget_id)
        raise
    if budget_id:
        await client.delete_budget(budget_id)


async def run_modes(
    client: AsyncClient, params: LabParams, observe: Observer = _ignore, show: bool = True
) -> dict[str, ModeResult]:
    """The same jobs with a plain check, then with holds, each on scratch budgets that are
    archived when it ends."""
    return {
        "check": await plain_check(client, params, observe, show),
        "hold": await earmark_hold(client, params, observe, show),
    }


async def run_lab(target: Target, params: LabParams) -> dict[str, ModeResult]:
    async with AsyncClient(
        target.worker,
        admin_target=target.admin,
        admin_token=target.admin_token,
        timeout_seconds=30,
    ) as client:
        return await run_modes(client, params)


def render(params: LabParams, results: dict[str, ModeResult]) -> str:
    check, hold = results["check"], results["hold"]
    lines = [
        f"{params.jobs} jobs of {params.estimate:,} (each costs {params.cost:,}) "
        f"on a plan of {params.limit:,}, {params.in_flight} at once",
        "",
        f"{'':<16}{'plain check':>14}{'earmark hold':>14}",
    ]
    for label, key in [
        ("started", "started"),
        ("refused", "refused"),
        ("capped", "capped"),
        ("spent", "spent"),
        ("over the plan", "over_plan"),
    ]:
        lines.append(f"{label:<16}{getattr(check, key):>14,}{getattr(hold, key):>14,}")
    return "\n".join(lines)


def main(target: str | None, admin: AdminAccess, params: LabParams, as_json: bool) -> str:
    with sidecar_target(target, admin) as resolved:
        results = asyncio.run(run_lab(resolved, params))
    if as_json:
        return json.dumps(
            {"params": asdict(params), **{k: asdict(v) for k, v in results.items()}}, indent=2
        )
    return render(params, results)
