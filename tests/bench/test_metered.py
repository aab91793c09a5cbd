"""Scenario 14 (bench/metered.py) runs: every provider's direct, metered and bare calls
against its fake and a spawned sidecar, a few rounds of one run."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from bench import metered
from bench.metered_providers import PROVIDERS
from bench.scenarios import Env
from earmark.spawn import spawn_sidecar
from earmark.store.embedded import EmbeddedPostgres


async def test_the_scenario_measures_every_provider(
    dsn: str, embedded_pg: EmbeddedPostgres, tmp_path: Path
) -> None:
    """One run of 3 rounds: each provider's seven figures, one value each, all finite; its
    calls settled (the invariant audit finds nothing); a target for each provider."""
    sidecar = await asyncio.to_thread(spawn_sidecar, tmp_path, "--database-url", dsn)
    try:
        postmaster = int((embedded_pg.pgdata / "postmaster.pid").read_text().split()[0])
        env = Env(dsn, sidecar, sidecar, runs=1, seconds=1.0, postmaster_pid=postmaster)
        out = await metered.metered_overhead(env, pairs=3, warmup_pairs=1)
    finally:
        await asyncio.to_thread(sidecar.stop)
    assert [] == env.problems
    expected = [metered.name(p, what) for p in PROVIDERS for what, _ in metered.FIGURES]
    assert expected == [f.name for f in out]
    assert all(len(f.values) == 1 and math.isfinite(f.values[0]) for f in out)
    by_name = {f.name: f for f in out}
    # OpenAI's figure keeps its name, which bench's older targets read.
    assert "metered call overhead: metered - direct p50" in by_name
    checked = [check() for check in metered.wrapper_targets(lambda n: by_name[n].median)]
    assert len(PROVIDERS) == len(checked)
