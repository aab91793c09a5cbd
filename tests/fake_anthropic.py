"""A fake Anthropic provider: a real HTTP server on 127.0.0.1 that answers POST /v1/messages
in the Messages API's shapes (a message, or its stream of server-sent events), with errors,
late answers and cache usage, and records what it was asked and what it billed.

The last message's text chooses the answer:
- "fail:CODE": HTTP CODE with Anthropic's error body;
- "late": a message `late_seconds` after the request (after the client's timeout, when the
  test sets it shorter), billed all the same, as a provider bills work whose caller stopped
  waiting;
- anything else: a message of `output_tokens` tokens (at most the request's max_tokens,
  unless `ignores_maximum` is set), or, streamed, that many text deltas of one token each,
  `chunk_seconds` apart, between message_start and message_delta's cumulative usage.
A request without model, max_tokens or messages is answered 400, as Anthropic answers it.
The prompt is the system's and the messages' characters over four, as a tokenizer roughly
counts them; `cache_read_tokens` of it were read from the cache and `cache_write_tokens`
written to it, and Anthropic's input_tokens counts neither.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.http_fake import StateServer, serving

ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}
REQUIRED = ("model", "max_tokens", "messages")


@dataclass(frozen=True)
class Bill:
    """What one answer would cost at the provider: its tokens, as Anthropic counts them."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0

    def usage(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
        }


@dataclass(frozen=True)
class Rates:
    """The test's prices, in micro-dollars per million tokens."""

    input: int
    output: int
    cache_read: int
    cache_write: int

    def micros(self, bill: Bill) -> int:
        """What the bill costs, rounded up once, as Earmark rounds."""
        scaled = (
            bill.input_tokens * self.input
            + bill.output_tokens * self.output
            + bill.cache_read_input_tokens * self.cache_read
            + bill.cache_creation_input_tokens * self.cache_write
        )
        return -(-scaled // 1_000_000)


@dataclass
class AnthropicState:
    """What the fake answers and what it saw; the lock guards it."""

    rates: Rates
    output_tokens: int = 300
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    chunk_seconds: float = 0.0
    late_seconds: float = 2.0
    ignores_maximum: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    billed: list[Bill] = field(default_factory=list)
    # Streams whose reader went away before the last event.
    abandoned: int = 0
    # Set when the fake stops: a late answer is cut short.
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def billed_micros(self) -> int:
        """The tally: what every answer so far cost at the test's prices."""
        with self.lock:
            return sum(self.rates.micros(bill) for bill in self.billed)


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


class _Handler(BaseHTTPRequestHandler):
    server: StateServer[AnthropicState]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the state, not the server's log."""

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The caller went away (it timed out): nobody to answer.
            pass

    def _error(self, status: int, message: str) -> None:
        kind = ERROR_TYPES.get(status, "overloaded_error" if status == 529 else "api_error")
        self._json(status, {"type": "error", "error": {"type": kind, "message": message}})

    def do_POST(self) -> None:
        state = self.server.state
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        with state.lock:
            state.requests.append(body)
        if self.path != "/v1/messages":
            self._error(404, f"no route {self.path}")
            return
        missing = [name for name in REQUIRED if name not in body]
        if missing:
            self._error(400, f"{missing[0]}: Field required")
            return
        last = _text(body["messages"][-1].get("content")) if body["messages"] else ""
        if last.startswith("fail:"):
            code = int(last.removeprefix("fail:"))
            self._error(code, f"canned {code}")
            return
        if last == "late":
            # The fake provider's own pace, not a test's wait: it answers after the caller's
            # timeout; stopping the fake cuts it short.
            state.stopping.wait(timeout=state.late_seconds)
        chars = len(_text(body.get("system"))) + sum(
            len(_text(m.get("content"))) for m in body["messages"]
        )
        prompt = chars // 4 + 1
        read = min(state.cache_read_tokens, prompt)
        written = min(state.cache_write_tokens, prompt - read)
        most = int(body["max_tokens"])
        output = state.output_tokens if state.ignores_maximum else min(state.output_tokens, most)
        stop = "max_tokens" if output == most else "end_turn"
        if body.get("stream"):
            self._stream(body, Bill(prompt - read - written, output, read, written), stop)
            return
        bill = Bill(prompt - read - written, output, read, written)
        with state.lock:
            state.billed.append(bill)
        self._json(
            200,
            {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": "tok " * output}],
                "model": body["model"],
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": bill.usage(),
            },
        )

    def _stream(self, body: dict[str, Any], whole: Bill, stop: str) -> None:
        state = self.server.state
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        sent = 0

        def event(kind: str, data: dict[str, Any]) -> None:
            self.wfile.write(
                f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()
            )
            self.wfile.flush()

        try:
            start = {**whole.usage(), "output_tokens": 0}
            message = {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": body["model"],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start,
            }
            event("message_start", {"message": message})
            event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            )
            event("ping", {})
            for _ in range(whole.output_tokens):
                delta = {"type": "text_delta", "text": "tok "}
                event("content_block_delta", {"index": 0, "delta": delta})
                sent += 1
                if state.chunk_seconds:
                    state.stopping.wait(timeout=state.chunk_seconds)
            event("content_block_stop", {"index": 0})
            event(
                "message_delta",
                {
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": whole.output_tokens},
                },
            )
            event("message_stop", {})
        except (BrokenPipeError, ConnectionResetError):
            with state.lock:
                state.abandoned += 1
        with state.lock:
            # The provider bills what it generated before the reader went away.
            state.billed.append(
                Bill(
                    whole.input_tokens,
                    sent,
                    whole.cache_read_input_tokens,
                    whole.cache_creation_input_tokens,
                )
            )


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
