"""Earmark as the LiteLLM proxy's budget gate: the real `litellm[proxy]` package, run as
`litellm --config` with the gate in litellm_settings.callbacks and without LiteLLM's
database, in front of a fake OpenAI, with a live sidecar."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest

from earmark.client.meter import Meter
from earmark.client.wire_openai import Chat
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import CEILING, INPUT, OUTPUT, budget, cost, holds, micros
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants, eventually
from tests.integrations.conftest import (
    GRACE_SECONDS,
    LEASE_PROXY,
    LEASE_SECONDS,
    SHARED_PROXY,
)
from tests.integrations.litellm_proxy import GATE, GUARD, MASTER, MODEL, config, litellm_proxy

pytestmark = pytest.mark.slow

ASKED = 100


def llm(url: str, key: str = "", budget_id: str = "") -> openai.AsyncOpenAI:
    """A caller of the proxy as a team's code would be: the openai SDK, without retries
    so that each answer is the proxy's own. A budget named by header is named with the
    master key (the only key that may name any budget), unless key says otherwise."""
    headers = {"x-earmark-budget": budget_id} if budget_id else {}
    key = key or (MASTER if budget_id else "sk-plain")
    return openai.AsyncOpenAI(
        base_url=f"{url}/v1", api_key=key, default_headers=headers, max_retries=0
    )


def message(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def named(text: str) -> dict[str, Any]:
    """A one-message request whose LiteLLM call id (which LiteLLM takes from the caller,
    and the gate labels the hold with) is its text."""
    return {"messages": message(text), "extra_headers": {"x-litellm-call-id": text}}


def hold_for(text: str, asked: int) -> int:
    """What the gate holds for a one-message request: its prompt as the metered clients
    estimate it, and asked output tokens."""
    body = {"model": MODEL, "messages": message(text), "max_tokens": asked}
    prompt = Chat().call(body, Meter("any")).prompt_tokens
    return micros(prompt, INPUT) + micros(asked, OUTPUT)


def env_of(sidecar: Running, **more: str) -> dict[str, str]:
    return {"EARMARK_TARGET": sidecar.target, "EARMARK_ADMIN_TARGET": sidecar.admin_target, **more}


async def state_of(sidecar: Running, budget_id: str) -> pb.BudgetState:
    return await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))


async def settled(sidecar: Running, budget_id: str) -> list[pb.Hold]:
    """The budget's holds once none is open (the gate settles off the caller's path)."""

    async def closed() -> bool:
        return all(h.state != pb.RESERVATION_STATE_HELD for h in await holds(sidecar, budget_id))

    await eventually(closed, within_seconds=20.0, what=f"{budget_id}'s holds are closed")
    return await holds(sidecar, budget_id)


@pytest.mark.xdist_group(SHARED_PROXY)
async def test_a_race_on_room_for_two_dispatches_exactly_two(
    priced: Running, provider: FakeOpenAI, proxy: str
) -> None:
    """5, 10, 32 and 50 concurrent requests through the proxy on a budget with room for
    two calls: two reach the provider, the rest are answered 422 (LiteLLM's budget error)
    with Earmark's reason, and the budget has used what the provider billed, with nothing
    held."""
    room = 2 * hold_for("go", ASKED) + 100
    for concurrency in (5, 10, 32, 50):
        budget_id = f"race-{concurrency}"
        await budget(priced, budget_id, room)
        before = len(provider.state.billed)
        async with llm(proxy, budget_id=budget_id) as client:
            answers = await asyncio.gather(
                *(
                    client.chat.completions.create(
                        model=MODEL, messages=message("go"), max_tokens=ASKED
                    )
                    for _ in range(concurrency)
                ),
                return_exceptions=True,
            )
        refused = [a for a in answers if isinstance(a, openai.UnprocessableEntityError)]
        billed = provider.state.billed[before:]
        held = await settled(priced, budget_id)
        state = await state_of(priced, budget_id)
        assert (concurrency, 2, concurrency - 2) == (len(answers), len(billed), len(refused))
        assert all("INSUFFICIENT_BUDGET" in str(r) for r in refused)
        assert (sum(cost(b) for b in billed), 0) == (state.used, state.held)
        assert 2 == len(held)
    await assert_invariants(priced.dsn)


@pytest.mark.xdist_group(SHARED_PROXY)
async def test_the_budget_comes_from_key_team_and_organization_metadata(
    priced: Running, provider: FakeOpenAI, proxy: str
) -> None:
    """A key of a team of an organization holds each call on all three budgets; the
    team's budget, when full, refuses with 422 naming it and what it has left; a request
    that names no budget anywhere is not sent."""
    for budget_id in ("key-alice", "org-acme"):
        await budget(priced, budget_id, 50_000_000)
    one = hold_for("hi", ASKED)
    await budget(priced, "team-research", one + one // 2)
    async with llm(proxy, key="sk-nested") as client:
        await client.chat.completions.create(model=MODEL, messages=message("hi"), max_tokens=ASKED)
        # Settled off the caller's path: the second call is decided on the first's bill.
        await settled(priced, "team-research")
        with pytest.raises(openai.UnprocessableEntityError) as refused:
            await client.chat.completions.create(
                model=MODEL, messages=message("hi"), max_tokens=ASKED
            )
    async with llm(proxy) as nameless:
        with pytest.raises(openai.PermissionDeniedError) as unnamed:
            await nameless.chat.completions.create(model=MODEL, messages=message("hi"))
    (billed,) = provider.state.billed
    used = [(await state_of(priced, b)).used for b in ("key-alice", "team-research", "org-acme")]
    headers = refused.value.response.headers
    assert [cost(billed)] * 3 == used
    assert ("INSUFFICIENT_BUDGET", "team-research") == (
        headers["x-earmark-refusal"],
        headers["x-earmark-budget"],
    )
    assert f"remaining {one + one // 2 - cost(billed)}" in str(refused.value)
    assert "earmark_budget_id" in str(unnamed.value)
    await assert_invariants(priced.dsn)


async def test_the_provider_is_told_the_cap_and_each_ending_is_kept(
    priced: Running, provider: FakeOpenAI, tmp_path: Path
) -> None:
    """A request with no maximum is sent with the model's ceiling; a stream settles at its
    usage chunk; a 4xx settles at nothing; a 5xx and a timeout stay in doubt with their
    prompt charge; a request a later hook rejects is released unsent; and the budget has
    used what the provider billed for the calls that answered."""
    await budget(priced, "team", 50_000_000)
    provider.state.late_seconds = 4.0
    settings = config(provider.url, callbacks=(GATE, GUARD), timeout_seconds=2.0)
    statuses: dict[str, int] = {}
    async with (
        litellm_proxy(settings, tmp_path, env_of(priced)) as url,
        llm(url, budget_id="team") as client,
    ):
        await client.chat.completions.create(model=MODEL, **named("free"))
        stream = await client.chat.completions.create(
            model=MODEL, max_tokens=20, stream=True, **named("flow")
        )
        chunks = [chunk async for chunk in stream]
        for text in ("fail:400", "fail:500", "late", "reject"):
            try:
                await client.chat.completions.create(model=MODEL, max_tokens=21, **named(text))
            except openai.APIStatusError as error:
                statuses[text] = error.status_code
        held = {h.labels["litellm.call_id"]: h for h in await settled(priced, "team")}
    sent = {r["messages"][-1]["content"]: r for r in provider.state.requests if "messages" in r}
    state = await state_of(priced, "team")
    billed = {b.completion_tokens: cost(b) for b in provider.state.billed}
    in_doubt = pb.RESERVATION_STATE_IN_DOUBT
    assert (CEILING, {"include_usage": True}) == (
        sent["free"]["max_completion_tokens"],
        sent["flow"]["stream_options"],
    )
    assert {"fail:400": 400, "fail:500": 500, "late": 408, "reject": 400} == statuses
    assert ("reject" not in sent, 21) == (True, len(chunks))
    assert {
        "free": (pb.RESERVATION_STATE_SETTLED, billed[300]),
        "flow": (pb.RESERVATION_STATE_SETTLED, billed[20]),
        "fail:400": (pb.RESERVATION_STATE_SETTLED, 0),
        "fail:500": (in_doubt, held["fail:500"].charged),
        "late": (in_doubt, held["late"].charged),
        "reject": (pb.RESERVATION_STATE_SETTLED, 0),
    } == {text: (h.state, h.charged) for text, h in held.items()}
    doubt = sum(h.charged for h in held.values() if h.state == in_doubt)
    assert (billed[300] + billed[20] + doubt, 0 < doubt) == (state.used, True)
    await assert_invariants(priced.dsn)


@pytest.mark.xdist_group(LEASE_PROXY)
async def test_a_hold_renews_while_its_call_runs_and_a_stream_left_midway_stays_in_doubt(
    priced: Running, provider: FakeOpenAI, lease_proxy: str
) -> None:
    """With a four-second lease, a call the provider holds up keeps its hold past the lease
    and settles at its bill; a stream whose client leaves after three chunks ends in doubt,
    not at LiteLLM's own count of the chunks it read."""
    assert (4, 1) == (LEASE_SECONDS, GRACE_SECONDS)
    await budget(priced, "team", 50_000_000)
    provider.state.chunk_seconds = 0.05
    async with llm(lease_proxy, budget_id="team") as client:
        slow = asyncio.ensure_future(
            client.chat.completions.create(model=MODEL, max_tokens=20, **named("slow"))
        )

        async def renewed() -> bool:
            found = [
                h for h in await holds(priced, "team") if h.labels["litellm.call_id"] == "slow"
            ]
            lease = found[0].expires_at.seconds - found[0].created_at.seconds if found else 0
            return lease > 5

        try:
            await eventually(renewed, within_seconds=20.0, what="the slow call's hold renewed")
        finally:
            provider.state.slow.set()
        await slow
        stream = await client.chat.completions.create(
            model=MODEL, max_tokens=60, stream=True, **named("left")
        )
        read = 0
        async for _ in stream:
            read += 1
            if read == 3:
                break
        await stream.close()
        held = {h.labels["litellm.call_id"]: h for h in await settled(priced, "team")}
    (slow_bill, *_) = provider.state.billed
    assert {
        "slow": (pb.RESERVATION_STATE_SETTLED, cost(slow_bill)),
        "left": (pb.RESERVATION_STATE_IN_DOUBT, held["left"].charged),
    } == {text: (h.state, h.charged) for text, h in held.items()}
    await assert_invariants(priced.dsn)


@pytest.mark.xdist_group(SHARED_PROXY)
async def test_responses_embeddings_and_what_the_gate_will_not_send(
    priced: Running, provider: FakeOpenAI, proxy: str
) -> None:
    """A Responses call, streamed and not, and an embedding settle at what the provider
    billed; a failed embedding is sent once and left in doubt; a no-log request and an
    image generation are answered unsent; a request reusing the call id of one in flight
    is held on its own, and each settles at its own bill."""
    await budget(priced, "team", 50_000_000)
    async with llm(proxy, budget_id="team") as client:
        await client.responses.create(
            model=MODEL, input="answer", max_output_tokens=30,
            extra_headers={"x-litellm-call-id": "answer"},
        )  # fmt: skip
        streamed = await client.responses.create(
            model=MODEL, input="flowing", max_output_tokens=30, stream=True,
            extra_headers={"x-litellm-call-id": "flowing"},
        )  # fmt: skip
        events = [event async for event in streamed]
        await client.embeddings.create(
            model=MODEL, input="vector", extra_headers={"x-litellm-call-id": "vector"}
        )
        with pytest.raises(openai.InternalServerError):
            await client.embeddings.create(
                model=MODEL, input="fail:500", extra_headers={"x-litellm-call-id": "broken"}
            )
        with pytest.raises(openai.BadRequestError) as unlogged:
            await client.chat.completions.create(
                model=MODEL, max_tokens=5, extra_body={"no-log": True}, **named("quiet")
            )
        with pytest.raises(openai.PermissionDeniedError) as image:
            await client.images.generate(model=MODEL, prompt="a cat")
        slow = asyncio.ensure_future(
            client.chat.completions.create(model=MODEL, max_tokens=20, **named("slow"))
        )

        async def in_flight() -> bool:
            return any(h.labels["litellm.call_id"] == "slow" for h in await holds(priced, "team"))

        try:
            await eventually(in_flight, within_seconds=20.0, what="the slow call is held")
            await client.chat.completions.create(
                model=MODEL, max_tokens=20, messages=message("again"),
                extra_headers={"x-litellm-call-id": "slow"},
            )  # fmt: skip
        finally:
            provider.state.slow.set()
        await slow
        closed = await settled(priced, "team")
        held = {
            h.labels["litellm.call_id"]: h for h in closed if h.labels["litellm.call_id"] != "slow"
        }
        slows = sorted(
            (h.state, h.charged) for h in closed if h.labels["litellm.call_id"] == "slow"
        )
    sent = [r.get("input") or r.get("messages") for r in provider.state.requests if r]
    bills = [cost(b) for b in provider.state.billed]
    in_doubt = pb.RESERVATION_STATE_IN_DOUBT
    assert (True, True, True) == (
        bool(events),
        "no-log" in str(unlogged.value),
        "image_generation" in str(image.value),
    )
    assert 1 == sum(1 for r in sent if r == "fail:500")
    assert {
        "answer": (pb.RESERVATION_STATE_SETTLED, bills[0]),
        "flowing": (pb.RESERVATION_STATE_SETTLED, bills[1]),
        "vector": (pb.RESERVATION_STATE_SETTLED, bills[2]),
        "broken": (in_doubt, held["broken"].charged),
    } == {text: (h.state, h.charged) for text, h in held.items()}
    assert sorted((pb.RESERVATION_STATE_SETTLED, b) for b in bills[3:]) == slows
    assert (5, True) == (len(bills), all(b > 0 for b in bills))
    await assert_invariants(priced.dsn)


@pytest.mark.xdist_group(LEASE_PROXY)
async def test_an_outcome_that_comes_after_the_grace_still_settles_the_hold(
    priced: Running, provider: FakeOpenAI, lease_proxy: str
) -> None:
    """With SSE keepalive on, LiteLLM serves a stream from a task of its own, so the
    request's handler ends before the stream does: a three-second stream outlives the
    one-second grace and its hold goes in doubt, then settles at the provider's bill when
    the stream's outcome comes."""
    assert GRACE_SECONDS == 1
    await budget(priced, "team", 50_000_000)
    provider.state.chunk_seconds = 0.05
    async with llm(lease_proxy, budget_id="team") as client:
        stream = await client.chat.completions.create(
            model=MODEL, max_tokens=60, stream=True, **named("kept")
        )
        chunks = [chunk async for chunk in stream]

        async def billed_in_full() -> bool:
            held = await holds(priced, "team")
            return [pb.RESERVATION_STATE_SETTLED] == [h.state for h in held]

        await eventually(billed_in_full, within_seconds=20.0, what="the stream's hold settled")
    (bill,) = provider.state.billed
    state = await state_of(priced, "team")
    ledger = await priced.admin.ListLedger(pb.ListLedgerRequest(budget_id="team"))
    assert (True, cost(bill), 0) == (len(chunks) > 60, state.used, state.held)
    assert ["hold", "charge", "in_doubt", "settle"] == [e.kind for e in ledger.entries]
    await assert_invariants(priced.dsn)
