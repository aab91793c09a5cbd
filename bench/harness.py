"""What every scenario needs: closed-loop workers, percentiles, medians with spread."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import psutil
from prometheus_client.parser import text_string_to_metric_families


def percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Loop:
    """What a closed loop measured: completed calls per kind and their latencies (s)."""

    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    latencies: dict[str, list[float]] = field(default_factory=dict)

    def record(self, kind: str, started: float) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.latencies.setdefault(kind, []).append(time.perf_counter() - started)

    def add(self, other: Loop) -> None:
        """Folds another loop's time, counts and latencies into this one."""
        self.seconds += other.seconds
        for kind, count in other.counts.items():
            self.counts[kind] = self.counts.get(kind, 0) + count
        for kind, samples in other.latencies.items():
            self.latencies.setdefault(kind, []).extend(samples)

    def rate(self, *kinds: str) -> float:
        return sum(self.counts.get(k, 0) for k in kinds) / self.seconds

    def ms(self, kind: str, q: float) -> float:
        return percentile(self.latencies.get(kind, []), q) * 1000


Step = Callable[[Loop], Awaitable[None]]


def _cpu_by_pid(processes: list[psutil.Process]) -> dict[int, float]:
    by_pid: dict[int, float] = {}
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        by_pid[process.pid] = times.user + times.system
    return by_pid


def postgres_cpu(postmaster_pid: int) -> dict[int, float]:
    """CPU used so far by each process of PostgreSQL: the postmaster, every backend and
    worker."""
    postmaster = psutil.Process(postmaster_pid)
    return _cpu_by_pid([postmaster, *postmaster.children()])


def processes_cpu(pids: list[int]) -> dict[int, float]:
    """CPU used so far by each of these processes (their threads, not their children)."""
    return _cpu_by_pid([psutil.Process(pid) for pid in pids])


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU spent between two readings by the processes alive at the second: a backend that
    ended meanwhile (an idle pool connection closed) takes its time with it, which only
    makes the figure a little low, where summing the totals would make it negative."""
    return sum(spent - before.get(pid, 0.0) for pid, spent in after.items())


@dataclass
class CpuPerCall:
    """CPU seconds spent while loops ran, by the load driver (this process), the sidecars
    and PostgreSQL: the figures that say where a call's cost is on a machine whose cores
    all three share."""

    driver: float = 0.0
    sidecars: float = 0.0
    postgres: float = 0.0

    async def measure(
        self, sidecar_pids: list[int], postmaster_pid: int | None, run: Awaitable[Loop]
    ) -> Loop:
        """Runs a loop and adds what each part spent meanwhile."""

        def now() -> tuple[dict[int, float], dict[int, float], dict[int, float]]:
            postgres = postgres_cpu(postmaster_pid) if postmaster_pid else {}
            return processes_cpu([os.getpid()]), processes_cpu(sidecar_pids), postgres

        before = now()
        loop = await run
        after = now()
        self.driver += cpu_spent(before[0], after[0])
        self.sidecars += cpu_spent(before[1], after[1])
        self.postgres += cpu_spent(before[2], after[2])
        return loop

    def per_call_us(self, calls: int) -> list[float]:
        """Microseconds per call: the driver's, the sidecars' and PostgreSQL's."""
        spent = (self.driver, self.sidecars, self.postgres)
        return [1e6 * seconds / max(1, calls) for seconds in spent]


async def closed_loop(workers: int, seconds: float, step: Step) -> Loop:
    """workers tasks each run step back to back until seconds pass; the clock starts when
    they all start, and calls still running at the end are not counted."""
    loop = Loop()
    stop_at = 0.0

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            await step(loop)

    stop_at = time.perf_counter() + seconds
    started = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(workers)])
    loop.seconds = time.perf_counter() - started
    return loop


@dataclass
class Figure:
    """One figure of the table: its runs, reported as median [min, max]."""

    name: str
    unit: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def row(self) -> str:
        # A ratio near 1 needs its second decimal; everything else reads well with one.
        d = 2 if self.unit in ("ratio", "retries") else 1
        spread = f"[{min(self.values):,.{d}f} .. {max(self.values):,.{d}f}]"
        return f"  {self.name:<44}{self.median:>12,.{d}f} {self.unit:<8}{spread}"

    def as_json(self) -> dict[str, object]:
        return {
            "unit": self.unit,
            "median": self.median,
            "min": min(self.values),
            "max": max(self.values),
            "runs": self.values,
        }


def scrape(metrics_port: int) -> dict[str, float]:
    """Sums every sample of each metric on a sidecar's /metrics, by sample name."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals
