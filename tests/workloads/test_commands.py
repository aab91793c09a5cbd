"""`earmark lab` and `earmark load` as a user runs them: real processes against a sidecar."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import asyncpg

from earmark.v1 import budget_pb2 as pb
from earmark.workloads.lab import step_costs
from tests.conftest import Running
from tests.helpers import assert_invariants, child, fetch_budget_row, free_port


async def earmark(*args: str) -> tuple[int, str, str]:
    async with child(
        sys.executable, "-m", "earmark", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def run_json(*args: str) -> dict[str, Any]:
    code, out, err = await earmark(*args, "--json")
    assert 0 == code, err
    return json.loads(out)


def test_step_costs_add_up() -> None:
    """A job's cost splits into steps that add up to it exactly."""
    assert [3, 3, 2, 2] == step_costs(10, 4)
    assert 40_000 == sum(step_costs(40_000, 7))


def targets(s: Running) -> tuple[str, ...]:
    return ("--target", s.target, "--admin-target", s.admin_target)


async def test_lab_reproduces_the_article(sidecar: Running) -> None:
    """With its defaults the lab shows 5 jobs spending 200,000 on a plain check and 2 jobs
    spending 80,000 with holds, 3 refused."""
    result = await run_json(
        "lab", "--target", sidecar.target, "--admin-target", sidecar.admin_target
    )
    assert {"started": 5, "refused": 0, "capped": 0, "spent": 200_000, "over_plan": 100_000} == (
        result["check"]
    )
    assert {"started": 2, "refused": 3, "capped": 0, "spent": 80_000, "over_plan": 0} == (
        result["hold"]
    )
    await assert_invariants(sidecar.dsn)


async def test_lab_underestimate_shows_capping(sidecar: Running) -> None:
    """When each job costs more than its estimate, holds cap the jobs at the plan."""
    result = await run_json(
        "lab",
        "--target",
        sidecar.target,
        "--admin-target",
        sidecar.admin_target,
        "--actual",
        "50000",
    )
    assert (250_000, 150_000) == (result["check"]["spent"], result["check"]["over_plan"])
    assert (2, 2, 80_000, 0) == (
        result["hold"]["started"], result["hold"]["capped"],
        result["hold"]["spent"], result["hold"]["over_plan"],
    )  # fmt: skip


async def test_lab_starts_its_own_sidecar_and_prints_a_table() -> None:
    """Without --target the lab runs its own sidecar and embedded database and prints the
    side-by-side table."""
    code, out, err = await earmark("lab", "--jobs", "4", "--step-seconds", "0")
    assert 0 == code, err
    rows = {line[:16].strip(): line[16:].split() for line in out.splitlines()[3:]}
    assert ["4", "2"] == rows["started"]
    assert ["160,000", "80,000"] == rows["spent"]
    assert ["60,000", "0"] == rows["over the plan"]


async def test_load_admits_exactly_what_fits(sidecar: Running) -> None:
    """30 jobs of 1,000 at 10 in flight on 20,000 admit 20, refuse 10, spend 20,000, hold 0."""
    report = await run_json(
        "load", *targets(sidecar),
        "--jobs", "30", "--estimate", "1000", "--limit", "20000", "--concurrency", "10",
    )  # fmt: skip
    assert (20, 10, 0, 20_000, 0) == (
        report["admitted"], report["refused"], report["failed"],
        report["spent"], report["held_at_end"],
    )  # fmt: skip
    assert {"p50", "p95", "p99"} == set(report["admit_ms"])
    archived = await fetch_budget_row(sidecar.dsn, report["budget_id"])
    assert (True, True) == (report["deleted"], archived["archived_at"] is not None)
    await assert_invariants(sidecar.dsn)


async def test_audit_exits_nonzero_on_a_violation(sidecar: Running) -> None:
    """`earmark audit` says clean on a consistent database, and on a budget whose held
    counter drifted names it and exits 1."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="aud", limit=100, unit="t"))
    clean = await earmark("audit", "--database-url", sidecar.dsn)
    assert (0, "audit: clean (1 budgets)\n") == clean[:2]
    conn = await asyncpg.connect(sidecar.dsn)
    try:
        await conn.execute("UPDATE budgets SET held = 7 WHERE budget_id = 'aud'")
        code, out, _ = await earmark("audit", "--database-url", sidecar.dsn)
    finally:
        await conn.execute("UPDATE budgets SET held = 0 WHERE budget_id = 'aud'")
        await conn.close()
    assert (1, "audit: 2 violations") == (code, out.splitlines()[0])
    assert "aud: held 7 != open holds 0" in out


async def test_audit_names_an_unreachable_database() -> None:
    """A database that is not there is a one-line error, exit 1, and no password in it."""
    port = free_port()
    code, out, err = await earmark(
        "audit", "--database-url", f"postgresql://u:hunter2@127.0.0.1:{port}/x"
    )
    assert (1, "", 1) == (code, out, len(err.strip().splitlines()))
    assert "earmark audit: database unavailable" in err
    assert "hunter2" not in err


async def test_bad_workload_flag_exits_with_its_name() -> None:
    """A nonsensical flag stops the command with a message naming it."""
    code, _, err = await earmark("load", "--target", "127.0.0.1:1", "--concurrency", "0")
    assert 0 != code
    assert "concurrency" in err
