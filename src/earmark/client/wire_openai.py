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
# The output items a Responses answer bills a tool call for.
_TOOL_ITEMS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
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
    """POST .../responses."""

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
    """A Response's usage, and the built-in tool calls its output items bill."""
    usage = response["usage"]
    details = usage.get("input_tokens_details") or {}
    tools: dict[str, int] = {}
    for item in response.get("output") or []:
        kind = _TOOL_ITEMS.get(str(item.get("type"))) if isinstance(item, dict) else None
        if kind is not None:
            tools[kind] = tools.get(kind, 0) + 1
    tier = response.get("service_tier")
    return Usage(
        input_tokens=number(usage.get("input_tokens")),
        output_tokens=number(usage.get("output_tokens")),
        cached_input_tokens=number(details.get("cached_tokens")),
        cache_write_input_tokens=number(details.get("cache_write_tokens")),
        service_tier=tier if isinstance(tier, str) else "",
        tool_calls=counts(tools.items()),
    )


class _ResponsesTally:
    """A Responses stream ends with response.completed (or .incomplete, .failed), whose
    response carries the usage."""

    FINAL = ("response.completed", "response.incomplete", "response.failed")

    def __init__(self, call: Call) -> None:
        self.call = call
        self._usage: Usage | None = None

    def keep(self, event: str, data: Any) -> bool:
        kind = event or (data.get("type") if isinstance(data, dict) else "")
        response = data.get("response") if isinstance(data, dict) else None
        if (
            kind in self.FINAL
            and isinstance(response, dict)
            and isinstance(response.get("usage"), dict)
        ):
            self._usage = responses_usage(response, self.call)
        return True

    def usage(self) -> Usage | None:
        return self._usage


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
