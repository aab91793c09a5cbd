"""The TypeScript SDK (clients/typescript, npm package @earmark/client): its generated code
matches protos/, its `node --test` suite passes against a live sidecar and the fake OpenAI
and Anthropic servers, it installs from its packed tarball (both its ES module and its
CommonJS build, with their types), and docs/sdk-typescript.md's workers run as written.
`make test` installs its packages (npm ci) and builds it first."""

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
from tests.fake_anthropic import FakeAnthropic, Rates, fake_anthropic
from tests.fake_openai import FakeOpenAI, fake_openai
from tests.helpers import assert_invariants, child

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")
INSTALLED = (PACKAGE / "node_modules" / ".bin" / "tsc").exists()
DOC = ROOT / "docs" / "sdk-typescript.md"
# What the packed package is checked with in a fresh folder (clients/typescript/test/pack):
# each build loaded as it is meant to be (`import` and `require`), and a TypeScript file.
PACK_CHECKS = PACKAGE / "test" / "pack"
# The suite's files (Node 20 takes no glob, and would run every .mjs under test/ as a test,
# the worker scripts and helpers among them).
TEST_FILES = sorted(str(p.relative_to(PACKAGE)) for p in (PACKAGE / "test").glob("*.test.mjs"))
LOCKED = json.loads((PACKAGE / "package-lock.json").read_text())["packages"]
OPENAI_VERSION = LOCKED["node_modules/openai"]["version"]
ANTHROPIC_VERSION = LOCKED["node_modules/@anthropic-ai/sdk"]["version"]
# The text of the Node tests' requests that Earmark must refuse before they are sent
# (test/helpers.mjs): no fake may ever see it.
NEVER_SENT = "never-sent"
# The rates of the Node tests (test/helpers.mjs), in micro-dollars per million tokens; the
# fake Anthropic's tally needs them, the tests read the budgets.
NODE_RATES = Rates(
    input=2_000_000,
    output=8_000_000,
    cache_read=1_000_000,
    cache_write=3_000_000,
    cache_write_long=4_000_000,
    web_search=10_000,
)
# The chunked fake OpenAI's answer: 290 tokens three a chunk, of uneven lengths, so that a
# stream counted by its characters would be cut short (test/helpers.mjs, CHUNKED_TEXTS).
CHUNKED_TOKENS = 290
CHUNKED_TEXTS = ("alpha ", "be ", "gamma-delta ")


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


def never_sent(*fakes: FakeOpenAI | FakeAnthropic) -> list[str]:
    """The requests of the fakes that carry NEVER_SENT: there must be none."""
    return [
        json.dumps(body)
        for fake in fakes
        for body in fake.state.requests
        if NEVER_SENT in json.dumps(body)
    ]


async def test_node_test_suite_against_a_live_sidecar(sidecar: Running, ts_dist: None) -> None:
    """`node --test` over clients/typescript/test: the round trip, a refusal as a value,
    errors by reason, hold() settling in finally, the wire rules, metered() OpenAI and
    Anthropic clients against the fake providers (every surface held before it is sent and
    settled at what the fake billed, refused unsent on an empty budget, told the true cap,
    streams read to their end or in doubt when cut), the same for AzureOpenAI, GoogleGenAI
    and BedrockRuntimeClient against the suite's in-process fakes (test/fakes.mjs) and for
    earmarkMiddleware() on @ai-sdk/openai and @ai-sdk/anthropic models against these fakes,
    the docs' Azure, Gemini, Bedrock and AI SDK workers run as written (test/docs.test.mjs),
    and Node processes racing on one small budget; no request Earmark refused reached a
    fake, and the ledger audit is clean."""
    assert NODE is not None
    with (
        fake_openai() as provider,
        fake_openai() as chunked,
        fake_anthropic(NODE_RATES) as claude,
        fake_anthropic(NODE_RATES) as caching,
    ):
        chunked.state.completion_tokens = CHUNKED_TOKENS
        chunked.state.tokens_per_chunk = 3
        chunked.state.token_texts = CHUNKED_TEXTS
        caching.state.cache_read_tokens = 40
        caching.state.cache_write_tokens = 100
        env = {
            "EARMARK_TARGET": sidecar.target,
            "EARMARK_ADMIN_TARGET": sidecar.admin_target,
            "FAKE_OPENAI_URL": provider.url,
            "FAKE_OPENAI_CHUNKED_URL": chunked.url,
            "FAKE_ANTHROPIC_URL": claude.url,
            "FAKE_ANTHROPIC_CACHE_URL": caching.url,
        }
        out = await run(
            NODE, "--test", "--test-concurrency=1", "--test-reporter=tap", *TEST_FILES,
            cwd=PACKAGE, env=env,
        )  # fmt: skip
    counts = dict(re.findall(r"^# (tests|pass|fail|duration_ms) ([\d.]+)$", out, re.M))
    print(f"node --test: {counts}")
    assert counts.get("fail") == "0", out
    assert int(counts.get("pass", "0")) >= 87, out
    assert [] == never_sent(provider, chunked, claude, caching)
    await assert_invariants(sidecar.dsn)


async def test_the_docs_workers_run_from_the_packed_tarball(
    sidecar: Running, ts_dist: None, tmp_path: Path
) -> None:
    """`npm pack` makes the package's tarball; installed into a fresh folder with `openai`
    and `@anthropic-ai/sdk` (from npm's cache, which `make test`'s npm ci filled), both its
    forms load (`import` and `require`), a TypeScript file type-checks against it as an ES
    module and as CommonJS, and the three workers of docs/sdk-typescript.md run exactly as
    written: the hold() worker settles what it says, the metered OpenAI worker (an ES
    module) is told the model's output ceiling and settles at what the fake OpenAI billed,
    and the metered Anthropic worker (CommonJS) settles at what the fake Anthropic billed."""
    assert NODE is not None
    assert NPM is not None
    packed = json.loads(
        await run(NPM, "pack", "--json", "--pack-destination", str(tmp_path), cwd=PACKAGE)
    )
    tarball = tmp_path / packed[0]["filename"]
    files = {f["path"] for f in packed[0]["files"]}
    expected = {
        f"dist/{form}/{name}" for form in ("esm", "cjs")
        for name in ("index.js", "index.d.ts", "openai.js", "metered.js", "package.json")
    }  # fmt: skip
    assert expected <= files
    assert not {"dist/index.js", "dist/openai.js"} & files, "a file of the old layout was packed"
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}\n')
    await run(
        NPM, "install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error",
        str(tarball), f"openai@{OPENAI_VERSION}", f"@anthropic-ai/sdk@{ANTHROPIC_VERSION}",
        cwd=app,
    )  # fmt: skip
    for script in ("load.mjs", "load.cjs"):
        shutil.copy(PACK_CHECKS / script, app / script)
        loaded = await run(NODE, script, cwd=app)
        assert "function function function function function" == loaded.strip(), script
    await type_check(app)
    (app / "worker.mjs").write_text(doc_block("ts-worker"))
    (app / "openai-worker.mjs").write_text(doc_block("ts-openai-worker"))
    (app / "anthropic-worker.cjs").write_text(doc_block("ts-anthropic-worker"))
    await put_price(
        sidecar, "openai", "gpt-4o-mini", input_usd_micros_per_mtok=150_000,
        output_usd_micros_per_mtok=600_000, max_output_tokens=16_384,
    )  # fmt: skip
    await put_price(
        sidecar, "anthropic", "claude-haiku-4-5", input_usd_micros_per_mtok=1_000_000,
        output_usd_micros_per_mtok=5_000_000, max_output_tokens=64_000,
    )  # fmt: skip
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        await client.put_budget("acme/tokens", 100_000, "tokens")
        await client.put_budget("job-142", 5_000_000, "usd_micros")
        await client.put_budget("job-143", 5_000_000, "usd_micros")
        out = await run(NODE, "worker.mjs", cwd=app, env={"EARMARK_TARGET": sidecar.target})
        state = await client.get_budget("acme/tokens")
        with fake_openai() as fake, fake_anthropic(NODE_RATES) as claude:
            env = {
                "EARMARK_TARGET": sidecar.target,
                "OPENAI_BASE_URL": fake.url,
                "OPENAI_API_KEY": "test",
                "ANTHROPIC_BASE_URL": claude.url,
                "ANTHROPIC_API_KEY": "test",
            }
            answered = await run(NODE, "openai-worker.mjs", cwd=app, env=env)
            messaged = await run(NODE, "anthropic-worker.cjs", cwd=app, env=env)
        job = await client.get_budget("job-142")
        messages_job = await client.get_budget("job-143")
    (bill,) = fake.state.billed
    (request,) = fake.state.requests
    (message_bill,) = claude.state.billed
    (message_request,) = claude.state.requests
    assert "done: 10" == out.strip()
    assert (31_200, 0) == (state.used, state.held)
    assert f"answered: {bill.prompt_tokens} {bill.completion_tokens}" == answered.strip()
    billed = -(-(bill.prompt_tokens * 150_000 + bill.completion_tokens * 600_000) // 1_000_000)
    assert (billed, 0, 0) == (job.used, job.held, job.open_reservations)
    # No maximum of its own: the provider is told the model's ceiling, never an estimate.
    assert (None, 16_384) == (request.get("max_tokens"), request["max_completion_tokens"])
    assert 300 == bill.completion_tokens
    in_tokens, out_tokens = message_bill.input_tokens, message_bill.output_tokens
    assert f"messaged: {in_tokens} {out_tokens}" == messaged.strip()
    billed = -(-(in_tokens * 1_000_000 + out_tokens * 5_000_000) // 1_000_000)
    assert (billed, 0, 0) == (messages_job.used, messages_job.held, messages_job.open_reservations)
    assert 1024 == message_request["max_tokens"]
    await assert_invariants(sidecar.dsn)


async def type_check(app: Path) -> None:
    """test/pack/typed.ts, checked by the package's own tsc as an ES module and as CommonJS
    against the packages installed in app (and the package's @types/node): one tsc over
    typed.mts and typed.cts, each of which node16 reads in its own module format (its
    imports resolved as `import` and as `require`), so that TypeScript's own libraries and
    @types/node are read once for both."""
    assert NODE is not None
    tsc = str(PACKAGE / "node_modules" / "typescript" / "bin" / "tsc")
    types = str(PACKAGE / "node_modules" / "@types")
    names = ("typed.mts", "typed.cts")
    for name in names:
        shutil.copy(PACK_CHECKS / "typed.ts", app / name)
    listed = await run(
        NODE, tsc, "--noEmit", "--strict", "--skipLibCheck", "--target", "ES2022",
        "--module", "node16", "--moduleResolution", "node16", "--typeRoots", types,
        "--types", "node", "--listFiles", *names, cwd=app,
    )  # fmt: skip
    # The package's types of both forms were read, one for each file.
    read = {line.rsplit("/@earmark/client/", 1)[-1] for line in listed.splitlines()}
    assert {"dist/esm/index.d.ts", "dist/cjs/index.d.ts"} <= read, listed


async def test_node_workers_on_one_task_never_spend_past_five_dollars(
    sidecar: Running, ts_dist: None
) -> None:
    """Four Node processes (two plain, two streaming) call the fake OpenAI through the
    TypeScript metered() on one $5.00 task until each is refused: together they never spend
    past it, and the budget's used is exactly what the provider billed."""
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
