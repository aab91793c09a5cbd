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
from tests.conftest import Running
from tests.fake_openai import fake_openai
from tests.helpers import assert_invariants, child

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")
INSTALLED = (PACKAGE / "node_modules" / ".bin" / "tsc").exists()
DOC = ROOT / "docs" / "sdk-typescript.md"
WORKER_BLOCK = re.compile(
    r"<!-- ts-worker:start -->\n```js\n(.*?)```\n<!-- ts-worker:end -->", re.S
)

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
            NODE, "--test", "--test-concurrency=1", "--test-reporter=tap", "test/",
            cwd=PACKAGE, env=env,
        )  # fmt: skip
    counts = dict(re.findall(r"^# (tests|pass|fail|duration_ms) ([\d.]+)$", out, re.M))
    print(f"node --test: {counts}")
    assert counts.get("fail") == "0", out
    assert int(counts.get("pass", "0")) >= 20, out
    await assert_invariants(sidecar.dsn)


async def test_the_docs_worker_runs_from_the_packed_tarball(
    sidecar: Running, tmp_path: Path
) -> None:
    """`npm pack` makes the package's tarball; installed into a fresh folder (its
    dependencies from npm's cache, which `make test`'s npm ci filled), the worker of
    docs/sdk-typescript.md runs exactly as written and settles what it says."""
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
        str(tarball), cwd=app,
    )  # fmt: skip
    found = WORKER_BLOCK.search(DOC.read_text())
    assert found is not None, "docs/sdk-typescript.md lost its ts-worker markers"
    (app / "worker.mjs").write_text(found[1])
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        await client.put_budget("acme/tokens", 100_000, "tokens")
        out = await run(NODE, "worker.mjs", cwd=app, env={"EARMARK_TARGET": sidecar.target})
        state = await client.get_budget("acme/tokens")
    assert "done: 10" == out.strip()
    assert (31_200, 0) == (state.used, state.held)
    await assert_invariants(sidecar.dsn)
