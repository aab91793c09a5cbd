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

from earmark import limits
from earmark.client import AsyncClient, Client, RefusedError
from earmark.client.llm import StreamCappedError, metered, prompt_tokens
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import INPUT, OUTPUT, QUICK, ask, budget, cost, holds
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


async def test_each_retry_takes_a_new_hold_and_openai_retries_are_off(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A 500 is retried by the wrapper on a new hold, never by the OpenAI client itself; the
    failed attempt's hold stays in doubt with the prompt it charged before sending (a 5xx
    may be billed), the answered one settles at its usage."""
    await budget(priced, "retry", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url, max_retries=5) as client,
    ):
        llm = metered(client, earmark, "retry", retry=QUICK)
        await llm.chat.completions.create(**ask("flaky", max_tokens=100))
    (billed,) = provider.state.billed
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="retry"))
    first, second = sorted(await holds(priced, "retry"), key=lambda h: h.created_at.ToDatetime())
    prompt = -(-prompt_tokens(ask("flaky")) * INPUT // 1_000_000)
    assert ["0", "0"] == provider.state.retry_headers
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


async def test_without_a_maximum_the_budgets_estimate_is_held(
    priced: Running, provider: FakeOpenAI, tmp_path: Path
) -> None:
    """A call that names no max_tokens holds the budget's default estimate for the model;
    its messages, given as an iterator, are counted and still sent whole; a worker with no
    access to the admin listener (no socket) still caps the provider at what the hold buys,
    at the output rate the prompt's Charge answered with."""
    await budget(priced, "guess", 5_000_000, default_estimate=70_000)
    messages = iter([{"role": "user", "content": "hello"}])
    async with (
        AsyncClient(priced.target, admin_target=f"unix:{tmp_path / 'none.sock'}") as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "guess")
        await llm.chat.completions.create(model="gpt-4o", messages=messages)
    (hold,) = await holds(priced, "guess")
    (billed,) = provider.state.billed
    (request,) = provider.state.requests
    prompt = -(
        -prompt_tokens({"messages": [{"role": "user", "content": "hello"}]}) * INPUT // 1_000_000
    )
    assert [{"role": "user", "content": "hello"}] == request["messages"]
    assert (70_000 - prompt) * 1_000_000 // OUTPUT == request["max_completion_tokens"]
    assert (70_000, cost(billed)) == (hold.amount, hold.settled_used)
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
        chunks = [chunk async for chunk in stream]  # type: ignore[union-attr]
    (billed,) = provider.state.billed
    (hold,) = await holds(priced, "stream")
    (request,) = provider.state.requests
    assert {"include_usage": True} == request["stream_options"]
    assert 201 == len(chunks)
    assert all(chunk.choices for chunk in chunks)
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (hold.state, hold.settled_used)
    assert 0 < hold.charged <= hold.amount
    await assert_invariants(priced.dsn)


async def test_a_stream_stops_when_its_hold_is_spent(priced: Running, provider: FakeOpenAI) -> None:
    """A slow stream with no maximum runs on the budget's estimate; when the provider
    overruns the maximum it was sent and a charge comes back capped, the wrapper closes
    the stream, settles at the tokens read, and says so."""
    await budget(priced, "cap", 5_000_000, default_estimate=10_000)
    provider.state.completion_tokens = 2_000
    provider.state.ignores_maximum = True
    provider.state.chunk_seconds = 0.002
    read = 0
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        stream = await metered(client, earmark, "cap").chat.completions.create(**ask(stream=True))

        async def read_all() -> None:
            nonlocal read
            async for _ in stream:  # type: ignore[union-attr]
                read += 1

        with pytest.raises(StreamCappedError):
            await read_all()
    (hold,) = await holds(priced, "cap")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="cap"))
    # The tokens read past the hold were generated, so they are recorded: at most one
    # charge's worth of output past it.
    past = hold.settled_used - hold.amount
    assert read < 2_000
    assert (pb.RESERVATION_STATE_SETTLED, 10_000) == (hold.state, hold.amount)
    assert 0 <= past <= limits.llm_stream_charge_tokens * OUTPUT // 1_000_000
    assert (hold.settled_used, 0) == (state.used, state.held)
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
