"""An agent on the metered client: the OpenAI Agents SDK runs an agent with a function
tool on metered(AsyncOpenAI()), so every model call the agent makes is held on an Earmark
budget before it is sent, sent with the cap the budget can pay, and settled at what OpenAI
billed; a call the budget cannot cover is refused before it is sent.

    pip install 'earmark[openai]' openai-agents
    export EARMARK_TARGET=127.0.0.1:50051 OPENAI_API_KEY=sk-...
    python examples/agents/agent.py BUDGET_ID "What do our notes say about pricing?"

AsyncOpenAI() reads OPENAI_API_KEY and OPENAI_BASE_URL as it always does; AsyncClient()
reads EARMARK_TARGET. The budget must exist and the model must be in the sidecar's price
book (`earmark prices import`, or PutPrice).
"""

from __future__ import annotations

import asyncio
import os
import sys

import agents
from openai import AsyncOpenAI

from earmark.client import AsyncClient
from earmark.client.errors import RefusedError
from earmark.client.llm import metered


@agents.function_tool
def look_up(query: str) -> str:
    """Looks a topic up in the team's notes."""
    return f"The notes on {query!r} say: ask the finance channel."


async def main(budget_id: str, question: str) -> int:
    # The Agents SDK uploads traces to OpenAI unless told not to; this example keeps its
    # calls to the model alone.
    agents.set_tracing_disabled(True)
    async with AsyncClient() as earmark, AsyncOpenAI() as openai_client:
        # The SDK's own client type, metered at its HTTP transport: the Agents SDK calls
        # the Responses API through it as through any AsyncOpenAI.
        llm = metered(openai_client, earmark, budget_id, job="agent")
        model = agents.OpenAIResponsesModel(
            model=os.environ.get("EARMARK_EXAMPLE_MODEL", "gpt-4o"), openai_client=llm
        )
        agent = agents.Agent(
            name="helper",
            instructions="Answer from the team's notes; look them up first.",
            model=model,
            tools=[look_up],
        )
        try:
            result = await agents.Runner.run(agent, question)
        except RefusedError as refused:
            print(f"refused before sending: {refused}", file=sys.stderr)
            return 2
    print(result.final_output)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(f"usage: {sys.argv[0]} BUDGET_ID QUESTION")
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
