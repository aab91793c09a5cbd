"""The Node.js worker, on the TypeScript SDK (@earmark/client), racing on one budget through a
live sidecar."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from earmark.client import AsyncClient
from tests.conftest import Running
from tests.helpers import assert_invariants, child

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "examples" / "node-worker" / "worker.js"
NODE = shutil.which("node")
# The SDK is linked from clients/typescript and must be built (make test does both).
INSTALLED = (
    ROOT
    / "examples"
    / "node-worker"
    / "node_modules"
    / "@earmark"
    / "client"
    / "dist"
    / "cjs"
    / "index.js"
).exists()


@pytest.mark.skipif(NODE is None, reason="node is not on this machine")
async def test_node_worker_never_exceeds_the_budget(sidecar: Running, ts_dist: None) -> None:
    """20 Node jobs of 10,000 that each cost 12,000 race on 100,000: 10 admitted and capped,
    10 refused; the Admin API shows used = 100,000 = what the worker was charged, held 0."""
    assert INSTALLED, "run `make test` (it installs the Node worker's packages with npm ci)"
    assert NODE is not None
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        await client.put_budget("node/tokens", 100_000, "tokens")
        async with child(
            NODE, str(WORKER), "--target", sidecar.target, "--budget", "node/tokens",
            "--jobs", "20", "--estimate", "10000", "--actual", "12000",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        ) as process:  # fmt: skip
            out, err = await asyncio.wait_for(process.communicate(), timeout=120)
        assert 0 == process.returncode, err.decode()
        summary = json.loads(out)
        state = await client.get_budget("node/tokens")
    assert {
        "admitted": 10,
        "refused": 10,
        "capped": 10,
        "charged": 100_000,
        "errors": {},
    } == summary
    assert (100_000, 0, 0, 0) == (state.used, state.held, state.remaining, state.open_reservations)
    assert state.used == summary["charged"]
    await assert_invariants(sidecar.dsn)


@pytest.mark.skipif(NODE is None, reason="node is not on this machine")
async def test_node_worker_reads_the_error_reason(sidecar: Running, ts_dist: None) -> None:
    """Jobs on a budget that does not exist fail NOT_FOUND, and the Node worker reads the
    reason the SDK decoded from the status details (google.rpc.ErrorInfo): BUDGET_NOT_FOUND
    for each."""
    assert INSTALLED, "run `make test` (it installs the Node worker's packages with npm ci)"
    assert NODE is not None
    async with child(
        NODE, str(WORKER), "--target", sidecar.target, "--budget", "node/missing",
        "--jobs", "3",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert 0 == process.returncode, err.decode()
    expected = {"admitted": 0, "refused": 0, "capped": 0, "charged": 0}
    assert {**expected, "errors": {"BUDGET_NOT_FOUND": 3}} == json.loads(out)
    await assert_invariants(sidecar.dsn)


def readme_typescript_command() -> str:
    """The README's TypeScript command, joined from its continued lines."""
    text = (ROOT / "docs" / "sdk.md").read_text()
    start = text.index("cd examples/node-worker && npx proto-loader-gen-types")
    end = text.index("\n```", start)
    return text[start:end].replace("\\\n", " ")


@pytest.mark.skipif(NODE is None, reason="node is not on this machine")
async def test_the_readmes_typescript_command_generates_types(tmp_path: Path) -> None:
    """The README's proto-loader-gen-types command, run as it stands from the repository's
    root (with its output sent to a temporary folder), writes the contract's types."""
    assert INSTALLED, "run `make test` (it installs the Node worker's packages with npm ci)"
    command = readme_typescript_command().replace("--outDir=gen/ts", f"--outDir={tmp_path}")
    async with child(
        "bash", "-euo", "pipefail", "-c", command, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        _, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert 0 == process.returncode, err.decode()
    assert (tmp_path / "earmark" / "v1" / "ReserveRequest.ts").is_file()
