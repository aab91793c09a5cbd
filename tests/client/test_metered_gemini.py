"""The metered google-genai Client (metered_gemini.py): the real google-genai against the fake
Gemini (fake_gemini.py) over HTTP on 127.0.0.1, held, called and settled through a live
sidecar. The sync surfaces run with the sync Client on a thread of their own (the sidecar
serves on the test's loop); client.aio with an AsyncClient, and with the sync Client too
(its held calls' steps on the Client's loop)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx2
import pytest
from google import genai
from google.genai import _api_client, _api_module, errors, types
from google.genai import client as genai_client

from earmark.client import AsyncClient, Client, RefusedError, wire_gemini
from earmark.client.errors import PriceNotFoundError
from earmark.client.gemini_transport import SyncNotMeteredError
from earmark.client.llm import EndpointNotMeteredError, Meter, SocketNotMeteredError, metered
from earmark.client.metered_gemini import LAZY
from earmark.client.wire_gemini import PROVIDER, GenerateContent
from earmark.v1 import budget_pb2 as pb
from tests.client.fake_gemini import USAGE, FakeGemini, GeminiState, fake_gemini
from tests.client.llm_helpers import CEILING, budget, holds, put_price
from tests.conftest import Running
from tests.helpers import assert_invariants, child

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
MODEL = "gemini-2.5-flash"
EMBEDDING = "gemini-embedding-001"
# The test's prices for Google's model, micro-dollars per million tokens: a cached token at
# a tenth of the input rate, thinking at the output rate.
INPUT, CACHED, OUTPUT = 25_000_000, 2_500_000, 100_000_000
# fake_gemini.USAGE's bill: input 10 + 2 (tool-use prompt), 4 of them cached; output 5 + 7
# (thoughts): 8 x 25 + 4 x 2.5 + 12 x 100 micro-dollars.
USAGE_MICROS = 8 * 25 + 4 * 25 // 10 + 12 * 100
CONFIG = types.GenerateContentConfig(max_output_tokens=100)


def bill(usage: dict[str, Any]) -> int:
    """What Google bills for a usageMetadata at the test's prices, rounded up as Earmark
    rounds: every input token (the prompt and the tool-use prompt), the cached ones at the
    cache rate; the candidates and the thoughts at the output rate."""
    given = usage.get("promptTokenCount", 0) + usage.get("toolUsePromptTokenCount", 0)
    cached = usage.get("cachedContentTokenCount", 0)
    output = usage.get("candidatesTokenCount", 0) + usage.get("thoughtsTokenCount", 0)
    scaled = (given - cached) * INPUT + cached * CACHED + output * OUTPUT
    return -(-scaled // 1_000_000)


def billed(fake: FakeGemini) -> int:
    return sum(bill(usage) for usage in fake.state.billed)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeGemini]:
    with fake_gemini() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeGemini) -> FakeGemini:
    """The module's fake, its answers as they start and its records empty."""
    fresh = GeminiState()
    state = server.state
    with state.lock:
        for name in ("usage", "partial_usage", "texts", "line_end", "cut", "error", "embed_usage"):
            setattr(state, name, getattr(fresh, name))
        state.requests.clear()
        state.billed.clear()
    return server


@pytest.fixture
async def priced(sidecar: Running) -> Running:
    """The sidecar with a price for google/gemini-2.5-flash, its ceiling CEILING."""
    await put_price(
        sidecar, PROVIDER, MODEL, input_usd_micros_per_mtok=INPUT,
        cached_input_usd_micros_per_mtok=CACHED, output_usd_micros_per_mtok=OUTPUT,
        max_output_tokens=CEILING,
    )  # fmt: skip
    await put_price(sidecar, PROVIDER, EMBEDDING, input_usd_micros_per_mtok=INPUT)
    return sidecar


def gemini(fake: FakeGemini) -> genai.Client:
    return genai.Client(api_key="k", http_options=types.HttpOptions(base_url=fake.url))


@contextlib.asynccontextmanager
async def aio_metered(
    fake: FakeGemini, earmark: Client | AsyncClient, budget_id: str
) -> AsyncIterator[genai.Client]:
    """A metered Client for client.aio in this loop, its pool closed in it after."""
    llm = metered(gemini(fake), earmark, budget_id)
    try:
        yield llm
    finally:
        await llm.aio.aclose()


def in_thread(s: Running, work: Callable[[Client], T]) -> Awaitable[T]:
    """work run with a sync Client on a thread of its own (the sidecar serves on this
    loop), the Client closed (its settles flushed) after."""

    def run() -> T:
        with Client(s.target) as earmark:
            return work(earmark)

    return asyncio.to_thread(run)


def shape_cost(body: dict[str, Any], output: int) -> int:
    """What the sidecar holds for a request the fake saw, with output tokens at most."""
    prompt = GenerateContent(MODEL).call(body, Meter("")).prompt_tokens
    return -(-(prompt * INPUT + output * OUTPUT) // 1_000_000)


async def settled(s: Running, budget_id: str, fake: FakeGemini) -> list[pb.Hold]:
    """The budget's holds, each settled, the budget's used exactly the fake's bill."""
    found = await holds(s, budget_id)
    state = await s.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    assert [pb.RESERVATION_STATE_SETTLED] * len(found) == [h.state for h in found]
    assert (billed(fake), 0) == (state.used, state.held)
    return found


async def test_generate_content_sync_and_aio_settle_at_the_bill(
    priced: Running, fake: FakeGemini
) -> None:
    """models.generate_content (sync Client), aio.models.generate_content with the same
    metered Client and with an AsyncClient's: each held for its prompt and its
    maxOutputTokens, sent with them, and settled at exactly the fake's bill, thinking as
    output and the cached part at the cache rate."""
    await budget(priced, "create", 5_000_000)

    async def aio(llm: genai.Client) -> str | None:
        try:
            reply = await llm.aio.models.generate_content(
                model=MODEL, contents="hello", config=CONFIG
            )
        finally:
            await llm.aio.aclose()
        return reply.text

    def sync_and_aio(earmark: Client) -> list[str | None]:
        llm = metered(gemini(fake), earmark, "create")
        first = llm.models.generate_content(model=MODEL, contents="hello", config=CONFIG)
        return [first.text, asyncio.run(aio(llm))]

    texts = await in_thread(priced, sync_and_aio)
    async with AsyncClient(priced.target) as earmark:
        third = await aio(metered(gemini(fake), earmark, "create"))
    found = await settled(priced, "create", fake)
    body = fake.state.requests[0].body
    assert ["Hello\u2028there"] * 3 == [*texts, third]
    assert [100] * 3 == [r.body["generationConfig"]["maxOutputTokens"] for r in fake.state.requests]
    assert [USAGE_MICROS] * 3 == [h.settled_used for h in found] == [bill(USAGE)] * 3
    assert [shape_cost(body, 100)] * 3 == [h.amount for h in found]
    await assert_invariants(priced.dsn)


async def test_a_priority_call_is_held_and_settled_at_the_priority_rates(
    priced: Running, fake: FakeGemini
) -> None:
    """A call asking for the priority service tier is refused unsent while the book has no
    priority price; with one, it is held and settled at its rates, the answer's
    trafficType ON_DEMAND_PRIORITY saying it ran there."""
    await budget(priced, "priority", 5_000_000)
    config = types.GenerateContentConfig(
        max_output_tokens=100, service_tier=types.ServiceTier.PRIORITY
    )
    async with AsyncClient(priced.target) as earmark, aio_metered(fake, earmark, "priority") as llm:
        with pytest.raises(PriceNotFoundError) as unpriced:
            await llm.aio.models.generate_content(model=MODEL, contents="hello", config=config)
        sent_unpriced = len(fake.state.requests)
        await put_price(
            priced, PROVIDER, MODEL, service_tier="priority", input_usd_micros_per_mtok=2 * INPUT,
            cached_input_usd_micros_per_mtok=2 * CACHED, output_usd_micros_per_mtok=2 * OUTPUT,
            max_output_tokens=CEILING,
        )  # fmt: skip
        fake.state.usage = {**USAGE, "trafficType": "ON_DEMAND_PRIORITY"}
        await llm.aio.models.generate_content(model=MODEL, contents="hello", config=config)
    (hold,) = await holds(priced, "priority")
    assert (0, "priority") == (sent_unpriced, fake.state.requests[0].body["serviceTier"])
    assert "priority" in str(unpriced.value)
    assert (pb.RESERVATION_STATE_SETTLED, 2 * USAGE_MICROS) == (hold.state, hold.settled_used)
    await assert_invariants(priced.dsn)


async def test_a_write_other_than_post_is_refused_unless_free(
    priced: Running, fake: FakeGemini
) -> None:
    """caches.update (a PATCH extending a cache Google bills by the hour) is refused
    before it is sent, as a POST to its path would be; a read is sent (the fake, which
    answers POSTs alone, refuses it)."""
    async with AsyncClient(priced.target) as earmark, aio_metered(fake, earmark, "b") as llm:
        with pytest.raises(EndpointNotMeteredError) as refused:
            await llm.aio.caches.update(
                name="cachedContents/abc", config=types.UpdateCachedContentConfig(ttl="31536000s")
            )
        with pytest.raises(errors.APIError) as read:
            await llm.aio.caches.get(name="cachedContents/abc")
    assert "PATCH" in str(refused.value)
    assert (501, False) == (read.value.code, isinstance(read.value, EndpointNotMeteredError))


async def test_streams_settle_from_their_last_chunk(priced: Running, fake: FakeGemini) -> None:
    """generate_content_stream, sync and aio (with the sync Client and with an AsyncClient):
    the chunks reach the caller as sent, the partial usage of the early ones is passed over,
    and each hold settles at the last chunk's usage, exactly the fake's bill."""
    await budget(priced, "stream", 5_000_000)

    async def aio_text(llm: genai.Client) -> str:
        try:
            chunks = await llm.aio.models.generate_content_stream(
                model=MODEL, contents="hello", config=CONFIG
            )
            return "".join([c.text or "" async for c in chunks])
        finally:
            await llm.aio.aclose()

    def sync_and_aio(earmark: Client) -> list[str]:
        llm = metered(gemini(fake), earmark, "stream")
        chunks = llm.models.generate_content_stream(model=MODEL, contents="hi", config=CONFIG)
        return ["".join(c.text or "" for c in chunks), asyncio.run(aio_text(llm))]

    texts = await in_thread(priced, sync_and_aio)
    async with AsyncClient(priced.target) as earmark:
        texts.append(await aio_text(metered(gemini(fake), earmark, "stream")))
    found = await settled(priced, "stream", fake)
    assert ["Hello\u2028there"] * 3 == texts
    assert [USAGE_MICROS] * 3 == [h.settled_used for h in found]
    await assert_invariants(priced.dsn)


async def test_a_dropped_stream_is_in_doubt_with_its_prompt_charged(
    priced: Running, fake: FakeGemini
) -> None:
    """A stream cut before its last chunk (no finishReason, only the partial usage) leaves
    its hold in doubt with the prompt charged, sync and aio alike."""
    await budget(priced, "cut", 5_000_000)
    fake.state.cut = True

    def sync_stream(earmark: Client) -> None:
        llm = metered(gemini(fake), earmark, "cut")
        with contextlib.suppress(httpx2.HTTPError):
            for _ in llm.models.generate_content_stream(model=MODEL, contents="hi", config=CONFIG):
                pass

    await in_thread(priced, sync_stream)
    async with AsyncClient(priced.target) as earmark, aio_metered(fake, earmark, "cut") as llm:
        with contextlib.suppress(httpx2.HTTPError):
            async for _ in await llm.aio.models.generate_content_stream(
                model=MODEL, contents="hi", config=CONFIG
            ):
                pass
    found = await holds(priced, "cut")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="cut"))
    prompt = GenerateContent(MODEL).call(fake.state.requests[0].body, Meter("")).prompt_tokens
    assert [] == fake.state.billed
    assert [pb.RESERVATION_STATE_IN_DOUBT] * 2 == [h.state for h in found]
    assert [-(-prompt * INPUT // 1_000_000)] * 2 == [h.charged for h in found]
    assert (sum(h.charged for h in found), 0) == (state.used, state.held - state.held)
    await assert_invariants(priced.dsn)


async def test_thinking_tokens_settle_as_output(priced: Running, fake: FakeGemini) -> None:
    """A call that thought 900 tokens to answer in 10 settles them at the output rate:
    100 x 25 + (10 + 900) x 100 micro-dollars, not the 3 500 of its answer alone."""
    await budget(priced, "think", 5_000_000)
    fake.state.usage = {
        "promptTokenCount": 100, "candidatesTokenCount": 10, "thoughtsTokenCount": 900,
        "totalTokenCount": 1_010,
    }  # fmt: skip
    thinking = types.GenerateContentConfig(
        max_output_tokens=2_000, thinking_config=types.ThinkingConfig(thinking_budget=1_000)
    )
    async with AsyncClient(priced.target) as earmark, aio_metered(fake, earmark, "think") as llm:
        await llm.aio.models.generate_content(model=MODEL, contents="think", config=thinking)
    (hold,) = await settled(priced, "think", fake)
    assert 100 * 25 + 910 * 100 == hold.settled_used == 93_500
    assert 2_000 == fake.state.requests[0].body["generationConfig"]["maxOutputTokens"]
    await assert_invariants(priced.dsn)


async def test_without_a_maximum_the_models_ceiling_is_held_and_told(
    priced: Running, fake: FakeGemini
) -> None:
    """A call that sets no maxOutputTokens is held for the model's ceiling (the price's
    max_output_tokens) and sent with it, so that Gemini cannot answer past what is held."""
    await budget(priced, "ceiling", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        aio_metered(fake, earmark, "ceiling") as llm,
    ):
        await llm.aio.models.generate_content(model=MODEL, contents="no maximum")
    (hold,) = await settled(priced, "ceiling", fake)
    (seen,) = fake.state.requests
    assert CEILING == seen.body["generationConfig"]["maxOutputTokens"] == 4_096
    assert shape_cost(seen.body, CEILING) == hold.amount
    await assert_invariants(priced.dsn)


async def test_every_surface_is_refused_unsent_on_an_empty_budget(
    priced: Running, fake: FakeGemini
) -> None:
    """On a budget that cannot pay for a prompt, generate_content, generate_content_stream
    and embed_content, sync and aio (with the sync Client and with an AsyncClient), raise
    RefusedError (an APIError too, as google-genai raises its own) and the fake sees none
    of them; count_tokens, which bills nothing, passes without a hold."""
    await budget(priced, "empty", 1)

    async def aio_calls(llm: genai.Client) -> int:
        async def stream() -> None:
            # The request is sent when the stream is first read.
            async for _ in await llm.aio.models.generate_content_stream(model=MODEL, contents="hi"):
                pass

        refused = 0
        for call in (
            lambda: llm.aio.models.generate_content(model=MODEL, contents="hi"),
            stream,
            lambda: llm.aio.models.embed_content(model=EMBEDDING, contents="hi"),
        ):
            with pytest.raises(RefusedError) as raised:
                await call()
            refused += isinstance(raised.value, errors.APIError)
        await llm.aio.models.count_tokens(model=MODEL, contents="hi")
        await llm.aio.aclose()
        return refused

    def sync_calls(earmark: Client) -> int:
        llm = metered(gemini(fake), earmark, "empty")
        refused = 0
        for call in (
            lambda: llm.models.generate_content(model=MODEL, contents="hi"),
            lambda: next(iter(llm.models.generate_content_stream(model=MODEL, contents="hi"))),
            lambda: llm.models.embed_content(model=EMBEDDING, contents="hi"),
        ):
            with pytest.raises(RefusedError) as raised:
                call()
            refused += isinstance(raised.value, errors.APIError)
        llm.models.count_tokens(model=MODEL, contents="hi")
        return refused + asyncio.run(aio_calls(llm))

    refused = await in_thread(priced, sync_calls)
    async with AsyncClient(priced.target) as earmark:
        refused += await aio_calls(metered(gemini(fake), earmark, "empty"))
    paths = [r.path.rpartition(":")[2] for r in fake.state.requests]
    assert (9, ["countTokens"] * 3, []) == (refused, paths, await holds(priced, "empty"))
    await assert_invariants(priced.dsn)


async def test_embed_content_settles_at_its_input(priced: Running, fake: FakeGemini) -> None:
    """embed_content is held for its input alone and settles at the usageMetadata's
    promptTokenCount at the input rate; a 5xx leaves a call in doubt with its prompt
    charged, a 4xx settles at nothing, each raised as google-genai's own error."""
    await budget(priced, "embed", 5_000_000)
    fake.state.embed_usage = {"promptTokenCount": 8}
    async with AsyncClient(priced.target) as earmark, aio_metered(fake, earmark, "embed") as llm:
        await llm.aio.models.embed_content(model=EMBEDDING, contents="hi")
        fake.state.error = 503
        with pytest.raises(errors.ServerError):
            await llm.aio.models.generate_content(model=MODEL, contents="fail", config=CONFIG)
        fake.state.error = 400
        with pytest.raises(errors.ClientError):
            await llm.aio.models.generate_content(model=MODEL, contents="fail", config=CONFIG)
    found = sorted(await holds(priced, "embed"), key=lambda h: h.state)
    prompt = GenerateContent(MODEL).call(fake.state.requests[1].body, Meter("")).prompt_tokens
    assert [
        (pb.RESERVATION_STATE_SETTLED, 8 * 25),
        (pb.RESERVATION_STATE_SETTLED, 0),
        (pb.RESERVATION_STATE_IN_DOUBT, -(-prompt * INPUT // 1_000_000)),
    ] == sorted(
        [(h.state, h.settled_used if h.state == pb.RESERVATION_STATE_SETTLED else h.charged)
         for h in found],
        key=lambda found: (found[0], -found[1]),
    )  # fmt: skip
    await assert_invariants(priced.dsn)


async def test_the_metered_client_is_a_copy_of_its_class_with_its_sockets_refused(
    priced: Running, fake: FakeGemini
) -> None:
    """metered() gives a genai.Client of the given one's class, on a copy of its API client
    (the given one is left unmetered), every module rebound to the copy; the live
    websockets raise SocketNotMeteredError before connecting; metered with an AsyncClient,
    its sync surfaces raise SyncNotMeteredError unsent; anything but a genai.Client is
    refused."""
    given = gemini(fake)
    async with AsyncClient(priced.target) as earmark:
        llm = metered(given, earmark, "b", job="copy")
        assert isinstance(llm, genai.Client)
        assert type(llm) is type(given)
        assert llm._api_client is not given._api_client
        assert given._api_client._httpx_client is not llm._api_client._httpx_client
        modules = [getattr(llm, n) for n in ("models", "caches", "files", "batches")]
        aio_modules = [llm.aio.models, llm.aio.live, llm.aio.live.music, llm.chats._modules]
        assert all(m._api_client is llm._api_client for m in modules + aio_modules)
        assert llm.aio._api_client is llm._api_client
        for connect in (llm.aio.live.connect, llm.aio.live.music.connect):
            with pytest.raises(SocketNotMeteredError):
                connect(model=MODEL)
        with pytest.raises(SocketNotMeteredError):
            llm.aio.interactions.connect("an-interaction")
        with pytest.raises(SyncNotMeteredError) as refused:
            llm.models.generate_content(model=MODEL, contents="hi")
        assert isinstance(refused.value, errors.APIError)
        with pytest.raises(TypeError):
            metered(object(), earmark, "b")
    assert [] == fake.state.requests


def test_every_module_of_google_genai_that_opens_a_websocket_is_refused() -> None:
    """The installed google-genai opens websockets (ws_connect) only in the modules whose
    surfaces SOCKETS refuses: an upgrade that adds one fails here until it is refused."""
    root = Path(genai.__file__).parent
    opening = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "tests" not in p.relative_to(root).parts and "ws_connect(" in p.read_text()
    )
    assert sorted(wire_gemini.SOCKET_MODULES) == opening


def test_the_private_google_genai_attributes_metered_relies_on_are_there() -> None:
    """metered_gemini replaces google-genai's private HTTP clients (BaseApiClient's
    _httpx_client, _async_httpx_client, _http_options, _retry, _async_retry,
    _aiohttp_sessions, _authorized_session, _websocket_base_url) and rebuilds the Client's
    module caches (LAZY): if an upgrade moves any of them, this fails here rather than a
    metered client sending unmetered."""
    client = genai.Client(api_key="k")
    api = client._api_client
    assert isinstance(api, _api_client.BaseApiClient)
    assert isinstance(api._httpx_client, httpx2.Client)
    assert isinstance(api._async_httpx_client, httpx2.AsyncClient)
    for name in ("_http_options", "_retry", "_async_retry", "_aiohttp_sessions"):
        assert name in vars(api), name
    assert "_authorized_session" in vars(api)
    assert callable(api._websocket_base_url)
    assert {"httpx_client", "httpx_async_client", "retry_options"} <= set(
        type(api._http_options).model_fields
    )
    assert callable(_api_client.retry_args)
    for owner in (client, client.aio):
        lazy = {n for n in vars(owner) if n in LAZY}
        built = {n for n, v in vars(owner).items() if v is None}
        # Every attribute None at construction is one metered() rebuilds.
        assert built == lazy, (type(owner), built - lazy)
    assert isinstance(client.aio, genai_client.AsyncClient)
    assert isinstance(client.models, _api_module.BaseModule)
    assert client.aio._api_client is api
    assert client.aio.live.music._api_client is api


# The five-process race's worker: it calls the fake Gemini through the metered client until
# Earmark refuses (plain: generate_content; stream: generate_content_stream; aio:
# client.aio's generate_content with the same sync Client), and prints what it did as one
# JSON line.
WORKER = """
import asyncio, json, sys
from google import genai
from google.genai import types
from earmark.client import Client, RefusedError
from earmark.client.llm import metered

target, url, budget_id, model, mode = sys.argv[1:6]
config = types.GenerateContentConfig(
    max_output_tokens=800, system_instruction="You answer briefly."
)
done = {"calls": 0, "refused": 0, "mode": mode}


async def aio(llm, ask):
    try:
        while True:
            try:
                await llm.aio.models.generate_content(**ask)
            except RefusedError:
                done["refused"] += 1
                return
            done["calls"] += 1
    finally:
        await llm.aio.aclose()


with Client(target) as earmark:
    gemini = genai.Client(api_key="k", http_options=types.HttpOptions(base_url=url))
    llm = metered(gemini, earmark, budget_id, job="race")
    ask = dict(model=model, contents="x" * 4_000, config=config)
    while mode == "aio" and not done["refused"]:
        asyncio.run(aio(llm, ask))
    while mode != "aio":
        try:
            if mode == "stream":
                for _ in llm.models.generate_content_stream(**ask):
                    pass
            else:
                llm.models.generate_content(**ask)
        except RefusedError:
            done["refused"] += 1
            break
        done["calls"] += 1
print(json.dumps(done), flush=True)
"""
# The race's bill per call: 800 input tokens, 200 cached ones, 700 output with thinking:
# 800 x 25 + 200 x 2.5 + 700 x 100 = 90 500 micro-dollars, some 27 calls on $2.50 (few, so
# that the race stays quick).
RACE_USAGE = {
    "promptTokenCount": 1_000, "cachedContentTokenCount": 200, "candidatesTokenCount": 400,
    "thoughtsTokenCount": 300, "totalTokenCount": 1_700,
}  # fmt: skip


@pytest.mark.slow
async def test_five_gemini_workers_never_spend_past_their_budget(
    priced: Running, fake: FakeGemini
) -> None:
    """Five worker processes (two on generate_content, two on generate_content_stream, one
    on client.aio) call the fake Gemini through the metered client on one $2.50 task until
    each is refused: the budget's used is exactly what the fake billed, thinking and cached
    tokens included, nothing is left held, and the audit is clean."""
    await budget(priced, "task", 2_500_000)
    fake.state.usage = RACE_USAGE
    assert 90_500 == bill(RACE_USAGE)

    def worker(mode: str) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        return child(
            sys.executable, "-c", WORKER, priced.target, fake.url, "task", MODEL, mode,
            stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip

    async with contextlib.AsyncExitStack() as stack:
        modes = ["plain", "plain", "stream", "stream", "aio"]
        processes = [await stack.enter_async_context(worker(mode)) for mode in modes]
        outs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in processes)), timeout=240
        )
    done = [json.loads(out) for out, _ in outs]
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="task"))
    calls = sum(d["calls"] for d in done)
    print(f"gemini race: {calls} calls, used {state.used} of 2500000 usd_micros, {done}")
    assert [0] * 5 == [p.returncode for p in processes]
    assert [1] * 5 == [d["refused"] for d in done]
    assert calls == len(fake.state.billed)
    assert (billed(fake), 0, 0) == (state.used, state.held, state.open_reservations)
    assert state.used <= 2_500_000
    await assert_invariants(priced.dsn)
