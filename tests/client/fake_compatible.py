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

- Azure OpenAI (learn.microsoft.com/azure/ai-services/openai: content filtering, API
  versions; /work/notes-45.md sections 3.2-3.3, checked with openai 3.60.0): the answer
  carries prompt_filter_results and each choice content_filter_results; a stream's first
  chunk has no choices, only prompt_filter_results, with an empty id, object and model and
  created 0; an answer the filter stopped ends with finish_reason "content_filter" (billed:
  its usage is sent); a prompt the filter refused is answered 400 with code
  "content_filter" and an innererror; an api-version before 2024-10-21 (or a preview
  before 2024-09-01-preview) answers a body with stream_options 400 "Unrecognized request
  argument supplied: stream_options".
- Groq (notes 4.2, from the AI SDK's Groq provider tests and Groq's own captures): a
  stream's usage is under x_groq.usage on the chunk with the finish_reason, and no chunk
  has a top-level usage; an answer's usage adds queue_time, prompt_time... and x_groq
  carries the request's id.
- OpenRouter (openrouter.ai/docs/use-cases/usage-accounting, api-reference/streaming):
  every answer's usage carries cost (dollars of its credits), cost_details and is_byok,
  streamed on the last chunk whether stream_options asked for it or not; streams carry
  `: OPENROUTER PROCESSING` comment lines.
- Mistral (docs.mistral.ai, chat completions; notes 4.3): a stream's usage is on its last
  chunk, the one with the finish_reason, whether asked for or not.
- xAI (docs.x.ai; genai-prices' x-ai extractor, notes 4.6): completion_tokens leave out
  completion_tokens_details.reasoning_tokens, which total_tokens counts.

What a test sets (CompatibleState): the usage's counts; `cache_hits`, sent as DeepSeek's
prompt_cache_hit_tokens (and prompt_tokens - hits as its misses), as is, so that a test can
send one out of its shape, None for an answer in OpenAI's shape; `served_tier`, the
service_tier the answer names (None: none, as DeepSeek answers); `flavor`, whose additions
the answers carry ("azure", "groq", "openrouter", "mistral", "xai"; "" for none);
`filtered`, what Azure's filter stops ("output", "prompt"; "" for nothing); `cost`,
OpenRouter's usage.cost, sent as is (and `upstream_cost`, a BYOK call's);
`reasoning_tokens`, xAI's; `delay_seconds`, how long an answer waits (the benchmark's
fixed answer time). It records each request's body and its path with its query
(`paths`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

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
    # Whose additions the answers carry: "azure", "groq", "openrouter", "mistral", "xai"
    # ("": none).
    flavor: str = ""
    # xAI's reasoning tokens, beside its completion_tokens.
    reasoning_tokens: int = 0
    # Azure's content filter: "output" stops the answer, "prompt" refuses the request.
    filtered: str = ""
    # OpenRouter's usage.cost, in dollars, sent as is; byok adds upstream_inference_cost.
    cost: Any = 0.0
    upstream_cost: Any = None
    # How long a chat completion waits before it answers: the provider's own pace (the
    # benchmark's fixed answer time); 0, at once.
    delay_seconds: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class FakeCompatible:
    url: str
    state: CompatibleState


def usage(state: CompatibleState) -> dict[str, Any]:
    """The usage object the answer carries: OpenAI's counts, and DeepSeek's cache hits and
    misses when the state has hits, OpenRouter's cost, Groq's timings."""
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
    if state.flavor == "openrouter":
        reported["cost"] = state.cost
        reported["is_byok"] = state.upstream_cost is not None
        reported["cost_details"] = {"upstream_inference_cost": state.upstream_cost}
        reported["prompt_tokens_details"] = {"cached_tokens": 0, "audio_tokens": 0}
    if state.flavor == "groq":
        timings = {"queue_time": 0.037, "prompt_time": 0.0007, "completion_time": 0.46}
        reported = {**timings, **reported, "total_time": 0.46}
    if state.flavor == "xai":
        reported["completion_tokens_details"] = {"reasoning_tokens": state.reasoning_tokens}
        reported["total_tokens"] += state.reasoning_tokens
    return reported


# Azure's filter results: every category safe (the filter ran and let it through).
SAFE = {
    kind: {"filtered": False, "severity": "safe"}
    for kind in ("hate", "self_harm", "sexual", "violence")
}
JAILBREAK = {"jailbreak": {"filtered": False, "detected": False}}
PROMPT_FILTER_RESULTS = [{"prompt_index": 0, "content_filter_results": {**SAFE, **JAILBREAK}}]
# An answer the filter stopped: a category filtered.
STOPPED = {**SAFE, "violence": {"filtered": True, "severity": "medium"}}
PROMPT_FILTERED = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
        "content management policy. Please modify your prompt and retry.",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {**SAFE, "sexual": {"filtered": True, "severity": "high"}},
        },
    }
}
STREAM_OPTIONS_REFUSED = {
    "error": {
        "message": "Unrecognized request argument supplied: stream_options",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
}
_VERSION = re.compile(r"(\d{4}-\d{2}-\d{2})(-preview)?")


def takes_stream_options(api_version: str) -> bool:
    """Whether Azure's api_version takes stream_options (notes 3.3: the GA 2024-10-21 and
    the previews from 2024-09-01-preview; 2024-08-01-preview is taken as one that does
    not)."""
    found = _VERSION.fullmatch(api_version)
    if found is None:
        return True
    day, preview = found.groups()
    return day >= ("2024-09-01" if preview else "2024-10-21")


class _Handler(JsonHandler):
    server: StateServer[CompatibleState]

    def do_POST(self) -> None:
        state = self.server.state
        body = self.read_json()
        with state.lock:
            state.requests.append(body)
            state.paths.append(self.path)
        url = urlsplit(self.path)
        if not url.path.endswith(ENDPOINT):
            error = {"message": f"Invalid URL (POST {self.path})", "type": "invalid_request_error"}
            self.send_json(404, {"error": {**error, "param": None, "code": None}})
            return
        azure = state.flavor == "azure"
        version = parse_qs(url.query).get("api-version", [""])[0]
        if azure and "stream_options" in body and not takes_stream_options(version):
            self.send_json(400, STREAM_OPTIONS_REFUSED)
            return
        if azure and state.filtered == "prompt":
            self.send_json(400, PROMPT_FILTERED)
            return
        if state.delay_seconds:
            time.sleep(state.delay_seconds)
        head: dict[str, Any] = {"id": "chatcmpl-compatible", "created": 1_700_000_000}
        head["model"] = body.get("model", "")
        head["system_fingerprint"] = "fp_compatible"
        if state.served_tier is not None:
            head["service_tier"] = state.served_tier
        stopped = azure and state.filtered == "output"
        text = "tok " * (state.completion_tokens // 2 if stopped else state.completion_tokens)
        finish = "content_filter" if stopped else "stop"
        filters: dict[str, Any] = {"content_filter_results": STOPPED if stopped else SAFE}
        each = filters if azure else {}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, **each}
            answer = {
                **head,
                "object": "chat.completion",
                "choices": [{**choice, "logprobs": None, "finish_reason": finish}],
                "usage": usage(state),
            }
            if azure:
                answer["prompt_filter_results"] = PROMPT_FILTER_RESULTS
            if state.flavor == "groq":
                answer["x_groq"] = {"id": "req_01jbd6g2qdfw2adyrt2az8hz4w"}
            self.send_json(200, answer)
            return
        chunk = {**head, "object": "chat.completion.chunk"}
        self.start_events()
        if state.flavor == "openrouter":
            self.send_chunk(b": OPENROUTER PROCESSING\n\n")
        if azure:
            first = {"id": "", "object": "", "created": 0, "model": "", "choices": []}
            self.send_event({**first, "prompt_filter_results": PROMPT_FILTER_RESULTS})
        delta = {"role": "assistant", "content": text}
        self.send_event(
            {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None, **each}]}
        )
        ending = {"index": 0, "delta": {}, "finish_reason": finish, **each}
        last: dict[str, Any] = {**chunk, "choices": [ending]}
        if state.flavor == "groq":
            last["x_groq"] = {"id": "req_01jadadp0femyae9kav1gpkhe8", "usage": usage(state)}
        if state.flavor == "mistral":
            last["usage"] = usage(state)
        self.send_event(last)
        asked = (body.get("stream_options") or {}).get("include_usage")
        if state.flavor == "openrouter" or (asked and state.flavor not in ("groq", "mistral")):
            self.send_event({**chunk, "choices": [], "usage": usage(state)})
        self.send_chunk(b"data: [DONE]\n\n")
        self.end_events()


@contextmanager
def fake_compatible(state: CompatibleState | None = None) -> Iterator[FakeCompatible]:
    server = StateServer(_Handler, state or CompatibleState())
    with serving(server, "fake-compatible") as port:
        yield FakeCompatible(f"http://127.0.0.1:{port}", server.state)
