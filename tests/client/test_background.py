"""Background responses through the metered OpenAI client: the hold stays open while the
response runs at the provider, renewing, its id recorded on it, and settles once at the
response's bill when a retrieve, a resumed stream or a cancel through the same client
says it ended; a closed client leaves it in doubt with its id."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import pytest

from earmark import limits
from earmark.client import AsyncClient, Client
from earmark.client.llm import metered
from earmark.client.openai_background import RESPONSE_ID_LABEL
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import budget, cost, holds
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants, eventually

# Long enough that a stalled test machine does not lose a hold between renewals (3 s was
# not: a loaded CI machine let the hold's lease end before the client's first Renew), short
# enough that a renewal (every third of it) comes within the test's wait for one.
LEASE_SECONDS = 10.0


def request(text: str = "hello", **fields: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "input": text, "max_output_tokens": 500, **fields}


async def read_into(stream: Any, seen: list[Any]) -> None:
    """Reads stream's events into seen, until it ends or fails."""
    async for event in stream:
        seen.append(event)


async def one_hold(s: Running, budget_id: str) -> pb.Hold:
    (hold,) = await holds(s, budget_id)
    return hold


async def test_a_background_response_settles_at_its_bill_once_retrieved(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A background create answers queued and its hold stays open, labelled with the
    response's id and renewed past its lease, while retrieves answer in progress; the
    retrieve that answers completed settles it at the fake's bill, and a second changes
    nothing: used is the bill, nothing held or in doubt."""
    await budget(priced, "bg", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "bg", lease_seconds=LEASE_SECONDS)
        created = await llm.responses.create(**request(background=True))

        async def labelled() -> bool:
            hold = await one_hold(priced, "bg")
            return created.id == hold.labels.get(RESPONSE_ID_LABEL)

        await eventually(labelled, within_seconds=15, what="the response id on the hold")
        first = (await one_hold(priced, "bg")).expires_at.ToDatetime()

        async def renewed() -> bool:
            return (await one_hold(priced, "bg")).expires_at.ToDatetime() > first

        await eventually(renewed, within_seconds=15, what="a renewal of the open hold")
        running = await llm.responses.retrieve(created.id)
        held = await one_hold(priced, "bg")
        (billed,) = provider.state.finish()
        done = await llm.responses.retrieve(created.id)
        again = await llm.responses.retrieve(created.id)
        await earmark.flush()
    hold = await one_hold(priced, "bg")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="bg"))
    statuses = (created.status, running.status, done.status, again.status)
    assert ("queued", "in_progress", "completed", "completed") == statuses
    assert pb.RESERVATION_STATE_HELD == held.state
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (hold.state, hold.settled_used)
    assert (cost(billed), 0, 0) == (state.used, state.held, state.open_reservations)
    await assert_invariants(priced.dsn)


async def test_a_retrieve_of_another_response_settles_nothing(
    priced: Running, provider: FakeOpenAI
) -> None:
    """Retrieving, through the metered client, a finished response it did not create (one
    made with the unmetered client) settles nothing: its own background response's hold
    stays open until the client closes, then in doubt with its prompt charged."""
    await budget(priced, "other", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "other")
        ours = await llm.responses.create(**request(background=True))
        theirs = await client.responses.create(**request("theirs", background=True))
        provider.state.finish(theirs.id)
        retrieved = await llm.responses.retrieve(theirs.id)
        await earmark.flush()
        open_hold = await one_hold(priced, "other")
    hold = await one_hold(priced, "other")
    assert ("completed", pb.RESERVATION_STATE_HELD) == (retrieved.status, open_hold.state)
    assert (pb.RESERVATION_STATE_IN_DOUBT, ours.id) == (
        hold.state,
        hold.labels[RESPONSE_ID_LABEL],
    )
    assert 0 < hold.charged < hold.amount
    await assert_invariants(priced.dsn)


async def test_a_cancelled_background_response_settles_at_nothing(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A cancel through the metered client answers the response cancelled with no usage:
    the hold settles at nothing, the prompt charged before sending returned."""
    await budget(priced, "cancel", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "cancel")
        created = await llm.responses.create(**request(background=True))
        cancelled = await llm.responses.cancel(created.id)
        await earmark.flush()
    hold = await one_hold(priced, "cancel")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="cancel"))
    assert ("cancelled", []) == (cancelled.status, provider.state.billed)
    assert (pb.RESERVATION_STATE_SETTLED, 0) == (hold.state, hold.settled_used)
    assert (0, 0) == (state.used, state.held)
    await assert_invariants(priced.dsn)


async def test_a_background_stream_cut_short_settles_when_resumed(
    priced: Running, provider: FakeOpenAI
) -> None:
    """A streamed background create whose stream is cut before its final event leaves the
    response running and its hold open; the stream resumed after the last event read
    carries the final event, and the hold settles at the fake's bill."""
    await budget(priced, "resume", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url, max_retries=0) as client,
    ):
        llm = metered(client, earmark, "resume")
        stream = await llm.responses.create(**request("cut", background=True, stream=True))
        seen: list[Any] = []
        with pytest.raises(openai.APIConnectionError):
            await read_into(stream, seen)
        await earmark.flush()
        open_hold = await one_hold(priced, "resume")
        response_id = seen[0].response.id
        resumed = await llm.responses.retrieve(
            response_id, stream=True, starting_after=seen[-1].sequence_number
        )
        rest = [event.type async for event in resumed]
        await earmark.flush()
    (billed,) = provider.state.billed
    hold = await one_hold(priced, "resume")
    assert (pb.RESERVATION_STATE_HELD, response_id) == (
        open_hold.state,
        open_hold.labels[RESPONSE_ID_LABEL],
    )
    assert "response.completed" == rest[-1]
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (hold.state, hold.settled_used)
    await assert_invariants(priced.dsn)


async def test_the_sync_client_settles_a_finished_one_and_leaves_a_running_one_in_doubt(
    priced: Running, provider: FakeOpenAI
) -> None:
    """Through the synchronous clients: a background response retrieved finished settles
    at its bill; one still running when the client closes is in doubt with its id."""
    await budget(priced, "sync-bg", 5_000_000)

    def work() -> tuple[str, str]:
        with (
            Client(priced.target) as earmark,
            openai.OpenAI(api_key="k", base_url=provider.url) as client,
        ):
            llm = metered(client, earmark, "sync-bg")
            finished = llm.responses.create(**request("first", background=True))
            provider.state.finish(finished.id)
            done = llm.responses.retrieve(finished.id)
            running = llm.responses.create(**request("second", background=True))
            return str(done.status), running.id

    status, running_id = await asyncio.to_thread(work)
    (billed,) = provider.state.billed
    by_state = {h.state: h for h in await holds(priced, "sync-bg")}
    settled = by_state[pb.RESERVATION_STATE_SETTLED]
    doubted = by_state[pb.RESERVATION_STATE_IN_DOUBT]
    assert ("completed", cost(billed)) == (status, settled.settled_used)
    assert running_id == doubted.labels[RESPONSE_ID_LABEL]
    await assert_invariants(priced.dsn)


async def test_past_the_most_kept_open_the_oldest_goes_in_doubt_with_its_id(
    priced: Running, provider: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for one running background response, a second one's hold stays open and
    the first's goes in doubt at once, its id recorded, and is not settled by its retrieve
    after; the second settles at its bill."""
    monkeypatch.setattr(limits, "llm_background_holds_max", 1)
    await budget(priced, "most", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "most")
        first = await llm.responses.create(**request("first", background=True))
        second = await llm.responses.create(**request("the second one", background=True))
        provider.state.finish()
        await llm.responses.retrieve(first.id)
        await llm.responses.retrieve(second.id)
        await earmark.flush()
    by_id = {h.labels[RESPONSE_ID_LABEL]: h for h in await holds(priced, "most")}
    second_bill = provider.state.background[second.id].billed
    assert pb.RESERVATION_STATE_IN_DOUBT == by_id[first.id].state
    assert (pb.RESERVATION_STATE_SETTLED, cost(second_bill)) == (
        by_id[second.id].state,
        by_id[second.id].settled_used,
    )
    await assert_invariants(priced.dsn)
