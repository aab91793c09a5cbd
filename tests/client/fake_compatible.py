"""A fake OpenAI-compatible Chat Completions server: a real HTTP server on 127.0.0.1 that
answers POST .../chat/completions (DeepSeek's /chat/completions under its base URL
https://api.deepseek.com, OpenAI's /v1/chat/completions, Azure OpenAI's
/openai/deployments/{deployment}/chat/completions), streamed or not, with the usage a test
sets, so that the tests see what a provider reports of its cache and its service tier
priced as it bills.

Wire facts followed, as published:
- DeepSeek's chat completion (api-docs.deepseek.com, "Create Chat Completion"): `usage` is
  {completion_tokens, prompt_tokens, prompt_cache_hit_tokens, prompt_cache_miss_tokens,
  total_tokens, completion_tokens_details {reasoning_tokens}}; prompt_tokens counts hits and
  misses both (hit + miss = prompt), and OpenAI's prompt_tokens_details.cached_tokens is not
  among its fields. A stream sends chat.completion.chunk objects and, with
  stream_options.include_usage, one more chunk before `data: [DONE]` whose choices are
  empty and whose usage is the whole request's.
- OpenAI's `service_tier` (openai/types/chat/chat_completion.py, chat_completion_chunk.py):
  the answer, and every chunk of a stream, name the tier that served the request, which
  "may be different from the value set in the parameter" (a priority request served at
  default, an auto one at the project's priority). Azure OpenAI answers the same field.

What a test sets (CompatibleState): the usage's counts; `cache_hits`, sent as DeepSeek's
prompt_cache_hit_tokens (and prompt_tokens - hits as its misses), as is, so that a test can
send one out of its shape, None for an answer in OpenAI's shape; `served_tier`, the
service_tier the answer names (None: none, as DeepSeek answers).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.http_fake import JsonHandler, StateServer, serving

# The endpoint's path, after whatever base path and deployment the provider puts first.
ENDPOINT = "/chat/completions"


@dataclass
class CompatibleState:
    """What the fake answers and what it was asked; the lock guards it."""

    prompt_tokens: int = 1_000
    completion_tokens: int = 200
    # DeepSeek's prompt_cache_hit_tokens, sent as is (None: OpenAI's shape, without it).
    cache_hits: Any = None
    # The service_tier the answer names (None: the answer names none).
    served_tier: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class FakeCompatible:
    url: str
    state: CompatibleState


def usage(state: CompatibleState) -> dict[str, Any]:
    """The usage object the answer carries: OpenAI's counts, and DeepSeek's cache hits and
    misses when the state has hits."""
    reported: dict[str, Any] = {
        "prompt_tokens": state.prompt_tokens,
        "completion_tokens": state.completion_tokens,
        "total_tokens": state.prompt_tokens + state.completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    if state.cache_hits is not None:
        hits = state.cache_hits
        misses = state.prompt_tokens - hits if isinstance(hits, int) else state.prompt_tokens
        reported["prompt_cache_hit_tokens"] = hits
        reported["prompt_cache_miss_tokens"] = misses
    return reported


class _Handler(JsonHandler):
    server: StateServer[CompatibleState]

    def do_POST(self) -> None:
        state = self.server.state
        body = self.read_json()
        with state.lock:
            state.requests.append(body)
        if not self.path.partition("?")[0].endswith(ENDPOINT):
            error = {"message": f"Invalid URL (POST {self.path})", "type": "invalid_request_error"}
            self.send_json(404, {"error": {**error, "param": None, "code": None}})
            return
        head: dict[str, Any] = {"id": "chatcmpl-compatible", "created": 1_700_000_000}
        head["model"] = body.get("model", "")
        head["system_fingerprint"] = "fp_compatible"
        if state.served_tier is not None:
            head["service_tier"] = state.served_tier
        text = "tok " * state.completion_tokens
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}}
            self.send_json(
                200,
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [{**choice, "logprobs": None, "finish_reason": "stop"}],
                    "usage": usage(state),
                },
            )
            return
        chunk = {**head, "object": "chat.completion.chunk"}
        self.start_events()
        delta = {"role": "assistant", "content": text}
        self.send_event({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        self.send_event({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            self.send_event({**chunk, "choices": [], "usage": usage(state)})
        self.send_chunk(b"data: [DONE]\n\n")
        self.end_events()


@contextmanager
def fake_compatible(state: CompatibleState | None = None) -> Iterator[FakeCompatible]:
    server = StateServer(_Handler, state or CompatibleState())
    with serving(server, "fake-compatible") as port:
        yield FakeCompatible(f"http://127.0.0.1:{port}", server.state)
