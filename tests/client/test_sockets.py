"""A metered client opens nothing Earmark cannot meter: the openai package's websocket
surfaces raise SocketNotMeteredError before connecting, on the metered client and on its
copies, and a connection made past them goes nowhere; the POSTs that start work billed
out of the call (resuming fine-tuning, a container's session) are refused unsent. Each
websocket test points the client at a socket listening on 127.0.0.1, which must have
accepted no connection."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx2
import openai
import pytest
import websockets.exceptions

from earmark.client import AsyncClient, Client
from earmark.client.llm import NOWHERE, metered
from earmark.client.wire import EndpointNotMeteredError, SocketNotMeteredError
from earmark.client.wire_openai import SOCKETS
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import ask, budget, holds
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants

# The arguments each websocket surface requires, as a caller would give them.
ARGUMENTS: dict[str, dict[str, Any]] = {
    "realtime.translations.connect": {"model": "gpt-realtime-translate"},
    "beta.realtime.connect": {"model": "gpt-realtime"},
    "live.sideband.connect": {"session_id": "sess_1"},
    "live.forks.connect": {"session_id": "sess_1"},
}


@contextlib.contextmanager
def listening() -> Iterator[socket.socket]:
    """A socket listening on 127.0.0.1 port 0, asked afterwards what connected to it."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def accepted(server: socket.socket) -> int:
    """How many connections server has had: each made one before it is accepted here."""
    count = 0
    while True:
        try:
            connection, _ = server.accept()
        except BlockingIOError:
            return count
        connection.close()
        count += 1


def addresses(server: socket.socket) -> dict[str, Any]:
    """A client's base URL and websocket base URL, both at server."""
    host = f"127.0.0.1:{server.getsockname()[1]}"
    return {"base_url": f"http://{host}/v1", "websocket_base_url": f"ws://{host}/v1"}


def reached(client: object, surface: str) -> Callable[..., Any]:
    """client's method named by surface ("beta.realtime.connect")."""
    found: Any = client
    for name in surface.split("."):
        found = getattr(found, name)
    return found


def refusal(surface: str) -> str:
    return f"openai {surface}() opens a websocket Earmark cannot meter; not connected"


def raised(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"


async def opened(client: object, surface: str) -> str:
    """What opening surface's websocket on client raised, entered as a caller enters it."""
    try:
        async with reached(client, surface)(**ARGUMENTS.get(surface, {})):
            return "connected"
    except Exception as error:
        return raised(error)


def opened_sync(client: object, surface: str) -> str:
    """opened, on a sync client."""
    try:
        with reached(client, surface)(**ARGUMENTS.get(surface, {})):
            return "connected"
    except Exception as error:
        return raised(error)


@pytest.mark.parametrize("surface", SOCKETS)
async def test_a_websocket_surface_is_refused_before_connecting(
    priced: Running, surface: str
) -> None:
    """A metered AsyncOpenAI, still an AsyncOpenAI, refuses the websocket surface with an
    error naming it, before any connection: the socket its URLs point at saw none."""
    await budget(priced, "sockets", 5_000_000)
    with listening() as server:
        async with (
            AsyncClient(priced.target) as earmark,
            openai.AsyncOpenAI(api_key="k", **addresses(server)) as client,
        ):
            llm = metered(client, earmark, "sockets")
            with pytest.raises(SocketNotMeteredError) as refused:
                async with reached(llm, surface)(**ARGUMENTS.get(surface, {})):
                    pass
        assert 0 == accepted(server)
    assert refusal(surface) == str(refused.value)
    assert {"surface": f"openai {surface}()"} == refused.value.about
    assert isinstance(llm, openai.AsyncOpenAI)
    assert [] == await holds(priced, "sockets")
    await assert_invariants(priced.dsn)


async def test_the_sync_client_refuses_every_websocket_surface(priced: Running) -> None:
    """A metered sync OpenAI refuses each websocket surface before connecting."""
    await budget(priced, "sockets", 5_000_000)

    def refusals(server: socket.socket) -> list[str]:
        with (
            Client(priced.target) as earmark,
            openai.OpenAI(api_key="k", **addresses(server)) as client,
        ):
            llm = metered(client, earmark, "sockets")
            return [opened_sync(llm, surface) for surface in SOCKETS]

    with listening() as server:
        found = await asyncio.to_thread(refusals, server)
        assert 0 == accepted(server)
    assert [f"SocketNotMeteredError: {refusal(surface)}" for surface in SOCKETS] == found
    assert [] == await holds(priced, "sockets")
    await assert_invariants(priced.dsn)


async def test_a_connection_made_past_the_refusals_goes_nowhere(priced: Running) -> None:
    """A connection manager built by hand from the resource's class, as a surface an SDK
    upgrade adds would be, connects to the metered client's websocket_base_url, which no
    websocket library opens: it fails before any connection."""
    with listening() as server:
        async with (
            AsyncClient(priced.target) as earmark,
            openai.AsyncOpenAI(api_key="k", **addresses(server)) as client,
        ):
            llm = metered(client, earmark, "sockets")
            found = []
            for surface in SOCKETS:
                owner, _, name = surface.rpartition(".")
                resource = reached(llm, owner)
                manager = getattr(type(resource), name)(resource, **ARGUMENTS.get(surface, {}))
                with pytest.raises(websockets.exceptions.InvalidURI) as nowhere:
                    async with manager:
                        pass
                found.append(nowhere.value.uri.startswith(NOWHERE))
        assert 0 == accepted(server)
    assert [True] * len(SOCKETS) == found
    assert NOWHERE == llm.websocket_base_url


async def test_a_copy_of_a_metered_client_is_metered_and_refuses_too(
    priced: Running, provider: FakeOpenAI
) -> None:
    """with_options and copy give a metered client, whatever they change: it refuses the
    websocket surfaces and the POSTs the original refuses, under another base URL too, and
    one given its own HTTP client is metered around it."""
    await budget(priced, "copies", 5_000_000)
    with listening() as server:
        at = addresses(server)
        async with (
            AsyncClient(priced.target) as earmark,
            openai.AsyncOpenAI(api_key="k", **at) as client,
            httpx2.AsyncClient() as own,
        ):
            llm = metered(client, earmark, "copies")
            copies = [
                llm.with_options(timeout=5),
                llm.copy(max_retries=0),
                llm.with_options(websocket_base_url=at["websocket_base_url"]),
                llm.with_options(http_client=own).with_options(timeout=5),
                llm.with_options(base_url=at["base_url"].replace("/v1", "/proxy/v1")),
            ]
            sockets = [await opened(copy, "realtime.connect") for copy in copies]
            endpoints = [await refused_endpoint(resume(copy)) for copy in copies]
            answered = await llm.with_options(
                http_client=own, base_url=provider.url
            ).chat.completions.create(**ask(max_tokens=50))
        assert 0 == accepted(server)
    (hold,) = await holds(priced, "copies")
    assert [f"SocketNotMeteredError: {refusal('realtime.connect')}"] * len(copies) == sockets
    assert [NOWHERE] * len(copies) == [copy.websocket_base_url for copy in copies]
    assert [
        *["POST /v1/fine_tuning/jobs/ftjob-1/resume"] * 4,
        "POST /proxy/v1/fine_tuning/jobs/ftjob-1/resume",
    ] == endpoints
    assert "chatcmpl-fake" == answered.id
    assert pb.RESERVATION_STATE_SETTLED == hold.state
    assert 1 == len(provider.state.requests)
    await assert_invariants(priced.dsn)


async def refused_endpoint(call: Awaitable[Any]) -> str:
    """The endpoint the call was refused for, unsent."""
    with pytest.raises(EndpointNotMeteredError) as refused:
        await call
    return refused.value.about["endpoint"]


def resume(llm: openai.AsyncOpenAI) -> Awaitable[Any]:
    return llm.fine_tuning.jobs.resume("ftjob-1")


def container(llm: openai.AsyncOpenAI) -> Awaitable[Any]:
    return llm.containers.create(name="scratch")


def container_file(llm: openai.AsyncOpenAI) -> Awaitable[Any]:
    return llm.containers.files.create("cntr_1", file=("a.txt", b"a"))


@pytest.mark.parametrize(
    ("call", "endpoint"),
    [
        (resume, "POST /v1/fine_tuning/jobs/ftjob-1/resume"),
        (container, "POST /v1/containers"),
        (container_file, "POST /v1/containers/cntr_1/files"),
    ],
)
async def test_work_billed_out_of_its_call_is_refused_unsent(
    priced: Running,
    provider: FakeOpenAI,
    call: Callable[[openai.AsyncOpenAI], Awaitable[Any]],
    endpoint: str,
) -> None:
    """Resuming a fine-tuning job (paid training restarts) and a container's session or
    files are refused before they are sent: the provider saw nothing, nothing is held."""
    await budget(priced, "doors", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "doors")
        with pytest.raises(EndpointNotMeteredError) as refused:
            await call(llm)
    assert {"endpoint": endpoint} == refused.value.about
    assert [] == provider.state.requests
    assert [] == await holds(priced, "doors")
    await assert_invariants(priced.dsn)
