"""The agent example (examples/agents/agent.py), run as a user runs it: a process with
OPENAI_BASE_URL at the fake OpenAI and EARMARK_TARGET at a live sidecar."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from earmark.v1 import budget_pb2 as pb
from tests.client.conftest import priced, provider
from tests.client.llm_helpers import budget, cost, holds
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants, child

__all__ = ["priced", "provider"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "agents" / "agent.py"

pytestmark = pytest.mark.slow


async def run(sidecar: Running, fake: FakeOpenAI, *argv: str) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "EARMARK_TARGET": sidecar.target,
        "OPENAI_BASE_URL": fake.url,
        "OPENAI_API_KEY": "sk-example",
    }
    async with child(
        sys.executable, str(EXAMPLE), *argv, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 60.0)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_agent_example_holds_every_model_call(
    priced: Running, provider: FakeOpenAI
) -> None:
    """The agent asks for its tool, reads the answer and replies: two model calls, each
    held and settled at the fake's bill, nothing left held, and the answer printed."""
    await budget(priced, "agents", 50_000_000)
    code, out, err = await run(priced, provider, "agents", "tool")
    held = await holds(priced, "agents")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="agents"))
    bills = sorted(cost(b) for b in provider.state.billed)
    assert (0, "") == (code, err)
    assert out.strip()
    assert (2, bills) == (len(held), sorted(h.settled_used for h in held))
    assert (sum(bills), 0) == (state.used, state.held)
    await assert_invariants(priced.dsn)


async def test_the_agent_example_says_when_the_budget_refuses(
    priced: Running, provider: FakeOpenAI
) -> None:
    """On a budget too small for one call, nothing is sent and the example exits 2 with
    Earmark's refusal."""
    await budget(priced, "agents", 10)
    code, out, err = await run(priced, provider, "agents", "tool")
    assert (2, "", []) == (code, out, provider.state.billed)
    assert "refused before sending" in err
    await assert_invariants(priced.dsn)
