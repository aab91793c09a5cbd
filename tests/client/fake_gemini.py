"""A fake Gemini API and Vertex AI: a real HTTP server on 127.0.0.1 that answers a model's
generateContent, streamGenerateContent (?alt=sse: server-sent events; without it, one JSON
array, as Google answers), countTokens, embedContent, batchEmbedContents and Vertex's
:predict embeddings, with the usageMetadata a test sets, and records every request it saw.

Wire facts followed, as published and as google-genai 3.6.1 sent and parsed them
(/work/notes-45.md §1; ai.google.dev/api/generate-content; Vertex's
projects.locations.publishers.models reference):
- Paths end in `:{method}` after the model, whatever the version (`v1`, the Python SDK's
  default; `v1beta`, the JS SDK's; `v1beta1`, Vertex's) and the resource before the model:
  `/{v}/models/{m}`, Vertex express mode's `/{v}/publishers/google/models/{m}` and
  `/{v}/projects/{p}/locations/{l}/publishers/google/models/{m}`. Authentication is an
  `x-goog-api-key` header or an `Authorization: Bearer` token; without one Google answers
  401 UNAUTHENTICATED.
- An answer is a GenerateContentResponse: candidates (content, finishReason, index),
  usageMetadata, modelVersion, responseId. A stream's events are `data: <chunk JSON>` and a
  blank line, no event names and no [DONE]; the early chunks carry a partial usageMetadata
  (the prompt's count), the last one the finishReason and the whole usage. Lines end in
  CRLF or LF (the SDK splits at either); the JSON is sent unescaped (ensure_ascii off), so
  a U+2028 in a text reaches the client raw, as the SDK's line splitter must allow.
- Errors are Google's error body, {"error": {"code", "message", "status"}}.
- countTokens answers {"totalTokens", "cachedContentTokenCount"}; batchEmbedContents
  {"embeddings": [{"values"}]}, with usageMetadata when the test sets one (the SDK reads it
  when present: models.py _EmbedContentResponse_from_mldev); Vertex's :predict
  {"predictions": [{"embeddings": {"values", "statistics"}}], "metadata"}.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.http_fake import JsonHandler, Received, StateServer, serving

MODEL_PATH = re.compile(
    r"/(?P<version>v\d+(?:(?:alpha|beta)\d*)?)/"
    r"(?:projects/[^/]+/locations/[^/]+/)?(?:publishers/google/)?"
    r"models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)"
)
# A whole usage, self-consistent: total = prompt + candidates + thoughts + tool-use prompt.
USAGE = {
    "promptTokenCount": 10,
    "candidatesTokenCount": 5,
    "thoughtsTokenCount": 7,
    "cachedContentTokenCount": 4,
    "toolUsePromptTokenCount": 2,
    "totalTokenCount": 24,
}
# What the early chunks of a stream carry: the prompt's count alone.
PARTIAL_USAGE = {"promptTokenCount": 10, "totalTokenCount": 10}
_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


@dataclass
class GeminiState:
    """What the fake answers and what it was asked; the lock guards it."""

    usage: dict[str, Any] = field(default_factory=lambda: dict(USAGE))
    partial_usage: dict[str, Any] | None = field(default_factory=lambda: dict(PARTIAL_USAGE))
    # A stream's texts, one chunk each; the last chunk carries the finishReason and usage.
    texts: list[str] = field(default_factory=lambda: ["Hel", "lo\u2028there"])
    line_end: str = "\r\n"
    # The stream stops before its last chunk (the connection cut).
    cut: bool = False
    # An error status every model method answers with (None: answers).
    error: int | None = None
    # The usageMetadata an embedding answer carries (None: none).
    embed_usage: dict[str, Any] | None = None
    # How long a model method waits before it answers: the provider's own pace (the
    # benchmark's fixed answer time); 0, at once.
    delay_seconds: float = 0.0
    requests: list[Received] = field(default_factory=list)
    # The usageMetadata of every answer Google would bill: a generateContent answered, a
    # stream sent to its last chunk, an embedding answered with a usage.
    billed: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bill(self, usage: dict[str, Any]) -> None:
        with self.lock:
            self.billed.append(dict(usage))


@dataclass(frozen=True)
class FakeGemini:
    url: str
    state: GeminiState


def chunks(state: GeminiState, model: str) -> list[dict[str, Any]]:
    """A stream's chunks: each text its own, the last with its finishReason and the usage."""
    out = []
    for at, text in enumerate(state.texts):
        last = at == len(state.texts) - 1
        candidate: dict[str, Any] = {
            "content": {"parts": [{"text": text}], "role": "model"},
            "index": 0,
        }
        chunk: dict[str, Any] = {"candidates": [candidate]}
        if last:
            candidate["finishReason"] = "STOP"
            chunk["usageMetadata"] = state.usage
        elif state.partial_usage is not None:
            chunk["usageMetadata"] = state.partial_usage
        out.append({**chunk, "modelVersion": model, "responseId": "resp-fake"})
    return out


def sse(chunks: list[dict[str, Any]], line_end: str) -> bytes:
    """Server-sent events as Gemini frames them: a data line and a blank line each."""
    return b"".join(
        f"data: {json.dumps(c, ensure_ascii=False)}{line_end}{line_end}".encode() for c in chunks
    )


def answer(state: GeminiState, model: str) -> dict[str, Any]:
    text = "".join(state.texts)
    return {
        "candidates": [
            {
                "content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": state.usage,
        "modelVersion": model,
        "responseId": "resp-fake",
    }


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": _STATUSES.get(status, "")}}


class _Handler(JsonHandler):
    server: StateServer[GeminiState]

    def do_POST(self) -> None:
        state = self.server.state
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        body = json.loads(raw) if raw else {}
        url = urlsplit(self.path)
        auth = (
            "api-key"
            if "x-goog-api-key" in self.headers
            else "bearer"
            if self.headers.get("authorization", "").startswith("Bearer ")
            else ""
        )
        headers = {
            n: self.headers[n] for n in ("content-type", "x-goog-api-client") if n in self.headers
        }
        with state.lock:
            state.requests.append(Received("POST", self.path, body, {**headers, "auth": auth}))
        found = MODEL_PATH.fullmatch(url.path)
        if found is None:
            self.send_json(404, error_body(404, f"no such method: {url.path}"))
            return
        if not auth:
            self.send_json(401, error_body(401, "Request is missing required authentication."))
            return
        if state.error is not None:
            self.send_json(state.error, error_body(state.error, "the fake was told to fail"))
            return
        if state.delay_seconds:
            time.sleep(state.delay_seconds)
        model, method = found["model"], found["method"]
        if method == "generateContent":
            state.bill(state.usage)
            self.send_json(200, answer(state, model))
        elif method == "streamGenerateContent":
            self._stream(state, model, parse_qs(url.query).get("alt") == ["sse"])
        elif method == "countTokens":
            self.send_json(200, {"totalTokens": 10, "cachedContentTokenCount": 0})
        elif method in ("embedContent", "batchEmbedContents"):
            self._embed(state, body, method)
        elif method == "predict":
            embedding = {"values": [0.1, 0.2], "statistics": {"token_count": 2, "truncated": False}}
            instances = body.get("instances") or []
            self.send_json(
                200,
                {
                    "predictions": [{"embeddings": embedding} for _ in instances],
                    "metadata": {"billableCharacterCount": 2},
                },
            )
        else:
            self.send_json(404, error_body(404, f"no such method: {method}"))

    def _stream(self, state: GeminiState, model: str, events: bool) -> None:
        sent = chunks(state, model)
        if not events:
            self.send_json(200, sent)
            return
        if state.cut:
            sent = sent[:-1]
        if not state.cut:
            state.bill(state.usage)
        self.start_events()
        self.send_chunk(sse(sent, state.line_end))
        if state.cut:
            self.cut_events()
        else:
            self.end_events()

    def _embed(self, state: GeminiState, body: dict[str, Any], method: str) -> None:
        values = {"values": [0.1, 0.2, 0.3]}
        reply: dict[str, Any]
        if method == "embedContent":
            reply = {"embedding": values}
        else:
            reply = {"embeddings": [values for _ in body.get("requests") or []]}
        if state.embed_usage is not None:
            state.bill(state.embed_usage)
            reply["usageMetadata"] = state.embed_usage
        self.send_json(200, reply)


@contextmanager
def fake_gemini(state: GeminiState | None = None) -> Iterator[FakeGemini]:
    server = StateServer(_Handler, state or GeminiState())
    with serving(server, "fake-gemini") as port:
        yield FakeGemini(f"http://127.0.0.1:{port}", server.state)
