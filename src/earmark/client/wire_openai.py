"""OpenAI at the wire: which requests bill, how each billable one is held and capped, and
where its usage is, as OpenAI's published API has them (the openai SDK's types: CompletionUsage,
ChatCompletionChunk, ResponseUsage and the Responses stream events, CreateEmbeddingResponse).

Metered: POST .../chat/completions (create, parse, stream, with_raw_response), POST
.../responses (create, parse, stream) and POST .../embeddings. Free, passed through:
every request that is not a POST, and the POSTs that bill nothing (a stored completion's
update, counting a Responses input's tokens, cancelling, moderations, files, uploads,
vector stores, conversations). Any other POST (images, audio, batches, fine-tuning, the
legacy completions, realtime sessions...) is refused before it is sent, naming it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from earmark import limits
from earmark.client.meter import Meter
from earmark.client.openai_background import (
    RESPONSE_ID_LABEL,
    Ended,
    InvalidResponseError,
    ending,
    response_usage,
    valid_id,
)
from earmark.client.wire import (
    FREE,
    Call,
    Provider,
    Route,
    Tally,
    number,
    prompt_estimate,
    reported,
    with_cap,
)
from earmark.core.prices import Usage, counts

PROVIDER = "openai"

# POST paths that bill nothing, by their last segments (ids stand for any id).
_FREE = re.compile(
    r"/(chat/completions/[^/]+|responses/input_tokens|responses/[^/]+/cancel|moderations"
    r"|files(/.*)?|uploads(/.*)?|vector_stores(/.*)?|conversations(/.*)?"
    r"|batches/[^/]+/cancel|fine_tuning/jobs/[^/]+/(cancel|pause|resume))$"
)
# The Responses API's built-in tools, by the kind their calls are priced as.
_TOOLS = {
    "web_search": "web_search",
    "web_search_preview": "web_search",
    "file_search": "file_search",
    "code_interpreter": "code_interpreter",
}
# A GET that reads a response again (retrieve, or a resumed stream), and a POST that
# cancels one: the id is the path's segment after /responses.
_READS = {
    "GET": re.compile(r"/responses/([^/]+)$"),
    "POST": re.compile(r"/responses/([^/]+)/cancel$"),
}


def _chars(value: Any) -> int:
    """The characters of a message's or item's text: a string, or parts with text."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_chars(part.get("text", "")) for part in value if isinstance(part, dict))
    return 0


def _tools_chars(body: dict[str, Any]) -> int:
    tools = body.get("tools")
    return len(json.dumps(tools, default=str)) if tools else 0


def _tier(body: dict[str, Any]) -> str:
    tier = body.get("service_tier")
    return tier if isinstance(tier, str) else ""


def _int(body: dict[str, Any], *names: str) -> int | None:
    """The first of names the body sets to a positive whole number."""
    for name in names:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class Chat:
    """POST .../chat/completions."""

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        chars = _tools_chars(body)
        for message in messages:
            chars += _chars(message.get("content")) + len(str(message.get("name", "")))
            if message.get("tool_calls"):
                chars += len(json.dumps(message["tool_calls"], default=str))
        return Call(
            model=str(body.get("model", "")),
            prompt_tokens=prompt_estimate(chars, len(messages)),
            asked=_int(body, "max_completion_tokens", "max_tokens"),
            choices=_int(body, "n") or 1,
            stream=bool(body.get("stream")),
            service_tier=_tier(body),
        )

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        sent = body
        if cap is not None:
            # Every maximum the caller set is lowered (both, when it set the older name
            # too); max_completion_tokens when it set none.
            names = [n for n in ("max_completion_tokens", "max_tokens") if body.get(n)]
            for name in names or ["max_completion_tokens"]:
                sent = with_cap(sent, name, cap)
        options = body.get("stream_options") or {}
        if call.stream and not options.get("include_usage"):
            # The usage chunk is asked for, and then not shown to the caller.
            return {**sent, "stream_options": {**options, "include_usage": True}}, True
        return sent, False

    def usage(self, answer: Any, call: Call) -> Usage | None:
        usage = reported(answer)
        return None if usage is None else chat_usage(usage, answer)

    def tally(self, call: Call, hidden_usage: bool) -> Tally:
        return _ChatTally(call, hidden_usage)


def chat_usage(usage: dict[str, Any], answer: dict[str, Any]) -> Usage:
    """A CompletionUsage as Earmark prices it: prompt_tokens counts cached reads and cache
    writes, completion_tokens counts reasoning. The transport names the provider and the
    model the call was held for (an answer names a dated snapshot the book may not have)."""
    prompt = usage.get("prompt_tokens_details") or {}
    tier = answer.get("service_tier")
    return Usage(
        input_tokens=number(usage.get("prompt_tokens")),
        output_tokens=number(usage.get("completion_tokens")),
        cached_input_tokens=number(prompt.get("cached_tokens")),
        cache_write_input_tokens=number(prompt.get("cache_write_tokens")),
        service_tier=tier if isinstance(tier, str) else "",
    )


class _ChatTally:
    """A chat stream's usage is its last chunk's (choices empty), when include_usage."""

    def __init__(self, call: Call, hidden: bool) -> None:
        self.call, self.hidden = call, hidden
        self._usage: Usage | None = None
        self._tier = ""

    def keep(self, event: str, data: Any) -> bool:
        if not isinstance(data, dict):
            return True
        if isinstance(data.get("service_tier"), str):
            self._tier = data["service_tier"]
        if isinstance(data.get("usage"), dict):
            self._usage = chat_usage(data["usage"], {"service_tier": self._tier})
            # The usage chunk Earmark asked for, which the caller did not, is not shown.
            return not (self.hidden and not data.get("choices"))
        return True

    def usage(self) -> Usage | None:
        return self._usage


class Responses:
    """POST .../responses. A background one (background: true) runs on at OpenAI after its
    answer: later says how its hold stays open until the response ends."""

    def __init__(self) -> None:
        self.later = Background()

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        items = body.get("input")
        chars = _chars(body.get("instructions")) + _tools_chars(body)
        count = 1
        if isinstance(items, list):
            count = len(items)
            for item in items:
                if isinstance(item, dict):
                    chars += _chars(item.get("content")) + _chars(item.get("output"))
                    chars += len(str(item.get("arguments", "")))
        else:
            chars += _chars(items)
        kinds = {
            _TOOLS[t["type"]]
            for t in body.get("tools") or []
            if isinstance(t, dict) and t.get("type") in _TOOLS
        }
        most = _int(body, "max_tool_calls") or meter.tool_calls_max
        return Call(
            model=str(body.get("model", "")),
            prompt_tokens=prompt_estimate(chars, count),
            asked=_int(body, "max_output_tokens"),
            stream=bool(body.get("stream")),
            service_tier=_tier(body),
            tool_calls_max=counts((kind, most) for kind in kinds),
        )

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        # A Responses stream always ends with its usage, in its final event.
        return with_cap(body, "max_output_tokens", cap), False

    def usage(self, answer: Any, call: Call) -> Usage | None:
        return None if reported(answer) is None else responses_usage(answer, call)

    def tally(self, call: Call, hidden_usage: bool) -> Tally:
        return _ResponsesTally(call)


def responses_usage(response: dict[str, Any], call: Call) -> Usage:
    """A Response's usage, and the built-in tool calls its output items bill
    (openai_background.py reads them, for reconcile too)."""
    return response_usage(response)


class _ResponsesTally:
    """A Responses stream ends with response.completed (or .incomplete, .failed), whose
    response carries the usage."""

    FINAL = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self, call: Call) -> None:
        self.call = call
        self._usage: Usage | None = None
        # A background response's id, from the events that open its stream, and whether
        # a final event came: a background stream that stops before one leaves the
        # response running at OpenAI.
        self.background_id: str | None = None
        self.ended = False

    def keep(self, event: str, data: Any) -> bool:
        kind = event or (data.get("type") if isinstance(data, dict) else "")
        response = data.get("response") if isinstance(data, dict) else None
        if not isinstance(response, dict):
            return True
        if response.get("background") is True and valid_id(response.get("id")):
            self.background_id = response["id"]
        if kind in self.FINAL:
            self.ended = True
            if isinstance(response.get("usage"), dict):
                self._usage = responses_usage(response, self.call)
        return True

    def usage(self) -> Usage | None:
        return self._usage


class Background:
    """OpenAI's background responses (POST .../responses with background: true): answered
    at once, queued or in progress with no usage, they run on at OpenAI. The hold stays
    open, the response's id recorded on it (RESPONSE_ID_LABEL), until a retrieve (GET
    .../responses/{id}), a resumed stream (GET ...?stream=true) or a cancel (POST
    .../responses/{id}/cancel) answers the response ended (openai_background.ending)."""

    label = RESPONSE_ID_LABEL

    def running(self, route: object, body: dict[str, Any], answer: Any) -> str | None:
        """The id of the background response a create's answer left running."""
        if not isinstance(route, Responses) or body.get("background") is not True:
            return None
        if not isinstance(answer, dict) or not valid_id(answer.get("id")):
            return None
        try:
            return None if ending(answer, answer["id"]) is not None else str(answer["id"])
        except InvalidResponseError:
            return None

    def left_running(self, tally: object) -> str | None:
        """The id of the background response a create's stream left running when it
        stopped before its final event (the connection dropped, the caller closed it)."""
        if isinstance(tally, _ResponsesTally) and not tally.ended:
            return tally.background_id
        return None

    def reads(self, method: str, path: str) -> str | None:
        pattern = _READS.get(method)
        found = pattern.search(path) if pattern is not None else None
        return None if found is None else found.group(1)

    def ended(self, answer: Any, call_id: str) -> Ended | None:
        return ending(answer, call_id)

    def resumed(self, call_id: str) -> _Resumed:
        return _Resumed(call_id)


class _Resumed:
    """A resumed stream of a background response (GET .../responses/{id}?stream=true): its
    final event's response says how the response ended; one that is not the response's,
    or not in its published shape, says nothing."""

    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        self._ended: Ended | None = None

    def keep(self, event: str, data: Any) -> bool:
        kind = event or (data.get("type") if isinstance(data, dict) else "")
        response = data.get("response") if isinstance(data, dict) else None
        if kind in _ResponsesTally.FINAL and isinstance(response, dict):
            try:
                self._ended = ending(response, self.response_id)
            except InvalidResponseError:
                self._ended = None
        return True

    def usage(self) -> Usage | None:
        return None if self._ended is None else self._ended.usage

    def ended(self) -> Ended | None:
        return self._ended


class Embeddings:
    """POST .../embeddings: the input alone is billed."""

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        given = body.get("input")
        inputs = given if isinstance(given, list) else [given]
        tokens = 0
        for each in inputs:
            if isinstance(each, list):
                tokens += len(each)  # token ids: one each
            else:
                tokens += prompt_estimate(len(str(each or "")), 0)
        return Call(model=str(body.get("model", "")), prompt_tokens=tokens, has_output=False)

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        return body, False

    def usage(self, answer: Any, call: Call) -> Usage | None:
        usage = reported(answer)
        return None if usage is None else Usage(number(usage.get("prompt_tokens")), 0)

    def tally(self, call: Call, hidden_usage: bool) -> Tally:
        raise AssertionError("embeddings are not streamed")


_ROUTES: dict[str, Route] = {
    "/chat/completions": Chat(),
    "/responses": Responses(),
    "/embeddings": Embeddings(),
}


def routing(path: str) -> Route | str | None:
    """The route of a POST to path; FREE for one that bills nothing; None otherwise."""
    for suffix, route in _ROUTES.items():
        if path.endswith(suffix):
            return route
    return FREE if _FREE.search(path) else None


def provider(name: str = PROVIDER) -> Provider:
    """OpenAI (or an OpenAI-compatible API, priced under name), its SDK's base error."""
    import openai

    return Provider(name, routing, openai.OpenAIError)


assert limits.llm_prompt_chars_per_token > 0
