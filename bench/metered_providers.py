"""Scenario 14's providers (bench/metered.py): for each, its fake on 127.0.0.1 answering
after the same fixed delay, the SDK client a worker would make (direct) and the same
through metered(), and a bare Reserve of the shape the metered call holds, by the same
worker through the same Earmark client.

Each provider's calls are opened on an AsyncExitStack that closes them. The async SDKs
share one AsyncClient; boto3 (bedrock) is synchronous and is metered with the sync Client,
so its calls are plain functions, which the scenario runs on a thread of their own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anthropic
import boto3  # type: ignore[import-untyped]
import httpx2
import openai
from botocore.config import Config  # type: ignore[import-untyped]
from google import genai
from google.genai import types

from earmark.client import AsyncClient, Client, Reservation
from earmark.client.llm import metered
from earmark.core.prices import Shape, Usage
from tests.client.fake_bedrock import BedrockState, fake_bedrock
from tests.client.fake_compatible import CompatibleState, fake_compatible
from tests.client.fake_gemini import GeminiState, fake_gemini
from tests.fake_anthropic import Rates, fake_anthropic
from tests.fake_openai import fake_openai

# The fake providers' own answer time: what a call costs before Earmark adds anything.
PROVIDER_DELAY_SECONDS = 0.01
# Every call asks for at most this many output tokens, and the fakes answer that many.
MAX_TOKENS = 20
# The bare Reserve's prompt, charged in it as a metered call's prompt is.
PROMPT_TOKENS = 10
# "late": the OpenAI and Anthropic fakes answer a message of this text after their
# late_seconds, the fixed delay; the other fakes take their delay_seconds for any call.
TEXT = "late"
MESSAGES = [{"role": "user", "content": TEXT}]


@dataclass(frozen=True)
class Calls:
    """One provider's calls on the scenario's loop: the three timed (direct, metered, the
    bare Reserve) and the two untimed that follow (flush: the metered call's Settle, sent
    off the caller's path; settle: the bare Reserve's)."""

    direct: Callable[[], Awaitable[object]]
    metered: Callable[[], Awaitable[object]]
    flush: Callable[[], Awaitable[object]]
    reserve: Callable[[], Awaitable[str]]
    settle: Callable[[str], Awaitable[object]]


@dataclass(frozen=True)
class SyncCalls:
    """Calls for a synchronous SDK: the same, as plain functions for a worker's thread."""

    direct: Callable[[], object]
    metered: Callable[[], object]
    flush: Callable[[], object]
    reserve: Callable[[], str]
    settle: Callable[[str], object]


Opener = Callable[["Provider", AsyncExitStack, str, AsyncClient, str], Awaitable[Calls | SyncCalls]]


@dataclass(frozen=True)
class Provider:
    """One provider of the scenario: its name in the figures, the provider and model its
    calls are priced as (a price is put for them), and how its calls are opened (given
    itself, the stack they close on, the sidecar's target, the async Earmark client and
    the budget)."""

    name: str
    priced_as: str
    model: str
    open: Opener

    def shape(self) -> tuple[Shape, Usage]:
        """The bare Reserve's shape and its prompt's charge, as a metered call holds."""
        shape = Shape(
            self.priced_as, self.model, input_tokens=PROMPT_TOKENS, max_output_tokens=MAX_TOKENS
        )
        return shape, Usage(PROMPT_TOKENS, 0, provider=self.priced_as, model=self.model)


def reservation_id(result: object) -> str:
    if not isinstance(result, Reservation):
        raise RuntimeError(f"the bench budget refused a bare Reserve: {result}")
    return result.reservation_id


def bare(earmark: AsyncClient, budget_id: str, provider: Provider) -> dict[str, Any]:
    """Calls' flush, reserve and settle through earmark: the metered calls' Settles waited
    for, a bare Reserve, and its Settle."""
    shape, charge = provider.shape()
    used = Usage(PROMPT_TOKENS, MAX_TOKENS)

    async def reserve() -> str:
        return reservation_id(await earmark.reserve(budget_id, shape=shape, charge=charge))

    async def settle(reservation: str) -> object:
        return await earmark.settle(reservation, usage=used)

    return {"reserve": reserve, "settle": settle, "flush": earmark.flush}


def _chat(client: Any, model: str) -> Callable[[], Awaitable[object]]:
    """One chat completion (openai's API, and the compatible hosts') of client."""

    async def call() -> object:
        return await client.chat.completions.create(
            model=model, max_tokens=MAX_TOKENS, messages=MESSAGES
        )

    return call


async def open_openai(
    provider: Provider, stack: AsyncExitStack, target: str, earmark: AsyncClient, budget_id: str
) -> Calls:
    fake = stack.enter_context(fake_openai())
    fake.state.late_seconds = PROVIDER_DELAY_SECONDS
    fake.state.completion_tokens = MAX_TOKENS
    direct = await stack.enter_async_context(
        openai.AsyncOpenAI(api_key="bench", base_url=fake.url, max_retries=0)
    )
    held = metered(direct, earmark, budget_id)
    return Calls(
        _chat(direct, "gpt-4o"), _chat(held, "gpt-4o"), **bare(earmark, budget_id, provider)
    )


CLAUDE = "claude-bench"


async def open_anthropic(
    provider: Provider, stack: AsyncExitStack, target: str, earmark: AsyncClient, budget_id: str
) -> Calls:
    rates = Rates(input=3_000_000, output=15_000_000, cache_read=300_000, cache_write=3_750_000)
    fake = stack.enter_context(fake_anthropic(rates))
    fake.state.late_seconds = PROVIDER_DELAY_SECONDS
    fake.state.output_tokens = MAX_TOKENS
    direct = await stack.enter_async_context(
        anthropic.AsyncAnthropic(api_key="bench", base_url=fake.url, max_retries=0)
    )
    held = metered(direct, earmark, budget_id)

    def create(client: Any) -> Callable[[], Awaitable[object]]:
        async def call() -> object:
            return await client.messages.create(
                model=CLAUDE, max_tokens=MAX_TOKENS, messages=MESSAGES
            )

        return call

    return Calls(create(direct), create(held), **bare(earmark, budget_id, provider))


GEMINI_MODEL = "gemini-2.5-flash"


async def open_gemini(
    provider: Provider, stack: AsyncExitStack, target: str, earmark: AsyncClient, budget_id: str
) -> Calls:
    state = GeminiState(delay_seconds=PROVIDER_DELAY_SECONDS)
    state.usage = {
        "promptTokenCount": PROMPT_TOKENS,
        "candidatesTokenCount": MAX_TOKENS,
        "totalTokenCount": PROMPT_TOKENS + MAX_TOKENS,
    }
    fake = stack.enter_context(fake_gemini(state))
    # The direct client sends with httpx2, as the metered copy does (client.aio would
    # otherwise send with aiohttp, installed here): the two differ by Earmark alone.
    http = await stack.enter_async_context(httpx2.AsyncClient())
    options = types.HttpOptions(base_url=fake.url, httpx_async_client=http)
    direct = genai.Client(api_key="bench", http_options=options)
    held = metered(direct, earmark, budget_id)
    stack.push_async_callback(held.aio.aclose)
    config = types.GenerateContentConfig(max_output_tokens=MAX_TOKENS)

    def generate(client: genai.Client) -> Callable[[], Awaitable[object]]:
        async def call() -> object:
            return await client.aio.models.generate_content(
                model=GEMINI_MODEL, contents=TEXT, config=config
            )

        return call

    return Calls(generate(direct), generate(held), **bare(earmark, budget_id, provider))


# boto3's bedrock-runtime names a Claude model by its Bedrock id; Earmark prices an
# in-region call as genai-prices' regional id (wire_bedrock.price_name).
BEDROCK_MODEL = "anthropic.claude-bench-v1:0"
ONE_SEND = Config(retries={"mode": "standard", "total_max_attempts": 1})


async def open_bedrock(
    provider: Provider, stack: AsyncExitStack, target: str, earmark: AsyncClient, budget_id: str
) -> SyncCalls:
    """boto3 is synchronous: metered with the sync Client (which runs its own loop on a
    thread), its calls and the bare Reserve made through that Client."""
    state = BedrockState(delay_seconds=PROVIDER_DELAY_SECONDS)
    state.usage = {
        "inputTokens": PROMPT_TOKENS,
        "outputTokens": MAX_TOKENS,
        "totalTokens": PROMPT_TOKENS + MAX_TOKENS,
    }
    fake = stack.enter_context(fake_bedrock(state))
    session = boto3.Session(
        aws_access_key_id="AKIDBENCH", aws_secret_access_key="bench", region_name="us-east-1"
    )

    def runtime() -> Any:
        client = session.client("bedrock-runtime", endpoint_url=fake.url, config=ONE_SEND)
        stack.callback(client.close)
        return client

    sync_earmark = Client(target)
    stack.callback(sync_earmark.close)
    direct, held = runtime(), metered(runtime(), sync_earmark, budget_id)
    messages = [{"role": "user", "content": [{"text": TEXT}]}]
    inference = {"maxTokens": MAX_TOKENS}
    shape, charge = provider.shape()
    used = Usage(PROMPT_TOKENS, MAX_TOKENS)

    def converse(client: Any) -> Callable[[], object]:
        def call() -> object:
            return client.converse(
                modelId=BEDROCK_MODEL, messages=messages, inferenceConfig=inference
            )

        return call

    def reserve() -> str:
        return reservation_id(sync_earmark.reserve(budget_id, shape=shape, charge=charge))

    def settle(reservation: str) -> object:
        return sync_earmark.settle(reservation, usage=used)

    return SyncCalls(converse(direct), converse(held), sync_earmark.flush, reserve, settle)


AZURE_API_VERSION = "2024-10-21"
# Azure names a deployment, which deployments= maps to the model it is priced as.
AZURE_DEPLOYMENT = "bench-4o"


async def open_azure(
    provider: Provider, stack: AsyncExitStack, target: str, earmark: AsyncClient, budget_id: str
) -> Calls:
    state = CompatibleState(
        PROMPT_TOKENS, MAX_TOKENS, flavor="azure", delay_seconds=PROVIDER_DELAY_SECONDS
    )
    fake = stack.enter_context(fake_compatible(state))
    direct = await stack.enter_async_context(
        openai.AsyncAzureOpenAI(
            api_key="bench", azure_endpoint=fake.url, api_version=AZURE_API_VERSION,
            max_retries=0,
        )
    )  # fmt: skip
    held = metered(direct, earmark, budget_id, deployments={AZURE_DEPLOYMENT: "gpt-4o"})
    return Calls(
        _chat(direct, AZURE_DEPLOYMENT),
        _chat(held, AZURE_DEPLOYMENT),
        **bare(earmark, budget_id, provider),
    )


def compatible(**state: Any) -> Opener:
    """An OpenAI-compatible host's calls: the openai SDK on the fake, metered with
    provider= naming the host (the fake is on loopback, which names none)."""

    async def open_host(
        provider: Provider, stack: AsyncExitStack, target: str, earmark: AsyncClient, budget_id: str
    ) -> Calls:
        answers = CompatibleState(
            PROMPT_TOKENS, MAX_TOKENS, delay_seconds=PROVIDER_DELAY_SECONDS, **state
        )
        fake = stack.enter_context(fake_compatible(answers))
        direct = await stack.enter_async_context(
            openai.AsyncOpenAI(api_key="bench", base_url=fake.url, max_retries=0)
        )
        held = metered(direct, earmark, budget_id, provider=provider.priced_as)
        return Calls(
            _chat(direct, provider.model),
            _chat(held, provider.model),
            **bare(earmark, budget_id, provider),
        )

    return open_host


OPENAI = Provider("openai", "openai", "gpt-4o", open_openai)
ANTHROPIC = Provider("anthropic", "anthropic", CLAUDE, open_anthropic)
GEMINI = Provider("gemini", "google", GEMINI_MODEL, open_gemini)
BEDROCK = Provider("bedrock", "aws", "regional." + BEDROCK_MODEL, open_bedrock)
AZURE = Provider("azure", "azure", "gpt-4o", open_azure)
DEEPSEEK = Provider("deepseek", "deepseek", "deepseek-chat", compatible(cache_hits=0))
# OpenRouter reports each call's cost (usage.cost, in dollars), which a money budget is
# charged as reported.
OPENROUTER = Provider(
    "openrouter", "openrouter", "openai/gpt-4o", compatible(flavor="openrouter", cost=0.0002)
)
PROVIDERS = (OPENAI, ANTHROPIC, GEMINI, BEDROCK, AZURE, DEEPSEEK, OPENROUTER)
