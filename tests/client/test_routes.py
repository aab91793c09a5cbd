"""Every route of the installed openai and anthropic packages is classified: each public
method of each of their resources is called with stand-in arguments through a transport
that records the first request it would send and sends nothing, and every POST must be in
the provider's route table (metered, free or refused), every websocket among the surfaces a
metered client refuses. No sidecar: these read the packages and the tables alone."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import openai.lib._websocket
import pytest
import websockets.sync.client
from anthropic._resource import AsyncAPIResource as AnthropicAsyncResource
from anthropic._resource import SyncAPIResource as AnthropicResource
from openai._resource import AsyncAPIResource as OpenAIAsyncResource
from openai._resource import SyncAPIResource as OpenAIResource

from earmark.client import wire_anthropic, wire_openai
from earmark.client.wire import FREE, REFUSED, Route, Routes, within

# The base URLs the recording clients are given; nothing is sent to either.
OPENAI_BASE, ANTHROPIC_BASE = "http://127.0.0.1:9/v1", "http://127.0.0.1:9"
# What a websocket surface is recorded as sending.
WEBSOCKET = "WEBSOCKET"
# How long one method is given to send its first request: a poller that retries its
# failed poll is stopped there, its first request recorded.
STEP_SECONDS = 5
# The methods that send nothing themselves: they read locally (a webhook's signature),
# or give back an object whose requests are its resource's own (a thread sends through
# beta.messages.create, a result's artifacts through artifacts.retrieve, the async
# client's environment worker and session tool runner through work and events).
LOCAL = {
    "openai": {
        "webhooks.unwrap",
        "webhooks.verify_signature",
        "beta.agents.sessions.artifacts.for_result",
    },
    "anthropic": {
        "beta.webhooks.unwrap",
        "beta.webhooks.parse_unverified",
        "beta.messages.thread",
        "beta.environments.work.worker",
        "beta.sessions.events.tool_runner",
    },
}

# The methods whose POST is metered: every other POST passes, billing nothing, or is refused.
METERED = {
    "openai": {
        "chat.completions.create", "chat.completions.parse", "chat.completions.stream",
        "beta.chat.completions.create", "beta.chat.completions.parse",
        "beta.chat.completions.stream", "responses.create", "responses.parse",
        "responses.stream", "beta.responses.create", "embeddings.create",
    },
    "anthropic": {
        "messages.create", "messages.parse", "messages.stream", "beta.messages.create",
        "beta.messages.parse", "beta.messages.stream", "beta.messages.tool_runner",
    },
}  # fmt: skip


def overrides(tmp: Path) -> dict[str, dict[str, Any]]:
    """The arguments of the methods that stand-ins do not satisfy (overloads that need one
    set of fields, files that must exist), by the method's dotted name."""
    text = tmp / "a.txt"
    text.write_text("a")
    return {
        "admin.organization.external_keys.create": {
            "external_id": "e", "kms_arn": "k", "name": "n", "role_arn": "r", "type": "aws",
        },
        "audio.voices.create": {"name": "n", "prompt": "p", "type": "t"},
        "beta.agents.automations.create": {
            "expression": "e", "name": "n", "target": {}, "timezone": "UTC", "type": "cron",
        },
        "beta.agents.environments.files.create": {
            "environment_id": "{environment_id}", "file_id": "f", "path": "/p", "type": "file",
        },
        "beta.agents.environments.files.prepare": {"files": {"/workspace/a.txt": text}},
        "beta.agents.environments.files.prepare_directory": {
            "root": tmp, "destination": "/workspace", "include": ["*.txt"],
        },
        "beta.agents.environments.files.upload": {
            "environment_id": "{environment_id}", "file": text.read_bytes(),
            "path": "/workspace/a.txt",
        },
        "responses.stream": {"input": "i", "model": "m"},
        "uploads.upload_file_chunked": {"file": text, "mime_type": "text/plain", "purpose": "p"},
        "videos.edit": {"prompt": "p", "video": ("a.mp4", b"a")},
        "videos.extend": {"prompt": "p", "seconds": "4", "video": ("a.mp4", b"a")},
    }  # fmt: skip


@dataclass(frozen=True)
class Sent:
    """The first request one SDK method sends: its HTTP method (WEBSOCKET for a websocket)
    and its path, with each id the method was given by name ("{job_id}")."""

    method: str
    path: str


@dataclass
class Recording:
    """The SDK's requests, each recorded and then failed with an error of the SDK's own,
    which the SDK raises as it is: nothing leaves the process."""

    sdk_error: type[Exception]
    sent: list[Sent] = field(default_factory=list)

    def unsent(self) -> Exception:
        return type("Unsent", (self.sdk_error,), {})("recorded, not sent")

    def http(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(Sent(request.method, request.url.path))
        raise self.unsent()

    def websocket(self, uri: str, *args: Any, **kwargs: Any) -> Any:
        self.sent.append(Sent(WEBSOCKET, httpx2.URL(uri).path))
        raise self.unsent()


def methods(root: object, resource: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every public method of every resource under root (a client or a resource), by its
    dotted name: the resources are root's cached properties of the resource class, beta's
    included, and theirs."""
    for name in sorted(dir(type(root))):
        if name.startswith("_") or name in ("with_raw_response", "with_streaming_response"):
            continue
        static = inspect.getattr_static(type(root), name)
        if isinstance(static, functools.cached_property):
            value = getattr(root, name)
            if isinstance(value, resource):
                for inner, method in methods(value, resource):
                    yield f"{name}.{inner}", method
        elif isinstance(root, resource) and callable(static):
            yield name, getattr(root, name)


def stand_in(parameter: inspect.Parameter) -> Any:
    """A value of the parameter's declared type; a string names the parameter, so that an
    id in a path reads as its name."""
    kind = str(parameter.annotation)
    if "FileTypes" in kind:
        return ("a.txt", b"a")
    if kind.startswith(("Iterable", "List", "Sequence")):
        return []
    if kind in ("int", "float"):
        return 1
    if kind == "bool":
        return True
    if kind.startswith(("Dict", "Mapping", "object")):
        return {}
    return "{" + parameter.name + "}"


def arguments(method: Callable[..., Any], given: dict[str, Any] | None) -> dict[str, Any]:
    if given is not None:
        return given
    return {
        name: stand_in(parameter)
        for name, parameter in inspect.signature(method).parameters.items()
        if parameter.default is inspect.Parameter.empty
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
    }


async def first_sent(
    method: Callable[..., Any], args: dict[str, Any], recording: Recording
) -> Sent | str | None:
    """What method sends first (its answer awaited, a stream or a connection entered, a
    runner or poller stepped), whatever a helper makes of the failure that follows; None
    when it sends nothing; the error it raised before sending otherwise."""
    recording.sent.clear()
    raised = None
    try:
        await asyncio.wait_for(_driven(method, args), STEP_SECONDS)
    except Exception as error:
        raised = f"{type(error).__name__}: {error}"
    return recording.sent[0] if recording.sent else raised


async def _driven(method: Callable[..., Any], args: dict[str, Any]) -> None:
    result = method(**args)
    if inspect.isawaitable(result):
        result = await result
    if hasattr(result, "__aenter__"):
        async with result:
            pass
    elif hasattr(result, "__enter__"):
        with result:
            pass
    elif hasattr(result, "__anext__"):
        await anext(result, None)
    elif hasattr(result, "__next__"):
        next(result, None)


@dataclass
class Surface:
    """What every method of an SDK's client sends first, the methods that send nothing, and
    those that could not be called."""

    called: set[str] = field(default_factory=set)
    sent: dict[str, Sent] = field(default_factory=dict)
    local: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)


async def surface(client: Any, resource: type, recording: Recording, tmp: Path) -> Surface:
    found, given = Surface(), overrides(tmp)
    local = LOCAL[type(client).__module__.partition(".")[0]]
    for name, method in methods(client, resource):
        found.called.add(name)
        outcome = await first_sent(method, arguments(method, given.get(name)), recording)
        if isinstance(outcome, Sent):
            found.sent[name] = outcome
        elif outcome is None or name in local:
            # A local method's stand-ins may not read as it wants; it sent nothing.
            found.local.add(name)
        else:
            found.failed[name] = outcome
    return found


async def openai_surface(monkeypatch: pytest.MonkeyPatch, tmp: Path, kind: str) -> Surface:
    """What each method of the sync or async OpenAI client sends."""
    recording = Recording(openai.OpenAIError)
    monkeypatch.setattr(websockets.sync.client, "connect", recording.websocket)
    monkeypatch.setattr(openai.lib._websocket, "_WebSocketConnect", recording.websocket)
    # openai 3.63 opens its sync websockets through this wrapper of websockets' connect,
    # bound where the wrapper is defined; earlier releases call websockets' connect.
    if hasattr(openai.lib._websocket, "_connect_sync"):
        monkeypatch.setattr(openai.lib._websocket, "_connect_sync", recording.websocket)
    options: dict[str, Any] = dict(
        api_key="k", admin_api_key="a", webhook_secret="w", base_url=OPENAI_BASE, max_retries=0
    )
    transport = httpx2.MockTransport(recording.http)
    if kind == "sync":
        client = openai.OpenAI(**options, http_client=httpx2.Client(transport=transport))
        return await surface(client, OpenAIResource, recording, tmp)
    aclient = openai.AsyncOpenAI(**options, http_client=httpx2.AsyncClient(transport=transport))
    return await surface(aclient, OpenAIAsyncResource, recording, tmp)


async def anthropic_surface(monkeypatch: pytest.MonkeyPatch, tmp: Path, kind: str) -> Surface:
    """What each method of the sync or async Anthropic client sends."""
    recording = Recording(anthropic.AnthropicError)
    monkeypatch.setattr(websockets.sync.client, "connect", recording.websocket)
    options: dict[str, Any] = dict(api_key="k", base_url=ANTHROPIC_BASE, max_retries=0)
    transport = httpx2.MockTransport(recording.http)
    if kind == "sync":
        client = anthropic.Anthropic(**options, http_client=httpx2.Client(transport=transport))
        return await surface(client, AnthropicResource, recording, tmp)
    aclient = anthropic.AsyncAnthropic(
        **options, http_client=httpx2.AsyncClient(transport=transport)
    )
    return await surface(aclient, AnthropicAsyncResource, recording, tmp)


def unclassified(found: Surface, routes: Routes, prefix: str) -> list[str]:
    """Each POST the route table does not list, and each method that sent neither an HTTP
    request nor a websocket the tests know of: "resource.method METHOD /path"."""
    unknown = [
        f"{name} POST {sent.path}"
        for name, sent in found.sent.items()
        if sent.method == "POST"
        and (not within(sent.path, prefix) or routes.find(sent.path[len(prefix) :]) is None)
    ]
    strange = [
        f"{name} {sent.method} {sent.path}"
        for name, sent in found.sent.items()
        if sent.method not in ("GET", "DELETE", "POST", WEBSOCKET)
    ]
    return unknown + strange


def kinds(found: Surface, routes: Routes, prefix: str) -> dict[str, set[str]]:
    """The methods by what becomes of what they send: a POST metered, FREE or REFUSED, a
    GET or DELETE passed, a WEBSOCKET refused."""
    by_kind: dict[str, set[str]] = {}
    for name, sent in found.sent.items():
        what: Route | str | None = sent.method
        if sent.method == "POST":
            what = routes.find(sent.path[len(prefix) :])
            what = what if what in (FREE, REFUSED) else "metered"
        by_kind.setdefault(str(what), set()).add(name)
    return by_kind


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_every_post_of_the_openai_package_is_classified(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    """Each public method of the openai client's resources is called and what it sends is
    known: a POST in wire_openai.ROUTES, a GET or DELETE, a websocket in SOCKETS, or
    nothing for the methods that read locally."""
    found = await openai_surface(monkeypatch, tmp_path, kind)
    assert {} == found.failed
    assert [] == unclassified(found, wire_openai.ROUTES, "/v1")
    assert LOCAL["openai"] & found.called == found.local
    by_kind = kinds(found, wire_openai.ROUTES, "/v1")
    assert {"metered", FREE, REFUSED, "GET", "DELETE", WEBSOCKET} == set(by_kind)
    assert (METERED["openai"], set(wire_openai.SOCKETS)) == (by_kind["metered"], by_kind[WEBSOCKET])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_every_post_of_the_anthropic_package_is_classified(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    """Each public method of the anthropic client's resources is called and what it sends
    is known: a POST in wire_anthropic.ROUTES, a GET or DELETE, or nothing for the methods
    that read locally; it opens no websocket."""
    found = await anthropic_surface(monkeypatch, tmp_path, kind)
    assert {} == found.failed
    assert [] == unclassified(found, wire_anthropic.ROUTES, "")
    assert LOCAL["anthropic"] & found.called == found.local
    by_kind = kinds(found, wire_anthropic.ROUTES, "")
    assert {"metered", FREE, REFUSED, "GET", "DELETE"} == set(by_kind)
    assert METERED["anthropic"] == by_kind["metered"]
    assert () == wire_anthropic.SOCKETS


def test_the_doors_of_issue_42_are_refused_and_the_routes_anchored() -> None:
    """Resuming a fine-tuning job and a container's session or files are refused; a path is
    matched whole after the base URL's own path, so a free path's tail opens nothing."""
    refused = [
        "/v1/fine_tuning/jobs/ftjob-1/resume", "/v1/containers", "/v1/containers/cntr_1/files",
        "/v1/containers/cntr_1/files/f/content", "/v1/files/../fine_tuning/jobs", "/v2/files",
        "/v1/vector_stores/..", "/v1/files/", "/v1/evals/e/files", "/files",
    ]  # fmt: skip
    assert [None] * len(refused) == [wire_openai.routing(path) for path in refused]
    assert [FREE, FREE, FREE] == [
        wire_openai.routing("/v1/files"),
        wire_openai.routing("/openai/v1/files", "/openai/v1"),
        wire_openai.routing("/v1/fine_tuning/jobs/ftjob-1/pause"),
    ]
    azure = "/openai/deployments/gpt-4o/chat/completions"
    assert ["Chat", "Chat"] == [
        type(wire_openai.routing(azure, "/openai")).__name__,
        type(wire_openai.routing("/proxy/v1/chat/completions", "/proxy/v1")).__name__,
    ]
    assert [None, None, FREE, "Messages"] == [
        wire_anthropic.routing("/v1/messages/batches"),
        wire_anthropic.routing("/v1/skills/s/files"),
        wire_anthropic.routing("/v1/files"),
        type(wire_anthropic.routing("/anthropic/v1/messages", "/anthropic")).__name__,
    ]


def test_only_a_refusal_takes_a_whole_area() -> None:
    """A route table refuses a template that would pass or meter a whole area."""
    with pytest.raises(ValueError, match="only REFUSED"):
        Routes({"/files/**": FREE})
