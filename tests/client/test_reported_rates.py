"""What providers report of their cache and their service tier, priced as they bill it
(issue 44): DeepSeek's cache hits at the hit rate, and the tier an OpenAI or Azure OpenAI
answer names rather than the one asked for; a report out of its published shape is
charged as plain input at the held tier, never as nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from earmark.client import AsyncClient
from earmark.client.llm import metered
from earmark.client.wire_openai import chat_usage
from earmark.core.prices import Usage
from earmark.v1 import budget_pb2 as pb
from tests.client.fake_compatible import CompatibleState, FakeCompatible, fake_compatible
from tests.client.llm_helpers import CACHED, CEILING, INPUT, OUTPUT, budget, holds, put_price
from tests.conftest import Running
from tests.helpers import assert_invariants

DEEPSEEK, DEEPSEEK_CHAT = "deepseek", "deepseek-chat"
# The test's DeepSeek rates, micro-dollars per million tokens: a cache hit at a tenth of a
# miss, as DeepSeek prices hits.
MISS, HIT, DEEPSEEK_OUTPUT = 2_700_000, 270_000, 11_000_000
# The test's gpt-4o rates at the flex (half) and priority (double) tiers; the default
# tier's are llm_helpers' INPUT, CACHED and OUTPUT.
FLEX = (INPUT // 2, CACHED // 2, OUTPUT // 2)
PRIORITY = (2 * INPUT, 2 * CACHED, 2 * OUTPUT)
DEFAULT = (INPUT, CACHED, OUTPUT)
PROMPT, COMPLETION = 1_000, 200
ASKED = 300


@pytest.fixture
def compatible() -> Iterator[FakeCompatible]:
    with fake_compatible(CompatibleState(prompt_tokens=PROMPT, completion_tokens=COMPLETION)) as f:
        yield f


@pytest.fixture
async def deepseek(sidecar: Running) -> Running:
    """The sidecar with DeepSeek's deepseek-chat priced, cache hits at their own rate."""
    await put_price(
        sidecar, DEEPSEEK, DEEPSEEK_CHAT, input_usd_micros_per_mtok=MISS,
        cached_input_usd_micros_per_mtok=HIT, output_usd_micros_per_mtok=DEEPSEEK_OUTPUT,
        max_output_tokens=CEILING,
    )  # fmt: skip
    return sidecar


@pytest.fixture
async def tiers(priced: Running) -> Running:
    """The sidecar with gpt-4o priced at the default, flex and priority tiers."""
    for tier, (rate_in, rate_cached, rate_out) in (("flex", FLEX), ("priority", PRIORITY)):
        await put_price(
            priced, "openai", "gpt-4o", service_tier=tier, input_usd_micros_per_mtok=rate_in,
            cached_input_usd_micros_per_mtok=rate_cached, output_usd_micros_per_mtok=rate_out,
            max_output_tokens=CEILING,
        )  # fmt: skip
    return priced


def owed(fresh: int, cached: int, output: int, rates: tuple[int, int, int]) -> int:
    """What fresh input, cached input and output tokens cost at (input, cached, output)
    rates, rounded up once as Earmark rounds."""
    rate_in, rate_cached, rate_out = rates
    return -(-(fresh * rate_in + cached * rate_cached + output * rate_out) // 1_000_000)


async def used(s: Running, budget_id: str) -> int:
    state = await s.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    return state.used


def ask(model: str, **request: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": ASKED,
            **request}  # fmt: skip


async def call(llm: openai.AsyncOpenAI, model: str, stream: bool = False, **request: Any) -> None:
    """One chat completion, read to its end when streamed."""
    if stream:
        answer = await llm.chat.completions.create(**ask(model, stream=True, **request))
        async for _ in answer:
            pass
    else:
        await llm.chat.completions.create(**ask(model, **request))


async def settled(s: Running, budget_id: str) -> list[int]:
    """The settled amounts of the budget's holds, in no order (all must be settled)."""
    found = await holds(s, budget_id)
    assert [pb.RESERVATION_STATE_SETTLED] * len(found) == [h.state for h in found]
    return sorted(h.settled_used for h in found)


async def test_a_deepseek_call_is_charged_its_cache_hits_at_the_hit_rate(
    deepseek: Running, compatible: FakeCompatible
) -> None:
    """A metered OpenAI client on DeepSeek's base URL is charged its prompt_cache_hit_tokens
    at the hit rate and its misses at the input rate, streamed or not."""
    compatible.state.cache_hits = 800
    await budget(deepseek, "ds", 50_000_000)
    async with (
        AsyncClient(deepseek.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=compatible.url, max_retries=0) as client,
    ):
        llm = metered(client, earmark, "ds", provider=DEEPSEEK)
        await call(llm, DEEPSEEK_CHAT)
        await call(llm, DEEPSEEK_CHAT, stream=True)
    # 200 misses, 800 hits and 200 output tokens: (200 * 2.7 + 800 * 0.27 + 200 * 11) $/M,
    # 540 + 216 + 2,200 = 2,956 micro-dollars; all 1,000 at the miss rate would be 4,900.
    each = owed(200, 800, 200, (MISS, HIT, DEEPSEEK_OUTPUT))
    assert (2_956, [each, each], 2 * each) == (
        each,
        await settled(deepseek, "ds"),
        await used(deepseek, "ds"),
    )
    await assert_invariants(deepseek.dsn)


async def test_a_deepseek_hit_count_out_of_its_shape_is_charged_as_input(
    deepseek: Running, compatible: FakeCompatible
) -> None:
    """Hits above the prompt, below zero or not a whole number are charged at the input
    rate, and the call still settles."""
    await budget(deepseek, "odd", 50_000_000)
    odd: list[Any] = [PROMPT + 1, -5, "800", 800.5, True]
    async with (
        AsyncClient(deepseek.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=compatible.url, max_retries=0) as client,
    ):
        llm = metered(client, earmark, "odd", provider=DEEPSEEK)
        for hits in odd:
            compatible.state.cache_hits = hits
            await call(llm, DEEPSEEK_CHAT)
    full = owed(PROMPT, 0, COMPLETION, (MISS, HIT, DEEPSEEK_OUTPUT))
    assert ([full] * len(odd), len(odd) * full) == (
        await settled(deepseek, "odd"),
        await used(deepseek, "odd"),
    )
    await assert_invariants(deepseek.dsn)


async def test_an_answer_naming_another_tier_is_charged_at_the_named_tier(
    tiers: Running, compatible: FakeCompatible
) -> None:
    """A priority request served at default is charged at default, an auto one served at
    priority at priority (streamed), a flex one at flex; a tier name the sidecar would
    refuse is charged at the tier asked."""
    await budget(tiers, "tier", 50_000_000)
    served = [
        ({"service_tier": "priority"}, "default", False),
        ({"service_tier": "auto"}, "priority", True),
        ({"service_tier": "flex"}, "flex", False),
        ({"service_tier": "flex"}, "not a tier", False),
    ]
    async with (
        AsyncClient(tiers.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=f"{compatible.url}/v1", max_retries=0) as client,
    ):
        llm = metered(client, earmark, "tier")
        for request, tier, stream in served:
            compatible.state.served_tier = tier
            await call(llm, "gpt-4o", stream=stream, **request)
    asked = [r["service_tier"] for r in compatible.state.requests]
    at_default = owed(PROMPT, 0, COMPLETION, DEFAULT)
    at_priority = owed(PROMPT, 0, COMPLETION, PRIORITY)
    at_flex = owed(PROMPT, 0, COMPLETION, FLEX)
    # 1,000 input and 200 output tokens at $25/M and $100/M: 25,000 + 20,000; priority
    # twice that, flex half.
    assert (45_000, 90_000, 22_500) == (at_default, at_priority, at_flex)
    assert (
        ["priority", "auto", "flex", "flex"],
        sorted([at_default, at_priority, at_flex, at_flex]),
        at_default + at_priority + 2 * at_flex,
    ) == (asked, await settled(tiers, "tier"), await used(tiers, "tier"))
    await assert_invariants(tiers.dsn)


async def test_an_azure_answer_naming_another_tier_is_charged_at_the_named_tier(
    tiers: Running, compatible: FakeCompatible
) -> None:
    """An Azure OpenAI deployment's priority request served at default is charged at
    default: Azure answers the tier it used in the same field as OpenAI."""
    compatible.state.served_tier = "default"
    for tier, (rate_in, rate_cached, rate_out) in (("", DEFAULT), ("priority", PRIORITY)):
        await put_price(
            tiers, "azure", "gpt-4o", service_tier=tier, input_usd_micros_per_mtok=rate_in,
            cached_input_usd_micros_per_mtok=rate_cached, output_usd_micros_per_mtok=rate_out,
            max_output_tokens=CEILING,
        )  # fmt: skip
    await budget(tiers, "azure", 50_000_000)
    async with (
        AsyncClient(tiers.target) as earmark,
        openai.AsyncAzureOpenAI(
            api_key="k", azure_endpoint=compatible.url, api_version="2024-10-21", max_retries=0
        ) as client,
    ):
        llm = metered(client, earmark, "azure", deployments={"gpt-4o": "gpt-4o"})
        await call(llm, "gpt-4o", service_tier="priority")
    at_default = owed(PROMPT, 0, COMPLETION, DEFAULT)
    assert ([at_default], at_default) == (
        await settled(tiers, "azure"),
        await used(tiers, "azure"),
    )
    await assert_invariants(tiers.dsn)


def test_deepseeks_hits_are_read_before_a_zero_cached_tokens() -> None:
    """An answer that carries OpenAI's cached_tokens as 0 beside DeepSeek's hit count is
    read at the hit count, and the tier it names is kept as given."""
    usage = {
        "prompt_tokens": 1_000, "completion_tokens": 200,
        "prompt_tokens_details": {"cached_tokens": 0},
        "prompt_cache_hit_tokens": 640, "prompt_cache_miss_tokens": 360,
    }  # fmt: skip
    expected = Usage(1_000, 200, cached_input_tokens=640, service_tier="default")
    assert expected == chat_usage(usage, {"service_tier": "default"})


def test_cache_parts_past_the_input_are_priced_as_input() -> None:
    """Cache reads that with the cache writes exceed the input count 0, and a details
    object that is not one is read as none."""
    both = {"prompt_tokens": 100, "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": 80, "cache_write_tokens": 40}}  # fmt: skip
    bad = {"prompt_tokens": 100, "completion_tokens": 1, "prompt_tokens_details": [1]}
    assert (Usage(100, 1, cache_write_input_tokens=40), Usage(100, 1)) == (
        chat_usage(both, {}),
        chat_usage(bad, {"service_tier": "x" * 33}),
    )
