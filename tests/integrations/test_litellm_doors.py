"""No way around the LiteLLM gate: the real `litellm[proxy]` from docs/litellm.md's config in
front of a fake OpenAI, tried as an attacker would. A caller's call id never steers another
request's hold, a pass-through route is held or refused, a key names only the budgets it
was given, and a spent budget is final to the caller's SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import openai
import pytest

from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import budget, cost, holds
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants, eventually, scrape
from tests.integrations.conftest import SHARED_PROXY
from tests.integrations.litellm_proxy import MASTER, MODEL
from tests.integrations.test_litellm import ASKED, hold_for, message, settled, state_of

# Every test here takes the proxy started once (tests/integrations/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(SHARED_PROXY)]

SHARED_ID = "call-everyone-knows"


def caller(url: str, key: str, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url, api_key=key, max_retries=0, **options)


async def test_a_call_id_steers_no_other_request(
    priced: Running, provider: FakeOpenAI, proxy: str
) -> None:
    """6 concurrent requests with one x-litellm-call-id on room for 2, for 3 rounds: 2 reach
    the provider each round, the rest are refused, and the budget has used what the
    provider billed; then, while team A's call is in flight, team B sends its call id: each
    team's budget has used exactly what its own calls were billed. No hold is left held or
    in doubt."""
    await shared_id_rounds(priced, provider, proxy)
    await reused_by_another_key(priced, provider, proxy)
    await assert_invariants(priced.dsn)


async def shared_id_rounds(priced: Running, provider: FakeOpenAI, url: str) -> None:
    room = 2 * hold_for("go", ASKED) + 100
    async with caller(f"{url}/v1", MASTER) as client:
        for round_ in range(3):
            budget_id = f"shared-id-{round_}"
            await budget(priced, budget_id, room)
            before = len(provider.state.billed)
            answers = await asyncio.gather(
                *(
                    client.chat.completions.create(
                        model=MODEL,
                        messages=message("go"),
                        max_tokens=ASKED,
                        extra_headers={
                            "x-litellm-call-id": SHARED_ID,
                            "x-earmark-budget": budget_id,
                        },
                    )
                    for _ in range(6)
                ),
                return_exceptions=True,
            )
            billed = provider.state.billed[before:]
            kept = await settled(priced, budget_id)
            state = await state_of(priced, budget_id)
            refused = [a for a in answers if isinstance(a, openai.UnprocessableEntityError)]
            assert (2, 4) == (len(billed), len(refused))
            assert (sum(cost(b) for b in billed), 0) == (state.used, state.held)
            assert [pb.RESERVATION_STATE_SETTLED] * 2 == [h.state for h in kept]


async def reused_by_another_key(priced: Running, provider: FakeOpenAI, url: str) -> None:
    for team in ("team-a", "team-b"):
        await budget(priced, team, 50_000_000)
    same = {"x-litellm-call-id": SHARED_ID}
    requests, bills = len(provider.state.requests), len(provider.state.billed)
    async with (
        caller(f"{url}/v1", "sk-team-a") as victim,
        caller(f"{url}/v1", "sk-team-b") as reuser,
    ):
        slow = asyncio.ensure_future(
            victim.chat.completions.create(
                model=MODEL, messages=message("slow"), max_tokens=20, extra_headers=same
            )
        )

        async def victim_sent() -> bool:
            return len(provider.state.requests) == requests + 1

        await eventually(victim_sent, within_seconds=20.0, what="team A's call reached the fake")
        for _ in range(2):
            await reuser.chat.completions.create(
                model=MODEL, messages=message("more words"), max_tokens=7, extra_headers=same
            )
        provider.state.slow.set()
        await slow
    a_holds, b_holds = await settled(priced, "team-a"), await settled(priced, "team-b")
    billed = {b.completion_tokens: cost(b) for b in provider.state.billed[bills:]}
    a, b = await state_of(priced, "team-a"), await state_of(priced, "team-b")
    assert (billed[20], 2 * billed[7]) == (a.used, b.used)
    assert [pb.RESERVATION_STATE_SETTLED] * 3 == [h.state for h in (*a_holds, *b_holds)]


async def test_openai_pass_through_routes_are_held_and_settled_at_the_bill(
    priced: Running, provider: FakeOpenAI, proxy: str
) -> None:
    """/openai/v1/chat/completions and /openai_passthrough/v1/chat/completions are held on
    the key's budget and settled at what the fake billed; a streamed pass-through, a
    pass-through to a route Earmark cannot price, and a background response (through the
    pass-through and the proxy's own route) are refused, and reach nothing."""
    await budget(priced, "team-a", 50_000_000)
    url = proxy
    for prefix in ("openai", "openai_passthrough"):
        async with caller(f"{url}/{prefix}/v1", "sk-team-a") as client:
            await client.chat.completions.create(
                model=MODEL, messages=message(f"through {prefix}"), max_tokens=9
            )
    async with caller(f"{url}/openai/v1", "sk-team-a") as client:
        with pytest.raises(openai.BadRequestError) as streamed:
            await client.chat.completions.create(
                model=MODEL, messages=message("s"), max_tokens=9, stream=True
            )
        with pytest.raises(openai.PermissionDeniedError) as unpriced:
            await client.images.generate(model="dall-e-3", prompt="a cat")
        with pytest.raises(openai.BadRequestError) as background:
            await client.responses.create(model=MODEL, input="later", background=True)
    async with caller(f"{url}/v1", "sk-team-a") as client:
        with pytest.raises(openai.BadRequestError) as background_proxied:
            await client.responses.create(model=MODEL, input="later", background=True)
    held = await settled(priced, "team-a")
    state = await state_of(priced, "team-a")
    assert 2 == len(provider.state.billed)
    assert (sum(cost(b) for b in provider.state.billed), 0) == (state.used, state.held)
    assert [pb.RESERVATION_STATE_SETTLED] * 2 == [h.state for h in held]
    assert "streamed pass-through" in str(streamed.value)
    assert "/openai/v1/images/generations" in str(unpriced.value)
    assert all("background" in str(e.value) for e in (background, background_proxied))
    await assert_invariants(priced.dsn)


async def test_a_key_spends_only_its_own_budgets_and_a_spent_one_is_final(
    priced: Running, provider: FakeOpenAI, proxy: str
) -> None:
    """A key without budget metadata, and another team's key, naming team B's budget by
    header, and a key whose own metadata (which its owner may write) names team B's budget
    outside what its team allows, are refused 403: team B's budget is untouched and nothing
    is sent. Then team A's spent budget is LiteLLM's own budget error (422,
    budget_exceeded) naming the budget and what is left: the OpenAI SDK, with its default
    retries, sends it once, and the sidecar refuses once."""
    await budget(priced, "team-a", 10)
    await budget(priced, "team-b", 50_000_000)
    await named_by_others(priced, proxy)
    await spent_once(priced, proxy)
    posted = [r for r in provider.state.requests if r]
    assert [] == posted
    await assert_invariants(priced.dsn)


async def named_by_others(priced: Running, url: str) -> None:
    header = {"x-earmark-budget": "team-b"}
    refused = []
    for key, headers in (
        ("sk-plain", header), ("sk-team-a", header), ("sk-self-named", {}),
    ):  # fmt: skip
        async with caller(f"{url}/v1", key, default_headers=headers) as client:
            with pytest.raises(openai.PermissionDeniedError) as caught:
                await client.chat.completions.create(
                    model=MODEL, messages=message("hi"), max_tokens=5
                )
            refused.append(caught.value)
    state = await state_of(priced, "team-b")
    assert ([], (0, 0)) == (await holds(priced, "team-b"), (state.used, state.held))
    assert all("earmark_allowed_budget_ids" in str(r) for r in refused)


async def spent_once(priced: Running, url: str) -> None:
    sent: list[httpx2.Request] = []

    async def count(request: httpx2.Request) -> None:
        sent.append(request)

    refusals = (
        "earmark_reservations_total",
        (("outcome", "refused"), ("reason", "insufficient_budget")),
    )
    refused_before = scrape(priced.sidecar.metrics_port).get(refusals, 0.0)
    async with (
        httpx2.AsyncClient(event_hooks={"request": [count]}) as http,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-team-a", http_client=http) as client,
    ):
        with pytest.raises(openai.UnprocessableEntityError) as refused:
            await client.chat.completions.create(model=MODEL, messages=message("hi"), max_tokens=5)
    refused_after = scrape(priced.sidecar.metrics_port)[refusals]
    body = refused.value.body
    assert (1, 1.0) == (len(sent), refused_after - refused_before)
    assert isinstance(body, dict)
    assert ("budget_exceeded", "INSUFFICIENT_BUDGET") == (
        body.get("type"), refused.value.response.headers["x-earmark-refusal"],
    )  # fmt: skip
    assert "on budget 'team-a' (asked" in body["message"]
    assert "remaining 10" in body["message"]
