"""Metering at the wire: a provider SDK's own client whose every HTTP request passes one
interception point, an httpx2 transport (wire_transport.py).

Why the HTTP boundary: the providers' SDKs (openai, anthropic) take an HTTP client
(`http_client=`), and everything they call goes through it: every method of every resource,
`with_raw_response`, the `parse` and `stream` helpers, and the frameworks that are handed
the client (the OpenAI Agents SDK, LangChain, LiteLLM). Metering there, from each
provider's published wire format (paths, JSON bodies, SSE events, usage fields), covers all
of them with one mechanism and survives SDK upgrades that add methods; a wrapper around
methods covered only the methods it named, and was not the SDK's type.

This module holds what every provider shares: how a billable request is read (Call), held
(its shape and prompt charge; the fees of the built-in tools it gives the model: Tool),
capped, and how a server-sent event stream is split into events so that the provider's
own final usage can be read as it passes; the table a provider's POSTs are routed by
(Routes: each whole path metered, free or refused, any other refused). The providers'
routes are in wire_openai.py and wire_anthropic.py. A websocket is no HTTP request: a
metered client refuses its SDK's websocket surfaces (SocketNotMeteredError, llm.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx2

from earmark import limits
from earmark.client.errors import EarmarkClientError
from earmark.client.meter import Meter
from earmark.core.prices import Counts, Shape, Usage, counts


class EndpointNotMeteredError(EarmarkClientError):
    """A request to an endpoint that bills and that Earmark cannot price: not sent."""

    reason = "ENDPOINT_NOT_METERED"

    def __init__(self, method: str, path: str) -> None:
        super().__init__(
            f"{method} {path} bills and Earmark cannot price it; not sent (the metered "
            "endpoints are listed in docs/providers-python.md)"
        )
        self.about = {"endpoint": f"{method} {path}"}


class SocketNotMeteredError(EndpointNotMeteredError):
    """A websocket surface of a provider's SDK called on a metered client: Earmark meters
    the HTTP requests the SDK sends, and a websocket is no HTTP request, so it is refused
    before any connection is made."""

    def __init__(self, surface: str) -> None:
        EarmarkClientError.__init__(
            self, f"{surface} opens a websocket Earmark cannot meter; not connected"
        )
        self.about = {"surface": surface}


class ToolNotMeteredError(EndpointNotMeteredError):
    """A request to a metered endpoint that gives the model a built-in tool whose fee
    Earmark cannot hold and settle (a tool the provider runs and bills apart from tokens,
    or one Earmark does not know): refused before anything is held or sent. tool names its
    type; why, what it bills that Earmark cannot hold."""

    reason = "TOOL_NOT_METERED"

    def __init__(self, tool: str, why: str) -> None:
        EarmarkClientError.__init__(
            self,
            f"the {tool} tool {why}; not sent (the metered tools are listed in "
            "docs/providers-python.md)",
        )
        self.tool, self.why = tool, why
        self.about = {"tool": tool}


@dataclass(frozen=True, slots=True)
class Tool:
    """What a tool type bills beyond the tokens it adds, and so what a request that gives
    the model one gets: fee, a kind of fee per call the price book prices (held for the
    calls the request allows, settled at the calls the answer reports); refused, why its
    fee cannot be held (the request is refused, unsent); neither, tokens only (the tool
    runs at the caller's, or at the provider's for no fee)."""

    fee: str = ""
    refused: str = ""


# A tool that bills its tokens alone.
TOKENS_ONLY = Tool()
# What a provider's tool types bill, by type: a Tool, or for a type whose bill depends on
# how the tool is set up (where a shell runs), what reads the tool and says.
Tools = Mapping[str, Tool | Callable[[dict[str, Any]], Tool]]


def held_tools(
    given: Any, table: Tools, untyped: str | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """The tools of a request's `tools` that bill a fee per call, each with its fee kind.
    Raises ToolNotMeteredError for a tool table refuses, and for one it does not list: a
    tool type Earmark has not classified may bill anything. untyped is the type of a tool
    that names none or null (Anthropic's custom tools); None refuses such a tool. An entry
    that is not an object is no tool the provider runs (it answers 400): passed over."""
    found: list[tuple[str, dict[str, Any]]] = []
    for tool in given if isinstance(given, list) else []:
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        kind = untyped if kind is None else kind
        name = kind if isinstance(kind, str) else "untyped"
        what = table.get(name) if isinstance(kind, str) else None
        if what is None:
            raise ToolNotMeteredError(
                name, "is of a type Earmark has not classified, and may bill a fee it cannot hold"
            )
        classified = what if isinstance(what, Tool) else what(tool)
        if classified.refused:
            raise ToolNotMeteredError(name, classified.refused)
        if classified.fee:
            found.append((classified.fee, tool))
    return found


@dataclass(frozen=True, slots=True)
class Call:
    """A billable request as read from its body: what to hold, and how to send it."""

    model: str
    # A conservative count of the prompt's tokens, charged when the hold is made.
    prompt_tokens: int
    # The caller's own maximum output per choice; None when it set none.
    asked: int | None = None
    choices: int = 1
    stream: bool = False
    service_tier: str = ""
    tool_calls_max: Counts = ()
    # Embeddings produce no output: their hold is the prompt alone.
    has_output: bool = True


class Tally(Protocol):
    """Reads a stream's events as they pass to the caller, for the provider's own usage."""

    def keep(self, event: str, data: Any) -> bool:
        """Notes one event (its SSE name, "" without one, and its JSON data); False drops
        it from what the caller sees."""
        ...

    def usage(self) -> Usage | None:
        """The provider's final usage, once the stream has carried it."""
        ...


class Route(Protocol):
    """One billable endpoint of a provider."""

    def call(self, body: dict[str, Any], meter: Meter) -> Call: ...

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        """The body to send, its output cap set to cap (None: the caller's own), and
        whether the stream's usage event is Earmark's alone (dropped from the caller)."""
        ...

    def usage(self, answer: Any, call: Call) -> Usage | None:
        """The usage a JSON answer reports; None when it reports none."""
        ...

    def tally(self, call: Call, hidden_usage: bool) -> Tally: ...


# What a provider's routing says of a POST: a billable route, FREE (it bills nothing:
# pass it through), or None (it bills, or may, and Earmark cannot price it: refused).
FREE = "free"
# What a route table says of a POST it lists that bills, or may, and that Earmark cannot
# price: refused before it is sent, as a POST the table does not list is.
REFUSED = "refused"
Routing = Callable[[str], "Route | str | None"]


@dataclass(frozen=True)
class Provider:
    """A provider: the name the price book knows it by, its routing of POST paths, and
    its SDK's base error, which the SDK passes through unwrapped, so that Earmark's errors
    are raised as they are rather than turned into connection errors and retried. sockets
    names its SDK's websocket surfaces ("realtime.connect"), which a metered client
    refuses."""

    name: str
    routing: Routing
    sdk_error: type[Exception] | None = None
    sockets: tuple[str, ...] = ()


class Routes:
    """A provider's POST paths, each with what Earmark does with it: a metered Route, FREE
    or REFUSED. A path is a template of the whole path after the base URL's own path
    (`/v1`): "{name}" stands for one segment (an id: not empty, not "." nor ".."), and a
    last "/**" for the rest of the path, which only REFUSED may take (an area refused
    whole, with the paths an SDK upgrade adds to it). A literal segment is preferred to an
    id, so /threads/runs is not /threads/{thread_id}."""

    def __init__(self, table: Mapping[str, Route | str]) -> None:
        self.table = dict(table)
        for template, what in self.table.items():
            if template.endswith("/**") and what != REFUSED:
                raise ValueError(f"{template}: only REFUSED takes a whole area")
            if not template.startswith("/"):
                raise ValueError(f"{template}: a path starts with /")
        self._literal = {t: w for t, w in self.table.items() if not _is_template(t)}
        templates = sorted((t for t in self.table if _is_template(t)), key=_specificity)
        self._templates = [(re.compile(_pattern(t)), self.table[t]) for t in templates]

    def find(self, path: str) -> Route | str | None:
        """What the table says of a POST to path (after the base URL's own path); None
        when it does not list it."""
        if path in self._literal:
            return self._literal[path]
        for pattern, what in self._templates:
            if pattern.fullmatch(path):
                return what
        return None

    def routing(self, path: str, prefix: str) -> Route | str | None:
        """The route of a POST to path, under a base URL whose own path is prefix: FREE
        for one that bills nothing; None for one refused, one the table does not list, and
        one outside prefix."""
        found = self.find(path[len(prefix) :]) if within(path, prefix) else None
        return None if found is None or found == REFUSED else found


def within(path: str, prefix: str) -> bool:
    """Whether path is under prefix (a base URL's own path, "" or "/v1"), segment-wise."""
    return path.startswith(prefix + "/")


# One id in a path: any segment but an empty one or a dot segment, which a server may
# resolve into another path.
_ID = r"(?!\.\.?(?:/|$))[^/]+"


def _is_template(template: str) -> bool:
    return "{" in template or template.endswith("/**")


def _pattern(template: str) -> str:
    area = template.endswith("/**")
    segments = template.removesuffix("/**").split("/")
    parts = [_ID if s.startswith("{") and s.endswith("}") else re.escape(s) for s in segments]
    return "/".join(parts) + ("(?:/.*)?" if area else "")


def _specificity(template: str) -> tuple[int, ...]:
    """Literal segments sort before ids, ids before an area's rest."""
    return tuple(2 if s == "**" else 1 if s.startswith("{") else 0 for s in template.split("/"))


def shape_of(provider: str, call: Call, meter: Meter) -> tuple[Shape, Usage]:
    """The Reserve's shape and its prompt charge: the caller's maximum (each choice's,
    times the choices), lowered to the meter's output_tokens_max; or with neither, the
    model's ceiling (output_ceiling), which the sidecar reads from the price."""
    most = call.asked
    if meter.output_tokens_max is not None:
        most = meter.output_tokens_max if most is None else min(most, meter.output_tokens_max)
    shape = Shape(
        provider,
        call.model,
        input_tokens=call.prompt_tokens,
        max_output_tokens=(most or 0) * call.choices if call.has_output else 0,
        service_tier=call.service_tier,
        max_tool_calls=counts(call.tool_calls_max),
        output_ceiling=call.has_output and most is None,
    )
    return shape, Usage(call.prompt_tokens, 0, provider=provider, model=call.model)


def cap_to_send(call: Call, told: int, degraded: bool) -> int | None:
    """The per-choice output cap to put in the body (None: send the caller's own): what
    the hold covers (told, all choices together) when the caller set none, when the meter
    lowered it, or when degrade did. The cap a provider is told is what the budget pays."""
    if not call.has_output or told <= 0:
        return None
    # Every choice gets at least one token: a hold too small for that was refused or
    # raises before sending (too_small).
    each = max(limits.llm_output_tokens_min, told // max(1, call.choices))
    if call.asked is None or degraded or each < call.asked:
        return each
    return None


def json_body(request: httpx2.Request) -> dict[str, Any]:
    """A billable request's JSON body; a body that is not a JSON object is not sent."""
    where = f"{request.method} {request.url.path}"
    try:
        body = json.loads(request.content or b"{}")
    except ValueError:
        raise EarmarkClientError(f"{where}: the body is not JSON; not sent") from None
    if not isinstance(body, dict):
        raise EarmarkClientError(f"{where}: the body is not a JSON object; not sent")
    return body


def rebuilt(request: httpx2.Request, body: dict[str, Any]) -> httpx2.Request:
    """request with body as its JSON content, its length recomputed."""
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
    return httpx2.Request(
        request.method,
        request.url,
        headers=headers,
        content=json.dumps(body, separators=(",", ":")).encode(),
        extensions=request.extensions,
    )


def answered(
    response: httpx2.Response,
    *,
    stream: httpx2.AsyncByteStream | httpx2.SyncByteStream | None = None,
    content: bytes | None = None,
) -> httpx2.Response:
    """The response the SDK gets: the provider's status and headers, and the body as
    Earmark read it (decoded, so without the encoding and length it came with)."""
    skip = {"content-encoding", "content-length", "transfer-encoding"}
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in skip]
    return httpx2.Response(
        response.status_code,
        headers=headers,
        stream=stream,
        content=content,
        extensions=response.extensions,
    )


def is_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").startswith("text/event-stream")


def json_answer(content: bytes) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        return None


class Events:
    """Splits a server-sent event stream into events as its bytes arrive and gives back
    the bytes of the events the tally keeps, unchanged, so that the SDK parses what the
    provider sent."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self._buffer = b""

    def feed(self, chunk: bytes) -> bytes:
        self._buffer += chunk
        kept = []
        while True:
            end, size = _event_end(self._buffer)
            if end < 0:
                break
            raw, self._buffer = self._buffer[:end], self._buffer[end + size :]
            if self._keep(raw):
                kept.append(raw + b"\n\n")
        if len(self._buffer) > limits.sse_event_bytes_max:
            # An event past the bound is no event a provider sends: passed on unread.
            kept.append(self._buffer)
            self._buffer = b""
        return b"".join(kept)

    def rest(self) -> bytes:
        """What is left when the stream ends: an unfinished event, passed on as it is."""
        out, self._buffer = self._buffer, b""
        return out

    def _keep(self, raw: bytes) -> bool:
        name, data = "", []
        for line in raw.splitlines():
            if line.startswith(b"event:"):
                name = line[6:].strip().decode(errors="replace")
            elif line.startswith(b"data:"):
                data.append(line[5:].strip())
        text = b"\n".join(data)
        if not text or text == b"[DONE]":
            return True
        parsed = json_answer(text)
        return True if parsed is None else self.tally.keep(name, parsed)


def _event_end(buffer: bytes) -> tuple[int, int]:
    """Where the first event in buffer ends, and the size of the blank line that ends it
    (-1 when none has ended yet): SSE allows LF and CRLF line ends."""
    found = [(buffer.find(end), len(end)) for end in (b"\n\n", b"\r\n\r\n")]
    found = [(at, size) for at, size in found if at >= 0]
    return min(found) if found else (-1, 0)


def with_cap(body: dict[str, Any], name: str, cap: int | None) -> dict[str, Any]:
    """body with its output maximum, under name, set to cap (None: as it is)."""
    return body if cap is None else {**body, name: cap}


def reported(answer: Any) -> dict[str, Any] | None:
    """The usage object a JSON answer carries; None when it carries none."""
    if isinstance(answer, dict) and isinstance(answer.get("usage"), dict):
        usage: dict[str, Any] = answer["usage"]
        return usage
    return None


def number(value: Any) -> int:
    """A count from a provider's JSON (absent or null: 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def prompt_estimate(chars: int, messages: int) -> int:
    """A conservative count of a prompt's tokens from its characters: one token per
    limits.llm_prompt_chars_per_token characters (fewer than the usual four, so that the
    hold errs high), plus each message's framing."""
    per_token = limits.llm_prompt_chars_per_token
    return -(-chars // per_token) + limits.llm_message_overhead_tokens * messages + 3
