"""Every billable surface of the real openai package, metered at the wire: the metered
client is the SDK's own type, each call is held before it leaves and settled at what the
fake provider billed, and an empty budget refuses before the provider sees anything."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest
from pydantic import BaseModel

from earmark.client import AsyncClient, Client, RefusedError
from earmark.client.llm import EndpointNotMeteredError, metered
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import (
    CACHED,
    CEILING,
    INPUT,
    OUTPUT,
    ask,
    budget,
    cost,
    holds,
    micros,
    put_price,
)
from tests.conftest import Running
from tests.fake_openai import Billed, FakeOpenAI
from tests.helpers import assert_invariants

EMBEDDING = "text-embedding-3-small"
Surface = Callable[[openai.AsyncOpenAI], Awaitable[object]]


class Answer(BaseModel):
    answer: str


async def chat_create(llm: openai.AsyncOpenAI) -> object:
    return await llm.chat.completions.create(**ask(max_tokens=50))


async def chat_stream(llm: openai.AsyncOpenAI, text: str = "hello") -> object:
    stream = await llm.chat.completions.create(**ask(text, stream=True))
    return [chunk async for chunk in stream]


async def chat_stream_helper(llm: openai.AsyncOpenAI) -> object:
    async with llm.chat.completions.stream(**ask()) as stream:
        async for _ in stream:
            pass
        return await stream.get_final_completion()


async def chat_parse(llm: openai.AsyncOpenAI) -> object:
    return await llm.chat.completions.parse(**ask(), response_format=Answer)


async def chat_raw(llm: openai.AsyncOpenAI) -> object:
    raw = await llm.chat.completions.with_raw_response.create(**ask())
    return raw.parse()


async def responses_create(llm: openai.AsyncOpenAI) -> object:
    return await llm.responses.create(model="gpt-4o", input="hello")


async def responses_stream(llm: openai.AsyncOpenAI) -> object:
    async with llm.responses.stream(model="gpt-4o", input="hello") as stream:
        async for _ in stream:
            pass
        return await stream.get_final_response()


async def responses_parse(llm: openai.AsyncOpenAI) -> object:
    return await llm.responses.parse(model="gpt-4o", input="hello", text_format=Answer)


async def embeddings(llm: openai.AsyncOpenAI) -> object:
    return await llm.embeddings.create(model=EMBEDDING, input=["hello", "world"])


SURFACES: dict[str, Surface] = {
    "chat.completions.create": chat_create,
    "chat.completions.create(stream=True)": chat_stream,
    "chat.completions.stream": chat_stream_helper,
    "chat.completions.parse": chat_parse,
    "chat.completions.with_raw_response": chat_raw,
    "responses.create": responses_create,
    "responses.stream": responses_stream,
    "responses.parse": responses_parse,
    "embeddings.create": embeddings,
}


def billed_cost(billed: Billed) -> int:
    """What the fake's bill costs at the test's prices (an embedding at the input rate)."""
    if billed.endpoint.endswith("embeddings"):
        return micros(billed.prompt_tokens, INPUT)
    return cost(billed)


@pytest.fixture
async def every_model(priced: Running) -> Running:
    """The priced sidecar with the embedding model priced too."""
    await put_price(priced, "openai", EMBEDDING, input_usd_micros_per_mtok=INPUT)
    return priced


@pytest.mark.parametrize("surface", list(SURFACES))
async def test_each_surface_is_held_and_settled_at_the_bill(
    every_model: Running, provider: FakeOpenAI, surface: str
) -> None:
    """The metered client is an AsyncOpenAI; the surface's call is held, its prompt
    charged by the Reserve, and settled at exactly what the fake billed."""
    s = every_model
    await budget(s, "b", 50_000_000)
    async with (
        AsyncClient(s.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "b")
        await SURFACES[surface](llm)
    (billed,) = provider.state.billed
    (hold,) = await holds(s, "b")
    state = await s.admin.GetBudget(pb.GetBudgetRequest(budget_id="b"))
    assert isinstance(llm, openai.AsyncOpenAI)
    assert (pb.RESERVATION_STATE_SETTLED, billed_cost(billed)) == (hold.state, hold.settled_used)
    assert (billed_cost(billed), 0) == (state.used, state.held)
    await assert_invariants(s.dsn)


@pytest.mark.parametrize("surface", list(SURFACES))
async def test_each_surface_is_refused_before_sending_on_an_empty_budget(
    every_model: Running, provider: FakeOpenAI, surface: str
) -> None:
    """On a budget that cannot pay for the prompt, the call raises RefusedError and the
    provider receives nothing; nothing is held."""
    s = every_model
    await budget(s, "empty", 1)
    async with (
        AsyncClient(s.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "empty")
        with pytest.raises(RefusedError):
            await SURFACES[surface](llm)
    state = await s.admin.GetBudget(pb.GetBudgetRequest(budget_id="empty"))
    assert ([], 0, 0) == (provider.state.requests, state.used, state.held)
    await assert_invariants(s.dsn)


async def test_the_sync_client_is_an_openai_and_unpriced_endpoints_are_refused(
    priced: Running, provider: FakeOpenAI
) -> None:
    """metered(OpenAI()) is an openai.OpenAI; a billable endpoint Earmark cannot price is
    refused before it is sent, naming it, and a free one passes without a hold."""

    def call() -> tuple[bool, str]:
        with (
            Client(priced.target) as earmark,
            openai.OpenAI(api_key="k", base_url=provider.url) as client,
        ):
            llm = metered(client, earmark, "b")
            with pytest.raises(EndpointNotMeteredError) as refused:
                llm.images.generate(model="gpt-image-1", prompt="a cat")
            with pytest.raises(openai.NotFoundError):
                llm.files.retrieve("file-1")
            return isinstance(llm, openai.OpenAI), str(refused.value)

    await budget(priced, "b", 5_000_000)
    is_openai, message = await asyncio.to_thread(call)
    assert (True, "POST /v1/images/generations bills") == (is_openai, message[:33])
    assert ["GET"] == [r.method for r in provider.state.received]
    assert [] == await holds(priced, "b")


STREAMS = {"tool calls": "tool", "reasoning": "think"}


@pytest.mark.parametrize("kind", list(STREAMS))
async def test_streams_with_tool_calls_or_reasoning_settle_at_the_final_usage(
    priced: Running, provider: FakeOpenAI, kind: str
) -> None:
    """A stream whose answer is a tool call's arguments, or hidden reasoning, settles at
    the provider's final usage: tokens no text delta shows are billed all the same."""
    await budget(priced, "s", 5_000_000)
    tools = [{"type": "function", "function": {"name": "look", "parameters": {
        "type": "object", "properties": {"query": {"type": "string"}}}}}]  # fmt: skip
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "s")
        stream = await llm.chat.completions.create(**ask(STREAMS[kind], stream=True, tools=tools))
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    (billed,) = provider.state.billed
    (hold,) = await holds(priced, "s")
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (hold.state, hold.settled_used)
    assert len(text) < billed.completion_tokens * 4
    await assert_invariants(priced.dsn)


async def test_a_stream_cut_before_its_usage_is_in_doubt(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A stream that ends before its usage chunk leaves its hold in doubt, its prompt
    charged: the provider billed the call, and only its report can say for what."""
    await budget(priced, "cut", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url, max_retries=0) as client,
    ):
        llm = metered(client, earmark, "cut")
        with pytest.raises(openai.APIConnectionError):
            await chat_stream(llm, "cut")
    (hold,) = await holds(priced, "cut")
    assert (1, pb.RESERVATION_STATE_IN_DOUBT) == (len(provider.state.billed), hold.state)
    await assert_invariants(priced.dsn)


async def test_the_priority_tier_is_priced_at_its_own_row(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A call sent at the priority tier is held and settled at the priority price, which
    the fake reports it ran at."""
    await put_price(
        priced, "openai", "gpt-4o", service_tier="priority", input_usd_micros_per_mtok=2 * INPUT,
        cached_input_usd_micros_per_mtok=CACHED, output_usd_micros_per_mtok=2 * OUTPUT,
        max_output_tokens=CEILING,
    )  # fmt: skip
    await budget(priced, "fast", 50_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "fast")
        await llm.chat.completions.create(**ask(service_tier="priority"))
    (billed,) = provider.state.billed
    (hold,) = await holds(priced, "fast")
    uncached = billed.prompt_tokens - billed.cached_tokens
    expected: Any = -(
        -(
            uncached * 2 * INPUT
            + billed.cached_tokens * CACHED
            + billed.completion_tokens * 2 * OUTPUT
        )
        // 1_000_000
    )
    assert ("priority", expected) == (billed.service_tier, hold.settled_used)
    await assert_invariants(priced.dsn)
