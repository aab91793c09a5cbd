"""The metered OpenAI client: the real openai package against a fake OpenAI-compatible
server over HTTP on 127.0.0.1, held, called and settled through a live sidecar."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from pathlib import Path

import openai
import pytest

from earmark.client import AsyncClient, Client, RefusedError
from earmark.client.llm import metered, prompt_tokens
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import (
    CEILING,
    INPUT,
    OUTPUT,
    QUICK,
    ask,
    budget,
    cost,
    holds,
    micros,
)
from tests.conftest import Running
from tests.fake_openai import Billed, FakeOpenAI
from tests.helpers import assert_invariants, child, eventually

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("llm_worker.py")


async def test_a_sync_call_is_held_then_settled_at_its_usage(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A synchronous OpenAI call holds its prompt and max_tokens, and settles at the usage
    the provider answered, cached input tokens at the cached rate."""
    await budget(priced, "sync", 5_000_000)
    provider.state.cached_tokens = 100

    def call() -> object:
        with (
            Client(priced.target) as earmark,
            openai.OpenAI(api_key="k", base_url=provider.url) as client,
        ):
            return metered(client, earmark, "sync").chat.completions.create(
                **ask("y" * 4_000, max_tokens=500)
            )

    reply = await asyncio.to_thread(call)
    (billed,) = provider.state.billed
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="sync"))
    (hold,) = await holds(priced, "sync")
    assert "chatcmpl-fake" == reply.id  # type: ignore[attr-defined]
    assert Billed(1_001, 300, 100) == billed
    assert (cost(billed), 0) == (state.used, state.held)
    estimate = prompt_tokens(ask("y" * 4_000))
    assert -(-(estimate * INPUT + 500 * OUTPUT) // 1_000_000) == hold.amount
    assert pb.RESERVATION_STATE_SETTLED == hold.state
    await assert_invariants(priced.dsn)


async def test_a_refusal_is_raised_before_any_request(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A call whose hold is refused raises RefusedError and sends the provider nothing."""
    await budget(priced, "poor", 1_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "poor")
        with pytest.raises(RefusedError) as refused:
            await llm.chat.completions.create(**ask(max_tokens=500))
    assert "INSUFFICIENT_BUDGET" == refused.value.reason
    assert [] == provider.state.requests
    assert [] == await holds(priced, "poor")
    await assert_invariants(priced.dsn)


async def test_a_body_that_is_no_json_object_is_refused_once_unsent(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A billable POST whose body is not a JSON object raises Earmark's error as it is,
    not a connection error the SDK retries: nothing is held or sent."""
    await budget(priced, "odd", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url, max_retries=2) as client,
    ):
        llm = metered(client, earmark, "odd")
        with pytest.raises(openai.OpenAIError) as refused:
            await llm.post("/chat/completions", cast_to=object, body=[1, 2])
    assert (False, True) == (
        isinstance(refused.value, openai.APIConnectionError),
        "not a JSON object" in str(refused.value),
    )
    assert ([], []) == (provider.state.requests, await holds(priced, "odd"))
    await assert_invariants(priced.dsn)


async def test_each_of_the_sdks_retries_takes_a_new_hold(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A 500 is retried by the OpenAI client itself, through the metered transport, so
    each attempt has its own hold: the failed one stays in doubt with the prompt it
    charged in its Reserve (a 5xx may be billed), the answered one settles at its usage."""
    await budget(priced, "retry", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url, max_retries=5) as client,
    ):
        llm = metered(client, earmark, "retry")
        await llm.chat.completions.create(**ask("flaky", max_tokens=100))
    (billed,) = provider.state.billed
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="retry"))
    first, second = sorted(await holds(priced, "retry"), key=lambda h: h.created_at.ToDatetime())
    prompt = -(-prompt_tokens(ask("flaky")) * INPUT // 1_000_000)
    assert ["0", "1"] == provider.state.retry_headers
    assert (prompt + cost(billed), first.amount - prompt) == (state.used, state.held)
    assert (pb.RESERVATION_STATE_IN_DOUBT, prompt) == (first.state, first.charged)
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (second.state, second.settled_used)
    await assert_invariants(priced.dsn)


async def test_an_error_settles_failed_before_it_propagates(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A 400 is not retried: the provider answered no, so the hold settles at nothing (the
    prompt charged before sending is given back) and the OpenAI error reaches the caller."""
    await budget(priced, "bad", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "bad", retry=QUICK)
        with pytest.raises(openai.BadRequestError):
            await llm.chat.completions.create(**ask("fail:400", max_tokens=100))
    (hold,) = await holds(priced, "bad")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="bad"))
    assert 1 == len(provider.state.requests)
    assert (pb.RESERVATION_STATE_SETTLED, 0) == (hold.state, hold.settled_used)
    assert (0, 0) == (state.used, state.held)
    await assert_invariants(priced.dsn)


async def test_without_a_maximum_the_call_is_held_for_the_ceiling_and_told_it(
    priced: Running, provider: FakeOpenAI
) -> None:
    """Ten calls that name no maximum on a HARD budget are each held for the model's
    ceiling and sent with it, so none is cut short by Earmark: each answer is the
    provider's whole answer, finish_reason stop, and settles at its usage."""
    await budget(priced, "ceiling", 50_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "ceiling")
        replies = [await llm.chat.completions.create(**ask()) for _ in range(10)]
    prompt = prompt_tokens(ask())
    assert [("stop", 300)] * 10 == [
        (r.choices[0].finish_reason, r.usage.completion_tokens if r.usage else 0) for r in replies
    ]
    assert [CEILING] * 10 == [r["max_completion_tokens"] for r in provider.state.requests]
    held = await holds(priced, "ceiling")
    assert {micros(prompt, INPUT) + micros(CEILING, OUTPUT)} == {h.amount for h in held}
    assert sorted(cost(b) for b in provider.state.billed) == sorted(h.settled_used for h in held)
    await assert_invariants(priced.dsn)


async def test_a_stream_settles_at_its_streamed_usage(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A stream asks for usage, hides the usage-only chunk from a caller that did not ask
    for it, charges as it reads, and settles at the provider's usage."""
    await budget(priced, "stream", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "stream")
        stream = await llm.chat.completions.create(**ask(max_tokens=200, stream=True))
        chunks = [chunk async for chunk in stream]
    (billed,) = provider.state.billed
    (hold,) = await holds(priced, "stream")
    (request,) = provider.state.requests
    assert {"include_usage": True} == request["stream_options"]
    assert 201 == len(chunks)
    assert all(chunk.choices for chunk in chunks)
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (hold.state, hold.settled_used)
    assert 0 < hold.charged <= hold.amount
    await assert_invariants(priced.dsn)


async def test_a_stream_is_read_to_its_end_under_its_maximum(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A 290-token answer under max_tokens=300, four tokens a chunk of text whose
    characters are not four a token, is read to its end: Earmark counts no tokens from
    characters, and settles at the provider's own usage."""
    await budget(priced, "whole", 5_000_000)
    provider.state.completion_tokens = 290
    provider.state.tokens_per_chunk = 4
    provider.state.token_texts = (" understanding", ",")
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "whole")
        stream = await llm.chat.completions.create(**ask(max_tokens=300, stream=True))
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    (billed,) = provider.state.billed
    (hold,) = await holds(priced, "whole")
    assert (" understanding," * 145, 290) == (text, billed.completion_tokens)
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (hold.state, hold.settled_used)
    await assert_invariants(priced.dsn)


async def test_a_worker_killed_during_a_call_leaves_its_hold_in_doubt(
    priced: Running, provider: FakeOpenAI
) -> None:
    """The prompt is charged before it is sent, so a worker SIGKILLed while the provider
    works leaves its hold IN_DOUBT once the lease passes, still held, not returned."""
    await budget(priced, "killed", 5_000_000)

    async def sent() -> bool:
        return 1 == len(provider.state.requests)

    async with child(
        sys.executable, str(WORKER), priced.target, provider.url, "killed", "slow", cwd=ROOT
    ) as process:
        await eventually(sent, within_seconds=60, what="the slow call sent")
        process.send_signal(signal.SIGKILL)
        assert -signal.SIGKILL == await process.wait()

    async def in_doubt() -> bool:
        return [pb.RESERVATION_STATE_IN_DOUBT] == [h.state for h in await holds(priced, "killed")]

    await eventually(in_doubt, within_seconds=15, what="the killed worker's hold in doubt")
    (hold,) = await holds(priced, "killed")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="killed"))
    prompt = -(-prompt_tokens(ask("slow")) * INPUT // 1_000_000)
    assert (prompt, True) == (hold.charged, hold.dispatched)
    assert (hold.amount - prompt, prompt, 1) == (state.held, state.used, state.open_reservations)
    await assert_invariants(priced.dsn)


@pytest.mark.slow
async def test_five_worker_processes_never_spend_past_five_dollars(
    priced: Running, provider: FakeOpenAI
) -> None:
    """Five worker processes (three plain, two streaming) call the provider through the
    metered client on one $5.00 task until each is refused: together they never spend past
    it, and the budget's used is exactly what the provider billed."""
    await budget(priced, "task", 5_000_000)

    def worker(mode: str) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        return child(
            sys.executable, str(WORKER), priced.target, provider.url, "task", mode,
            stdout=asyncio.subprocess.PIPE, cwd=ROOT,
        )  # fmt: skip

    async with contextlib.AsyncExitStack() as stack:
        modes = ["plain"] * 3 + ["stream"] * 2
        processes = [await stack.enter_async_context(worker(mode)) for mode in modes]
        outs = await asyncio.wait_for(
            asyncio.gather(*(p.communicate() for p in processes)), timeout=240
        )
    done = [json.loads(out) for out, _ in outs]
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="task"))
    billed = sum(cost(b) for b in provider.state.billed)
    calls = sum(d["calls"] for d in done)
    print(f"race: {calls} calls, used {state.used} of 5000000 usd_micros, {done}")
    assert [0] * 5 == [p.returncode for p in processes]
    assert [1] * 5 == [d["refused"] for d in done]
    assert calls == len(provider.state.billed)
    assert (billed, 0, 0) == (state.used, state.held, state.open_reservations)
    assert state.used <= 5_000_000
    await assert_invariants(priced.dsn)
