"""`make bench`: Earmark's benchmark suite.

Starts one PostgreSQL (the embedded one, fsync on) and the sidecars as separate processes
on loopback, drives them from this process, prints a table of medians with their spread,
and writes it as JSON under bench/results/. It never fails on a timing: the targets are
printed beside the figures, met or not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import psutil

from bench import growth, scenarios
from bench.harness import Figure
from earmark.settings import KINDE_CLIENT_ID, KINDE_CLIENT_SECRET
from earmark.spawn import SpawnedSidecar, spawn_sidecar
from earmark.store.embedded import EmbeddedPostgres, ensure_database
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, fake_kinde

ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    memory = psutil.virtual_memory().total / 2**30
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{memory:.0f} GiB, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def targets(by_name: dict[str, Figure]) -> list[tuple[str, bool]]:
    def m(name: str) -> float:
        return by_name[name].median

    floor = m("floor: health Check calls/s")
    naive = m("naive hot budget: admissions/s")
    checks = [
        (
            f"hot budget calls/s >= 0.6 x floor ({0.6 * floor:,.0f})",
            m("hot budget: calls/s (Reserve + Settle)") >= 0.6 * floor,
        ),
        (
            "priced hot budget calls/s >= 0.9 x plain (median of the run-by-run ratios)",
            m("priced / plain hot budget calls/s, run by run") >= 0.9,
        ),
        (
            f"hot budget admissions/s >= 8 x naive ({8 * naive:,.0f})",
            m("hot budget: admissions/s") >= 8 * naive,
        ),
        (
            f"1,000 budgets calls/s >= 0.6 x floor ({0.6 * floor:,.0f})",
            m("1,000 budgets: calls/s (Reserve + Settle)") >= 0.6 * floor,
        ),
        (
            "p99 at 50 in flight <= 40 ms (Reserve and Settle, hot and 1,000 budgets)",
            max(
                m("hot budget: Reserve p99"),
                m("hot budget: Settle p99"),
                m("1,000 budgets: Reserve p99"),
                m("1,000 budgets: Settle p99"),
            )
            <= 40,
        ),
        ("single in-flight Reserve p50 <= 2 ms", m("single in flight: Reserve p50") <= 2),
        (
            "store-alone group admission >= 20,000 admissions/s",
            m("store alone: admissions/s (500 submitters)") >= 20_000,
        ),
        (
            "the rate-limit counter and the outbox add no retries (account hot budget)",
            m("account hot budget: serialization retries per admission") == 0,
        ),
        (
            "zero retries exhausted (grouped scenarios)",
            max(m("hot budget: retries exhausted"), m("1,000 budgets: retries exhausted")) == 0,
        ),
    ]
    return checks


async def run(args: argparse.Namespace, folder: Path) -> dict[str, object]:
    pg = EmbeddedPostgres(folder / "db")
    await asyncio.to_thread(pg.start)
    sidecars: list[SpawnedSidecar] = []

    def sidecar(name: str, database: str, *extra: str) -> SpawnedSidecar:
        (folder / name).mkdir()
        started = spawn_sidecar(folder / name, "--database-url", pg.uri(database), *extra)
        sidecars.append(started)
        return started

    try:
        for database in ("bench", "growth"):
            await ensure_database(pg.uri(), database)
        grouped = sidecar("grouped", "bench")
        naive = sidecar("naive", "bench", "--admission", "naive")
        env = scenarios.Env(
            dsn=pg.uri("bench"), grouped=grouped, naive=naive, runs=args.runs, seconds=args.seconds
        )
        results: list[Figure] = []
        steps = [
            ("1. floor", scenarios.floor(env)),
            ("2. hot budget, plain and priced", scenarios.hot_budget(env)),
            ("3. 1,000 budgets", scenarios.many_budgets(env)),
            ("4. naive baseline", scenarios.naive_baseline(env)),
            ("5. store alone", scenarios.store_alone(env)),
        ]
        for label, coroutine in steps:
            print(f"running {label} ...", flush=True)
            results += await coroutine
        print("running 6. two sidecars ...", flush=True)
        results += await scenarios.two_sidecars(env, sidecar("second", "bench"))
        print("running 7. single in flight ...", flush=True)
        results += await scenarios.single_in_flight(env)
        print("running 9. account hot budget ...", flush=True)
        with fake_kinde() as kinde:
            kinde.state.unlimited = True
            os.environ[KINDE_CLIENT_ID], os.environ[KINDE_CLIENT_SECRET] = CLIENT_ID, CLIENT_SECRET
            account_sidecar = sidecar(
                "account", "bench", "--limits-provider", "kinde", "--kinde-domain", kinde.url,
                "--admissions-per-minute", "1000000",
            )  # fmt: skip
            results += await scenarios.account_hot_budget(env, account_sidecar)
            account_sidecar.stop()
        print("running 8. growth ...", flush=True)
        growth_sidecar = sidecar("growth", "growth")
        results += await growth.growth(env, growth_sidecar, pg.uri("growth"), args.reservations)
        return {"figures": results, "problems": env.problems}
    finally:
        for started in sidecars:
            started.stop()
        await asyncio.to_thread(pg.stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs per figure")
    parser.add_argument("--seconds", type=float, default=4.0, help="each run's length")
    parser.add_argument(
        "--reservations", type=int, default=200_000, help="for the memory growth figure"
    )
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="earmark-bench-") as tmp:
        outcome = asyncio.run(run(args, Path(tmp)))
    figures: list[Figure] = outcome["figures"]  # type: ignore[assignment]
    problems: list[str] = outcome["problems"]  # type: ignore[assignment]
    by_name = {f.name: f for f in figures}
    lines = [
        f"Earmark benchmark: {args.runs} runs of {args.seconds:g} s each, 50 in flight unless "
        "said; median [min .. max]",
        f"machine: {machine()}",
        "",
        *[f.row() for f in figures],
        "",
        "targets:",
        *[f"  [{'met' if ok else 'NOT met'}] {text}" for text, ok in targets(by_name)],
        "",
        f"invariant violations: {len(problems)}",
        *[f"  {p}" for p in problems],
    ]
    print("\n".join(lines))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    path = out / f"bench-{stamp}.json"
    path.write_text(
        json.dumps(
            {
                "machine": machine(),
                "args": vars(args),
                "figures": {f.name: f.as_json() for f in figures},
                "targets": [{"target": t, "met": ok} for t, ok in targets(by_name)],
                "invariant_violations": problems,
            },
            indent=2,
        )
    )
    print(f"\nwritten to {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
