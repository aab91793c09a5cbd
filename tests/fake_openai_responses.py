"""The fake OpenAI's Responses API: POST /v1/responses answered with a Response object, or
with its stream of named server-sent events, from the plan of tests/fake_openai_state.py.

Wire facts followed, as checked in the installed SDK (openai 3.57.0) and a recording:
- Response (openai/types/responses/response.py): object "response", status "completed" or
  "incomplete" with incomplete_details.reason "max_output_tokens" when it stopped at the
  request's max_output_tokens; output items are a message {id, type "message", status,
  role, content [{type "output_text", text, annotations, logprobs}]}, a reasoning item
  {id, type "reasoning", summary []} or a function_call {id, type, status, arguments,
  call_id, name} (response_output_message.py, response_reasoning_item.py,
  response_function_tool_call.py).
- ResponseUsage (response_usage.py): input_tokens, input_tokens_details {cached_tokens,
  cache_write_tokens} (both required), output_tokens, output_tokens_details
  {reasoning_tokens}, total_tokens; the reasoning tokens are among the output tokens.
- The stream (ResponseStreamEvent, response_stream_event.py; the order is a recorded
  stream's, vercel/ai packages/openai/src/responses/__fixtures__/
  issue-20047-openai-responses.chunks.txt, and what the SDK's ResponseStreamState
  accepts, openai/lib/streaming/responses/_responses.py): response.created and
  response.in_progress (status "in_progress", no usage), then for each output item
  response.output_item.added, for a message response.content_part.added,
  response.output_text.delta (with logprobs []), response.output_text.done and
  response.content_part.done, for a function call response.function_call_arguments.delta
  and .done, then response.output_item.done; last response.completed or
  response.incomplete with the whole response and its usage. Every event has its type as
  the `event:` line and in its JSON, and a sequence_number counting from 0. There is no
  `data: [DONE]`.
- Background responses (the `background` parameter of responses.create in
  openai/resources/responses/responses.py; OpenAI's background guide): a create with
  background true answers at once with a Response of its own id, status "queued",
  background true, usage null and no output, and the response runs on until the test
  finishes it (OpenAIState.finish: then completed, or incomplete at max_output_tokens, with
  its usage, and billed). GET /v1/responses/{id} (responses.retrieve) answers it
  "in_progress" while it runs, as it is once finished; with stream=true and starting_after
  N its stream's events after sequence number N (the events that open it while it runs,
  then the stream ends; every event once finished). POST /v1/responses/{id}/cancel
  (responses.cancel) stops a running one, "cancelled" with usage null and nothing billed,
  and answers a finished one as it is (cancelling twice is idempotent). A streamed
  background create (stream true too) opens with response.created, the Response queued
  with its id and background true, and runs to its end whatever the stream does: cut, it
  is billed whole and can be retrieved or resumed. An id the fake does not know is 404
  "No response found with id '...'", and so is another project's (by the Bearer key's
  project, OpenAIState.project_ids).
"""

from __future__ import annotations

import itertools
import re
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from tests.fake_openai_state import (
    RESPONSES,
    BackgroundRun,
    Billed,
    Caller,
    OpenAIState,
    Plan,
    chars,
    filled,
    last_text,
    plan,
    served_tier,
)
from tests.http_fake import JsonHandler

RESPONSE_ID = "resp_fake"
MESSAGE_ID = "msg_fake"
REASONING_ID = "rs_fake"
CALL_ITEM_ID = "fc_fake"
CALL_ID = "call_fake"
# GET /v1/responses/{id}, and POST /v1/responses/{id}/cancel.
RETRIEVED = re.compile(r"/v1/responses/([^/?]+)")
CANCELLED = re.compile(r"/v1/responses/([^/]+)/cancel")
# One event: its type, its fields, and how many of the answer's tokens it carries.
Event = tuple[str, dict[str, Any], int]


def last_input(body: dict[str, Any]) -> str:
    """The text of a request's last input item (a function call's output has none)."""
    given = body.get("input")
    if isinstance(given, str):
        return given
    if isinstance(given, list) and given and isinstance(given[-1], dict):
        return last_text(given[-1].get("content"))
    return ""


def _prompt(body: dict[str, Any]) -> int:
    """The instructions' and input items' characters over four, plus one."""
    given = body.get("input")
    total = len(str(body.get("instructions") or ""))
    for item in [given] if isinstance(given, str) else given or []:
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += chars(item.get("content")) + len(str(item.get("output") or ""))
            total += len(str(item.get("arguments") or ""))
    return total // 4 + 1


def _function_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    """The first function tool of a Responses request (its name and parameters are at the
    tool's top level, not under "function" as in Chat Completions)."""
    for tool in body.get("tools") or []:
        if tool.get("type") == "function":
            return {"name": tool.get("name"), "parameters": tool.get("parameters") or {}}
    return None


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


@dataclass
class _Answer:
    """One request's answer, as the Response objects and output items that carry it."""

    body: dict[str, Any]
    billed: Billed
    plan: Plan
    tool: dict[str, Any] | None
    text_format: dict[str, Any]
    created: int = field(default_factory=lambda: int(time.time()))
    response_id: str = RESPONSE_ID
    background: bool = False

    @property
    def status(self) -> str:
        return "incomplete" if self.plan.capped else "completed"

    def items(self) -> list[dict[str, Any]]:
        """The output items, finished: the reasoning (when there was any), then the call
        or the message (left out when reasoning spent the whole limit)."""
        items: list[dict[str, Any]] = []
        if self.plan.reasoning:
            items.append({"id": REASONING_ID, "type": "reasoning", "summary": []})
        text = "".join(self.plan.tokens)
        if self.tool:
            call = {"id": CALL_ITEM_ID, "type": "function_call", "status": self.status}
            details = {"arguments": text, "call_id": CALL_ID, "name": self.tool["name"]}
            items.append({**call, **details})
        elif text or not self.plan.reasoning:
            message = {"id": MESSAGE_ID, "type": "message", "status": self.status}
            items.append({**message, "content": [_part(text)], "role": "assistant"})
        return items

    def usage(self) -> dict[str, Any]:
        b = self.billed
        return {
            "input_tokens": b.prompt_tokens,
            "input_tokens_details": {
                "cache_write_tokens": b.cache_write_tokens,
                "cached_tokens": b.cached_tokens,
            },
            "output_tokens": b.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": b.reasoning_tokens},
            "total_tokens": b.prompt_tokens + b.completion_tokens,
        }

    def response(self, done: bool, status: str | None = None) -> dict[str, Any]:
        """The Response object: in progress (as the stream opens), or done; a background
        one in the status given (queued, in_progress, cancelled)."""
        status = status or (self.status if done else "in_progress")
        done = status in ("completed", "incomplete")
        tier = self.billed.service_tier if done else self.body.get("service_tier") or "auto"
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": self.background,
            "completed_at": self.created if status == "completed" else None,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": self.body.get("instructions"),
            "max_output_tokens": self.body.get("max_output_tokens"),
            "max_tool_calls": None,
            "model": self.body["model"],
            "output": self.items() if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": self.body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "service_tier": tier,
            "store": True,
            "temperature": 1.0,
            "text": {"format": self.text_format, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": self.body.get("tools") or [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": self.usage() if done else None,
            "user": None,
            "metadata": {},
        }

    def events(self, per_chunk: int) -> Iterator[Event]:
        """The stream's events, in the order the API sends them (a background response
        opens queued)."""
        first = "queued" if self.background else "in_progress"
        yield "response.created", {"response": self.response(False, first)}, 0
        yield "response.in_progress", {"response": self.response(done=False)}, 0
        tokens = self.plan.tokens
        pieces = ["".join(tokens[i : i + per_chunk]) for i in range(0, len(tokens), per_chunk)]
        sizes = [len(tokens[i : i + per_chunk]) for i in range(0, len(tokens), per_chunk)]
        for index, item in enumerate(self.items()):
            at = {"output_index": index}
            if item["type"] == "reasoning":
                yield "response.output_item.added", {**at, "item": item}, 0
            elif item["type"] == "function_call":
                opening = {**item, "status": "in_progress", "arguments": ""}
                yield "response.output_item.added", {**at, "item": opening}, 0
                of = {"item_id": CALL_ITEM_ID, **at}
                for piece, size in zip(pieces, sizes, strict=True):
                    yield "response.function_call_arguments.delta", {**of, "delta": piece}, size
                done = {**of, "arguments": item["arguments"]}
                yield "response.function_call_arguments.done", done, 0
            else:
                opening = {**item, "status": "in_progress", "content": []}
                yield "response.output_item.added", {**at, "item": opening}, 0
                of = {"item_id": MESSAGE_ID, **at, "content_index": 0}
                yield "response.content_part.added", {**of, "part": _part("")}, 0
                for piece, size in zip(pieces, sizes, strict=True):
                    delta = {**of, "delta": piece, "logprobs": []}
                    yield "response.output_text.delta", delta, size
                text = "".join(pieces)
                yield "response.output_text.done", {**of, "text": text, "logprobs": []}, 0
                yield "response.content_part.done", {**of, "part": _part(text)}, 0
            yield "response.output_item.done", {**at, "item": item}, 0
        final = "response.incomplete" if self.plan.capped else "response.completed"
        yield final, {"response": self.response(done=True)}, 0


def answer(
    handler: JsonHandler, state: OpenAIState, body: dict[str, Any], last: str, caller: Caller
) -> None:
    """Answers a POST /v1/responses whose last input is last, and bills it to caller."""
    prompt = _prompt(body)
    tool = _function_tool(body) if last == "tool" else None
    text_format = (body.get("text") or {}).get("format") or {"type": "text"}
    json_text = None
    if tool:
        json_text = filled(tool["parameters"])
    elif text_format.get("type") == "json_schema":
        json_text = filled(text_format.get("schema") or {})
    it = plan(state, last, body.get("max_output_tokens"), json_text)
    cached = min(state.cached_tokens, prompt)
    written = min(state.cache_write_tokens, prompt - cached)
    tier = served_tier(body.get("service_tier"))
    model = body["model"]
    billed = Billed(prompt, it.completion, cached, RESPONSES, model, tier, it.reasoning, written)
    reply = _Answer(body, billed, it, tool, text_format)
    if body.get("background"):
        reply.background = True
        reply.response_id = f"resp_bg{next(state.background_numbers)}"
        run = BackgroundRun(reply, billed, caller, billed_already=bool(body.get("stream")))
        with state.lock:
            state.background[reply.response_id] = run
        if body.get("stream"):
            # It runs to its end whatever its stream does; the stream bills it below.
            run.status = reply.status
    if not body.get("stream"):
        if reply.background:
            handler.send_json(200, reply.response(False, "queued"))
            return
        state.bill(reply.billed, caller)
        handler.send_json(200, reply.response(done=True))
        return
    events = list(reply.events(state.tokens_per_chunk))
    cut = last == "cut"
    if cut:
        # Half the deltas, then the connection closes: no final event, so no usage.
        deltas = [n for n, (_, _, tokens) in enumerate(events) if tokens]
        events = events[: deltas[len(deltas) // 2]] if deltas else events[:-1]
    sent, numbers = 0, itertools.count()
    handler.start_events()
    try:
        for kind, fields, tokens in events:
            handler.send_event({"type": kind, **fields, "sequence_number": next(numbers)}, kind)
            sent += tokens
            if tokens and state.chunk_seconds:
                time.sleep(state.chunk_seconds)
        if cut:
            handler.cut_events()
        else:
            handler.end_events()
    except (BrokenPipeError, ConnectionResetError):
        with state.lock:
            state.abandoned += 1
        # The provider bills what it generated before the reader went away.
        reply.billed = replace(reply.billed, completion_tokens=it.reasoning + sent)
    state.bill(reply.billed, caller)


def _run(handler: JsonHandler, state: OpenAIState, response_id: str) -> BackgroundRun | None:
    """The background response of response_id, when the request's key is of the project
    that made it (another project's response is not found, as at OpenAI)."""
    asking = state.caller(handler.headers.get("authorization")).project_id
    with state.lock:
        run = state.background.get(response_id)
    return run if run is not None and run.caller.project_id == asking else None


def _unknown(handler: JsonHandler, response_id: str) -> None:
    error = {"message": f"No response found with id '{response_id}'.", "param": None}
    handler.send_json(404, {"error": {**error, "type": "invalid_request_error", "code": None}})


def retrieve(handler: JsonHandler, state: OpenAIState, target: str) -> bool:
    """Answers GET /v1/responses/{id}[?stream=true&starting_after=N] (False: target is no
    such path)."""
    url = urllib.parse.urlsplit(target)
    found = RETRIEVED.fullmatch(url.path)
    if found is None:
        return False
    query = dict(urllib.parse.parse_qsl(url.query))
    run = _run(handler, state, found.group(1))
    with state.lock:
        if run is not None and run.status == "queued":
            run.status = "in_progress"
    if run is None:
        _unknown(handler, found.group(1))
        return True
    reply: _Answer = run.answer
    if query.get("stream") != "true":
        answer = reply.response(not run.running, run.status) | state.retrieved_changes
        handler.send_json(200, answer)
        return True
    after = int(query.get("starting_after", "-1"))
    events = list(enumerate(reply.events(state.tokens_per_chunk)))
    if run.running:
        events = [e for e in events if e[1][0] in ("response.created", "response.in_progress")]
    handler.start_events()
    for number, (kind, fields, _) in events:
        if number > after:
            handler.send_event({"type": kind, **fields, "sequence_number": number}, kind)
    handler.end_events()
    return True


def cancel(handler: JsonHandler, state: OpenAIState, path: str) -> bool:
    """Answers POST /v1/responses/{id}/cancel (False: path is no such path)."""
    found = CANCELLED.fullmatch(path)
    if found is None:
        return False
    run = _run(handler, state, found.group(1))
    with state.lock:
        if run is not None and run.running:
            run.status = "cancelled"
    if run is None:
        _unknown(handler, found.group(1))
        return True
    reply: _Answer = run.answer
    handler.send_json(200, reply.response(not run.running, run.status))
    return True
