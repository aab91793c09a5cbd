"""The Go SDK (clients/go, module github.com/earmark-dev/earmark/gen/go): it is gofmt-clean
and vet-clean, its `go test` suite passes against a live sidecar, and its example worker
runs as docs/sdk-go.md shows (tests/test_generated.py checks its generated code against
protos/). `make test` builds it first (`make go`: the module, its tests,
clients/go/bin/worker and clients/go/bin/conformance, offline in GOPATH mode)."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants, binary_missing, child

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "clients" / "go"
WORKER = MODULE / "bin" / "worker"
ADAPTER = MODULE / "bin" / "conformance"
# Where the module's import path resolves in GOPATH mode (the Makefile's GO_LINK and
# GO_ENV, which `make go` makes).
LINK = MODULE / ".gopath" / "src" / "github.com" / "earmark-dev" / "earmark" / "gen" / "go"
GO_ENV = {
    "GO111MODULE": "off",
    "GOPATH": f"{MODULE / '.gopath'}:/usr/share/gocode",
    "GOFLAGS": "",
    "GOPROXY": "off",
}


@pytest.fixture(autouse=True)
def go_installed() -> None:
    """Skips without Debian's Go (fails instead under .ci/run), and asks for `make go`."""
    why = binary_missing("go", "golang-go")
    if why is not None:
        pytest.skip(why)
    assert WORKER.exists(), "run `make go` (`make test` runs it first)"
    assert ADAPTER.exists(), "run `make go` (`make test` runs it first)"
    assert LINK.exists(), "run `make go` (`make test` runs it first)"


async def run(
    *argv: str, cwd: Path, env: dict[str, str] | None = None, code: int = 0
) -> tuple[str, str]:
    """Runs argv, failing the test with its output unless it exits with code within 2
    minutes; returns its stdout and stderr."""
    async with child(
        *argv, cwd=cwd, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert code == process.returncode, f"{' '.join(argv)}:\n{out.decode()}\n{err.decode()}"
    return out.decode(), err.decode()


async def test_go_vet_and_go_test_against_a_live_sidecar(sidecar: Running) -> None:
    """gofmt has nothing to change, `go vet` nothing to say, and `go test ./...` passes:
    backoff, errors by reason, retries with one key on retryable reasons only (a fake
    server), the settlement journal (the Python SDK's bytes and names, quarantine, the
    directory check, first-format records, a record kept until a settled answer or a final
    refusal), and against the live sidecar a hold renewed past its lease, charged and
    settled, a refusal as an answer, an idempotent Reserve and Charge, errors by reason, a
    cancelled context mid-hold settled failed, an unknown outcome left in doubt, a journal
    record settled once by the next client's Recover, and a SIGKILLed worker's hold expired;
    the ledger audit is clean."""
    unformatted, _ = await run("gofmt", "-l", ".", cwd=MODULE)
    assert "" == unformatted
    await run("go", "vet", "./...", cwd=LINK, env=GO_ENV)
    env = {**GO_ENV, "EARMARK_TARGET": sidecar.target, "EARMARK_ADMIN_TARGET": sidecar.admin_target}
    out, _ = await run("go", "test", "-count=1", "-v", "./...", cwd=LINK, env=env)
    passed = re.findall(r"^--- PASS: (\w+)", out, re.M)
    print(f"go test: {len(passed)} passed")
    assert [] == re.findall(r"^--- (?:FAIL|SKIP): (\w+)", out, re.M), out
    assert 20 <= len(passed), out
    await assert_invariants(sidecar.dsn)


async def test_the_example_worker_runs_as_the_docs_show(sidecar: Running) -> None:
    """`worker -target HOST:PORT -budget ID -amount N -used M` prints one JSON line with the
    reservation id and its settled state and exits 0, and the budget moved as it says;
    on an empty budget it prints the refusal and exits 2."""
    for budget, limit in (("go-worker", 1_000), ("go-empty", 0)):
        await sidecar.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget, limit=limit, unit="tokens")
        )
    target = ["-target", sidecar.target]
    out, _ = await run(
        str(WORKER), *target, "-budget", "go-worker", "-amount", "500", "-used", "320", cwd=MODULE
    )
    (line,) = out.splitlines()
    settled = json.loads(line)
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="go-worker"))
    assert {"admitted", "reservation_id", "state", "charged", "released"} == set(settled)
    assert settled["reservation_id"]
    assert (True, "RESERVATION_STATE_SETTLED", 320, 180) == (
        settled["admitted"], settled["state"], settled["charged"], settled["released"]
    )  # fmt: skip
    assert (320, 0, 0) == (state.used, state.held, state.open_reservations)
    out, _ = await run(
        str(WORKER), *target, "-budget", "go-empty", "-amount", "1", "-used", "1", cwd=MODULE,
        code=2,
    )  # fmt: skip
    (line,) = out.splitlines()
    refused = json.loads(line)
    assert (False, "REFUSAL_REASON_INSUFFICIENT_BUDGET", "go-empty") == (
        refused["admitted"], refused["reason"], refused["budget_id"]
    )  # fmt: skip
    assert refused["message"]
    await assert_invariants(sidecar.dsn)


async def test_the_conformance_adapter_speaks_the_protocol(
    sidecar: Running, tmp_path: Path
) -> None:
    """clients/go/bin/conformance (docs/conformance.md's adapter protocol; the kit runs its
    scenarios): a hold's events and answer, its end `unknown` in doubt and `failed` settled,
    a refusal's reason without its prefix, an unknown op, and `quit` exiting 0 with the
    journal left empty."""
    for budget, limit in (("go-kit", 1_000), ("go-kit-empty", 0)):
        await sidecar.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget, limit=limit, unit="tokens")
        )
    journal = tmp_path / "journal"
    hold = {"op": "hold", "budget_id": "go-kit", "amount": 300, "lease_ms": 60_000}
    commands = [
        {"op": "open", "target": sidecar.target, "journal_dir": str(journal), "token": None},
        {**hold, "charges": [100], "used": 150, "end": "unknown"},
        {**hold, "charges": [20], "used": None, "end": "failed"},
        {**hold, "budget_id": "go-kit-empty", "charges": [], "end": "succeeded"},
        {"op": "nope"},
        {"op": "quit"},
    ]
    stdin = "".join(json.dumps(c) + "\n" for c in commands).encode()
    async with child(
        str(ADAPTER), cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(stdin), timeout=60)
    assert 0 == process.returncode, err.decode()
    lines = [json.loads(line) for line in out.decode().splitlines()]
    doubt, failed = lines[2]["reservation_id"], lines[4]["reservation_id"]
    assert [
        {"done": True, "ok": True},
        {"event": "reserved", "reservation_id": doubt},
        {"done": True, "ok": True, "admitted": True, "reservation_id": doubt, "state": "IN_DOUBT"},
        {"event": "reserved", "reservation_id": failed},
        {"done": True, "ok": True, "admitted": True, "reservation_id": failed, "state": "SETTLED"},
        {"done": True, "ok": True, "admitted": False, "reason": "INSUFFICIENT_BUDGET"},
        {"done": True, "ok": False, "code": "UNIMPLEMENTED", "reason": "unknown op"},
        {"done": True, "ok": True},
    ] == lines
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="go-kit"))
    assert (170, 150) == (state.used, state.held)  # in doubt at 150 (the rest held), settled at 20
    assert [] == sorted(p.name for p in journal.iterdir())
    await assert_invariants(sidecar.dsn)
