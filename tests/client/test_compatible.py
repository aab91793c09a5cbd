"""OpenAI-compatible providers through metered() (issue 45): the real openai package, its
base URL a provider's own (https://api.deepseek.com...), its requests carried to the fake
compatible server (fake_compatible.py) on 127.0.0.1 by its HTTP client's transport, each
call held and settled through a live sidecar. The provider is named by the base URL's
host; Groq's streamed usage is read from x_groq; OpenRouter's reported cost is what a
money budget is charged (a tokens budget its tokens; a cost not believed, the book's
price); an empty budget refuses a call before it is sent; a host Earmark does not know
needs provider=. One sidecar and one fake serve the module (each test on budgets of its
own)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import openai
import pytest
import pytest_asyncio

from earmark.client import AsyncClient, Client, RefusedError, hosts
from earmark.client.llm import EndpointNotMeteredError, ProviderNotNamedError, metered
from earmark.client.reported import dollars_to_micros, reported_cost
from earmark.client.wire import Call
from earmark.client.wire_openai import Chat, Compatible
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.client.fake_compatible import CompatibleState, FakeCompatible, fake_compatible
from tests.client.llm_helpers import CEILING, budget, holds, put_price
from tests.conftest import TABLES, Running, running, sidecar_settings
from tests.helpers import assert_invariants

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.xdist_group("compatible")]

PROMPT, COMPLETION = 1_000, 200
# The test's rates, micro-dollars per million tokens (input, cache read, output).
DEEPSEEK = ("deepseek", "deepseek-chat", (2_700_000, 270_000, 11_000_000))
GROQ = ("groq", "llama-3.3-70b-versatile", (590_000, 295_000, 790_000))
OPENROUTER = ("openrouter", "openai/gpt-4o", (2_500_000, 1_250_000, 10_000_000))
MISTRAL = ("mistral", "mistral-large-latest", (2_000_000, 200_000, 6_000_000))
XAI = ("x-ai", "grok-4", (3_000_000, 750_000, 15_000_000))
BASE_URLS = {
    "deepseek": "https://api.deepseek.com",
    "groq": "https://api.groq.com/openai/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "mistral": "https://api.mistral.ai/v1",
    "x-ai": "https://api.x.ai/v1",
}


def owed(fresh: int, cached: int, output: int, rates: tuple[int, int, int]) -> int:
    rate_in, rate_cached, rate_out = rates
    return -(-(fresh * rate_in + cached * rate_cached + output * rate_out) // 1_000_000)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sidecar(database_url: str) -> AsyncIterator[Running]:
    """The module's sidecar, on an emptied database, with each provider's test model
    priced under its genai-prices id."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f"TRUNCATE {TABLES}")
    finally:
        await conn.close()
    folder = Path(tempfile.mkdtemp(prefix="em-"))
    try:
        async with running(Sidecar(sidecar_settings(database_url, folder)), database_url) as s:
            for provider, model, rates in (DEEPSEEK, GROQ, OPENROUTER, MISTRAL, XAI):
                rate_in, rate_cached, rate_out = rates
                await put_price(
                    s, provider, model, input_usd_micros_per_mtok=rate_in,
                    cached_input_usd_micros_per_mtok=rate_cached,
                    output_usd_micros_per_mtok=rate_out, max_output_tokens=CEILING,
                )  # fmt: skip
            yield s
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCompatible]:
    with fake_compatible(CompatibleState(PROMPT, COMPLETION)) as fake:
        yield fake


def reset(server: FakeCompatible, flavor: str = "", **state: Any) -> FakeCompatible:
    """The module's fake as it starts, answering as flavor, its record empty."""
    fresh = CompatibleState(PROMPT, COMPLETION, flavor=flavor, **state)
    with server.state.lock:
        for name in ("flavor", "cache_hits", "served_tier", "filtered", "cost", "upstream_cost",
                     "reasoning_tokens"):  # fmt: skip
            setattr(server.state, name, getattr(fresh, name))
        server.state.requests.clear()
        server.state.paths.clear()
    return server


class ToFake(httpx2.AsyncBaseTransport):
    """Sends each request, whatever its host, to the fake: the SDK's base URL stays the
    provider's own (the one metered() names the provider by)."""

    def __init__(self, fake: FakeCompatible) -> None:
        self.fake = httpx2.URL(fake.url)
        self.inner = httpx2.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(scheme="http", host=self.fake.host, port=self.fake.port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class SyncToFake(httpx2.BaseTransport):
    """ToFake for the sync SDK clients."""

    def __init__(self, fake: FakeCompatible) -> None:
        self.fake = httpx2.URL(fake.url)
        self.inner = httpx2.HTTPTransport()

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        request.url = request.url.copy_with(scheme="http", host=self.fake.host, port=self.fake.port)
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def at(provider: str, fake: FakeCompatible) -> openai.AsyncOpenAI:
    """An openai client on provider's own base URL, its requests carried to the fake."""
    http = httpx2.AsyncClient(transport=ToFake(fake))
    return openai.AsyncOpenAI(
        api_key="k", base_url=BASE_URLS[provider], http_client=http, max_retries=0
    )


async def chat(llm: Any, model: str, stream: bool = False) -> list[Any]:
    """One chat completion: its answer, or its chunks read to the end."""
    request: dict[str, Any] = {
        "model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 300,
    }  # fmt: skip
    if not stream:
        return [await llm.chat.completions.create(**request)]
    return [chunk async for chunk in await llm.chat.completions.create(**request, stream=True)]


async def settled(s: Running, budget_id: str) -> list[int]:
    """The budget's holds' settled amounts (all settled), in no order."""
    found = await holds(s, budget_id)
    assert [pb.RESERVATION_STATE_SETTLED] * len(found) == [h.state for h in found]
    return sorted(h.settled_used for h in found)


async def test_deepseek_is_named_by_its_host(sidecar: Running, server: FakeCompatible) -> None:
    """A client on https://api.deepseek.com, metered without provider=, is priced under
    deepseek: its cache hits at the hit rate, streamed or not."""
    fake = reset(server, cache_hits=800)
    provider, model, rates = DEEPSEEK
    await budget(sidecar, "ds", 50_000_000)
    async with AsyncClient(sidecar.target) as earmark, at(provider, fake) as client:
        llm = metered(client, earmark, "ds")
        await chat(llm, model)
        await chat(llm, model, stream=True)
    each = owed(200, 800, COMPLETION, rates)
    assert ["/chat/completions"] * 2 == fake.state.paths
    assert [each, each] == await settled(sidecar, "ds")
    await assert_invariants(sidecar.dsn)


async def test_groqs_streamed_usage_is_read_from_x_groq(
    sidecar: Running, server: FakeCompatible
) -> None:
    """Groq's stream carries its usage under x_groq on its finishing chunk, and no chunk
    has a top-level usage: the stream settles at it (not in doubt), as the answer does at
    its own usage; the caller sees every chunk."""
    fake = reset(server, flavor="groq")
    provider, model, rates = GROQ
    await budget(sidecar, "groq", 50_000_000)
    async with AsyncClient(sidecar.target) as earmark, at(provider, fake) as client:
        llm = metered(client, earmark, "groq")
        await chat(llm, model)
        chunks = await chat(llm, model, stream=True)
    assert [None, "stop"] == [chunk.choices[0].finish_reason for chunk in chunks]
    assert chunks[-1].model_extra["x_groq"]["usage"]["completion_tokens"] == COMPLETION
    assert ["/openai/v1/chat/completions"] * 2 == fake.state.paths
    each = owed(PROMPT, 0, COMPLETION, rates)
    assert [each, each] == await settled(sidecar, "groq")
    await assert_invariants(sidecar.dsn)


async def test_openrouter_settles_at_its_reported_cost(
    sidecar: Running, server: FakeCompatible
) -> None:
    """A money budget is charged OpenRouter's usage.cost (and a BYOK call's upstream cost
    with it), streamed or not, the stream's processing comments passed; a tokens budget is
    charged the tokens; a cost not believed (not finite, negative, past the bound, not a
    number) is priced from the tokens at the book's price. A sync client settles the
    same."""
    fake = reset(server, flavor="openrouter", cost=0.0123)
    provider, model, rates = OPENROUTER
    await budget(sidecar, "or-usd", 50_000_000)
    await budget(sidecar, "or-tokens", 1_000_000, unit="tokens")
    await budget(sidecar, "or-odd", 50_000_000)
    await budget(sidecar, "or-byok", 50_000_000)
    async with AsyncClient(sidecar.target) as earmark, at(provider, fake) as client:
        llm = metered(client, earmark, "or-usd")
        await chat(llm, model)
        chunks = await chat(llm, model, stream=True)
        await chat(metered(client, earmark, "or-tokens"), model, stream=True)
        odd = metered(client, earmark, "or-odd")
        for cost in (float("nan"), -0.01, 1_001.0, "0.0123"):
            fake.state.cost = cost
            await chat(odd, model)
        fake.state.cost, fake.state.upstream_cost = 0.001, 0.02
        await chat(metered(client, earmark, "or-byok"), model)
    fake.state.cost, fake.state.upstream_cost = 0.0123, None

    def sync_call() -> None:
        http = httpx2.Client(transport=SyncToFake(fake))
        with (
            Client(sidecar.target) as earmark,
            openai.OpenAI(api_key="k", base_url=BASE_URLS[provider], http_client=http) as sdk,
        ):
            llm = metered(sdk, earmark, "or-usd")
            llm.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])

    await asyncio.to_thread(sync_call)
    # OpenRouter's stream ends with its usage, asked or not: sent as the caller wrote it,
    # and the caller sees the usage as it would unmetered.
    assert [False] == [
        "stream_options" in body for body in fake.state.requests[:2] if body.get("stream")
    ]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_extra["cost"] == 0.0123
    assert [12_300, 12_300, 12_300] == await settled(sidecar, "or-usd")
    assert [PROMPT + COMPLETION] == await settled(sidecar, "or-tokens")
    assert [owed(PROMPT, 0, COMPLETION, rates)] * 4 == await settled(sidecar, "or-odd")
    assert [21_000] == await settled(sidecar, "or-byok")
    await assert_invariants(sidecar.dsn)


async def test_mistral_and_xai_are_charged_as_they_bill(
    sidecar: Running, server: FakeCompatible
) -> None:
    """Mistral ends every stream with its usage: its stream is sent without stream_options
    (an argument its API may refuse) and settles at the last chunk's usage. xAI's
    reasoning tokens, which its completion_tokens leave out, are charged as output."""
    await budget(sidecar, "mistral", 50_000_000)
    await budget(sidecar, "xai", 50_000_000)
    fake = reset(server, flavor="mistral")
    async with AsyncClient(sidecar.target) as earmark, at("mistral", fake) as client:
        chunks = await chat(metered(client, earmark, "mistral"), MISTRAL[1], stream=True)
    assert chunks[-1].usage is not None
    assert ["stream_options" in body for body in fake.state.requests] == [False]
    fake = reset(server, flavor="xai", reasoning_tokens=500)
    async with AsyncClient(sidecar.target) as earmark, at("x-ai", fake) as client:
        llm = metered(client, earmark, "xai")
        await chat(llm, XAI[1])
        await chat(llm, XAI[1], stream=True)
    assert [owed(PROMPT, 0, COMPLETION, MISTRAL[2])] == await settled(sidecar, "mistral")
    each = owed(PROMPT, 0, COMPLETION + 500, XAI[2])
    assert [each, each] == await settled(sidecar, "xai")
    await assert_invariants(sidecar.dsn)


async def test_a_provider_that_reads_only_max_tokens_is_told_its_cap_there(
    sidecar: Running, server: FakeCompatible
) -> None:
    """DeepSeek documents max_tokens, not max_completion_tokens: a call that names no
    maximum is sent the model's ceiling as max_tokens, and one that names the newer field
    is told its cap as max_tokens too (its own field kept); Groq, which reads
    max_completion_tokens, is sent that."""
    await budget(sidecar, "cap-name", 50_000_000)
    request: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    sent: list[tuple[Any, Any]] = []
    for provider, model in (DEEPSEEK[:2], DEEPSEEK[:2], GROQ[:2]):
        fake = reset(server, flavor="groq" if provider == "groq" else "")
        async with AsyncClient(sidecar.target) as earmark, at(provider, fake) as client:
            llm = metered(client, earmark, "cap-name")
            named = {"max_completion_tokens": 50} if len(sent) == 1 else {}
            await llm.chat.completions.create(model=model, **request, **named)  # type: ignore[call-overload]
        body = fake.state.requests[0]
        sent.append((body.get("max_tokens"), body.get("max_completion_tokens")))
    assert [(CEILING, None), (50, 50), (None, CEILING)] == sent
    await assert_invariants(sidecar.dsn)


async def test_a_copy_on_another_host_is_named_by_that_host(
    sidecar: Running, server: FakeCompatible
) -> None:
    """A metered client's copy given another base URL is priced under the provider that
    host names (a Groq client's copy on api.deepseek.com under deepseek, its cache hits at
    the hit rate), and a copy on a host Earmark does not know is refused as metered() would
    refuse it, not priced as the original's provider; so is a call to another host's URL."""
    fake = reset(server, cache_hits=800)
    await budget(sidecar, "moved", 50_000_000)
    async with AsyncClient(sidecar.target) as earmark, at("groq", fake) as client:
        llm = metered(client, earmark, "moved")
        with pytest.raises(ProviderNotNamedError):
            llm.with_options(base_url="https://evil.example.com/v1")
        await chat(llm.with_options(base_url=BASE_URLS["deepseek"]), DEEPSEEK[1])
        # A call given an absolute URL on another host: refused unsent, not priced as groq.
        with pytest.raises(EndpointNotMeteredError, match=r"evil\.example\.com"):
            await llm.post(
                "https://evil.example.com/openai/v1/chat/completions",
                body={"model": GROQ[1], "messages": [{"role": "user", "content": "hi"}]},
                cast_to=object,
            )
    assert ["/chat/completions"] == fake.state.paths
    assert [owed(200, 800, COMPLETION, DEEPSEEK[2])] == await settled(sidecar, "moved")
    await assert_invariants(sidecar.dsn)


async def test_an_empty_budget_refuses_a_call_unsent(
    sidecar: Running, server: FakeCompatible
) -> None:
    """A budget with nothing left refuses the call before it is sent: the provider sees
    no request, streamed or not."""
    fake = reset(server, flavor="openrouter", cost=0.0123)
    provider, model, _ = OPENROUTER
    await budget(sidecar, "empty", 0)
    async with AsyncClient(sidecar.target) as earmark, at(provider, fake) as client:
        llm = metered(client, earmark, "empty")
        for stream in (False, True):
            with pytest.raises(RefusedError):
                await chat(llm, model, stream=stream)
    assert ([], []) == (fake.state.paths, await holds(sidecar, "empty"))


async def test_a_host_earmark_does_not_know_needs_provider() -> None:
    """Each known host names its provider (genai-prices' ids), Azure's hosts azure, and
    OpenAI's own host, no base URL and a loopback host openai; any other host is refused
    by metered() until provider= names its prices' provider."""
    known = {f"https://{host}/v1": name for host, name in hosts.HOSTS.items()}
    others = {
        "https://my-resource.openai.azure.com/openai/v1": "azure",
        "https://my-apim.azure-api.net/openai": "azure",
        "": "openai",
        "https://eu.api.openai.com/v1": "openai",
        "http://localhost:8000/v1": "openai",
        "http://127.0.0.1:11434/v1": "openai",
        "http://[::1]:8000/v1": "openai",
    }
    assert {**known, **others} == {url: hosts.named(url) for url in {**known, **others}}
    assert {"deepseek", "groq", "mistral", "together", "openrouter", "x-ai"} <= set(
        hosts.HOSTS.values()
    )
    async with (
        AsyncClient("127.0.0.1:9") as earmark,
        openai.AsyncOpenAI(api_key="k", base_url="https://llm.example.com/v1") as unknown,
    ):
        with pytest.raises(ProviderNotNamedError, match="provider=") as raised:
            metered(unknown, earmark, "b")
        assert raised.value.about == {"host": "llm.example.com"}
        assert isinstance(metered(unknown, earmark, "b", provider="together"), openai.AsyncOpenAI)


async def test_a_reported_cost_is_believed_within_its_bounds() -> None:
    """Dollars become micro-dollars rounded up, as the JSON wrote them; a cost not finite,
    negative, past $1,000, or not a number is not believed; a BYOK call adds its upstream
    cost, and one whose upstream cost is not believed is not believed whole."""
    assert [950_000, 1, 0, 1_000_000_000] == [
        dollars_to_micros(v) for v in (0.95, 0.0000001, 0, 1_000)
    ]
    assert [None] * 6 == [
        dollars_to_micros(v) for v in (float("inf"), float("nan"), -0.01, 1_000.000001, True, "1")
    ]
    byok = {"cost": 0.001, "is_byok": True, "cost_details": {"upstream_inference_cost": 0.02}}
    bad = {**byok, "cost_details": {"upstream_inference_cost": -1}}
    assert [21_000, None, None, 1_000] == [
        reported_cost(byok), reported_cost(bad), reported_cost({}),
        reported_cost({"cost": 0.001, "cost_details": {"upstream_inference_cost": 0.02}}),
    ]  # fmt: skip


async def test_xais_reasoning_is_added_unless_its_total_counted_it() -> None:
    """xAI's reasoning tokens are added to its completion_tokens when total_tokens counts
    them apart (or names no total), and not when the total says completion_tokens did."""
    route = Compatible(Chat(), "x-ai")
    call = Call("grok-4", 10)

    def read(**usage: Any) -> int:
        details = {"completion_tokens_details": {"reasoning_tokens": 50}}
        answer = {"usage": {"prompt_tokens": 10, "completion_tokens": 20, **details, **usage}}
        found = route.usage(answer, call)
        assert found is not None
        return found.output_tokens

    assert [70, 70, 20] == [read(total_tokens=80), read(), read(total_tokens=30)]
