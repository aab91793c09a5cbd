"""RegionAgent.demand's batches (issue 48): Reserves that need the home for one budget at
once wait for one call together, which asks for all their needs; one cancelled does not
cancel the others; closing the agent answers every one waiting. The home here is a stub
whose calls land when the test says."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from earmark import limits
from earmark.core import regions
from earmark.metrics import Metrics
from earmark.regions.agent import Asked, HomeLink, RegionAgent
from earmark.store.regions import RegionShare, ShareOutcome
from earmark.v1 import budget_pb2 as pb
from tests.helpers import FakeClock, eventually

T0 = datetime(2026, 12, 1, 12, tzinfo=UTC)


class Store:
    """A region with no share of any budget yet, that takes every answer."""

    def __init__(self) -> None:
        self.applied: list[ShareOutcome] = []

    async def region_shares(self, after: str = "", count: int = 0) -> list[RegionShare]:
        return []

    async def region_share(self, budget_id: str) -> RegionShare | None:
        return None

    async def apply_share_answer(self, name: str, outcome: ShareOutcome) -> regions.Region | None:
        self.applied.append(outcome)
        return None

    async def give_back_share(self, name: str, budget_id: str, keep: int, short: bool) -> int:
        return 0


class Home:
    """A Regions stub: records each Share call and answers it, granting each ask its need,
    once the test lets it land."""

    def __init__(self) -> None:
        self.calls: list[pb.ShareRequest] = []
        self.land = asyncio.Event()

    async def Share(self, request: pb.ShareRequest, **_: Any) -> pb.ShareResponse:
        self.calls.append(request)
        await self.land.wait()
        return pb.ShareResponse(
            answers=[
                pb.ShareAnswer(
                    budget_id=ask.budget_id,
                    found=True,
                    asked_at=ask.sent_at,
                    granted=ask.need,
                    granted_now=ask.need,
                )
                for ask in request.asks
            ]
        )


def agent_with(home: Home, store: Store) -> RegionAgent:
    agent = RegionAgent(store, Metrics(), name="eu", home=HomeLink("unused"), clock=FakeClock(T0))
    agent._stub = home  # the test's stub, not a channel
    return agent


async def calls_made(home: Home, count: int) -> None:
    async def made() -> bool:
        return len(home.calls) >= count

    await eventually(made, within_seconds=5, what=f"{count} calls")


async def test_reserves_that_wait_at_once_make_one_call_for_all_their_needs() -> None:
    """Three Reserves at once make one call, whose need is their sum and smallest_need the
    least; two that come while it is under way make the next one together."""
    home, store = Home(), Store()
    agent = agent_with(home, store)
    first = [asyncio.create_task(agent.demand("b", n)) for n in (300, 100, 200)]
    await calls_made(home, 1)
    later = [asyncio.create_task(agent.demand("b", n)) for n in (50, 70)]
    await asyncio.sleep(0)
    assert 1 == len(home.calls)
    home.land.set()
    answered = await asyncio.gather(*first, *later)
    asks = [(c.asks[0].need, c.asks[0].smallest_need) for c in home.calls]
    assert ([Asked.ANSWERED] * 5, [(600, 100), (120, 50)]) == (answered, asks)
    assert {} == agent._asking


async def test_one_reserve_alone_asks_as_before() -> None:
    """A Reserve alone asks for its need, with no smallest_need."""
    home, store = Home(), Store()
    home.land.set()
    agent = agent_with(home, store)
    assert Asked.ANSWERED == await agent.demand("b", 40)
    assert [(40, 0)] == [(c.asks[0].need, c.asks[0].smallest_need) for c in home.calls]


async def test_a_reserve_cancelled_does_not_cancel_the_others() -> None:
    """A waiting Reserve whose caller is gone is cancelled alone: the call goes on and the
    other is answered."""
    home, store = Home(), Store()
    agent = agent_with(home, store)
    gone = asyncio.create_task(agent.demand("b", 10))
    kept = asyncio.create_task(agent.demand("b", 20))
    await calls_made(home, 1)
    gone.cancel()
    home.land.set()
    assert Asked.ANSWERED == await kept
    assert gone.cancelled()
    assert [30] == [c.asks[0].need for c in home.calls]


async def test_closing_answers_every_reserve_waiting_and_keeps_nothing() -> None:
    """close() while Reserves wait (one batch under way, one behind it, and one whose task
    has not started) answers each UNREACHABLE, and a demand after it is answered so at
    once."""
    home, store = Home(), Store()
    agent = agent_with(home, store)
    under_way = asyncio.create_task(agent.demand("b", 10))
    await calls_made(home, 1)
    behind = asyncio.create_task(agent.demand("b", 20))
    not_started = asyncio.create_task(agent.demand("c", 30))
    await asyncio.sleep(0)
    await agent.close()
    answers = await asyncio.gather(under_way, behind, not_started)
    assert [Asked.UNREACHABLE] * 3 == list(answers)
    assert {} == agent._asking
    assert Asked.UNREACHABLE == await agent.demand("b", 1)


async def test_needs_past_the_largest_count_are_asked_within_it() -> None:
    """Two Reserves each lacking more than the largest amount (a share's remaining below 0)
    ask for at most the largest count the home reads, the smallest within it."""
    home, store = Home(), Store()
    agent = agent_with(home, store)
    waiting = [asyncio.create_task(agent.demand("b", n)) for n in (2 * 10**18, 3 * 10**18)]
    await calls_made(home, 1)
    home.land.set()
    assert [Asked.ANSWERED] * 2 == list(await asyncio.gather(*waiting))
    top = limits.limit_units_max
    assert [(top, top)] == [(c.asks[0].need, c.asks[0].smallest_need) for c in home.calls]
