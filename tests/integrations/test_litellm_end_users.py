"""A budget per end user through the LiteLLM gate (issue 47): a team's
earmark_end_user_budget ("acme/end-user/{end_user}") holds each request with an end user
(the OpenAI `user` field, as LiteLLM resolves it) on that end user's budget, which a budget
template makes on the end user's first request. The real `litellm[proxy]` the package's
gate tests share (tests/integrations/conftest.py, `proxy`), whose custom auth resolves the
end user as LiteLLM's own auth does (tests/integrations/litellm_auth.py), in front of the
fake OpenAI and each test's sidecar: each test has its own sidecar over its own emptied
database (its template, prices and budgets its own) and its own fake's state."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import asyncpg
import openai
import pytest

from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import CEILING, budget, holds, put_price
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants, eventually
from tests.integrations.conftest import SHARED_PROXY
from tests.integrations.litellm_proxy import MODEL

# Every test here takes the proxy started once (tests/integrations/conftest.py).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(SHARED_PROXY)]

DOLLAR = 1_000_000
DIME = DOLLAR // 10
# Every call asks ASKED output tokens and the fake answers that many (it answers 300 unless
# capped); at RATE micro-dollars per million output tokens and nothing for the prompt, each
# call holds exactly a dime and is billed exactly a dime, so the $1.00 template admits
# exactly FIT calls per end user however the holds and settles interleave.
ASKED = 100
RATE = DIME * 1_000_000 // ASKED
FIT = DOLLAR // DIME
USERS = 20
# The 200 Reserves (ten per end user, all of which fit) and one more per end user,
# all at once, so that the last of each races the others for the last dime. 220 calls take
# about 4 s through the proxy on 2 cores.
PER_USER = FIT + 1


@pytest.fixture
async def dimes(sidecar: Running) -> Running:
    """The sidecar with gpt-4o priced so that each call of ASKED tokens costs a dime."""
    await put_price(
        sidecar, "openai", "gpt-4o", input_usd_micros_per_mtok=0,
        output_usd_micros_per_mtok=RATE, max_output_tokens=CEILING,
    )  # fmt: skip
    return sidecar


def llm(url: str, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


async def call(client: openai.AsyncOpenAI, user: str) -> Any:
    return await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "go"}], max_tokens=ASKED, user=user
    )


async def users_template(s: Running) -> None:
    budget = pb.PutBudgetRequest(limit=DOLLAR, unit="usd_micros", period=pb.PERIOD_MONTH)
    await s.admin.PutBudgetTemplate(
        pb.PutBudgetTemplateRequest(template_id="users", pattern="acme/end-user/*", budget=budget)
    )


async def closed(s: Running, budget_ids: list[str]) -> None:
    """Waits until none of the budgets' holds is open (the gate settles off the caller's
    path)."""

    async def none_open() -> bool:
        for budget_id in budget_ids:
            if any(h.state == pb.RESERVATION_STATE_HELD for h in await holds(s, budget_id)):
                return False
        return True

    await eventually(none_open, within_seconds=30.0, what="every hold is closed")


async def test_concurrent_first_calls_of_20_end_users_make_each_budget_once(
    dimes: Running, provider: FakeOpenAI, proxy: str
) -> None:
    """220 concurrent chat completions, 11 for each of 20 end users that have no budget yet,
    each holding and billed a dime, with a $1.00 template on acme/end-user/*: each end
    user's budget made once (from the template, its admissions 10), exactly 10 calls of
    each sent and billed, the eleventh refused 422 (LiteLLM's budget error) naming that end
    user's budget; the organization's budget nesting them all has what they used; the
    invariants hold."""
    await users_template(dimes)
    await budget(dimes, "org-acme", 100 * DOLLAR)
    users = [f"u{n}" for n in range(USERS)]
    async with llm(proxy, "sk-end-users") as client:
        answers = await asyncio.gather(
            *(call(client, users[n % USERS]) for n in range(USERS * PER_USER)),
            return_exceptions=True,
        )
    sent: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    for n, answer in enumerate(answers):
        user = users[n % USERS]
        if isinstance(answer, openai.UnprocessableEntityError):
            headers = answer.response.headers
            assert ("INSUFFICIENT_BUDGET", f"acme/end-user/{user}") == (
                headers["x-earmark-refusal"],
                headers["x-earmark-budget"],
            )
            refused[user] += 1
        else:
            assert not isinstance(answer, BaseException), answer
            sent[user] += 1
    assert ({u: FIT for u in users}, {u: 1 for u in users}) == (dict(sent), dict(refused))
    assert [DIME] * USERS * FIT == [
        b.completion_tokens * RATE // 1_000_000 for b in provider.state.billed
    ]
    budget_ids = [f"acme/end-user/{u}" for u in users]
    await closed(dimes, [*budget_ids, "org-acme"])
    conn = await asyncpg.connect(dimes.dsn)
    try:
        rows = await conn.fetch(
            "SELECT budget_id, template_id, used, held, admissions FROM budgets "
            "WHERE budget_id LIKE 'acme/end-user/%' ORDER BY budget_id"
        )
        org = await conn.fetchrow(
            "SELECT used, held, admissions FROM budgets WHERE budget_id = 'org-acme'"
        )
    finally:
        await conn.close()
    assert [(b, "users", DOLLAR, 0, FIT) for b in sorted(budget_ids)] == [tuple(r) for r in rows]
    assert org is not None
    assert (USERS * DOLLAR, 0, USERS * FIT) == tuple(org)
    await assert_invariants(dimes.dsn)


async def test_end_users_the_gate_does_not_hold(
    dimes: Running, provider: FakeOpenAI, proxy: str
) -> None:
    """Without a template, an end user's first call finds no budget: 404, not sent. An end
    user id that is not one budget id segment is 400 and a key whose own metadata sets the
    field 403, neither held nor sent; a call without an end user holds as the team's and
    organization's other fields say (here: the organization's budget alone)."""
    await budget(dimes, "org-acme", 100 * DOLLAR)
    async with llm(proxy, "sk-end-users") as client:
        with pytest.raises(openai.NotFoundError) as missing:
            await call(client, "u1")
        for bad in ("a/b", "{end_user}", "x" * 65):
            with pytest.raises(openai.BadRequestError) as malformed:
                await call(client, bad)
            assert "end user id" in str(malformed.value)
        answer = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "go"}], max_tokens=ASKED
        )
    async with llm(proxy, "sk-self-set") as self_set:
        with pytest.raises(openai.PermissionDeniedError) as denied:
            await call(self_set, "u1")
    assert "acme/end-user/u1" in str(missing.value)
    assert "earmark_end_user_budget" in str(denied.value)
    assert 1 == len(provider.state.billed)
    assert answer.usage is not None
    assert ASKED == answer.usage.completion_tokens
    await closed(dimes, ["org-acme"])
    state = await dimes.admin.GetBudget(pb.GetBudgetRequest(budget_id="org-acme"))
    assert (DIME, 0) == (state.used, state.held)
    await assert_invariants(dimes.dsn)
