"""A fake Anthropic provider: a real HTTP server on 127.0.0.1 that answers POST /v1/messages
(a message, or its stream of server-sent events) and /v1/messages/count_tokens in the
Messages API's published shapes, with errors, late, unstarted and cut answers, cache reads
and writes and a web search, and records what it was asked and what it billed; and, for an
Admin API key, GET /v1/organizations/usage_report/messages and
/v1/organizations/cost_report from that bill (tests/fake_anthropic_reports.py). Its bill
and state are in tests/fake_anthropic_state.py: each bill carries when its request arrived
(the fake's `clock`) and its API key's id and workspace (`api_key_ids`, `workspace_ids`,
by the API key).

The last message's text chooses the answer:
- "fail:CODE": HTTP CODE with Anthropic's error body;
- "late": a message `late_seconds` after the request (after the client's timeout, when the
  test sets it shorter), billed all the same, as a provider bills work whose caller stopped
  waiting;
- "unstarted": the connection closes unanswered `late_seconds` after the request, and
  nothing is billed: a message whose caller gave up before the provider started it
  (`unstarted` counts them);
- "cut" (streamed): the stream stops halfway through its text, before message_delta, and
  the connection closes before the last chunk: billed whole all the same;
- anything else: a message of `output_tokens` tokens of `token_texts` (at most the
  request's max_tokens, unless `ignores_maximum` is set), streamed `tokens_per_chunk` a
  text delta, `chunk_seconds` apart.
A request without model, max_tokens or messages is answered 400, as Anthropic answers it.
The prompt is the system's and the messages' characters over four, plus one (count_tokens
answers that number); `cache_read_tokens` of it were read from the cache and
`cache_write_tokens` written to it, and Anthropic's input_tokens counts neither. The
writes are one-hour writes when any block of the request asks `cache_control` ttl "1h",
else five-minute ones. With a web search tool (type "web_search_...") the answer first
searches once: a server_tool_use block whose query counts three characters an output
token, and a web_search_tool_result block whose results add `search_result_tokens` to
the input. A stream whose reader goes away is billed for the output tokens sent.

Wire facts followed, as checked in the installed SDK (anthropic 2.15.0) and recordings:
- Message and Usage (anthropic/types/message.py, usage.py): usage has input_tokens,
  cache_creation_input_tokens, cache_read_input_tokens, cache_creation
  {ephemeral_5m_input_tokens, ephemeral_1h_input_tokens} (cache_creation.py),
  output_tokens, service_tier, and server_tool_use {web_search_requests,
  web_fetch_requests} (server_tool_usage.py) when a server tool ran.
- The stream (raw_message_stream_event.py; recordings in vercel/ai,
  packages/anthropic/src/__fixtures__/anthropic-web-search-tool.1.chunks.txt and
  anthropic-json-tool.1.chunks.txt): message_start (message.usage with the input counts,
  cache_creation, output_tokens 1 and service_tier), per block content_block_start,
  content_block_delta (text_delta, or input_json_delta for a server_tool_use, the first
  one empty), content_block_stop; a web_search_tool_result block comes whole in its
  content_block_start; `ping` may come between; then message_delta with delta.stop_reason
  and a cumulative usage (MessageDeltaUsage, message_delta_usage.py: input_tokens,
  cache_creation_input_tokens, cache_read_input_tokens, output_tokens, and
  server_tool_use after a search; its input grows past message_start's by the search
  results, as recorded), then message_stop. Each event's type is its `event:` line and
  its JSON's "type". stop_reason is "max_tokens" at the request's max_tokens, else
  "end_turn".
- count_tokens answers MessageTokensCount {input_tokens} (message_tokens_count.py).
- The API key: the installed SDK sends it as `Authorization: Bearer KEY`, not x-api-key
  (anthropic/_client.py, `_api_key_auth`); the fake reads either.
- Errors: {"type": "error", "error": {"type", "message"}, "request_id"}
  (anthropic/types/shared/error_response.py and the *_error.py types beside it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from tests.fake_anthropic_reports import report
from tests.fake_anthropic_state import AnthropicState, Bill, Caller, Rates
from tests.http_fake import JsonHandler, StateServer, serving

__all__ = ["AnthropicState", "Bill", "FakeAnthropic", "Rates", "fake_anthropic"]

MESSAGES, COUNT_TOKENS = "/v1/messages", "/v1/messages/count_tokens"
REQUIRED = {MESSAGES: ("model", "max_tokens", "messages"), COUNT_TOKENS: ("model", "messages")}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
# The headers a test may ask about; never the API key.
HEADERS = ("anthropic-version", "anthropic-beta", "user-agent", "x-stainless-retry-count")
SEARCH_ID = "srvtoolu_fake"
RESULT = {
    "type": "web_search_result",
    "title": "A fake result",
    "url": "https://example.com/fake",
    "encrypted_content": "ZmFrZQ==",
    "page_age": None,
}
# One event: its type, its fields, and how many output tokens it carries.
Event = tuple[str, dict[str, Any], int]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _asks_an_hour(value: Any) -> bool:
    """Whether any block asks its cache entry to live an hour (cache_control ttl "1h")."""
    if isinstance(value, dict):
        control = value.get("cache_control")
        if isinstance(control, dict) and control.get("ttl") == "1h":
            return True
        return any(_asks_an_hour(inner) for inner in value.values())
    return isinstance(value, list) and any(_asks_an_hour(inner) for inner in value)


@dataclass(frozen=True)
class _Answer:
    """One message: its bill, its query and text as tokens, and why it stopped."""

    bill: Bill
    query: list[str]
    text: list[str]
    stop: str
    # The input tokens the search results added, which message_start does not count yet.
    found: int


def _plan(state: AnthropicState, body: dict[str, Any], caller: Caller) -> _Answer:
    prompt = _prompt(body)
    read = min(state.cache_read_tokens, prompt)
    written = min(state.cache_write_tokens, prompt - read)
    searches = any(
        str(tool.get("type", "")).startswith("web_search_") for tool in body.get("tools") or []
    )
    query: list[str] = []
    if searches:
        last = _text(body["messages"][-1].get("content")) if body["messages"] else ""
        asked = json.dumps({"query": last[:40] or "fake"})
        query = [asked[i : i + 3] for i in range(0, len(asked), 3)]
    texts = state.token_texts
    text = [texts[i % len(texts)] for i in range(state.output_tokens)]
    most = int(body["max_tokens"])
    if not state.ignores_maximum:
        query = query[:most]
        text = text[: most - len(query)]
    output = len(query) + len(text)
    found = state.search_result_tokens if searches else 0
    bill = Bill(
        prompt - read - written + found,
        output,
        read,
        written,
        written if _asks_an_hour(body) else 0,
        int(searches),
        body["model"],
        caller.at,
        caller.api_key_id,
        caller.workspace_id,
    )
    return _Answer(bill, query, text, "max_tokens" if output >= most else "end_turn", found)


def _prompt(body: dict[str, Any]) -> int:
    messages = body.get("messages") or []
    chars = len(_text(body.get("system"))) + sum(len(_text(m.get("content"))) for m in messages)
    return chars // 4 + 1


def _content(answer: _Answer) -> list[dict[str, Any]]:
    """The message's content blocks: a search and its results first, then the text."""
    blocks: list[dict[str, Any]] = []
    if answer.bill.web_search_requests:
        query = json.loads("".join(answer.query)) if answer.query else {}
        use = {"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search", "input": query}
        result = {"type": "web_search_tool_result", "tool_use_id": SEARCH_ID, "content": [RESULT]}
        blocks += [use, result]
    return [*blocks, {"type": "text", "text": "".join(answer.text)}]


def _message(body: dict[str, Any], answer: _Answer, streamed: bool) -> dict[str, Any]:
    """The message, whole; or as message_start carries it: no content, no stop reason, one
    output token, and the input before any search."""
    usage = answer.bill.usage()
    if streamed:
        usage["input_tokens"] -= answer.found
        usage["output_tokens"] = 1
        usage.pop("server_tool_use", None)
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [] if streamed else _content(answer),
        "stop_reason": None if streamed else answer.stop,
        "stop_sequence": None,
        "usage": usage,
    }


def _events(body: dict[str, Any], answer: _Answer, per: int) -> Iterator[Event]:
    yield "message_start", {"message": _message(body, answer, streamed=True)}, 0
    index = 0
    if answer.bill.web_search_requests:
        use = {"type": "server_tool_use", "id": SEARCH_ID, "name": "web_search", "input": {}}
        yield "content_block_start", {"index": 0, "content_block": use}, 0
        yield "content_block_delta", _delta(0, "input_json_delta", "partial_json", ""), 0
        for i in range(0, len(answer.query), per):
            tokens = answer.query[i : i + per]
            delta = _delta(0, "input_json_delta", "partial_json", "".join(tokens))
            yield "content_block_delta", delta, len(tokens)
        yield "content_block_stop", {"index": 0}, 0
        result = {"type": "web_search_tool_result", "tool_use_id": SEARCH_ID, "content": [RESULT]}
        yield "content_block_start", {"index": 1, "content_block": result}, 0
        yield "content_block_stop", {"index": 1}, 0
        index = 2
    yield "content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}, 0
    yield "ping", {}, 0
    for i in range(0, len(answer.text), per):
        tokens = answer.text[i : i + per]
        delta = _delta(index, "text_delta", "text", "".join(tokens))
        yield "content_block_delta", delta, len(tokens)
    yield "content_block_stop", {"index": index}, 0
    stop = {"stop_reason": answer.stop, "stop_sequence": None}
    yield "message_delta", {"delta": stop, "usage": answer.bill.delta_usage()}, 0
    yield "message_stop", {}, 0


def _delta(index: int, kind: str, name: str, value: str) -> dict[str, Any]:
    return {"index": index, "delta": {"type": kind, name: value}}


class _Handler(JsonHandler):
    server: StateServer[AnthropicState]

    def _error(self, status: int, message: str) -> None:
        kind = ERROR_TYPES.get(status, "api_error")
        error = {"type": kind, "message": message}
        self.send_json(status, {"type": "error", "error": error, "request_id": "req_fake"})

    def _api_key(self) -> str | None:
        """The request's API key: its x-api-key, or its Authorization bearer token (as the
        installed SDK sends an api_key)."""
        bearer = (self.headers.get("authorization") or "").removeprefix("Bearer ").strip()
        return self.headers.get("x-api-key") or bearer or None

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        state = self.server.state
        key = self._api_key()
        caller = state.caller(key)
        body = self.read_json()
        with state.lock:
            state.requests.append(body)
            state.received.append(self.received(body, HEADERS))
        if self.command == "GET":
            version = self.headers.get("anthropic-version") or ""
            answered = report(state, self.path, key, version)
            if answered is not None:
                self.send_json(*answered)
                return
        if self.command != "POST" or self.path not in REQUIRED:
            self._error(404, f"no route {self.command} {self.path}")
            return
        missing = [name for name in REQUIRED[self.path] if name not in body]
        if missing:
            self._error(400, f"{missing[0]}: Field required")
            return
        if self.path == COUNT_TOKENS:
            self.send_json(200, {"input_tokens": _prompt(body)})
            return
        last = _text(body["messages"][-1].get("content")) if body["messages"] else ""
        if last.startswith("fail:"):
            code = int(last.removeprefix("fail:"))
            self._error(code, f"canned {code}")
            return
        if last in ("late", "unstarted"):
            # The fake provider's own pace, not a test's wait: it answers after the caller's
            # timeout; stopping the fake cuts it short.
            state.stopping.wait(timeout=state.late_seconds)
        if last == "unstarted":
            # Never started: no answer, no bill; the connection closes.
            with state.lock:
                state.unstarted += 1
            self.close_connection = True
            return
        answer = _plan(state, body, caller)
        if body.get("stream"):
            self._stream(body, answer, cut=last == "cut")
            return
        state.bill(answer.bill)
        self.send_json(200, _message(body, answer, streamed=False))

    def _stream(self, body: dict[str, Any], answer: _Answer, cut: bool) -> None:
        state = self.server.state
        events = list(_events(body, answer, state.tokens_per_chunk))
        if cut:
            # Half the text, then the connection closes: no message_delta, so no usage.
            texts = [n for n, (kind, fields, _) in enumerate(events) if _is_text(kind, fields)]
            events = events[: texts[len(texts) // 2]] if texts else events[:-2]
        sent = 0
        self.start_events()
        try:
            for kind, fields, tokens in events:
                self.send_event({"type": kind, **fields}, kind)
                sent += tokens
                if tokens and state.chunk_seconds:
                    state.stopping.wait(timeout=state.chunk_seconds)
            if cut:
                self.cut_events()
            else:
                self.end_events()
        except (BrokenPipeError, ConnectionResetError):
            with state.lock:
                state.abandoned += 1
            # The provider bills what it generated before the reader went away.
            state.bill(replace(answer.bill, output_tokens=sent))
            return
        state.bill(answer.bill)


def _is_text(kind: str, fields: dict[str, Any]) -> bool:
    return kind == "content_block_delta" and fields["delta"]["type"] == "text_delta"


@dataclass
class FakeAnthropic:
    state: AnthropicState
    url: str


@contextmanager
def fake_anthropic(rates: Rates) -> Iterator[FakeAnthropic]:
    """Serves a fake Anthropic on 127.0.0.1 port 0 until the block ends, also on failure;
    its tally prices what it billed at rates."""
    state = AnthropicState(rates=rates)
    with serving(StateServer(_Handler, state), "fake-anthropic", state.stopping.set) as port:
        yield FakeAnthropic(state=state, url=f"http://127.0.0.1:{port}")
