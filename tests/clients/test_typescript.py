"""The TypeScript SDK (clients/typescript, npm package @earmark/client): its generated code
matches protos/, its `node --test` suite passes against a live sidecar and the fake OpenAI
server, it installs from its packed tarball, and docs/sdk-typescript.md's worker runs as
written. `make test` installs its packages (npm ci) and builds it first."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from earmark.client import AsyncClient
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import CACHED, INPUT, OUTPUT, cost, put_price
from tests.conftest import Running
from tests.fake_openai import fake_openai
from tests.helpers import assert_invariants, child

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")
INSTALLED = (PACKAGE / "node_modules" / ".bin" / "tsc").exists()
DOC = ROOT / "docs" / "sdk-typescript.md"
# The suite's files (Node 20 takes no glob, and would run every .mjs under test/ as a test,
# the worker scripts and helpers among them).
TEST_FILES = sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "test").glob("*.test.mjs"))
LOCKED = json.loads((PACKAGE / "package-lock.json").read_text())["packages"]
OPENAI_VERSION = LOCKED["node_modules/openai"]["version"]


def doc_block(name: str) -> str:
    """The js block of docs/sdk-typescript.md between the markers `name`:start and :end."""
    block = re.compile(rf"<!-- {name}:start -->\n```js\n(.*?)```\n<!-- {name}:end -->", re.S)
    found = block.search(DOC.read_text())
    assert found is not None, f"docs/sdk-typescript.md lost its {name} markers"
    return found[1]


pytestmark = pytest.mark.skipif(NODE is None or NPM is None, reason="node is not on this machine")


async def run(*argv: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Runs argv, failing the test with its output unless it exits 0 within 5 minutes;
    returns its stdout."""
    async with child(
        *argv, cwd=cwd, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    assert 0 == process.returncode, f"{' '.join(argv)}:\n{out.decode()}\n{err.decode()}"
    return out.decode()


async def built() -> None:
    assert INSTALLED, "run `make test` (it installs the TypeScript SDK's packages with npm ci)"
    assert NODE is not None
    await run(
        NODE, str(PACKAGE / "node_modules" / "typescript" / "bin" / "tsc"), "-p", ".", cwd=PACKAGE
    )


def _sources(folder: Path) -> dict[Path, bytes]:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*.ts")}


async def test_generated_code_matches_protos(tmp_path: Path) -> None:
    """Regenerating src/gen/ from protos/ (ts-proto run by protoc) into a temporary folder
    gives byte-identical files: protos/ changed without `npm run generate` fails here."""
    assert INSTALLED, "run `make test` (it installs the TypeScript SDK's packages with npm ci)"
    assert NODE is not None
    await run(NODE, "scripts/protogen.mjs", "--out", str(tmp_path), cwd=PACKAGE)
    checked_in = PACKAGE / "src" / "gen"
    generated = await asyncio.to_thread(_sources, tmp_path)
    kept = await asyncio.to_thread(_sources, checked_in)
    assert sorted(generated) == sorted(kept)
    for name, content in generated.items():
        assert content == kept[name], f"{name} drifted from protos/: run `npm run generate`"


async def test_node_test_suite_against_a_live_sidecar(sidecar: Running) -> None:
    """`node --test` over clients/typescript/test: the round trip, a refusal as a value,
    errors by reason, hold() settling in finally, the openai wrapper against the fake
    provider (settled at what it billed, capped, 4xx, 5xx in doubt, streams) and Node
    processes racing on one small budget; then the ledger audit is clean."""
    await built()
    assert NODE is not None
    with fake_openai() as provider:
        env = {
            "EARMARK_TARGET": sidecar.target,
            "EARMARK_ADMIN_TARGET": sidecar.admin_target,
            "FAKE_OPENAI_URL": provider.url,
        }
        out = await run(
            NODE, "--test", "--test-concurrency=1", "--test-reporter=tap", *TEST_FILES,
            cwd=PACKAGE, env=env,
        )  # fmt: skip
    counts = dict(re.findall(r"^# (tests|pass|fail|duration_ms) ([\d.]+)$", out, re.M))
    print(f"node --test: {counts}")
    assert counts.get("fail") == "0", out
    assert int(counts.get("pass", "0")) >= 20, out
    await assert_invariants(sidecar.dsn)


async def test_the_docs_workers_run_from_the_packed_tarball(
    sidecar: Running, tmp_path: Path
) -> None:
    """`npm pack` makes the package's tarball; installed into a fresh folder with `openai`
    (from npm's cache, which `make test`'s npm ci filled), the two workers of
    docs/sdk-typescript.md run exactly as written: the hold() worker settles what it says,
    and the metered OpenAI worker sends a maximum answer the size of its hold after the
    prompt and settles at what the fake OpenAI billed."""
    await built()
    assert NODE is not None
    assert NPM is not None
    packed = json.loads(
        await run(NPM, "pack", "--json", "--pack-destination", str(tmp_path), cwd=PACKAGE)
    )
    tarball = tmp_path / packed[0]["filename"]
    files = {f["path"] for f in packed[0]["files"]}
    assert {"dist/index.js", "dist/index.d.ts", "dist/openai.js", "package.json"} <= files
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}\n')
    await run(
        NPM, "install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error",
        str(tarball), f"openai@{OPENAI_VERSION}", cwd=app,
    )  # fmt: skip
    (app / "worker.mjs").write_text(doc_block("ts-worker"))
    (app / "openai-worker.mjs").write_text(doc_block("ts-openai-worker"))
    await put_price(
        sidecar, "openai", "gpt-4o-mini", input_usd_micros_per_mtok=150_000,
        output_usd_micros_per_mtok=600_000,
    )  # fmt: skip
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        await client.put_budget("acme/tokens", 100_000, "tokens")
        await client.put_budget("job-142", 5_000_000, "usd_micros", default_estimate=20_000)
        out = await run(NODE, "worker.mjs", cwd=app, env={"EARMARK_TARGET": sidecar.target})
        state = await client.get_budget("acme/tokens")
        with fake_openai() as fake:
            env = {
                "EARMARK_TARGET": sidecar.target,
                "OPENAI_BASE_URL": fake.url,
                "OPENAI_API_KEY": "test",
            }
            answered = await run(NODE, "openai-worker.mjs", cwd=app, env=env)
        job = await client.get_budget("job-142")
    (bill,) = fake.state.billed
    (request,) = fake.state.requests
    # The SDK's own count of the request's prompt, which its first Charge priced.
    sdk = "import('@earmark/client/openai')"
    count = f"{sdk}.then(m => console.log(m.promptTokens({json.dumps(request)})))"
    prompt = int(await run(NODE, "--input-type=module", "-e", count, cwd=app))
    covered = (20_000 - -(-prompt * 150_000 // 1_000_000)) * 1_000_000 // 600_000
    assert "done: 10" == out.strip()
    assert (31_200, 0) == (state.used, state.held)
    assert f"answered: {bill.prompt_tokens} {bill.completion_tokens}" == answered.strip()
    billed = -(-(bill.prompt_tokens * 150_000 + bill.completion_tokens * 600_000) // 1_000_000)
    assert (billed, 0) == (job.used, job.held)
    assert (None, covered) == (request.get("max_tokens"), request["max_completion_tokens"])
    await assert_invariants(sidecar.dsn)


async def test_node_workers_on_one_task_never_spend_past_five_dollars(sidecar: Running) -> None:
    """Four Node processes (two plain, two streaming) call the fake OpenAI through the
    TypeScript metered() on one $5.00 task until each is refused: together they never spend
    past it, and the budget's used is exactly what the provider billed."""
    await built()
    assert NODE is not None
    await put_price(
        sidecar, "openai", "gpt-4o", input_usd_micros_per_mtok=INPUT,
        cached_input_usd_micros_per_mtok=CACHED, output_usd_micros_per_mtok=OUTPUT,
    )  # fmt: skip
    await sidecar.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="ts-task", limit=5_000_000, unit="usd_micros")
    )
    worker = str(PACKAGE / "test" / "metered-race-worker.mjs")
    with fake_openai() as provider:
        env = {"EARMARK_TARGET": sidecar.target, "FAKE_OPENAI_URL": provider.url}
        modes = ["plain", "plain", "stream", "stream"]
        outs = await asyncio.gather(
            *(run(NODE, worker, "ts-task", mode, cwd=PACKAGE, env=env) for mode in modes)
        )
    done = [json.loads(out) for out in outs]
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="ts-task"))
    billed = sum(cost(b) for b in provider.state.billed)
    calls = sum(d["calls"] for d in done)
    print(f"typescript race: {calls} calls, used {state.used} of 5000000 usd_micros, {done}")
    assert [1] * 4 == [d["refused"] for d in done]
    assert calls == len(provider.state.billed)
    assert (billed, 0, 0) == (state.used, state.held, state.open_reservations)
    assert state.used <= 5_000_000
    await assert_invariants(sidecar.dsn)
