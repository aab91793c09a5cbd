"""50 workers in flight on one hot budget, each looping Reserve: admissions/s, p50, p99.

Starts its own sidecar (with its own embedded PostgreSQL) as a separate process on
loopback, drives it from this process, prints a table and writes JSON under
bench/results/. Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import grpc

from earmark.spawn import spawn_sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc

ROOT = Path(__file__).resolve().parent.parent


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run_once(target: str, workers: int, calls_per_worker: int) -> dict[str, float]:
    budget_id = f"bench-{uuid.uuid4().hex[:8]}"
    async with grpc.aio.insecure_channel(target) as channel:
        admin = budget_pb2_grpc.AdminStub(channel)
        budget = budget_pb2_grpc.BudgetStub(channel)
        await admin.PutBudget(pb.PutBudgetRequest(budget_id=budget_id, limit=10**15, unit="t"))
        latencies: list[float] = []
        unavailable = 0

        async def worker() -> None:
            nonlocal unavailable
            for _ in range(calls_per_worker):
                request = pb.ReserveRequest(
                    budget_id=budget_id, amount=1, idempotency_key=uuid.uuid4().hex
                )
                started = time.perf_counter()
                try:
                    reply = await budget.Reserve(request, timeout=30)
                except grpc.aio.AioRpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    unavailable += 1
                    continue
                latencies.append(time.perf_counter() - started)
                assert reply.admitted

        started = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(workers)])
        elapsed = time.perf_counter() - started
        state = await admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    assert state.held == len(latencies), "held != admitted"
    return {
        "admissions_per_second": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "unavailable": unavailable,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--calls-per-worker", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="earmark-bench-") as tmp:
        sidecar = spawn_sidecar(Path(tmp), "--metrics-listen", "")
        try:
            target = sidecar.target
            asyncio.run(run_once(target, args.workers, 10))  # warm-up
            runs = [
                asyncio.run(run_once(target, args.workers, args.calls_per_worker))
                for _ in range(args.runs)
            ]
        finally:
            sidecar.stop()
    summary = {
        key: {
            "median": statistics.median(r[key] for r in runs),
            "min": min(r[key] for r in runs),
            "max": max(r[key] for r in runs),
        }
        for key in runs[0]
    }
    print(f"hot budget: {args.workers} workers in flight, Reserve only, {args.runs} runs")
    print(f"{'figure':<24}{'median':>12}{'min':>12}{'max':>12}")
    for key, value in summary.items():
        print(f"{key:<24}{value['median']:>12.1f}{value['min']:>12.1f}{value['max']:>12.1f}")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (out / f"reserve_hot-{stamp}.json").write_text(
        json.dumps({"args": vars(args), "runs": runs, "summary": summary}, indent=2)
    )


if __name__ == "__main__":
    main()
