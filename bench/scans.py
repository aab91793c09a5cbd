"""Scenario 12, scans: Reserve latency on a hot budget alone and while 10 operators each
page through every hold of a budget of 9,300 open holds (ListHolds, 1,000 a page), and
what a page costs the sidecar's event loop.

The scanners run in a process of their own (`python -m bench.scans ADMIN BUDGET N`), so
that decoding their pages does not slow this process's event loop, which times the
Reserves: what moves is the sidecar's latency, not the load client's.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import uuid

import grpc

from bench.harness import Figure, Loop, Step, closed_loop, processes_cpu
from bench.scenarios import UNLIMITED_ENOUGH, Env, check_invariants, figures, reserve_settle, stubs
from earmark import limits
from earmark.spawn import SpawnedSidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc

SCANNED_HOLDS = 9_300
SCANNERS = 10
# Reserves in flight on the hot budget: few enough that the hot budget alone leaves the
# machine's two cores room, so that what the scans take shows.
RESERVES_IN_FLIGHT = 10
FILL_IN_FLIGHT = 50
SCANNED_LEASE_SECONDS = 3600
# Alone, with scans, with scans, alone; then the other way round (see hot_loop).
ABBA = (False, True, True, False)
LABEL = f"scans ({SCANNERS} full ListHolds scans of {SCANNED_HOLDS:,} holds)"


async def fill(env: Env, sidecar: SpawnedSidecar, budget_id: str) -> None:
    """SCANNED_HOLDS open holds on budget_id, made by Reserve, leased for an hour."""
    s = stubs(sidecar)
    try:
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=UNLIMITED_ENOUGH, unit="t")
        )
        lease = pb.ReserveRequest().lease
        lease.FromSeconds(SCANNED_LEASE_SECONDS)
        keys = iter(range(SCANNED_HOLDS))

        async def worker() -> None:
            for key in keys:
                request = pb.ReserveRequest(
                    budget_id=budget_id, amount=1, idempotency_key=f"scan-{key}", lease=lease
                )
                assert (await s.budget.Reserve(request, timeout=30)).admitted

        await asyncio.gather(*(worker() for _ in range(FILL_IN_FLIGHT)))
    finally:
        await s.close()


class Scanners:
    """The child process of SCANNERS scanners: started, then stopped with its counts."""

    def __init__(self, sidecar: SpawnedSidecar, budget_id: str) -> None:
        self._argv = [sys.executable, "-m", "bench.scans", sidecar.admin, budget_id]
        self._process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        """Returns once every scanner has read its first page."""
        self._process = await asyncio.create_subprocess_exec(
            *self._argv, stdout=asyncio.subprocess.PIPE
        )
        assert self._process.stdout is not None
        line = await asyncio.wait_for(self._process.stdout.readline(), timeout=60)
        assert b"started\n" == line, line

    async def stop(self) -> dict[str, float]:
        """Stops the scanners after their current page; their pages, holds and full scans."""
        assert self._process is not None
        assert self._process.stdout is not None
        self._process.send_signal(signal.SIGTERM)
        out = await asyncio.wait_for(self._process.stdout.read(), timeout=60)
        assert 0 == await self._process.wait()
        self._process = None
        counts: dict[str, float] = json.loads(out)
        return counts


def sidecar_cpu_seconds(sidecar: SpawnedSidecar) -> float:
    return sum(processes_cpu([sidecar.process.pid]).values())


async def with_scanners(
    sidecar: SpawnedSidecar, budget_id: str, seconds: float, step: Step | None
) -> tuple[Loop, dict[str, float], float]:
    """The Reserve loop while the scanners run (or, with step None, the scanners alone);
    their counts, and the sidecar's CPU seconds meanwhile."""
    scanners = Scanners(sidecar, budget_id)
    await scanners.start()
    cpu = sidecar_cpu_seconds(sidecar)
    started = time.perf_counter()
    try:
        if step is None:
            await asyncio.sleep(seconds)
            loop = Loop(seconds=time.perf_counter() - started)
        else:
            loop = await closed_loop(RESERVES_IN_FLIGHT, seconds, step)
    finally:
        counts = await scanners.stop()
    counts["seconds"] = time.perf_counter() - started
    return loop, counts, sidecar_cpu_seconds(sidecar) - cpu


async def scans(env: Env) -> list[Figure]:
    """12. Reserve p50 and p99 on a hot budget alone and with the scanners running, in
    halves of each run in ABBA order as 2b is; the ratio of the p99s run by run; holds
    listed/s and the sidecar's CPU per 1,000 holds listed, with the scanners alone."""
    sidecar = env.grouped
    out = figures(
        (f"{LABEL}: Reserve p50, alone", "ms"),
        (f"{LABEL}: Reserve p99, alone", "ms"),
        (f"{LABEL}: Reserve p50, with scans", "ms"),
        (f"{LABEL}: Reserve p99, with scans", "ms"),
        (f"{LABEL}: Reserve p99 with / without scans, run by run", "ratio"),
        (f"{LABEL}: holds listed/s, scans alone", "holds/s"),
        (f"{LABEL}: sidecar CPU per 1,000 holds listed", "ms"),
        (f"{LABEL}: sidecar CPU, share of one core, scans alone", "ratio"),
    )
    suffix = uuid.uuid4().hex[:6]
    scanned, hot = f"scanned-{suffix}", f"scan-hot-{suffix}"
    await fill(env, sidecar, scanned)
    s = stubs(sidecar)
    try:
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=hot, limit=UNLIMITED_ENOUGH, unit="t")
        )
        step = reserve_settle(s, hot)
        await closed_loop(RESERVES_IN_FLIGHT, 0.5, step)  # warm-up
        for run in range(env.runs):
            alone, scanning = Loop(), Loop()
            for scanned_now in ABBA if run % 2 == 0 else ABBA[::-1]:
                if scanned_now:
                    loop, _, _ = await with_scanners(sidecar, scanned, env.seconds / 2, step)
                    scanning.add(loop)
                else:
                    alone.add(await closed_loop(RESERVES_IN_FLIGHT, env.seconds / 2, step))
            _, counts, cpu = await with_scanners(sidecar, scanned, env.seconds / 2, None)
            values = [
                alone.ms("reserve", 0.5),
                alone.ms("reserve", 0.99),
                scanning.ms("reserve", 0.5),
                scanning.ms("reserve", 0.99),
                scanning.ms("reserve", 0.99) / max(1e-9, alone.ms("reserve", 0.99)),
                counts["holds"] / counts["seconds"],
                1000 * cpu / max(1.0, counts["holds"] / 1000),
                cpu / counts["seconds"],
            ]
            for figure, value in zip(out, values, strict=True):
                figure.values.append(value)
        await check_invariants(env, LABEL)
    finally:
        await s.close()
    return out


# The scanners' process.


async def scan_until_stopped(admin: str, budget_id: str, scanners: int) -> dict[str, float]:
    """scanners tasks each page through every hold of budget_id, again and again, until
    SIGTERM; prints "started" once each has read a page."""
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    counts = {"pages": 0.0, "holds": 0.0, "scans": 0.0}
    started: list[None] = []
    all_started = asyncio.Event()
    async with grpc.aio.insecure_channel(admin) as channel:
        stub = budget_pb2_grpc.AdminStub(channel)

        async def scanner() -> None:
            token = ""
            first = True
            while not stopping.is_set():
                page = await stub.ListHolds(
                    pb.ListHoldsRequest(
                        budget_id=budget_id, page_size=limits.page_size_max, page_token=token
                    ),
                    timeout=60,
                )
                counts["pages"] += 1
                counts["holds"] += len(page.holds)
                token = page.next_page_token
                if not token:
                    counts["scans"] += 1
                if first:
                    first = False
                    started.append(None)
                    if len(started) == scanners:
                        all_started.set()

        tasks = [asyncio.create_task(scanner()) for _ in range(scanners)]
        await all_started.wait()
        print("started", flush=True)
        await asyncio.gather(*tasks)
    return counts


def main() -> None:
    admin, budget_id = sys.argv[1], sys.argv[2]
    scanners = int(sys.argv[3]) if len(sys.argv) > 3 else SCANNERS
    print(json.dumps(asyncio.run(scan_until_stopped(admin, budget_id, scanners))), flush=True)


if __name__ == "__main__":
    main()
