"""The Java worker of examples/java-worker (no SDK: protoc's stubs, Debian's grpc-java and
protobuf-java, plain javac) reserves and settles against a live sidecar as its README shows.
Its checked-in stubs (gen/) are checked against protos/ by tests/test_generated.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import NoReturn

import pytest

from earmark.client import AsyncClient
from tests.conftest import Running
from tests.helpers import REQUIRE_SERVERS, assert_invariants, binary_missing, child

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "java-worker"
GEN = EXAMPLE / "gen"
OUT = EXAMPLE / "out"
BUILD = EXAMPLE / "build.sh"
# One xdist worker runs them all, so that a stale out/ is rebuilt by one build.sh at a time.
pytestmark = pytest.mark.xdist_group("java-worker")


def missing(why: str) -> NoReturn:
    """Skips for why, or fails where .ci/run requires every toolchain."""
    if os.environ.get(REQUIRE_SERVERS):
        pytest.fail(why)
    pytest.skip(why)


def _built() -> bool:
    """out/ holds classes newer than every source (Worker.java, gen/, build.sh)."""
    worker = OUT / "Worker.class"
    if not worker.exists():
        return False
    sources = [EXAMPLE / "Worker.java", BUILD, *GEN.rglob("*.java")]
    return worker.stat().st_mtime >= max(p.stat().st_mtime for p in sources)


@pytest.fixture(scope="session")
def java_classpath() -> str:
    """The run classpath (out/ and Debian's jars), building out/ once when it is stale."""
    for name in ("java", "javac"):
        why = binary_missing(name, "default-jdk-headless")
        if why is not None:
            pytest.skip(why)
    jars = subprocess.run([str(BUILD), "--classpath"], capture_output=True, text=True, timeout=30)
    if jars.returncode != 0:
        missing(jars.stderr.strip())
    if not _built():
        subprocess.run([str(BUILD)], check=True, timeout=300)
    return f"{OUT}:{jars.stdout.strip()}"


async def worker(classpath: str, *argv: str) -> tuple[int, str, str]:
    """Runs the worker as the README shows; its exit code, stdout and stderr."""
    async with child(
        "java", "-cp", classpath, "Worker", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_java_worker_reserves_and_settles(sidecar: Running, java_classpath: str) -> None:
    """The worker holds 1,000 and settles at 600: one JSON line, exit 0, and the budget used
    600 with nothing held; then on an empty budget it is refused, exits 2, and holds nothing."""
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        await client.put_budget("java/tokens", 10_000, "tokens")
        await client.put_budget("java/empty", 0, "tokens")
        code, out, err = await worker(
            java_classpath, "--target", sidecar.target, "--budget", "java/tokens",
            "--amount", "1000", "--used", "600",
        )  # fmt: skip
        assert 0 == code, err
        line = json.loads(out)
        state = await client.get_budget("java/tokens")
        refused_code, refused_out, refused_err = await worker(
            java_classpath, "--target", sidecar.target, "--budget", "java/empty",
            "--amount", "1000", "--used", "600",
        )  # fmt: skip
        empty = await client.get_budget("java/empty")
    assert 1 == len(out.splitlines())
    assert {
        "admitted": True,
        "state": "RESERVATION_STATE_SETTLED",
        "used": 600,
        "charged": 600,
        "released": 400,
    } == {k: v for k, v in line.items() if k != "reservation_id"}
    assert line["reservation_id"]
    assert (600, 0, 0) == (state.used, state.held, state.open_reservations)
    assert 2 == refused_code, refused_err
    refusal = json.loads(refused_out)
    assert (False, "REFUSAL_REASON_INSUFFICIENT_BUDGET") == (
        refusal["admitted"],
        refusal["reason"],
    )
    assert (0, 0, 0) == (empty.used, empty.held, empty.open_reservations)
    await assert_invariants(sidecar.dsn)


async def test_java_worker_reads_the_error_reason(sidecar: Running, java_classpath: str) -> None:
    """On a budget that does not exist the worker exits 1 and prints NOT_FOUND with the
    reason it read from the status details (google.rpc.ErrorInfo): BUDGET_NOT_FOUND."""
    code, out, err = await worker(
        java_classpath, "--target", sidecar.target, "--budget", "java/missing",
        "--amount", "1000", "--used", "600",
    )  # fmt: skip
    assert (1, "") == (code, out)
    failure = json.loads(err.splitlines()[-1])
    assert ("NOT_FOUND", "BUDGET_NOT_FOUND") == (failure["code"], failure["reason"])
    await assert_invariants(sidecar.dsn)
