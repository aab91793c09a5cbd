"""The load command: many jobs racing on one budget, with admission latency percentiles."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import asdict, dataclass, field

from earmark.client import AsyncClient, ClientError
from earmark.client.errors import Refusal
from earmark.ops.connect import AdminAccess
from earmark.workloads.progress import Progress
from earmark.workloads.target import Target, sidecar_target


@dataclass(frozen=True, slots=True)
class LoadParams:
    jobs: int = 120
    estimate: int = 1_000
    limit: int = 100_000
    concurrency: int = 50
    actual: int = 0  # 0: each job uses its estimate
    budget_id: str = ""  # empty: a fresh budget with the given limit
    # Set: the jobs hold on the account's current billing cycle, its limit the plan's.
    account: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.jobs <= 1_000_000:
            raise ValueError("jobs: must be between 1 and 1000000")
        if not 1 <= self.concurrency <= 10_000:
            raise ValueError("concurrency: must be between 1 and 10000")
        if self.estimate < 1 or self.limit < 0 or self.actual < 0:
            raise ValueError("estimate must be > 0, limit and actual >= 0")


@dataclass(slots=True)
class LoadReport:
    budget_id: str
    admitted: int = 0
    refused: int = 0
    failed: int = 0
    spent: int = 0
    held_at_end: int = 0
    # The budget this run made was archived at the end (it had no open holds left).
    deleted: bool = False
    seconds: float = 0.0
    jobs_per_second: float = 0.0
    admit_ms: dict[str, float] = field(default_factory=dict)


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_load(target: Target, params: LoadParams) -> LoadReport:
    budget_id = params.budget_id or ("" if params.account else f"load-{uuid.uuid4().hex[:8]}")
    report = LoadReport(budget_id=budget_id)
    latencies: list[float] = []
    created = not params.budget_id and not params.account
    async with AsyncClient(
        target.worker,
        admin_target=target.admin,
        admin_token=target.admin_token,
        timeout_seconds=30,
    ) as client:
        if created:
            await client.put_budget(budget_id, params.limit, "units")
        gate = asyncio.Semaphore(params.concurrency)
        progress = Progress("load", params.jobs)

        async def job() -> None:
            async with gate:
                try:
                    started = time.perf_counter()
                    decision = await client.reserve(
                        budget_id, params.estimate, account=params.account
                    )
                    latencies.append(time.perf_counter() - started)
                    report.budget_id = report.budget_id or decision.budget_id
                    if isinstance(decision, Refusal):
                        report.refused += 1
                    else:
                        report.admitted += 1
                        used = params.actual or params.estimate
                        await client.settle(decision.reservation_id, used)
                except ClientError:
                    report.failed += 1
            progress.step()

        started = time.perf_counter()
        try:
            await asyncio.gather(*[job() for _ in range(params.jobs)])
        finally:
            progress.close()
        report.seconds = time.perf_counter() - started
        state = await client.get_budget(report.budget_id)
        if created and not state.open_reservations:
            # A load test leaves nothing behind but the archived budget's ledger.
            await client.delete_budget(budget_id)
            report.deleted = True
    report.spent, report.held_at_end = state.used, state.held
    report.jobs_per_second = params.jobs / report.seconds
    report.admit_ms = {
        f"p{int(q * 100)}": round(percentile(latencies, q) * 1000, 2) for q in (0.5, 0.95, 0.99)
    }
    return report


def render(params: LoadParams, report: LoadReport) -> str:
    ms = report.admit_ms
    return "\n".join(
        [
            f"{params.jobs} jobs of {params.estimate:,} on {report.budget_id} "
            f"(limit {params.limit:,}), {params.concurrency} in flight",
            f"admitted        {report.admitted:>10,}",
            f"refused         {report.refused:>10,}",
            f"failed          {report.failed:>10,}",
            f"spent           {report.spent:>10,}",
            f"held at end     {report.held_at_end:>10,}",
            f"budget          {'deleted' if report.deleted else 'kept':>10}",
            f"took            {report.seconds:>10.2f} s",
            f"jobs/s          {report.jobs_per_second:>10.1f}",
            f"time to admit   p50 {ms['p50']} ms, p95 {ms['p95']} ms, p99 {ms['p99']} ms",
        ]
    )


def main(target: str | None, admin: AdminAccess, params: LoadParams, as_json: bool) -> str:
    with sidecar_target(target, admin) as resolved:
        report = asyncio.run(run_load(resolved, params))
    if as_json:
        return json.dumps({"params": asdict(params), **asdict(report)}, indent=2)
    return render(params, report)
