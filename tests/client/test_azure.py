"""Azure OpenAI through metered() (issue 45): the real openai package's AsyncAzureOpenAI
(and a plain client on Azure's v1 API) against the fake compatible server (its Azure
flavor, fake_compatible.py) over HTTP on 127.0.0.1, each call held and settled through a
live sidecar. A deployment is priced as the base model deployments= maps it to, under
provider "azure"; one it does not map is refused before anything is held or sent; a
content-filtered answer settles at its usage, a prompt the filter refused at nothing; a
chat stream under an api-version that streams no usage is refused unsent. One sidecar and
one fake serve the module (each test on budgets of its own)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import openai
import pytest
import pytest_asyncio

from earmark.client import AsyncClient
from earmark.client.hosts import streams_usage
from earmark.client.llm import DeploymentNotMappedError, StreamUsageNotReportedError, metered
from earmark.client.wire import ToolNotMeteredError
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.client.fake_compatible import CompatibleState, FakeCompatible, fake_compatible
from tests.client.llm_helpers import CACHED, CEILING, INPUT, OUTPUT, budget, holds, put_price
from tests.conftest import TABLES, Running, running, sidecar_settings
from tests.helpers import assert_invariants

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("azure")]

PROMPT, COMPLETION = 1_000, 200
DEPLOYMENTS = {"prod-4o": "gpt-4o"}
GA = "2024-10-21"
# (1,000 input and 200 output tokens at the test's gpt-4o rates, rounded up once.)
OWED = -(-(PROMPT * INPUT + COMPLETION * OUTPUT) // 1_000_000)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sidecar(database_url: str) -> AsyncIterator[Running]:
    """The module's sidecar, on an emptied database, with gpt-4o priced under azure only:
    a call priced as openai's would find no price."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f"TRUNCATE {TABLES}")
    finally:
        await conn.close()
    folder = Path(tempfile.mkdtemp(prefix="em-"))
    try:
        async with running(Sidecar(sidecar_settings(database_url, folder)), database_url) as s:
            await put_price(
                s, "azure", "gpt-4o", input_usd_micros_per_mtok=INPUT,
                cached_input_usd_micros_per_mtok=CACHED, output_usd_micros_per_mtok=OUTPUT,
                max_output_tokens=CEILING,
            )  # fmt: skip
            yield s
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCompatible]:
    with fake_compatible(CompatibleState(PROMPT, COMPLETION, flavor="azure")) as fake:
        yield fake


@pytest.fixture
def fake(server: FakeCompatible) -> FakeCompatible:
    """The module's fake, as it starts, its record empty."""
    state = server.state
    with state.lock:
        state.filtered = ""
        state.requests.clear()
        state.paths.clear()
    return server


def azure(fake: FakeCompatible, api_version: str = GA, **options: Any) -> openai.AsyncAzureOpenAI:
    return openai.AsyncAzureOpenAI(
        api_key="k", azure_endpoint=fake.url, api_version=api_version, max_retries=0, **options
    )


def ask(model: str = "prod-4o", **request: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 300,
            **request}  # fmt: skip


async def chat(llm: Any, stream: bool = False, **request: Any) -> list[Any]:
    """One chat completion: its answer, or its chunks read to the end."""
    if not stream:
        return [await llm.chat.completions.create(**ask(**request))]
    return [
        chunk async for chunk in await llm.chat.completions.create(**ask(stream=True, **request))
    ]


async def settled(s: Running, budget_id: str) -> list[int]:
    """The budget's holds' settled amounts (all settled), in no order."""
    found = await holds(s, budget_id)
    assert [pb.RESERVATION_STATE_SETTLED] * len(found) == [h.state for h in found]
    return sorted(h.settled_used for h in found)


async def test_a_deployment_is_priced_as_its_base_model(
    sidecar: Running, fake: FakeCompatible
) -> None:
    """A call to the deployment prod-4o is priced as gpt-4o under azure, streamed or not,
    whether the path names it (the deployment from the model, or azure_deployment=, whose
    path wins over the body's model) or the body does (Azure's v1 API, a plain client)."""
    await budget(sidecar, "az", 50_000_000)
    async with (
        AsyncClient(sidecar.target) as earmark,
        azure(fake) as by_model,
        azure(fake, azure_deployment="prod-4o") as by_deployment,
        openai.AsyncOpenAI(api_key="k", base_url=f"{fake.url}/openai/v1", max_retries=0) as v1,
    ):
        llm = metered(by_model, earmark, "az", deployments=DEPLOYMENTS)
        answer = (await chat(llm))[0]
        chunks = await chat(llm, stream=True)
        await chat(metered(by_deployment, earmark, "az", deployments=DEPLOYMENTS), model="x")
        await chat(metered(v1, earmark, "az", deployments=DEPLOYMENTS), stream=True)
    # Azure's additions reach the caller: the filter results, and the stream's first
    # chunk, which has no choices; the usage chunk Earmark asked for does not.
    assert answer.model_extra["prompt_filter_results"][0]["prompt_index"] == 0
    assert ([], "stop", [None] * 3) == (
        chunks[0].choices,
        chunks[-1].choices[0].finish_reason,
        [chunk.usage for chunk in chunks],
    )
    deployed = f"/openai/deployments/prod-4o/chat/completions?api-version={GA}"
    assert [deployed, deployed, deployed, "/openai/v1/chat/completions"] == fake.state.paths
    assert [True, True] == [
        body["stream_options"]["include_usage"]
        for body in fake.state.requests
        if body.get("stream")
    ]
    assert [OWED] * 4 == await settled(sidecar, "az")
    await assert_invariants(sidecar.dsn)


async def test_an_unmapped_deployment_is_refused_unsent(
    sidecar: Running, fake: FakeCompatible
) -> None:
    """A deployment deployments= does not map, named by the path or by the body, is refused
    before anything is held or sent, as the SDK's error too; an Azure client metered
    without deployments=, as azure or not, and one map that is not of names to models, are
    refused by metered()."""
    await budget(sidecar, "unmapped", 50_000_000)
    refused: list[DeploymentNotMappedError] = []
    async with (
        AsyncClient(sidecar.target) as earmark,
        azure(fake) as by_model,
        azure(fake, azure_deployment="staging-4o") as by_deployment,
        openai.AsyncOpenAI(api_key="k", base_url=f"{fake.url}/openai/v1", max_retries=0) as v1,
    ):
        for client, model in ((by_model, "staging-4o"), (by_deployment, "prod-4o"), (v1, "gpt-4o")):
            llm = metered(client, earmark, "unmapped", deployments=DEPLOYMENTS)
            with pytest.raises(DeploymentNotMappedError) as raised:
                await chat(llm, model=model)
            assert isinstance(raised.value, openai.OpenAIError)
            refused.append(raised.value)
        with pytest.raises(TypeError, match="deployments="):
            metered(by_model, earmark, "unmapped", provider="azure")
        with pytest.raises(TypeError, match="deployments="):
            metered(by_model, earmark, "unmapped")
        with pytest.raises(TypeError, match="deployments="):
            metered(by_model, earmark, "unmapped", deployments={"prod-4o": ""})
    assert ["staging-4o", "staging-4o", "gpt-4o"] == [e.about["deployment"] for e in refused]
    assert "not sent" in str(refused[0])
    assert ([], []) == (fake.state.paths, await holds(sidecar, "unmapped"))


async def test_on_your_data_is_refused_unsent(sidecar: Running, fake: FakeCompatible) -> None:
    """A chat call with data_sources (Azure OpenAI On Your Data), whose searches and
    embeddings bill apart from its tokens, is refused before anything is held or sent."""
    await budget(sidecar, "on-your-data", 50_000_000)
    search = {"type": "azure_search", "parameters": {"endpoint": "https://s", "index_name": "i"}}
    async with AsyncClient(sidecar.target) as earmark, azure(fake) as client:
        llm = metered(client, earmark, "on-your-data", deployments=DEPLOYMENTS)
        with pytest.raises(ToolNotMeteredError) as raised:
            await chat(llm, extra_body={"data_sources": [search]})
    assert isinstance(raised.value, openai.OpenAIError)
    assert "data_sources (Azure OpenAI On Your Data)" == raised.value.about["tool"]
    assert ([], []) == (fake.state.paths, await holds(sidecar, "on-your-data"))


async def test_a_content_filtered_answer_settles_at_its_usage(
    sidecar: Running, fake: FakeCompatible
) -> None:
    """An answer the filter stopped (finish_reason content_filter) was generated and
    billed: it settles at its usage, streamed or not; a prompt the filter refused (400
    content_filter) settles at nothing."""
    await budget(sidecar, "filtered", 50_000_000)
    async with AsyncClient(sidecar.target) as earmark, azure(fake) as client:
        llm = metered(client, earmark, "filtered", deployments=DEPLOYMENTS)
        fake.state.filtered = "output"
        answer = (await chat(llm))[0]
        chunks = await chat(llm, stream=True)
        fake.state.filtered = "prompt"
        with pytest.raises(openai.BadRequestError) as raised:
            await chat(llm)
    assert ("content_filter", "content_filter") == (
        answer.choices[0].finish_reason,
        chunks[-1].choices[0].finish_reason,
    )
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["code"] == "content_filter"
    assert [0, OWED, OWED] == await settled(sidecar, "filtered")
    await assert_invariants(sidecar.dsn)


async def test_a_stream_under_an_api_version_without_stream_usage_is_refused_unsent(
    sidecar: Running, fake: FakeCompatible
) -> None:
    """Under 2024-06-01 (and 2024-08-01-preview) a chat stream could carry no usage, as
    the api-version refuses stream_options: it is refused before it is held or sent, and
    an answer that is not streamed settles as ever; 2024-09-01-preview streams its usage."""
    await budget(sidecar, "old", 50_000_000)
    refused: list[str] = []
    async with (
        AsyncClient(sidecar.target) as earmark,
        azure(fake, "2024-06-01") as old,
        azure(fake, "2024-08-01-preview") as contested,
        azure(fake, "2024-09-01-preview") as preview,
    ):
        for client in (old, contested):
            llm = metered(client, earmark, "old", deployments=DEPLOYMENTS)
            with pytest.raises(StreamUsageNotReportedError) as raised:
                await chat(llm, stream=True)
            assert isinstance(raised.value, openai.OpenAIError)
            refused.append(raised.value.about["api_version"])
        assert ([], []) == (fake.state.paths, await holds(sidecar, "old"))
        await chat(metered(old, earmark, "old", deployments=DEPLOYMENTS))
        await chat(metered(preview, earmark, "old", deployments=DEPLOYMENTS), stream=True)
        # A copy under another api-version is routed under its own.
        copied = metered(preview, earmark, "old", deployments=DEPLOYMENTS)
        with pytest.raises(StreamUsageNotReportedError):
            await chat(copied.with_options(api_version="2024-06-01"), stream=True)
    assert ["2024-06-01", "2024-08-01-preview"] == refused
    assert [OWED, OWED] == await settled(sidecar, "old")
    await assert_invariants(sidecar.dsn)


async def test_the_api_versions_that_stream_usage() -> None:
    """The GA versions from 2024-10-21, the previews from 2024-09-01-preview, and the v1
    API (no api-version, or one not dated) take stream_options."""
    old = ["2023-05-15", "2024-06-01", "2024-08-01-preview"]
    new = ["2024-09-01-preview", "2024-10-01-preview", "2024-10-21", "2025-04-01-preview"]
    versions = [*old, *new, "preview", None]
    assert [False, False, False, True, True, True, True, True, True] == [
        streams_usage(version) for version in versions
    ]
