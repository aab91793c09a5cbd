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
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil

from bench import console, growth, metered, regions, scans, scenarios
from bench.harness import Figure
from bench.sidecars import k_sidecars
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
    """Each target whose figures this run measured: its text and whether it was met."""

    def m(name: str) -> float:
        return by_name[name].median

    def worst(suffix: str) -> float:
        """The largest value of any run of the K-sidecar figures ending in suffix."""
        found = [
            max(f.values)
            for name, f in by_name.items()
            if " sidecar" in name and name.endswith(suffix)
        ]
        if not found:
            raise KeyError(suffix)
        return max(found)

    def floor() -> float:
        return m("floor: health Check calls/s")

    def naive() -> float:
        return m("naive hot budget: admissions/s")

    checks: list[Callable[[], tuple[str, bool]]] = [
        lambda: (
            f"hot budget calls/s >= 0.6 x floor ({0.6 * floor():,.0f})",
            m("hot budget: calls/s (Reserve + Settle)") >= 0.6 * floor(),
        ),
        lambda: (
            "priced hot budget calls/s >= 0.9 x plain (median of the run-by-run ratios)",
            m("priced / plain hot budget calls/s, run by run") >= 0.9,
        ),
        lambda: (
            f"hot budget admissions/s >= 8 x naive ({8 * naive():,.0f})",
            m("hot budget: admissions/s") >= 8 * naive(),
        ),
        lambda: (
            f"1,000 budgets calls/s >= 0.6 x floor ({0.6 * floor():,.0f})",
            m("1,000 budgets: calls/s (Reserve + Settle)") >= 0.6 * floor(),
        ),
        lambda: (
            "p99 at 50 in flight <= 40 ms (Reserve and Settle, hot and 1,000 budgets)",
            max(
                m("hot budget: Reserve p99"),
                m("hot budget: Settle p99"),
                m("1,000 budgets: Reserve p99"),
                m("1,000 budgets: Settle p99"),
            )
            <= 40,
        ),
        lambda: ("single in-flight Reserve p50 <= 2 ms", m("single in flight: Reserve p50") <= 2),
        lambda: (
            "store-alone group admission >= 20,000 admissions/s",
            m("store alone: admissions/s (500 submitters)") >= 20_000,
        ),
        lambda: (
            "the rate-limit counter and the outbox add no retries (account hot budget)",
            m("account hot budget: serialization retries per admission") == 0,
        ),
        lambda: (
            "zero retries exhausted (grouped scenarios)",
            max(m("hot budget: retries exhausted"), m("1,000 budgets: retries exhausted")) == 0,
        ),
        lambda: (
            "8 sidecars, one hot budget: calls/s >= 0.7 x one sidecar's (aim 0.9; median ratio)",
            m("8 sidecars / 1, one hot budget, run by run") >= 0.7,
        ),
        lambda: (
            "8 sidecars, a budget each: calls/s >= 0.8 x one sidecar's (median ratio)",
            m("8 sidecars / 1, a budget each, run by run") >= 0.8,
        ),
        lambda: ("K sidecars: no UNAVAILABLE in any run", worst(": UNAVAILABLE") == 0),
        lambda: (
            "8 sidecars, a budget each: CPU per admission <= 2.0 x one sidecar's (aim 1.5; "
            "sidecars and PostgreSQL; median ratio)",
            m("CPU per admission, 8 sidecars / 1, a budget each, run by run") <= 2.0,
        ),
        lambda: (
            "nested holds on a hot parent: calls/s >= 0.8 x the plain hot budget's (median ratio)",
            m("nested / plain hot budget calls/s, run by run") >= 0.8,
        ),
        lambda: (
            f"Reserve p99 with {scans.SCANNERS} full ListHolds scans <= 2 x without "
            "(median of the run-by-run ratios)",
            m(f"{scans.LABEL}: Reserve p99 with / without scans, run by run") <= 2,
        ),
        lambda: (
            "metered call overhead p50 <= 3 ms (metered - direct, alternated in one run)",
            m(f"{metered.LABEL}: metered - direct p50") <= 3,
        ),
        lambda: (
            "K sidecars: serialization retries < 0.05 per admission in every run",
            worst(": retries per admission") < 0.05,
        ),
        *metered.wrapper_targets(m),
        *regions.targets(m),
    ]
    measured = []
    for check in checks:
        try:
            measured.append(check())
        except KeyError:
            continue  # a scenario this run left out
    return measured


SCENARIOS = (
    "floor",
    "hot",
    "many",
    "naive",
    "store",
    "two",
    "single",
    "account",
    "growth",
    "sidecars",
    "nested",
    "scans",
    "console",
    "metered",
    "regions",
)


async def account(env: scenarios.Env, sidecar: Callable[..., SpawnedSidecar]) -> list[Figure]:
    """9, against a fake Kinde that grants every account an unlimited plan."""
    with fake_kinde() as kinde:
        kinde.state.unlimited = True
        os.environ[KINDE_CLIENT_ID], os.environ[KINDE_CLIENT_SECRET] = CLIENT_ID, CLIENT_SECRET
        account_sidecar = sidecar(
            "account", "bench", "--limits-provider", "kinde", "--kinde-domain", kinde.url,
            "--admissions-per-minute", "1000000",
        )  # fmt: skip
        try:
            return await scenarios.account_hot_budget(env, account_sidecar)
        finally:
            account_sidecar.stop()


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
        for database in ("bench", "growth", "sidecars"):
            await ensure_database(pg.uri(), database)
        grouped = sidecar("grouped", "bench")
        naive = sidecar("naive", "bench", "--admission", "naive")
        postmaster_pid = int((pg.pgdata / "postmaster.pid").read_text().split()[0])
        env = scenarios.Env(
            dsn=pg.uri("bench"),
            grouped=grouped,
            naive=naive,
            runs=args.runs,
            seconds=args.seconds,
            postmaster_pid=postmaster_pid,
        )
        results: list[Figure] = []
        only = set(args.only or SCENARIOS)
        steps: list[tuple[str, str, Callable[[], Awaitable[list[Figure]]]]] = [
            ("floor", "1. floor", lambda: scenarios.floor(env)),
            ("hot", "2. hot budget, plain and priced", lambda: scenarios.hot_budget(env)),
            ("many", "3. 1,000 budgets", lambda: scenarios.many_budgets(env)),
            ("naive", "4. naive baseline", lambda: scenarios.naive_baseline(env)),
            ("store", "5. store alone", lambda: scenarios.store_alone(env)),
            ("two", "6. two sidecars", lambda: scenarios.two_sidecars(
                env, sidecar("second", "bench"))),
            ("single", "7. single in flight", lambda: scenarios.single_in_flight(env)),
            ("account", "9. account hot budget", lambda: account(env, sidecar)),
            ("growth", "8. growth", lambda: growth.growth(
                env, sidecar("growth", "growth"), pg.uri("growth"), args.reservations)),
            ("sidecars", "10. K sidecars", lambda: k_sidecars(
                env, lambda name, *flags: sidecar(name, "sidecars", *flags), pg.uri("sidecars"),
                postmaster_pid)),
            ("nested", "11. nested holds on a hot parent", lambda: scenarios.nested_hot_parent(
                env)),
            ("scans", "12. Reserves while operators scan", lambda: scans.scans(env)),
            ("console", "13. the console's pages", lambda: console.console(env)),
            ("metered", "14. metered call overhead", lambda: metered.metered_overhead(env)),
            ("regions", "15. budgets across regions", lambda: regions.regions(
                env, folder / "regions")),
        ]  # fmt: skip
        for key, label, start in steps:
            if key in only:
                print(f"running {label} ...", flush=True)
                results += await start()
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
    parser.add_argument(
        "--only", action="append", choices=SCENARIOS, help="run only these scenarios (repeatable)"
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
