"""The metered OpenAI client's unknown outcomes and provider caps: the real openai package
against the fake OpenAI on 127.0.0.1, held and settled through a live sidecar."""

from __future__ import annotations

import asyncio

import openai
import pytest

from earmark.client import AsyncClient, Client, RefusedError
from earmark.client.llm import metered, prompt_tokens
from earmark.core.prices import Usage
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import (
    CEILING,
    INPUT,
    ONCE,
    OUTPUT,
    ask,
    budget,
    closed_port,
    cost,
    holds,
    micros,
)
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants, eventually

# The client's timeout, well under the fake's late answer.
TIMEOUT_SECONDS = 0.3


async def test_a_timeout_after_sending_leaves_the_hold_in_doubt_at_once(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A call the provider answers after the client's timeout raises APITimeoutError and
    leaves its hold IN_DOUBT at once with the prompt charged; the provider bills it all the
    same, and ResolveHold at that bill leaves the budget's used equal to the bill."""
    await budget(priced, "late", 5_000_000)
    async with (
        AsyncClient(priced.target, admin_target=priced.admin_target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url, timeout=TIMEOUT_SECONDS) as client,
    ):
        llm = metered(client, earmark, "late", retry=ONCE)
        with pytest.raises(openai.APITimeoutError):
            await llm.chat.completions.create(**ask("late", max_tokens=100))
        (hold,) = await holds(priced, "late")
        doubted = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="late"))
        prompt = micros(prompt_tokens(ask("late")), INPUT)
        assert (pb.RESERVATION_STATE_IN_DOUBT, prompt) == (hold.state, hold.charged)
        assert (prompt, hold.amount - prompt) == (doubted.used, doubted.held)

        async def billed() -> bool:
            return 1 == len(provider.state.billed)

        await eventually(billed, within_seconds=30, what="the late call billed")
        (bill,) = provider.state.billed
        usage = Usage(bill.prompt_tokens, bill.completion_tokens, bill.cached_tokens)
        await earmark.resolve_hold(hold.reservation_id, usage=usage)
    after = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="late"))
    assert (cost(bill), 0, 0) == (after.used, after.held, after.open_reservations)
    await assert_invariants(priced.dsn)


async def test_a_5xx_is_an_unknown_outcome_and_a_4xx_is_nothing(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A 503 leaves its hold in doubt with the prompt charged (the provider may have run
    it); a 404 settles at nothing; each error reaches the caller."""
    await budget(priced, "codes", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "codes", retry=ONCE)
        with pytest.raises(openai.InternalServerError):
            await llm.chat.completions.create(**ask("fail:503", max_tokens=100))
        with pytest.raises(openai.NotFoundError):
            await llm.chat.completions.create(**ask("fail:404", max_tokens=100))
    found = {h.state: h for h in await holds(priced, "codes")}
    doubted, settled = found[pb.RESERVATION_STATE_IN_DOUBT], found[pb.RESERVATION_STATE_SETTLED]
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="codes"))
    prompt = micros(prompt_tokens(ask("fail:503")), INPUT)
    assert 2 == len(provider.state.requests)
    assert (prompt, 0) == (doubted.charged, settled.settled_used)
    assert (prompt, doubted.amount - prompt) == (state.used, state.held)
    await assert_invariants(priced.dsn)


async def test_a_dropped_connection_is_an_unknown_outcome_in_a_sync_worker(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A synchronous worker whose answer is cut off mid-body (the provider ran and billed
    the call) gets APIConnectionError, and its hold is IN_DOUBT with the prompt charged."""
    await budget(priced, "drop", 5_000_000)

    def call() -> None:
        # A synchronous worker, on a thread of its own: the sidecar serves on this loop.
        with (
            Client(priced.target) as earmark,
            openai.OpenAI(api_key="k", base_url=provider.url) as client,
        ):
            llm = metered(client, earmark, "drop", retry=ONCE)
            with pytest.raises(openai.APIConnectionError):
                llm.chat.completions.create(**ask("drop", max_tokens=100))

    await asyncio.to_thread(call)
    (hold,) = await holds(priced, "drop")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="drop"))
    prompt = micros(prompt_tokens(ask("drop")), INPUT)
    assert 1 == len(provider.state.billed)
    assert (pb.RESERVATION_STATE_IN_DOUBT, prompt) == (hold.state, hold.charged)
    assert (prompt, hold.amount - prompt, 1) == (state.used, state.held, state.open_reservations)
    await assert_invariants(priced.dsn)


async def test_a_refused_connection_settles_at_nothing(priced: Running) -> None:
    """A connection refused before anything was sent is no unknown outcome: each attempt's
    hold settles at nothing and the connection error reaches the caller."""
    await budget(priced, "refused", 5_000_000)
    url = f"http://127.0.0.1:{closed_port()}/v1"
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=url) as client,
    ):
        llm = metered(client, earmark, "refused", retry=ONCE)
        with pytest.raises(openai.APIConnectionError):
            await llm.chat.completions.create(**ask(max_tokens=100))
    (hold,) = await holds(priced, "refused")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="refused"))
    assert (pb.RESERVATION_STATE_SETTLED, 0) == (hold.state, hold.settled_used)
    assert (0, 0) == (state.used, state.held)
    await assert_invariants(priced.dsn)


async def test_without_a_maximum_a_tokens_budget_holds_the_ceiling(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A sync call with no maximum on a tokens budget holds its prompt and the model's
    ceiling in tokens, is sent with the ceiling, and settles at the tokens billed."""
    await budget(priced, "tokens", 1_000_000, unit="tokens")

    def call() -> object:
        # A synchronous worker, on a thread of its own: the sidecar serves on this loop.
        with (
            Client(priced.target) as earmark,
            openai.OpenAI(api_key="k", base_url=provider.url) as client,
        ):
            return metered(client, earmark, "tokens").chat.completions.create(**ask("t" * 300))

    await asyncio.to_thread(call)
    (request,) = provider.state.requests
    (hold,) = await holds(priced, "tokens")
    (bill,) = provider.state.billed
    prompt = prompt_tokens(ask("t" * 300))
    assert (CEILING, "max_tokens" in request) == (request["max_completion_tokens"], False)
    assert (prompt + CEILING, bill.prompt_tokens + bill.completion_tokens) == (
        hold.amount,
        hold.settled_used,
    )
    await assert_invariants(priced.dsn)


async def test_a_call_the_budget_cannot_cover_is_refused_or_degraded(
    priced: Running, provider: FakeOpenAI
) -> None:
    """With room for the prompt and 100 output tokens, a call without a maximum is refused
    before anything is sent; with degrade=True it is sent with max_completion_tokens 100,
    the largest the budget covers, and the answer stops there."""
    prompt = micros(prompt_tokens(ask()), INPUT)
    await budget(priced, "thin", prompt + micros(100, OUTPUT))
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        with pytest.raises(RefusedError):
            await metered(client, earmark, "thin").chat.completions.create(**ask())
        refused_requests = len(provider.state.requests)
        degraded = metered(client, earmark, "thin", degrade=True)
        reply = await degraded.chat.completions.create(**ask())
    (request,) = provider.state.requests
    (hold,) = await holds(priced, "thin")
    (bill,) = provider.state.billed
    assert (0, 100, "length") == (
        refused_requests,
        request["max_completion_tokens"],
        reply.choices[0].finish_reason,
    )
    assert (pb.RESERVATION_STATE_SETTLED, cost(bill)) == (hold.state, hold.settled_used)
    await assert_invariants(priced.dsn)
