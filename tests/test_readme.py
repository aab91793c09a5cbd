"""The README's grpcurl walkthrough and the docs' marked blocks, run as they stand with a
real grpcurl against a live sidecar."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.fake_anthropic import Rates, fake_anthropic
from tests.fake_openai import fake_openai
from tests.helpers import FakeClock, assert_invariants, child

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SEARCH_PATH = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
GRPCURL = shutil.which("grpcurl", path=SEARCH_PATH)


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- (\w+):start -->\n```sh\n(.*?)```\n<!-- \1:end -->", re.S)
# The example plans file of docs/plans.md, which its block runs against.
PLANS_FILE = re.compile(
    r"<!-- plans-file:start -->\n```toml\n(.*?)```\n<!-- plans-file:end -->", re.S
)


def blocks() -> dict[str, str]:
    """Every marked shell block of the README and docs/, by name."""
    return {m[1]: m[2] for doc in DOCS for m in MARKER.finditer(doc.read_text())}


def walkthrough(name: str = "walkthrough") -> str:
    found = blocks().get(name)
    assert found is not None, f"the README and docs/ lost the {name} markers"
    return found


def test_every_marked_block_is_run() -> None:
    """Every marked shell block in the README and docs/ is one a test here or in
    tests/test_providers_doc.py runs."""
    source = Path(__file__).read_text() + (ROOT / "tests" / "test_providers_doc.py").read_text()
    assert {"walkthrough", "scopes", "operator"} <= set(blocks())
    assert set() == {name for name in blocks() if f'tmp_path, "{name}")' not in source}


async def run_block(sidecar: Running, tmp_path: Path, name: str) -> str:
    """Runs the README's block as bash would, with grpcurl on PATH and the sidecar's
    database as EARMARK_DATABASE_URL (for `earmark usage`); returns what it printed."""
    admin = sidecar.admin_target.removeprefix("unix:")
    env = {
        **os.environ,
        "EARMARK": sidecar.target,
        "ADMIN": admin,
        "PATH": SEARCH_PATH,
        "EARMARK_DATABASE_URL": sidecar.dsn,
    }
    async with child(
        "bash", "-euo", "pipefail", "-c", walkthrough(name),
        cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=120)
    out = stdout.decode() + stderr.decode()
    assert 0 == process.returncode, out
    return out


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl is installed by `make venv`")
async def test_readme_walkthrough_runs(sidecar: Running, tmp_path: Path) -> None:
    """list, describe, PutBudget, Reserve, Charge, Settle and GetBudget, then PutPrice, a
    Reserve by shape and a Settle by usage, as the README types them, succeed and show the
    answers the README promises."""
    out = await run_block(sidecar, tmp_path, "walkthrough")
    for expected in (
        "earmark.v1.Budget",
        "earmark.v1.Admin",
        "rpc Reserve ( .earmark.v1.ReserveRequest ) returns ( .earmark.v1.ReserveResponse );",
        "string idempotency_key = 3;",
        '"admitted": true',
        '"remaining": "60000"',
        '"hold_remaining": "28000"',
        '"released": "8800"',
        '"state": "RESERVATION_STATE_SETTLED"',
        '"used": "31200"',
        '"remaining": "68800"',
        '"version": "1"',
        '"amount": "45000"',
        '"estimate_source": "ESTIMATE_SOURCE_SHAPE"',
        '"price_version": "1"',
        '"charged": "37000"',
        '"released": "8000"',
    ):
        assert expected in out, expected


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl is installed by `make venv`")
async def test_readme_scopes_run(sidecar: Running, tmp_path: Path) -> None:
    """The Scopes block: a nested Reserve and the account's refusal, the escrow, a SOFT
    admission, ListHolds, ListLedger, ReleaseHold and DeleteBudget answer as the README says."""
    out = await run_block(sidecar, tmp_path, "scopes")
    for expected in (
        '"remaining": "100000"',
        '"refused_budget_id": "acme"',
        "needs 9000000, 8500000 left (the rest is its output escrow, for PHASE_FINAL)",
        '"over_limit": true',
        '"also_budget_ids": [\n        "acme"\n      ]',
        '"kind": "hold"',
        '"released": "400000"',
        '"archived_at"',
    ):
        assert expected in out, expected
    await assert_invariants(sidecar.dsn)


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl is installed by `make venv`")
async def test_readme_operator_commands_run(sidecar: Running, tmp_path: Path) -> None:
    """The command-line block: budgets put (a budget's policies too), prices put and list,
    holds list and release, ledger, budgets get -o json and delete answer as the README
    shows them."""
    out = await run_block(sidecar, tmp_path, "operator")
    for expected in (
        "acme/ops   usd_micros   $5.00   $0.00   $0.00       $5.00       0   hard     15%      ok",
        "openai     gpt-4o-mini   default         1   2026-01-01T00:00:00Z   -         $0.15"
        "         $0.60",
        "held     $0.40",
        "400,000",
        "hold      ",
        "+$0.40",
        "-$0.40",
        '"escrow_bps": 1500',
        "15%      archived",
        "observe   week in America/New_York",
        "80%,95.5%    committed         120 admissions/min",
    ):
        assert expected in out, expected
    await assert_invariants(sidecar.dsn)


@pytest.mark.skipif(GRPCURL is None, reason="grpcurl is installed by `make venv`")
async def test_the_stand_in_block_runs_on_the_example_plans_file(
    dsn: str, socket_dir: Path, tmp_path: Path
) -> None:
    """docs/plans.md's example file, given to a sidecar with --limits-provider file, and its
    block: a Reserve by account on the anchor's period, a Settle, an account on the default
    plan refused past it, and `earmark usage` printing the settled total."""
    (example,) = PLANS_FILE.findall((ROOT / "docs" / "plans.md").read_text())
    plans_file = tmp_path / "plans.toml"
    plans_file.write_text(example)
    settings = sidecar_settings(
        dsn, socket_dir, limits_provider="file", plans_file=plans_file,
        report_interval_seconds=0.05,
    )  # fmt: skip
    # The instant the doc's answers were taken at: acme's period is 2026-11-15..2026-12-15.
    clock = FakeClock(datetime(2026, 12, 1, 12, tzinfo=UTC))
    async with running(Sidecar(settings, clock=clock), dsn) as side:
        out = await run_block(side, tmp_path, "standin")
        await assert_invariants(dsn)
    for expected in (
        '"admitted": true',
        '"budget_id": "acme/tokens/2026-11-15"',
        '"remaining": "4960000"',
        '"reason": "REFUSAL_REASON_INSUFFICIENT_BUDGET"',
        '"remaining": "100000"',
        "tokens    2026-11-15..2026-12-15   tokens   5,000,000   12,000      0    12,000",
        '"metered": 12000',
    ):
        assert expected in out, expected


def test_the_readme_is_a_quick_start() -> None:
    """The README stays a quick start under 300 lines, with every doc it sends readers to
    present."""
    text = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"\]\(((?:docs|bench)/[\w\-]+\.md)", text))
    assert (True, set()) == (
        len(text.splitlines()) < 300,
        {path for path in linked if not (ROOT / path).exists()},
    )
    assert {"docs/architecture.md", "docs/upgrades-and-backups.md", "bench/RESULTS.md"} <= linked


async def test_the_openai_worker_runs_as_written(
    sidecar: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/providers-python.md's OpenAI worker, against the fake OpenAI: the call without a
    maximum is sent the model's ceiling, and the budget's used is what the fake billed."""
    with fake_openai() as fake:
        # The provider client's own variables, as a worker's deployment sets them.
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        out = await run_block(sidecar, tmp_path, "openai_worker")
    (bill,) = fake.state.billed
    (request,) = fake.state.requests
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="job-142"))
    billed = -(-(bill.prompt_tokens * 150_000 + bill.completion_tokens * 600_000) // 1_000_000)
    assert f"answered: {bill.prompt_tokens} {bill.completion_tokens}" in out
    assert 16_384 == request["max_completion_tokens"]
    assert (billed, 0, 0) == (state.used, state.held, state.open_reservations)
    await assert_invariants(sidecar.dsn)


async def test_the_anthropic_worker_runs_as_written(
    sidecar: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/providers-python.md's Anthropic worker, against the fake Anthropic with cache
    reads and writes: its max_tokens is lowered to the 400 tokens held, and the budget's
    used is what the fake billed at the block's prices."""
    rates = Rates(input=3_000_000, output=15_000_000, cache_read=300_000, cache_write=3_750_000)
    with fake_anthropic(rates) as fake:
        fake.state.cache_read_tokens, fake.state.cache_write_tokens = 3, 2
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        out = await run_block(sidecar, tmp_path, "anthropic_worker")
    (bill,) = fake.state.billed
    (request,) = fake.state.requests
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="job-143"))
    assert f"answered: {4 * bill.output_tokens} {bill.output_tokens}" in out
    assert 400 == request["max_tokens"]
    assert (fake.state.billed_micros(), 0, 0) == (
        state.used,
        state.held,
        state.open_reservations,
    )
    await assert_invariants(sidecar.dsn)
