"""`python -m bench.abba --before REV`: this tree's sidecar against the sidecar of an
earlier commit, on one PostgreSQL and one database, alternated in ABBA order.

A machine shared with others moves absolute timings between minutes; two sidecars measured
in turn, each half of a round on one (A B B A, then B A A B), share whatever the machine
did, so their run-by-run ratios say what a change moved. Per half it measures: one worker,
one call at a time (Reserve p50 and Settle p50, scenario 7, and the health Check's p50 as
the empty RPC's), and the sidecar's CPU per call
(from /proc) for the health Check at 50 in flight (the floor, scenario 1) and for Reserve
then Settle on one hot budget at 50 in flight (scenario 2); and a Reserve refused on a full
budget, one at a time and 50 in flight. It prints each run's figures,
then the medians of after / before with [min .. max].
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from bench.harness import CpuPerCall, closed_loop
from bench.scenarios import IN_FLIGHT, UNLIMITED_ENOUGH, check_step, reserve_settle, stubs
from earmark.spawn import SpawnedSidecar, spawn_sidecar
from earmark.store.embedded import EmbeddedPostgres, ensure_database
from earmark.v1 import budget_pb2 as pb

ROOT = Path(__file__).resolve().parent.parent
FIGURES = (
    "Check p50 ms", "Reserve p50 ms", "Settle p50 ms", "floor CPU us", "hot CPU us",
    "hot/floor CPU", "Refused p50 ms", "refused hot p50 ms",
)  # fmt: skip


def export(rev: str, into: Path, changed: Sequence[str] = ()) -> Path:
    """The sources of rev, unpacked under into (git archive: the work tree is untouched),
    with the work tree's copies of the changed paths over them: the change measured alone,
    whatever else others have changed in the work tree meanwhile."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    for path in changed:
        assert path.startswith("src/"), path
        (into / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, into / path)
    return into / "src"


@contextlib.contextmanager
def python_path(src: Path) -> Iterator[None]:
    """PYTHONPATH for the next spawned sidecar: an exported tree's sources come before the
    installed (editable) package."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(src)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


async def half(sidecar: SpawnedSidecar, seconds: float) -> list[float]:
    """One sidecar's figures for one half of a round, in FIGURES' order."""
    s = stubs(sidecar)
    try:
        budget_id = f"abba-{uuid.uuid4().hex[:8]}"
        await s.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=UNLIMITED_ENOUGH, unit="t")
        )
        step = reserve_settle(s, budget_id)
        await closed_loop(1, 0.3, step)
        single = await closed_loop(1, seconds, step)
        empty = await closed_loop(1, seconds / 2, check_step(s))
        pid = [sidecar.process.pid]
        floor_cpu = CpuPerCall()
        floor = await floor_cpu.measure(pid, None, closed_loop(IN_FLIGHT, seconds, check_step(s)))
        floor_us = floor_cpu.per_call_us(floor.counts.get("check", 0))[1]
        hot_cpu = CpuPerCall()
        hot = await hot_cpu.measure(pid, None, closed_loop(IN_FLIGHT, seconds, step))
        calls = hot.counts.get("reserve", 0) + hot.counts.get("settle", 0)
        hot_us = hot_cpu.per_call_us(calls)[1]
        # A budget with no room: every Reserve refused, one at a time and 50 in flight
        # (since issue 43 a refusal is counted on the budget's row, a write).
        full_id = f"abba-full-{uuid.uuid4().hex[:8]}"
        await s.admin.PutBudget(pb.PutBudgetRequest(budget_id=full_id, limit=0, unit="t"))
        refusing = reserve_settle(s, full_id)
        refused = await closed_loop(1, seconds / 2, refusing)
        refused_hot = await closed_loop(IN_FLIGHT, seconds / 2, refusing)
        return [
            empty.ms("check", 0.5),
            single.ms("reserve", 0.5),
            single.ms("settle", 0.5),
            floor_us,
            hot_us,
            hot_us / floor_us,
            refused.ms("refused", 0.5),
            refused_hot.ms("refused", 0.5),
        ]
    finally:
        await s.close()


def summary(label: str, values: list[float]) -> str:
    return (
        f"{label:>16}: median {statistics.median(values):8.3f} "
        f"[{min(values):.3f} .. {max(values):.3f}]"
    )


async def rounds(a: SpawnedSidecar, b: SpawnedSidecar, runs: int, seconds: float) -> None:
    measured: dict[str, list[list[float]]] = {"A": [], "B": []}
    sides = {"A": a, "B": b}
    for run in range(runs):
        order = "ABBA" if run % 2 == 0 else "BAAB"
        halves: dict[str, list[list[float]]] = {"A": [], "B": []}
        for side in order:
            halves[side].append(await half(sides[side], seconds))
        for side, got in halves.items():
            # A run's figure for a side: the mean of its two halves.
            mean = [statistics.fmean(v) for v in zip(*got, strict=True)]
            measured[side].append(mean)
            shown = ", ".join(f"{n} {v:.3f}" for n, v in zip(FIGURES, mean, strict=True))
            print(f"run {run} {side}: {shown}")
    for index, name in enumerate(FIGURES):
        before = [run[index] for run in measured["A"]]
        after = [run[index] for run in measured["B"]]
        print(f"{name}")
        print(summary("before (A)", before))
        print(summary("after (B)", after))
        print(summary("after/before", [y / x for x, y in zip(before, after, strict=True)]))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.abba")
    parser.add_argument("--before", required=True, help="the commit to compare with (A)")
    parser.add_argument(
        "--after",
        default="HEAD",
        help="the commit measured (B), with the work tree's copies of --changed over it",
    )
    parser.add_argument("--changed", nargs="*", default=[], help="paths under src/")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="earmark-abba-") as tmp:
        folder = Path(tmp)
        before_src = export(args.before, folder / "before")
        after_src = export(args.after, folder / "after", args.changed)
        pg = EmbeddedPostgres(folder / "db")
        pg.start()
        sidecars: list[SpawnedSidecar] = []
        try:
            asyncio.run(ensure_database(pg.uri(), "abba"))
            # This tree's sidecar first: its migrations are a superset of the earlier ones.
            for name in ("a", "b"):
                (folder / name).mkdir()
            with python_path(after_src):
                sidecars.append(spawn_sidecar(folder / "b", "--database-url", pg.uri("abba")))
            with python_path(before_src):
                sidecars.append(spawn_sidecar(folder / "a", "--database-url", pg.uri("abba")))
            asyncio.run(rounds(sidecars[1], sidecars[0], args.runs, args.seconds))
        finally:
            for sidecar in sidecars:
                sidecar.stop()
            pg.stop()


if __name__ == "__main__":
    main()
