"""docs/providers.md's workers, each run as written (tests/test_readme.py's run_block) against
a live sidecar and the repository's fake provider: what the worker printed, what the fake
was sent, and the budget's used equal to what the fake billed, then the invariant audit."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest

from earmark.v1 import budget_pb2 as pb
from tests.client.fake_bedrock import BedrockState, fake_bedrock
from tests.client.fake_compatible import CompatibleState, fake_compatible
from tests.client.fake_gemini import fake_gemini
from tests.conftest import Running
from tests.fake_anthropic_state import Rates
from tests.helpers import assert_invariants
from tests.test_readme import run_block


def micros(scaled: int) -> int:
    """Micro-dollars from tokens times micro-dollars per million tokens, rounded up once, as
    Earmark rounds."""
    return -(-scaled // 1_000_000)


async def used(sidecar: Running, budget_id: str) -> tuple[int, int, int]:
    """The budget's used, held and open reservations."""
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    return state.used, state.held, state.open_reservations


async def test_the_gemini_worker_runs_as_written(
    sidecar: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Gemini worker, against the fake Gemini: count_tokens passes unheld, the call
    without a maximum is sent the model's ceiling, and the budget's used is what the fake
    billed, the cached tokens at the cache rate and the thinking at the output rate."""
    with fake_gemini() as fake:
        # google-genai's own variables, as a worker's deployment sets them.
        monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake.url)
        monkeypatch.setenv("GEMINI_API_KEY", "test")
        for name in ("GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT"):
            monkeypatch.delenv(name, raising=False)
        out = await run_block(sidecar, tmp_path, "gemini_worker")
    (usage,) = fake.state.billed
    counted, generated = fake.state.requests
    given = usage["promptTokenCount"] + usage["toolUsePromptTokenCount"]
    cached = usage["cachedContentTokenCount"]
    output = usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]
    billed = micros((given - cached) * 300_000 + cached * 30_000 + output * 2_500_000)
    assert "counted: 10" in out
    assert f"generated: {usage['promptTokenCount']} {output}" in out
    assert (":countTokens", ":generateContent") == (
        counted.path[counted.path.rindex(":") :],
        generated.path[generated.path.rindex(":") :],
    )
    assert 65_536 == generated.body["generationConfig"]["maxOutputTokens"]
    assert (billed, 0, 0) == await used(sidecar, "job-144")
    await assert_invariants(sidecar.dsn)


async def test_the_bedrock_worker_runs_as_written(
    sidecar: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Bedrock worker, against the fake Bedrock: Converse on a us. profile is priced as
    its regional. id and sent maxTokens 1024, the budget's used is what the fake billed
    (cache reads and writes at their rates), and ApplyGuardrail is refused unsent."""
    rates = Rates(input=1_100_000, output=5_500_000, cache_read=110_000, cache_write=1_375_000)
    with fake_bedrock(BedrockState(rates=rates)) as fake:
        # boto3's own variables; no shared config or profile of the machine's.
        monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", fake.url)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
            monkeypatch.delenv(name, raising=False)
        out = await run_block(sidecar, tmp_path, "bedrock_worker")
    (bill,) = fake.state.billed
    (request,) = fake.state.requests
    assert (
        f"conversed: {bill.input_tokens} {bill.cache_read_tokens} {bill.cache_write_tokens} "
        f"{bill.output_tokens}"
    ) in out
    assert "not sent: ApplyGuardrail bedrock-runtime" in out
    assert "/model/us.anthropic.claude-haiku-4-5-20251001-v1:0/converse" == unquote(request.path)
    assert 1_024 == request.body["inferenceConfig"]["maxTokens"]
    assert (fake.state.billed_micros(), 0, 0) == await used(sidecar, "job-145")
    await assert_invariants(sidecar.dsn)


async def test_the_azure_worker_runs_as_written(
    sidecar: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Azure OpenAI worker, against the fake compatible server's Azure flavor: the
    deployment's stream is priced as gpt-4o-mini under azure and sent the model's ceiling,
    the budget's used is what the fake billed, and the unmapped deployment is not sent."""
    with fake_compatible(CompatibleState(flavor="azure")) as fake:
        # AzureOpenAI's own variables.
        monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", fake.url)
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", "test")
        monkeypatch.setenv("OPENAI_API_VERSION", "2024-10-21")
        for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "AZURE_OPENAI_AD_TOKEN"):
            monkeypatch.delenv(name, raising=False)
        out = await run_block(sidecar, tmp_path, "azure_worker")
    state = fake.state
    (path,) = state.paths
    (request,) = state.requests
    billed = micros(state.prompt_tokens * 165_000 + state.completion_tokens * 660_000)
    assert f"answered: {state.prompt_tokens} {state.completion_tokens}" in out
    assert "not sent: prod-4o" in out
    assert "/openai/deployments/prod-mini/chat/completions?api-version=2024-10-21" == path
    assert 16_384 == request["max_completion_tokens"]
    assert (billed, 0, 0) == await used(sidecar, "job-146")
    await assert_invariants(sidecar.dsn)


async def test_the_deepseek_worker_runs_as_written(
    sidecar: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DeepSeek worker, against the fake compatible server with DeepSeek's cache hits:
    its max_tokens is sent as it is, and the budget's used is what the fake billed, the
    hits at the cache rate."""
    with fake_compatible(CompatibleState(cache_hits=600)) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        out = await run_block(sidecar, tmp_path, "deepseek_worker")
    state = fake.state
    (request,) = state.requests
    misses = state.prompt_tokens - 600
    billed = micros(misses * 270_000 + 600 * 70_000 + state.completion_tokens * 1_100_000)
    assert f"answered: {state.prompt_tokens} 600 {state.completion_tokens}" in out
    assert ["/chat/completions"] == state.paths
    assert (1_024, None) == (request["max_tokens"], request.get("max_completion_tokens"))
    assert (billed, 0, 0) == await used(sidecar, "job-147")
    await assert_invariants(sidecar.dsn)


async def test_the_openrouter_worker_runs_as_written(
    sidecar: Running, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The OpenRouter worker, against the fake compatible server's OpenRouter flavor: the
    budget's used is the cost OpenRouter reported, not the tokens at the book's rates."""
    with fake_compatible(CompatibleState(flavor="openrouter", cost=0.00231)) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{fake.url}/api/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        out = await run_block(sidecar, tmp_path, "openrouter_worker")
    state = fake.state
    by_tokens = micros(state.prompt_tokens * 1_000_000 + state.completion_tokens * 5_000_000)
    assert f"answered: {state.prompt_tokens} {state.completion_tokens} cost: 0.00231" in out
    assert ["/api/v1/chat/completions"] == state.paths
    assert (2_310, 0, 0) == await used(sidecar, "job-148")
    assert 2_310 != by_tokens
    await assert_invariants(sidecar.dsn)
