"""The metered Anthropic client: the real anthropic package against a fake Anthropic server
over HTTP on 127.0.0.1, held, called and settled through a live sidecar."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import anthropic
import pytest

from earmark.client import AsyncClient, Client, RefusedError
from earmark.client.llm import Meter, metered
from earmark.client.wire_anthropic import Messages
from earmark.core.prices import Usage
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import (
    CLAUDE,
    CLAUDE_RATES,
    ONCE,
    budget,
    closed_port,
    holds,
    micros,
)
from tests.conftest import Running
from tests.fake_anthropic import Bill, FakeAnthropic
from tests.helpers import assert_invariants, child, eventually

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("anthropic_worker.py")
# The client's timeout, well under the fake's late answer.
TIMEOUT_SECONDS = 0.3


def prompt_tokens(request: dict[str, Any]) -> int:
    """What the metered client holds and charges for a message's prompt."""
    return Messages().call(request, Meter("")).prompt_tokens


def ask(text: str = "hello", max_tokens: int = 500, **request: Any) -> dict[str, Any]:
    return {
        "model": CLAUDE,
        "max_tokens": max_tokens,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": text}],
        **request,
    }


def shape_cost(request: dict[str, Any], output: int) -> int:
    """What the sidecar holds for request with output tokens at most: its prompt's estimate
    at the input rate and output at the output rate, rounded up once."""
    scaled = prompt_tokens(request) * CLAUDE_RATES.input + output * CLAUDE_RATES.output
    return -(-scaled // 1_000_000)


async def settled_exactly(s: Running, budget_id: str, fake: FakeAnthropic) -> pb.Hold:
    """The one hold settled at exactly what the fake billed, nothing left held."""
    (hold,) = await holds(s, budget_id)
    state = await s.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    assert (pb.RESERVATION_STATE_SETTLED, fake.state.billed_micros()) == (
        hold.state,
        hold.settled_used,
    )
    assert (hold.settled_used, 0) == (state.used, state.held)
    return hold


async def test_a_message_settles_at_its_usage_with_cache_reads_and_writes(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """messages.create holds its prompt and max_tokens and settles at exactly what the fake
    billed: cache reads and cache writes each at their own rate, though Anthropic's
    input_tokens counts neither."""
    await budget(priced_claude, "create", 5_000_000)
    claude.state.cache_read_tokens, claude.state.cache_write_tokens = 600, 200
    async with (
        AsyncClient(priced_claude.target) as earmark,
        anthropic.AsyncAnthropic(api_key="k", base_url=claude.url) as client,
    ):
        reply = await metered(client, earmark, "create").messages.create(**ask("y" * 4_000))
    (bill,) = claude.state.billed
    (request,) = claude.state.requests
    hold = await settled_exactly(priced_claude, "create", claude)
    assert Bill(203, 300, 600, 200) == bill
    assert (300, 500) == (reply.usage.output_tokens, request["max_tokens"])
    assert shape_cost(ask("y" * 4_000), 500) == hold.amount
    await assert_invariants(priced_claude.dsn)


async def test_messages_stream_settles_at_the_streamed_usage(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """messages.stream gives anthropic's own MessageStream: its text and final message read
    as usual while the hold is charged as the deltas come, and the hold settles at exactly
    what the fake billed."""
    await budget(priced_claude, "stream", 5_000_000)
    claude.state.cache_read_tokens = 100

    def call() -> tuple[str, int]:
        # A synchronous worker, on a thread of its own: the sidecar serves on this loop.
        with (
            Client(priced_claude.target) as earmark,
            anthropic.Anthropic(api_key="k", base_url=claude.url) as client,
        ):
            llm = metered(client, earmark, "stream")
            with llm.messages.stream(**ask("z" * 2_000)) as stream:
                text = "".join(stream.text_stream)
                final = stream.get_final_message()
            return text, final.usage.output_tokens

    text, output = await asyncio.to_thread(call)
    hold = await settled_exactly(priced_claude, "stream", claude)
    assert ("tok " * 300, 300) == (text, output)
    assert 0 < hold.charged <= hold.amount
    await assert_invariants(priced_claude.dsn)


async def test_create_with_stream_settles_at_the_streamed_usage(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """create(stream=True) gives the raw events (the anthropic package itself drops the
    pings the fake sends), charges the hold as the deltas come and settles at exactly what
    the fake billed."""
    await budget(priced_claude, "events", 5_000_000)
    claude.state.cache_write_tokens = 150
    async with (
        AsyncClient(priced_claude.target) as earmark,
        anthropic.AsyncAnthropic(api_key="k", base_url=claude.url) as client,
    ):
        events: Any = await metered(client, earmark, "events").messages.create(
            **ask("w" * 2_000), stream=True
        )
        kinds = [event.type async for event in events]
    await settled_exactly(priced_claude, "events", claude)
    assert ["message_start", "content_block_start", "content_block_delta"] == kinds[:3]
    assert ["content_block_stop", "message_delta", "message_stop"] == kinds[-3:]
    assert 300 == kinds.count("content_block_delta")
    await assert_invariants(priced_claude.dsn)


async def test_max_tokens_above_the_hold_is_lowered_to_what_it_covers(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """With output_tokens_max=50, a request for max_tokens=4096 holds 50 output tokens and
    is sent with max_tokens lowered to the 50 the hold covers after the prompt, so that the
    provider stops there; the hold settles at what the fake billed."""
    await budget(priced_claude, "cap", 5_000_000)
    async with (
        AsyncClient(priced_claude.target, admin_target=priced_claude.admin_target) as earmark,
        anthropic.AsyncAnthropic(api_key="k", base_url=claude.url) as client,
    ):
        llm = metered(client, earmark, "cap", output_tokens_max=50)
        reply = await llm.messages.create(**ask(max_tokens=4_096))
    (request,) = claude.state.requests
    hold = await settled_exactly(priced_claude, "cap", claude)
    assert (50, "max_tokens") == (request["max_tokens"], reply.stop_reason)
    assert shape_cost(ask(), 50) == hold.amount
    await assert_invariants(priced_claude.dsn)


async def test_a_stream_past_its_cap_is_read_whole_and_its_overshoot_recorded(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """A provider that overruns the max_tokens it was sent is never cut off by Earmark:
    the stream is read to its end and the hold settles at what the provider billed, the
    excess recorded as overshoot."""
    await budget(priced_claude, "overrun", 5_000_000)
    claude.state.output_tokens, claude.state.ignores_maximum = 200, True
    read = 0
    async with (
        AsyncClient(priced_claude.target) as earmark,
        anthropic.AsyncAnthropic(api_key="k", base_url=claude.url) as client,
    ):
        llm = metered(client, earmark, "overrun")
        async with llm.messages.stream(**ask(max_tokens=50)) as stream:
            async for _ in stream.text_stream:
                read += 1
    hold = await settled_exactly(priced_claude, "overrun", claude)
    assert (200, True) == (read, hold.settled_used > hold.amount)
    await assert_invariants(priced_claude.dsn)


async def test_one_hour_cache_writes_and_web_searches_are_priced_at_their_rates(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """A message whose cache writes are kept an hour and which runs web searches settles
    at the fake's bill: the 1-hour writes at their rate, each search at its fee."""
    await budget(priced_claude, "search", 5_000_000)
    claude.state.cache_write_tokens = 1_000
    long_lived = {"type": "ephemeral", "ttl": "1h"}
    system = [{"type": "text", "text": "Be brief. " * 800, "cache_control": long_lived}]
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    async with (
        AsyncClient(priced_claude.target) as earmark,
        anthropic.AsyncAnthropic(api_key="k", base_url=claude.url) as client,
    ):
        llm = metered(client, earmark, "search")
        reply = await llm.messages.create(**ask("look it up", system=system, tools=[search]))
    (bill,) = claude.state.billed
    await settled_exactly(priced_claude, "search", claude)
    assert (1_000, 1, 1) == (
        bill.ephemeral_1h_input_tokens,
        bill.web_search_requests,
        reply.usage.server_tool_use.web_search_requests if reply.usage.server_tool_use else 0,
    )
    await assert_invariants(priced_claude.dsn)


async def test_every_surface_is_refused_unsent_and_count_tokens_passes(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """The metered client is an AsyncAnthropic; on a budget that cannot pay for a prompt,
    create, create(stream=True) and stream raise RefusedError and the fake sees none of
    them, while count_tokens, which bills nothing, passes through without a hold."""
    await budget(priced_claude, "empty", 1)
    async with (
        AsyncClient(priced_claude.target) as earmark,
        anthropic.AsyncAnthropic(api_key="k", base_url=claude.url) as client,
    ):
        llm = metered(client, earmark, "empty")
        with pytest.raises(RefusedError):
            await llm.messages.create(**ask())
        with pytest.raises(RefusedError):
            await llm.messages.create(**ask(stream=True))
        with pytest.raises(RefusedError):
            async with llm.messages.stream(**ask()) as stream:
                await stream.get_final_message()
        counted = await llm.messages.count_tokens(
            model=CLAUDE, messages=[{"role": "user", "content": "hello"}]
        )
    assert isinstance(llm, anthropic.AsyncAnthropic)
    assert (1, 0, []) == (
        len(claude.state.requests),
        len(claude.state.billed),
        await holds(priced_claude, "empty"),
    )
    assert 0 < counted.input_tokens
    await assert_invariants(priced_claude.dsn)


async def test_a_timeout_after_sending_leaves_the_hold_in_doubt_until_resolved(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """A message the fake answers after the client's timeout raises APITimeoutError and
    leaves its hold IN_DOUBT at once with the prompt charged; ResolveHold at the fake's bill
    leaves the budget's used equal to it."""
    await budget(priced_claude, "late", 5_000_000)
    async with (
        AsyncClient(priced_claude.target, admin_target=priced_claude.admin_target) as earmark,
        anthropic.AsyncAnthropic(
            api_key="k", base_url=claude.url, timeout=TIMEOUT_SECONDS
        ) as client,
    ):
        with pytest.raises(anthropic.APITimeoutError):
            await metered(client, earmark, "late", retry=ONCE).messages.create(**ask("late"))
        (hold,) = await holds(priced_claude, "late")
        prompt = micros(prompt_tokens(ask("late")), CLAUDE_RATES.input)
        assert (pb.RESERVATION_STATE_IN_DOUBT, prompt) == (hold.state, hold.charged)

        async def billed() -> bool:
            return 1 == len(claude.state.billed)

        await eventually(billed, within_seconds=30, what="the late message billed")
        (bill,) = claude.state.billed
        usage = Usage(bill.input_tokens, bill.output_tokens)
        await earmark.resolve_hold(hold.reservation_id, usage=usage)
    after = await priced_claude.admin.GetBudget(pb.GetBudgetRequest(budget_id="late"))
    assert (claude.state.billed_micros(), 0, 0) == (after.used, after.held, after.open_reservations)
    await assert_invariants(priced_claude.dsn)


async def test_a_5xx_is_in_doubt_and_a_4xx_is_nothing(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """A 529 (overloaded) leaves its hold in doubt with the prompt charged; a 400 settles at
    nothing; each error reaches the caller with Anthropic's error body."""
    await budget(priced_claude, "codes", 5_000_000)
    async with (
        AsyncClient(priced_claude.target) as earmark,
        anthropic.AsyncAnthropic(api_key="k", base_url=claude.url) as client,
    ):
        llm = metered(client, earmark, "codes", retry=ONCE)
        with pytest.raises(anthropic.InternalServerError):
            await llm.messages.create(**ask("fail:529"))
        with pytest.raises(anthropic.BadRequestError) as bad:
            await llm.messages.create(**ask("fail:400"))
    found = {h.state: h for h in await holds(priced_claude, "codes")}
    doubted = found[pb.RESERVATION_STATE_IN_DOUBT]
    settled = found[pb.RESERVATION_STATE_SETTLED]
    state = await priced_claude.admin.GetBudget(pb.GetBudgetRequest(budget_id="codes"))
    prompt = micros(prompt_tokens(ask("fail:529")), CLAUDE_RATES.input)
    assert "invalid_request_error" == bad.value.body["error"]["type"]  # type: ignore[index]
    assert (prompt, 0) == (doubted.charged, settled.settled_used)
    assert (prompt, doubted.amount - prompt) == (state.used, state.held)
    await assert_invariants(priced_claude.dsn)


async def test_a_refused_connection_settles_at_nothing_in_a_sync_worker(
    priced_claude: Running,
) -> None:
    """A synchronous worker whose connection is refused before anything was sent gets
    APIConnectionError, and its hold settles at nothing: no unknown outcome."""
    await budget(priced_claude, "refused", 5_000_000)
    url = f"http://127.0.0.1:{closed_port()}"

    def call() -> None:
        # A synchronous worker, on a thread of its own: the sidecar serves on this loop.
        with (
            Client(priced_claude.target) as earmark,
            anthropic.Anthropic(api_key="k", base_url=url) as client,
        ):
            llm = metered(client, earmark, "refused", retry=ONCE)
            with pytest.raises(anthropic.APIConnectionError):
                llm.messages.create(**ask())

    await asyncio.to_thread(call)
    (hold,) = await holds(priced_claude, "refused")
    state = await priced_claude.admin.GetBudget(pb.GetBudgetRequest(budget_id="refused"))
    assert (pb.RESERVATION_STATE_SETTLED, 0) == (hold.state, hold.settled_used)
    assert (0, 0) == (state.used, state.held)
    await assert_invariants(priced_claude.dsn)


@pytest.mark.slow
async def test_five_anthropic_workers_never_spend_past_five_dollars(
    priced_claude: Running, claude: FakeAnthropic
) -> None:
    """Five worker processes (two plain, two on messages.stream, one on create(stream=True))
    call the fake Anthropic through the metered client on one $5.00 task until each is
    refused: the budget's used is exactly what the fake billed, cache reads and writes
    included, nothing is left held, and the audit is clean."""
    await budget(priced_claude, "task", 5_000_000)
    claude.state.cache_read_tokens, claude.state.cache_write_tokens = 500, 100

    def worker(mode: str) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        return child(
            sys.executable, str(WORKER), priced_claude.target, claude.url, "task", CLAUDE, mode,
            stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip

    async with contextlib.AsyncExitStack() as stack:
        modes = ["plain", "plain", "stream", "stream", "events"]
        processes = [await stack.enter_async_context(worker(mode)) for mode in modes]
        outs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in processes)), timeout=240
        )
    done = [json.loads(out) for out, _ in outs]
    state = await priced_claude.admin.GetBudget(pb.GetBudgetRequest(budget_id="task"))
    calls = sum(d["calls"] for d in done)
    print(f"anthropic race: {calls} calls, used {state.used} of 5000000 usd_micros, {done}")
    assert [0] * 5 == [p.returncode for p in processes]
    assert [1] * 5 == [d["refused"] for d in done]
    assert calls == len(claude.state.billed)
    assert (claude.state.billed_micros(), 0, 0) == (
        state.used,
        state.held,
        state.open_reservations,
    )
    assert state.used <= 5_000_000
    await assert_invariants(priced_claude.dsn)
