"""An agent framework on the metered client: the OpenAI Agents SDK runs an agent, with a
function tool, on metered(AsyncOpenAI()) against the fake's Responses API; every model
call the agent makes is held before it is sent and settled at what the fake billed."""

from __future__ import annotations

import agents
import openai

from earmark.client import AsyncClient
from earmark.client.llm import metered
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import budget, cost, holds
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants


async def test_an_agent_on_the_metered_client_holds_every_model_call(
    priced: Running, provider: FakeOpenAI
) -> None:
    """The agent calls the model, runs the tool the model asked for, and calls the model
    again: two model calls, two holds, each settled at its bill, nothing left held."""
    await budget(priced, "agent", 50_000_000)
    looked_up: list[str] = []

    @agents.function_tool
    def look(query: str) -> str:
        """Looks a thing up."""
        looked_up.append(query)
        return "found it"

    agents.set_tracing_disabled(True)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "agent")
        model = agents.OpenAIResponsesModel(model="gpt-4o", openai_client=llm)
        agent = agents.Agent(name="helper", instructions="Help.", model=model, tools=[look])
        result = await agents.Runner.run(agent, "tool")
    held = await holds(priced, "agent")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="agent"))
    bills = sorted(cost(b) for b in provider.state.billed)
    assert (2, ["fake"]) == (len(provider.state.billed), looked_up)
    assert isinstance(result.final_output, str)
    assert bills == sorted(h.settled_used for h in held)
    assert {pb.RESERVATION_STATE_SETTLED} == {h.state for h in held}
    assert (sum(bills), 0) == (state.used, state.held)
    await assert_invariants(priced.dsn)
