"""A fake OpenAI: a real HTTP server on 127.0.0.1 that answers POST /v1/chat/completions,
/v1/responses (tests/fake_openai_responses.py, background responses retrieved and
cancelled too) and /v1/embeddings in OpenAI's published wire format, with errors, slow,
late, unstarted, dropped and cut answers, and records what it was asked and what it
billed; and, for an admin key, GET /v1/organization/usage/completions,
/v1/organization/usage/embeddings and /v1/organization/costs from that bill
(tests/fake_openai_reports.py). Its state and bill are in tests/fake_openai_state.py: each
bill carries when its request arrived (the fake's `clock`) and its API key's id and
project (`api_key_ids`, `project_ids`, by the Bearer key).

The last message's text (a Responses input's last item, an embedding's last input)
chooses the answer:
- "fail:CODE": HTTP CODE with an OpenAI error body;
- "flaky": 500 the first time that exact request text is seen, then an answer;
- "slow": an answer once `slow` is set;
- "late": an answer `late_seconds` after the request (after the client's timeout, when the
  test sets it shorter), billed all the same, as a provider bills work whose caller
  stopped waiting;
- "unstarted": the connection closes unanswered `late_seconds` after the request, and
  nothing is billed: a call whose caller gave up before the provider started it
  (`unstarted` counts them);
- "drop" (chat, not streamed): billed, and the connection drops halfway through the body;
- "cut" (streamed): the stream stops halfway and the connection closes before the last
  chunk, so before the usage chunk or final event: billed whole all the same;
- "tool" (with function tools in the request): a call of the first one, its arguments a
  JSON object of its parameters' properties, counted three characters a token;
- "think": `reasoning_tokens` hidden reasoning tokens first, counted in the completion;
- anything else: `completion_tokens` tokens of `token_texts` (a json_schema response
  format gets a JSON object of its schema's properties instead), streamed
  `tokens_per_chunk` a chunk, `chunk_seconds` apart.
An answer stops at the request's max_completion_tokens or max_tokens (Responses:
max_output_tokens), reasoning included, unless `ignores_maximum` is set, as a provider
that overruns it would. Prompt tokens are the messages' (instructions' and input's)
characters over four, plus one; an embedding input counts the same, a token array its
length; `cached_tokens` of a prompt were read from the cache and `cache_write_tokens`
written to it. A stream whose reader goes away is billed for the tokens sent.

Wire facts followed, as checked (openai 3.57.0 is the SDK installed):
- Chat: ChatCompletion and ChatCompletionChunk (openai/types/chat/chat_completion.py,
  chat_completion_chunk.py); usage is CompletionUsage (openai/types/completion_usage.py):
  prompt_tokens_details {cached_tokens, audio_tokens, and cache_write_tokens, sent here
  only when nonzero}, completion_tokens_details {reasoning_tokens, audio_tokens,
  accepted_prediction_tokens, rejected_prediction_tokens}. A recorded stream (vercel/ai,
  packages/openai/src/chat/__fixtures__/openai-text.chunks.txt) sends one token a chunk,
  the first with role "assistant", `service_tier` "default" on every chunk, a last
  choice with an empty delta and its finish_reason, then (include_usage) a chunk with
  empty choices and the usage, then `data: [DONE]`; chunks carry no `event:` line. The
  fake carries the role on the first text chunk rather than a chunk of its own, so that
  a stream's chunks are its text chunks and one more. A streamed tool call's first
  delta has the call's index, id, type and name with arguments "", the rest argument
  fragments (ChoiceDeltaToolCall). finish_reason is "length" at the request's limit,
  "tool_calls" for a call, else "stop".
- service_tier: a request's "auto" (or none) is answered "default", "fast" as
  "priority" (the service_tier docstring in chat_completion.py); the Responses stream's
  opening events echo the requested tier, "auto" when none, and the final one says the
  tier used (vercel/ai packages/openai/src/responses/__fixtures__/
  issue-20047-openai-responses.chunks.txt).
- Embeddings: CreateEmbeddingResponse {object "list", data [{object "embedding", index,
  embedding}], model, usage {prompt_tokens, total_tokens}}
  (openai/types/create_embedding_response.py); the SDK sends encoding_format "base64"
  unless told otherwise and decodes little-endian float32
  (openai/lib/_parsing/_embeddings.py).
- Errors: {"error": {"message", "type", "param", "code"}}; an unknown path is 404
  "Invalid URL (POST /path)" of type invalid_request_error, 429 is type "requests" code
  "rate_limit_exceeded" (OpenAI's error-codes guide), 5xx type "server_error".
- Streams are sent in chunked transfer encoding, as the API sends them, so that a cut
  stream reads as a body cut short: the Python SDK raises APIConnectionError, while
  Node 20's fetch (so the npm openai package) just ends the stream, without its usage.
  Chunks leave out the optional `obfuscation` field.
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from tests.fake_openai_reports import report
from tests.fake_openai_responses import answer as answer_responses
from tests.fake_openai_responses import cancel as cancel_response
from tests.fake_openai_responses import last_input
from tests.fake_openai_responses import retrieve as retrieve_response
from tests.fake_openai_state import (
    CHAT,
    EMBEDDINGS,
    HEADERS,
    RESPONSES,
    Billed,
    Caller,
    ModelRates,
    OpenAIState,
    Plan,
    chars,
    filled,
    last_text,
    plan,
    served_tier,
)
from tests.http_fake import JsonHandler, StateServer, serving

__all__ = ["Billed", "FakeOpenAI", "ModelRates", "OpenAIState", "chat_usage", "fake_openai"]

CHAT_ID = "chatcmpl-fake"
CALL_ID = "call_fake"
FINGERPRINT = "fp_fake"
REQUIRED = {
    CHAT: ("model", "messages"),
    RESPONSES: ("model",),
    EMBEDDINGS: ("model", "input"),
}


def chat_usage(billed: Billed) -> dict[str, Any]:
    """A chat completion's usage object, as CompletionUsage has it."""
    prompt_details = {"cached_tokens": billed.cached_tokens, "audio_tokens": 0}
    if billed.cache_write_tokens:
        prompt_details["cache_write_tokens"] = billed.cache_write_tokens
    return {
        "prompt_tokens": billed.prompt_tokens,
        "completion_tokens": billed.completion_tokens,
        "total_tokens": billed.prompt_tokens + billed.completion_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {
            "reasoning_tokens": billed.reasoning_tokens,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _chat_last(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    return last_text(messages[-1].get("content"))


def _embedding_inputs(body: dict[str, Any]) -> list[Any]:
    """The inputs of an embeddings request: a string, a token array, or a list of either."""
    given = body.get("input")
    if isinstance(given, str) or (isinstance(given, list) and given and isinstance(given[0], int)):
        return [given]
    return list(given or [])


def _embedding_last(body: dict[str, Any]) -> str:
    texts = [item for item in _embedding_inputs(body) if isinstance(item, str)]
    return texts[-1] if texts else ""


def _function_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The first function tool of a chat request: its name and parameters."""
    for tool in body.get("tools") or []:
        if tool.get("type") == "function":
            function = tool.get("function") or {}
            return {"name": function.get("name"), "parameters": function.get("parameters") or {}}
    return None


class _Handler(JsonHandler):
    server: StateServer[OpenAIState]
    # Who sent the request being answered, as it arrived.
    caller: Caller

    def _error(self, status: int, message: str = "", param: str | None = None) -> None:
        kind, code = "invalid_request_error", None
        if status == 429:
            kind, code = "requests", "rate_limit_exceeded"
        elif status >= 500:
            kind = "server_error"
        error = {"message": message or f"canned {status}", "type": kind, "param": param}
        self.send_json(status, {"error": {**error, "code": code}})

    def _record(self, body: Any, last: str) -> bool:
        """Records the request; whether its text is seen for the first time."""
        state = self.server.state
        with state.lock:
            state.requests.append(body)
            state.received.append(self.received(body, HEADERS))
            state.retry_headers.append(self.headers.get("x-stainless-retry-count", ""))
            state.seen[last] += 1
            return state.seen[last] == 1

    def do_GET(self) -> None:
        self._record({}, "")
        if retrieve_response(self, self.server.state, self.path):
            return
        answered = report(self.server.state, self.path, self.headers.get("authorization"))
        if answered is None:
            self._error(404, f"Invalid URL (GET {self.path})")
            return
        self.send_json(*answered)

    def do_POST(self) -> None:
        state = self.server.state
        self.caller = state.caller(self.headers.get("authorization"))
        body = self.read_json()
        routes: dict[str, tuple[Callable[[dict[str, Any]], str], Callable[..., None]]] = {
            CHAT: (_chat_last, self._chat),
            RESPONSES: (last_input, self._responses),
            EMBEDDINGS: (_embedding_last, self._embeddings),
        }
        if self.path not in routes:
            self._record(body, "")
            if not cancel_response(self, state, self.path):
                self._error(404, f"Invalid URL (POST {self.path})")
            return
        last_of, answer = routes[self.path]
        last = last_of(body)
        first_sight = self._record(body, last)
        missing = [name for name in REQUIRED[self.path] if name not in body]
        if missing:
            self._error(400, f"Missing required parameter: '{missing[0]}'.", missing[0])
            return
        if last.startswith("fail:"):
            self._error(int(last.removeprefix("fail:")))
            return
        if last == "flaky" and first_sight:
            self._error(500)
            return
        if last == "slow":
            state.slow.wait(timeout=30)
        if last in ("late", "unstarted"):
            # The fake provider's own pace, not a test's wait: it answers after the caller's
            # timeout; stopping the fake cuts it short.
            state.slow.wait(timeout=state.late_seconds)
        if last == "unstarted":
            # Never started: no answer, no bill; the connection closes.
            with state.lock:
                state.unstarted += 1
            self.close_connection = True
            return
        answer(body, last)

    def _responses(self, body: dict[str, Any], last: str) -> None:
        answer_responses(self, self.server.state, body, last, self.caller)

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

    def _chat(self, body: dict[str, Any], last: str) -> None:
        state = self.server.state
        prompt = sum(chars(m.get("content")) for m in body["messages"]) // 4 + 1
        tool = _function_tool(body) if last == "tool" else None
        response_format = body.get("response_format") or {}
        schema = None
        if response_format.get("type") == "json_schema":
            schema = filled((response_format.get("json_schema") or {}).get("schema") or {})
        json_text = filled(tool["parameters"]) if tool else schema
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        answer = plan(state, last, limit, json_text)
        cached = min(state.cached_tokens, prompt)
        written = min(state.cache_write_tokens, prompt - cached)
        tier = served_tier(body.get("service_tier"))
        billed = Billed(
            prompt, answer.completion, cached, CHAT, body["model"], tier, answer.reasoning, written
        )
        finish = "length" if answer.capped else "tool_calls" if tool else "stop"
        if body.get("stream"):
            self._chat_stream(body, billed, answer, tool, finish, cut=last == "cut")
            return
        state.bill(billed, self.caller)
        if last == "drop":
            self._drop()
            return
        text = "".join(answer.tokens)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None if tool else text,
            "refusal": None,
            "annotations": [],
        }
        if tool:
            function = {"name": tool["name"], "arguments": text}
            message["tool_calls"] = [{"id": CALL_ID, "type": "function", "function": function}]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        self.send_json(
            200,
            {
                "id": CHAT_ID,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [choice],
                "usage": chat_usage(billed),
                "service_tier": tier,
                "system_fingerprint": FINGERPRINT,
            },
        )

    def _chat_stream(
        self,
        body: dict[str, Any],
        billed: Billed,
        answer: Plan,
        tool: dict[str, Any] | None,
        finish: str,
        cut: bool,
    ) -> None:
        state = self.server.state
        with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        created = int(time.time())

        def chunk(delta: dict[str, Any] | None, reason: str | None = None) -> dict[str, Any]:
            """A chunk of one choice's delta, or (delta None) the usage chunk."""
            data: dict[str, Any] = {
                "id": CHAT_ID,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body["model"],
                "service_tier": billed.service_tier,
                "system_fingerprint": FINGERPRINT,
                "choices": []
                if delta is None
                else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
            }
            if with_usage:
                # Present on every chunk when asked for, null but on the last.
                data["usage"] = chat_usage(billed) if delta is None else None
            return data

        # Each event with the tokens it carries; a cut stream ends before the second half
        # of its tokens, so before the finish, usage and [DONE].
        events: list[tuple[dict[str, Any], int]] = []
        per = state.tokens_per_chunk
        pieces = [answer.tokens[i : i + per] for i in range(0, len(answer.tokens), per)]
        if tool:
            call = {"index": 0, "id": CALL_ID, "type": "function"}
            opening = {"role": "assistant", "content": None, "refusal": None}
            header = {**call, "function": {"name": tool["name"], "arguments": ""}}
            events.append((chunk({**opening, "tool_calls": [header]}), 0))
            for piece in pieces:
                fragment = {"index": 0, "function": {"arguments": "".join(piece)}}
                events.append((chunk({"tool_calls": [fragment]}), len(piece)))
        else:
            for n, piece in enumerate(pieces or [[""]]):
                text = {"content": "".join(piece)}
                delta = {"role": "assistant", **text, "refusal": None} if n == 0 else text
                events.append((chunk(delta), len(piece) if pieces else 0))
        if cut:
            events = events[: (1 if tool else 0) + len(pieces) // 2]
        else:
            events.append((chunk({}, finish), 0))
            if with_usage:
                events.append((chunk(None), 0))
        sent = 0
        self.start_events()
        try:
            for data, tokens in events:
                self.send_event(data)
                sent += tokens
                if tokens and state.chunk_seconds:
                    time.sleep(state.chunk_seconds)
            if cut:
                self.cut_events()
            else:
                self.send_chunk(b"data: [DONE]\n\n")
                self.end_events()
        except (BrokenPipeError, ConnectionResetError):
            with state.lock:
                state.abandoned += 1
            # The provider bills what it generated before the reader went away.
            billed = replace(billed, completion_tokens=answer.reasoning + sent)
        state.bill(billed, self.caller)

    def _embeddings(self, body: dict[str, Any], last: str) -> None:
        state = self.server.state
        inputs = _embedding_inputs(body)
        tokens = sum(len(i) if isinstance(i, list) else len(str(i)) // 4 + 1 for i in inputs)
        dimensions = int(body.get("dimensions") or state.dimensions)
        data = []
        for index in range(len(inputs)):
            # Eighths are exact in float32, so that base64 and floats decode to one vector.
            vector = [(index + k + 1) / 8 for k in range(dimensions)]
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                packed = struct.pack(f"<{dimensions}f", *vector)
                embedding = base64.b64encode(packed).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        state.bill(Billed(tokens, 0, 0, EMBEDDINGS, body["model"]), self.caller)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        self.send_json(
            200, {"object": "list", "data": data, "model": body["model"], "usage": usage}
        )


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
