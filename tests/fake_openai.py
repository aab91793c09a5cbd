"""A fake OpenAI-compatible provider: a real HTTP server on 127.0.0.1 that answers
POST /v1/chat/completions with canned completions, usage, errors and slow streams, and
records what it was asked and what it billed.

The last message's text chooses the answer:
- "fail:CODE": HTTP CODE with an OpenAI error body;
- "flaky": 500 the first time that exact request text is seen, then a completion;
- "slow": a completion once `slow` is set;
- "drop": a completion billed, whose connection drops halfway through its body;
- "late": a completion `late_seconds` after the request (after the client's timeout, when
  the test sets it shorter), billed all the same, as a provider bills work whose caller
  stopped waiting;
- anything else: a completion of `completion_tokens` tokens (at most the request's
  max_completion_tokens or max_tokens, unless `ignores_maximum` is set, as a provider
  that overruns it would), or, streamed, that many chunks of one token each,
  `chunk_seconds` apart, then the usage chunk when the request asked for it.
Prompt tokens are the messages' characters over four, as a tokenizer roughly counts them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.http_fake import StateServer, serving


@dataclass(frozen=True)
class Billed:
    """What one answer would cost at the provider: its tokens."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int


@dataclass
class OpenAIState:
    """What the fake answers and what it saw; the lock guards it."""

    completion_tokens: int = 300
    cached_tokens: int = 0
    chunk_seconds: float = 0.0
    # How long a "late" request waits before it is answered (and billed).
    late_seconds: float = 2.0
    # Generate past the request's maximum answer, as no real provider should.
    ignores_maximum: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    retry_headers: list[str] = field(default_factory=list)
    billed: list[Billed] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)
    # Streams whose reader went away before the last chunk.
    abandoned: int = 0
    # "slow" requests are answered once this is set (or after 30 s).
    slow: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content)
    return str(content)


class _Handler(BaseHTTPRequestHandler):
    server: StateServer[OpenAIState]
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
            # The caller went away (a killed worker): nobody to answer.
            pass

    def _error(self, status: int) -> None:
        self._json(
            status,
            {"error": {"message": f"canned {status}", "type": "server_error", "code": None}},
        )

    def _drop(self) -> None:
        """Promises a body, sends half of it and closes the connection: the caller sees
        the answer cut off after the request was run."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "1000")
        self.end_headers()
        self.wfile.write(b'{"id": "chatcmpl-fake", "object": "chat.comp')
        self.wfile.flush()
        self.close_connection = True

    def do_POST(self) -> None:
        state = self.server.state
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))))
        last = _text(body["messages"][-1])
        with state.lock:
            state.requests.append(body)
            state.retry_headers.append(self.headers.get("x-stainless-retry-count", ""))
            state.seen[last] += 1
            first_sight = state.seen[last] == 1
        if self.path != "/v1/chat/completions":
            self._error(404)
            return
        if last.startswith("fail:"):
            self._error(int(last.removeprefix("fail:")))
            return
        if last == "flaky" and first_sight:
            self._error(500)
            return
        if last == "slow":
            state.slow.wait(timeout=30)
        if last == "late":
            # The fake provider's own pace, not a test's wait: it answers after the caller's
            # timeout; stopping the fake cuts it short.
            state.slow.wait(timeout=state.late_seconds)
        prompt = sum(len(_text(m)) for m in body["messages"]) // 4 + 1
        most = body.get("max_completion_tokens") or body.get("max_tokens")
        capped = most and not state.ignores_maximum
        completion = min(state.completion_tokens, most) if capped else state.completion_tokens
        cached = min(state.cached_tokens, prompt)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        if body.get("stream"):
            self._stream(body, prompt, completion, cached, usage)
            return
        with state.lock:
            state.billed.append(Billed(prompt, completion, cached))
        if last == "drop":
            self._drop()
            return
        self._json(
            200,
            {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "tok " * completion},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            },
        )

    def _stream(
        self, body: dict[str, Any], prompt: int, completion: int, cached: int, usage: Any
    ) -> None:
        state = self.server.state
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        sent = 0

        def event(choices: list[Any], with_usage: Any = None) -> bytes:
            chunk = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": body["model"],
                "choices": choices,
                "usage": with_usage,
            }
            return f"data: {json.dumps(chunk)}\n\n".encode()

        try:
            for _ in range(completion):
                delta = {"index": 0, "delta": {"content": "tok "}, "finish_reason": None}
                self.wfile.write(event([delta]))
                self.wfile.flush()
                sent += 1
                if state.chunk_seconds:
                    time.sleep(state.chunk_seconds)
            self.wfile.write(event([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
            if (body.get("stream_options") or {}).get("include_usage"):
                self.wfile.write(event([], usage))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with state.lock:
                state.abandoned += 1
        with state.lock:
            # The provider bills what it generated before the reader went away.
            state.billed.append(Billed(prompt, sent, cached))


@dataclass
class FakeOpenAI:
    state: OpenAIState
    url: str


@contextmanager
def fake_openai() -> Iterator[FakeOpenAI]:
    """Serves a fake OpenAI on 127.0.0.1 port 0 until the block ends, also on failure."""
    state = OpenAIState()
    with serving(StateServer(_Handler, state), "fake-openai", state.slow.set) as port:
        yield FakeOpenAI(state=state, url=f"http://127.0.0.1:{port}/v1")
