"""The Concurrency Lab: why a check is not a limit, in one command.

N jobs that each expect to cost X start at the same moment against a plan of L, twice:
- plain check: each job reads what is left, runs if its estimate fits, and its usage is
  recorded when it ends (the broken pattern: every job reads the same remaining);
- Earmark hold: each job reserves its estimate, charges every step before running it
  (stopping when capped), and settles what it used.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

from earmark.client import AsyncClient
from earmark.client.errors import Refusal
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


def step_costs(total: int, steps: int) -> list[int]:
    """total split into steps parts that add up exactly."""
    base, extra = divmod(total, steps)
    return [base + (1 if i < extra else 0) for i in range(steps)]


async def _run_jobs(params: LabParams, job: Callable[[], Awaitable[None]], label: str) -> None:
    gate = asyncio.Semaphore(params.in_flight)
    start = asyncio.Event()
    progress = Progress(label, params.jobs)

    async def one() -> None:
        await start.wait()
        async with gate:
            await job()
        progress.step()

    tasks = [asyncio.create_task(one()) for _ in range(params.jobs)]
    # Every job is waiting on the same event: they start at the same moment.
    await asyncio.sleep(0)
    start.set()
    try:
        await asyncio.gather(*tasks)
    finally:
        progress.close()


async def plain_check(client: AsyncClient, params: LabParams) -> ModeResult:
    """Read remaining, run, record usage at the end: every job sees the same number."""
    meter = f"lab-check-{uuid.uuid4().hex[:8]}"
    # The meter records usage; its own limit stays unset, as a usage counter's would.
    await client.put_budget(meter, None, "units")
    result = ModeResult()

    async def job() -> None:
        state = await client.get_budget(meter)
        if params.limit - state.used < params.estimate:
            result.refused += 1
            return
        result.started += 1
        for _ in range(params.steps):
            await asyncio.sleep(params.step_seconds)
        recorded = await client.reserve(meter, params.cost)
        assert not isinstance(recorded, Refusal)
        await client.settle(recorded.reservation_id, params.cost)

    await _run_jobs(params, job, "plain check")
    result.spent = (await client.get_budget(meter)).used
    result.over_plan = max(0, result.spent - params.limit)
    return result


async def earmark_hold(client: AsyncClient, params: LabParams) -> ModeResult:
    """Reserve the estimate, charge each step before it runs, settle what was used."""
    budget = "" if params.account else f"lab-hold-{uuid.uuid4().hex[:8]}"
    if not params.account:
        await client.put_budget(budget, params.limit, "units")
    result = ModeResult()
    held_on: set[str] = set()

    async def job() -> None:
        async with client.hold(
            budget, params.estimate, raise_on_refusal=False, account=params.account
        ) as h:
            if h.reservation is None:
                result.refused += 1
                if h.refusal is not None and h.refusal.budget_id:
                    held_on.add(h.refusal.budget_id)
                return
            held_on.add(h.reservation.budget_id)
            result.started += 1
            for cost in step_costs(params.cost, params.steps):
                step = await h.charge(cost)
                if step.capped:
                    result.capped += 1
                    break
                await asyncio.sleep(params.step_seconds)

    await _run_jobs(params, job, "earmark hold")
    (budget,) = held_on or {budget}
    state = await client.get_budget(budget)
    result.spent = state.used
    result.over_plan = max(0, result.spent - (state.limit if state.limit is not None else 0))
    return result


async def run_lab(target: Target, params: LabParams) -> dict[str, ModeResult]:
    async with AsyncClient(
        target.worker,
        admin_target=target.admin,
        admin_token=target.admin_token,
        timeout_seconds=30,
    ) as client:
        return {
            "check": await plain_check(client, params),
            "hold": await earmark_hold(client, params),
        }


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
