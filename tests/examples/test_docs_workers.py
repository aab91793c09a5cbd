"""The Go example worker and the Java worker run as their docs show (docs/sdk-go.md's
example block, examples/java-worker/README.md's Run block, each command as written but for
the sidecar's address) against `earmark serve`, print the lines the docs show, and the
budget moves as they say."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import grpc

from earmark.spawn import spawn_sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc
from tests.helpers import assert_invariants, child

ROOT = Path(__file__).resolve().parents[2]
GO_DOC = ROOT / "docs" / "sdk-go.md"
JAVA_DOC = ROOT / "examples" / "java-worker" / "README.md"
# The addresses the docs give (`make run`'s), replaced by the test sidecar's.
DOCS_TARGET = "127.0.0.1:50051"
DOCS_ADMIN_SOCKET = ".earmark/admin.sock"


def block(doc: Path, heading: str) -> str:
    """The first fenced block under heading."""
    section = doc.read_text().split(f"\n{heading}\n", 1)[1]
    found = re.search(r"```[a-z]*\n(.*?)```", section, re.S)
    assert found is not None, f"{doc.name}: no block under {heading}"
    return found.group(1)


def commands_and_outputs(text: str) -> tuple[list[str], list[dict[str, Any]]]:
    """A block's commands (continuation lines joined; comments and `make` lines, which
    `make test` has run, left out) and the JSON lines it shows as their output."""
    commands, outputs = [], []
    for line in text.replace("\\\n", " ").splitlines():
        shown = line.removeprefix("# ").strip()
        if shown.startswith("{"):
            outputs.append(json.loads(shown))
        elif line.strip() and not line.startswith("#") and not line.startswith("make "):
            commands.append(line.strip())
    return commands, outputs


def matches(shown: dict[str, Any], printed: dict[str, Any]) -> bool:
    """printed has shown's keys and values, "…" standing for any value."""
    return set(shown) == set(printed) and all(v == "…" or printed[k] == v for k, v in shown.items())


async def run_block(text: str, target: str, admin_socket: Path) -> None:
    commands, outputs = commands_and_outputs(text)
    script = "\n".join(commands).replace(DOCS_TARGET, target)
    script = script.replace(DOCS_ADMIN_SOCKET, str(admin_socket))
    async with child(
        "bash", "-euo", "pipefail", "-c", script, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert 0 == process.returncode, err.decode()
    # The worker's line is the last; grpcurl's answer (several lines) comes before it.
    last = out.decode().splitlines()[-1]
    assert 1 == len(outputs)
    assert matches(outputs[0], json.loads(last)), (outputs, last)


async def test_the_go_and_java_workers_run_as_their_docs_show(
    database_url: str, socket_dir: Path
) -> None:
    """`earmark serve`, then each doc's block: the Go worker holds 500 on acme/tokens and
    settles at 320, the Java worker holds 1,000 on java/tokens (put by the block's grpcurl)
    and settles at 600; each prints the line its doc shows, and each budget used what it
    says with nothing held."""
    sidecar = await asyncio.to_thread(spawn_sidecar, socket_dir, "--database-url", database_url)
    try:
        admin_socket = Path(sidecar.admin.removeprefix("unix:"))
        async with grpc.aio.insecure_channel(sidecar.admin) as channel:
            admin = pb_grpc.AdminStub(channel)
            await admin.PutBudget(
                pb.PutBudgetRequest(budget_id="acme/tokens", limit=10_000, unit="tokens")
            )
            await run_block(block(GO_DOC, "## The example worker"), sidecar.target, admin_socket)
            await run_block(block(JAVA_DOC, "## Run"), sidecar.target, admin_socket)
            go = await admin.GetBudget(pb.GetBudgetRequest(budget_id="acme/tokens"))
            java = await admin.GetBudget(pb.GetBudgetRequest(budget_id="java/tokens"))
    finally:
        stopped = await asyncio.to_thread(sidecar.stop)
    assert 0 == stopped
    assert ((320, 0), (600, 0)) == ((go.used, go.held), (java.used, java.held))
    await assert_invariants(database_url)
