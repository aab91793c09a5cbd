"""OpenAI at the wire: which requests bill, how each billable one is held and capped, and
where its usage is, as OpenAI's published API has them (the openai SDK's types: CompletionUsage,
ChatCompletionChunk, ResponseUsage and the Responses stream events, CreateEmbeddingResponse).

Every POST is routed by ROUTES, its whole path after the base URL's own path (/v1):
metered, POST /chat/completions (create, parse, stream, with_raw_response), /responses
(create, parse, stream) and /embeddings; free, passed through, the POSTs that bill
nothing (a stored completion's update, counting a Responses input's tokens, cancelling or
pausing, moderations) and the standing costs (files, uploads, vector stores,
conversations); every other POST (images, audio, batches, fine-tuning and resuming it,
containers, the legacy completions, realtime sessions and client secrets...) is refused
before it is sent, naming it. A request that is not a POST passes. The websocket surfaces
(SOCKETS: realtime.connect, responses.connect...) are refused before connecting.

A metered request's built-in tools are read by their type (RESPONSES_TOOLS, CHAT_TOOLS):
a tool with a fee per call Earmark prices (web search, file search, code interpreter) is
held and settled; a tool that bills only tokens passes; one whose fee Earmark cannot hold
(image generation, a hosted shell, Chat Completions' web_search_options), and a type it
has not classified, is refused before anything is held or sent (ToolNotMeteredError).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from earmark import limits
from earmark.client import hosts
from earmark.client.errors import EarmarkClientError
from earmark.client.held_call import Raising
from earmark.client.meter import Meter
from earmark.client.openai_background import (
    RESPONSE_ID_LABEL,
    Ended,
    InvalidResponseError,
    ending,
    response_usage,
    valid_id,
)
from earmark.client.reported import reported_cost, with_cost
from earmark.client.wire import (
    FREE,
    REFUSED,
    TOKENS_ONLY,
    Call,
    EndpointNotMeteredError,
    Provider,
    Route,
    Routes,
    Tally,
    Tool,
    ToolNotMeteredError,
    Tools,
    held_tools,
    number,
    prompt_estimate,
    reported,
    with_cap,
    within,
)
from earmark.client.wire_usage import cache_parts, reported_count, served_tier
from earmark.core.prices import Usage, counts

PROVIDER = "openai"


def _shell(tool: dict[str, Any]) -> Tool:
    """A shell the caller runs (a local environment, or none named: the shell tool ran
    locally before it had environments) bills tokens; one in a container at OpenAI bills
    the container's time."""
    environment = tool.get("environment")
    if environment is None or (
        isinstance(environment, dict) and environment.get("type") == "local"
    ):
        return TOKENS_ONLY
    return Tool(
        refused="in a container at OpenAI bills its running time, which Earmark cannot hold"
    )


# A namespace groups the caller's own tools (the openai package's NamespaceToolParam.Tool:
# functions and custom tools), each classified as a tool of the request is.
NAMESPACE_TOOLS: dict[str, Tool] = {"function": TOKENS_ONLY, "custom": TOKENS_ONLY}


def _namespace(tool: dict[str, Any]) -> Tool:
    held_tools(tool.get("tools"), NAMESPACE_TOOLS)
    return TOKENS_ONLY


# Every tool type of the Responses API (the openai package's ToolParam), by what it bills
# beyond its tokens; a type not listed is refused. tests/client/test_tools.py reads the
# installed package's types and fails on one not listed here.
RESPONSES_TOOLS: Tools = {
    # Held: a fee per call, priced by kind (--tool-fee web_search=...), held for the
    # request's max_tool_calls of each and settled at the calls the answer's output items
    # report (openai_background.TOOL_ITEMS). The dated types are the same tools, pinned.
    "web_search": Tool(fee="web_search"),
    "web_search_2025_08_26": Tool(fee="web_search"),
    "web_search_preview": Tool(fee="web_search"),
    "web_search_preview_2025_03_11": Tool(fee="web_search"),
    "file_search": Tool(fee="file_search"),
    "code_interpreter": Tool(fee="code_interpreter"),
    # Tokens only: the caller's own tools, and the tools the caller runs (a computer, a
    # local shell, patches), which bill only what the model reads and writes.
    "function": TOKENS_ONLY,
    "custom": TOKENS_ONLY,
    "namespace": _namespace,
    "computer": TOKENS_ONLY,
    "computer_use_preview": TOKENS_ONLY,
    "local_shell": TOKENS_ONLY,
    "apply_patch": TOKENS_ONLY,
    "shell": _shell,
    # Tokens only, run at OpenAI for no fee: remote MCP servers and connectors (OpenAI
    # bills the tokens of their listings and results; the server is the caller's), and
    # tool search, which loads the caller's deferred tools.
    "mcp": TOKENS_ONLY,
    "tool_search": TOKENS_ONLY,
    # Refused: fees Earmark has no count or price for.
    "image_generation": Tool(
        refused="bills each image it generates at the image model's rates, which Earmark "
        "cannot hold"
    ),
    "programmatic_tool_calling": Tool(
        refused="runs programs at OpenAI, at a cost Earmark has no price for"
    ),
}
# Chat Completions' tools are the caller's own (the openai package's
# ChatCompletionToolUnionParam); its built-in web search is a parameter of its own.
CHAT_TOOLS: Tools = {"function": TOKENS_ONLY, "custom": TOKENS_ONLY}
# Chat Completions' built-in tools that are parameters of the request, not tools: a search
# model bills a search fee per call, and the answer counts no searches to settle it at.
CHAT_TOOL_PARAMETERS = {
    "web_search_options": "bills a search fee per call that the answer does not count, "
    "which Earmark cannot hold and settle",
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
        # A tool whose fee cannot be held is refused before the hold: nothing is held for a
        # request that is not sent.
        for parameter, why in CHAT_TOOL_PARAMETERS.items():
            if body.get(parameter) is not None:
                raise ToolNotMeteredError(parameter, why)
        held_tools(body.get("tools"), CHAT_TOOLS)
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


def chat_usage(usage: dict[str, Any], answer: dict[str, Any]) -> Usage | None:
    """A CompletionUsage as Earmark prices it: prompt_tokens counts cached reads and cache
    writes, completion_tokens counts reasoning. The transport names the provider and the
    model the call was held for (an answer names a dated snapshot the book may not have).

    DeepSeek (OpenAI-compatible, api-docs.deepseek.com) reports its cache reads as
    prompt_cache_hit_tokens, of prompt_tokens, beside prompt_cache_miss_tokens; its
    prompt_tokens_details.cached_tokens is absent or 0, so its own count is read when it
    sends one. The tier is the one the answer says it ran at, which OpenAI and Azure bill
    and which may differ from the one asked for. None when a count is not believed
    (wire_usage.reported_count): the call is left in doubt."""
    details = usage.get("prompt_tokens_details")
    prompt = details if isinstance(details, dict) else {}
    input_tokens = reported_count(usage.get("prompt_tokens"))
    output_tokens = reported_count(usage.get("completion_tokens"))
    if input_tokens is None or output_tokens is None:
        return None
    hits = usage.get("prompt_cache_hit_tokens")
    cached, written = cache_parts(
        input_tokens,
        prompt.get("cached_tokens") if hits is None else hits,
        prompt.get("cache_write_tokens"),
    )
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached,
        cache_write_input_tokens=written,
        service_tier=served_tier(answer.get("service_tier")),
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
            # (Azure's first chunk has no choices either, and no usage: it is shown.)
            return not (self.hidden and not data.get("choices"))
        groq = data.get("x_groq")
        if self._usage is None and isinstance(groq, dict) and isinstance(groq.get("usage"), dict):
            # Groq streams its usage under x_groq on the chunk that finishes the answer
            # (the openai SDK leaves it in model_extra); a top-level usage, if it sends
            # one too, is the one read.
            self._usage = chat_usage(groq["usage"], {"service_tier": self._tier})
        return True

    def usage(self) -> Usage | None:
        return self._usage


class Responses:
    """POST .../responses. A background one (background: true) runs on at OpenAI after its
    answer: later says how its hold stays open until the response ends."""

    def __init__(self) -> None:
        self.later = Background()

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        kinds = {kind for kind, _ in held_tools(body.get("tools"), RESPONSES_TOOLS)}
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


def responses_usage(response: dict[str, Any], call: Call) -> Usage | None:
    """A Response's usage, and the built-in tool calls its output items bill
    (openai_background.py reads them, for reconcile too); None when its input or output
    count is not believed (wire_usage.reported_count): the call is left in doubt."""
    usage = response.get("usage")
    given = usage if isinstance(usage, dict) else {}
    if any(reported_count(given.get(n)) is None for n in ("input_tokens", "output_tokens")):
        return None
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
        if not isinstance(unwrapped(route), Responses) or body.get("background") is not True:
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


# Every POST of OpenAI's API, by the path after the base URL's own path (/v1), with what
# Earmark does with it; a POST it does not list is refused too. tests/client/test_routes.py
# sends every method of the installed openai package and fails on a POST not listed here.
ROUTES = Routes(
    {
        # Metered: held, capped and settled at the provider's usage.
        "/chat/completions": Chat(),
        "/responses": Responses(),
        "/embeddings": Embeddings(),
        # Free, billing nothing: a stored completion's metadata, counting a Responses
        # input's tokens, moderations, and cancelling or pausing what bills (its spend
        # stops; resuming it is refused below).
        "/chat/completions/{completion_id}": FREE,
        "/responses/input_tokens": FREE,
        "/moderations": FREE,
        "/responses/{response_id}/cancel": FREE,
        "/batches/{batch_id}/cancel": FREE,
        "/fine_tuning/jobs/{fine_tuning_job_id}/cancel": FREE,
        "/fine_tuning/jobs/{fine_tuning_job_id}/pause": FREE,
        # Free, a standing cost: stored files, uploads, vector stores (the files they
        # index) and conversations are billed by the gigabyte-day they keep, not by call.
        "/files": FREE,
        "/uploads": FREE,
        "/uploads/{upload_id}/parts": FREE,
        "/uploads/{upload_id}/complete": FREE,
        "/uploads/{upload_id}/cancel": FREE,
        "/vector_stores": FREE,
        "/vector_stores/{vector_store_id}": FREE,
        "/vector_stores/{vector_store_id}/files": FREE,
        "/vector_stores/{vector_store_id}/files/{file_id}": FREE,
        "/vector_stores/{vector_store_id}/file_batches": FREE,
        "/vector_stores/{vector_store_id}/file_batches/{batch_id}/cancel": FREE,
        "/conversations": FREE,
        "/conversations/{conversation_id}": FREE,
        "/conversations/{conversation_id}/items": FREE,
        # Refused: calls that bill what Earmark has no price for (the legacy completions,
        # compaction, images, audio, video; a search may run a model on its query).
        "/completions": REFUSED,
        "/responses/compact": REFUSED,
        "/vector_stores/{vector_store_id}/search": REFUSED,
        "/images/**": REFUSED,
        "/audio/**": REFUSED,
        "/videos/**": REFUSED,
        "/decisions": REFUSED,
        "/content_provenance_checks": REFUSED,
        # Refused: work that bills once started, out of the call that started it
        # (batches, fine-tuning and its resumption, graders, evals, container sessions,
        # Assistants runs, agents, skills).
        "/batches": REFUSED,
        "/fine_tuning/jobs": REFUSED,
        "/fine_tuning/jobs/{fine_tuning_job_id}/resume": REFUSED,
        "/fine_tuning/alpha/**": REFUSED,
        "/fine_tuning/checkpoints/**": REFUSED,
        "/evals/**": REFUSED,
        "/containers/**": REFUSED,
        "/assistants/**": REFUSED,
        "/threads/**": REFUSED,
        "/agents/**": REFUSED,
        "/chatkit/**": REFUSED,
        "/skills/**": REFUSED,
        "/vaults/**": REFUSED,
        # Refused: sessions and keys that bill where Earmark does not see it (a Realtime
        # client secret opens a session from a browser; calls and live sessions run
        # audio models).
        "/realtime/**": REFUSED,
        "/live/**": REFUSED,
        # Refused: administration, no metered worker's job; a metered client mints no key
        # and lifts no spend limit.
        "/organization/**": REFUSED,
        "/projects/**": REFUSED,
        "/webhook_endpoints/**": REFUSED,
    }
)
# Azure OpenAI names the model's deployment in the path, before the endpoint's own path
# (/openai/deployments/{deployment}/chat/completions); OpenAI's API has no such path.
_DEPLOYMENT = re.compile(r"/deployments/(?!\.\.?/)[^/]+(?=/)")
# The openai package's websocket surfaces, which a metered client refuses (the websockets
# they open are no HTTP request); tests/client/test_routes.py finds every one it has.
SOCKETS = (
    "realtime.connect",
    "realtime.translations.connect",
    "beta.realtime.connect",
    "responses.connect",
    "beta.responses.connect",
    "live.connect",
    "live.sideband.connect",
    "live.forks.connect",
)


def routing(path: str, prefix: str = "/v1") -> Route | str | None:
    """The route of a POST to path, under a base URL whose own path is prefix; FREE for one
    that bills nothing; None otherwise (refused)."""
    _, path = _deployed(path, prefix)
    return ROUTES.routing(path, prefix)


def _deployed(path: str, prefix: str) -> tuple[str | None, str]:
    """The deployment path names after prefix (None: none), and path without it."""
    found = _DEPLOYMENT.match(path, len(prefix)) if within(path, prefix) else None
    if found is None:
        return None, path
    return found.group(0).removeprefix("/deployments/"), prefix + path[found.end() :]


# Azure OpenAI (openai/lib/azure.py; learn.microsoft.com/azure/ai-services/openai): OpenAI's
# routes, bodies, streams and usage, under the deployment a call names, priced under
# provider "azure" as the deployment's base model (genai-prices keys Azure's prices by base
# model: gpt-4o...). An AzureOpenAI client names the deployment in the path
# (/openai/deployments/{deployment}/chat/completions?api-version=..., its azure_deployment
# or the body's model), and for the paths Azure serves without one (/openai/responses) and
# for Azure's v1 API through a plain OpenAI client (/openai/v1/chat/completions) in the
# body's model; the path wins when both are there, as it is what Azure serves. Azure's
# additions are passed on unread: a content-filtered answer (finish_reason
# "content_filter") is billed and settles at its usage, a prompt refused by the filter
# (400 content_filter) at nothing; a stream's first chunk carries only
# prompt_filter_results, with no choices and no usage.


class DeploymentNotMappedError(EndpointNotMeteredError):
    """A call to an Azure OpenAI deployment that metered() was given no base model for (its
    deployments=): Earmark cannot price it, so it was not sent (nothing was held).
    about["deployment"] names it. The TypeScript SDK's error of the same name."""

    def __init__(self, deployment: str) -> None:
        EarmarkClientError.__init__(
            self,
            f"the Azure deployment {deployment!r} has no base model in metered()'s "
            "deployments=, so Earmark cannot price it; not sent",
        )
        self.about = {"deployment": deployment}


class StreamUsageNotReportedError(EndpointNotMeteredError):
    """A chat stream to Azure OpenAI under an api-version that streams no usage (it takes
    no stream_options: before 2024-10-21, or 2024-09-01-preview): its hold could only go in
    doubt, so it was not sent (nothing was held). about["api_version"] names it."""

    def __init__(self, api_version: str) -> None:
        EarmarkClientError.__init__(
            self,
            f"Azure OpenAI api-version {api_version!r} streams no usage (stream_options "
            "takes 2024-10-21 or 2024-09-01-preview and later), so Earmark could not settle "
            "the stream; not sent: use a later api_version, or stream=False",
        )
        self.about = {"api_version": api_version}


@dataclass(frozen=True)
class Azure:
    """An Azure OpenAI client's deployments (name: base model), its api-version (None:
    the v1 API, which takes none), and how its refusals are raised (as the SDK's errors
    too: raised from a route, before the transport could make them so)."""

    deployments: Mapping[str, str]
    api_version: str | None = None
    errors: Raising = field(default_factory=Raising)

    def base_model(self, deployment: str) -> str:
        model = self.deployments.get(deployment)
        if not isinstance(model, str) or not model:
            raise self.errors(DeploymentNotMappedError)(deployment)
        return model


class Deployed:
    """A metered route of Azure OpenAI: OpenAI's own, its calls priced as their
    deployment's base model (the path's deployment, else the body's model); a deployment
    not mapped, and a chat stream under an api-version that streams no usage, refused
    before anything is held or sent."""

    def __init__(self, route: Route, azure: Azure, deployment: str | None) -> None:
        self.route, self.azure, self.deployment = route, azure, deployment
        self.later = getattr(route, "later", None)

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        if body.get("data_sources"):
            # Azure OpenAI On Your Data: the service queries the named search index (and an
            # embedding deployment, for vector search) for the call, billed to those
            # resources apart from the call's tokens.
            raise self.azure.errors(ToolNotMeteredError)(
                "data_sources (Azure OpenAI On Your Data)",
                "runs searches and embeddings billed apart from the call's tokens, which "
                "Earmark cannot hold",
            )
        call = self.route.call(body, meter)
        model = self.azure.base_model(call.model if self.deployment is None else self.deployment)
        version = self.azure.api_version
        if call.stream and isinstance(self.route, Chat) and not hosts.streams_usage(version):
            assert version is not None
            raise self.azure.errors(StreamUsageNotReportedError)(version)
        return replace(call, model=model)

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        return self.route.sent(body, call, cap)

    def usage(self, answer: Any, call: Call) -> Usage | None:
        return self.route.usage(answer, call)

    def tally(self, call: Call, hidden_usage: bool) -> Tally:
        return self.route.tally(call, hidden_usage)


class Compatible:
    """A metered route of an OpenAI-compatible provider whose answers differ from OpenAI's
    (hosts.REPORTS_COST, XAI, STREAMS_USAGE_UNASKED, MAX_TOKENS_ONLY): its usage carries the
    cost the provider reports (OpenRouter's usage.cost: earmark.client.reported); xAI's
    reasoning tokens, which its completion_tokens leave out, are output; a stream to a
    provider that ends every stream with its usage is sent without stream_options; a chat
    call to one that reads only max_tokens is told its cap there."""

    def __init__(self, route: Route, name: str) -> None:
        self.route, self.name = route, name
        self.later = getattr(route, "later", None)

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        return self.route.call(body, meter)

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        sent, hidden = self.route.sent(body, call, cap)
        if self.name in MAX_TOKENS_ONLY and isinstance(unwrapped(self), Chat):
            sent = _told_max_tokens(body, sent, cap)
        if hidden and self.name in STREAMS_USAGE_UNASKED:
            # The caller's own stream_options, if any, as the caller wrote them.
            sent = {k: v for k, v in sent.items() if k != "stream_options"}
            if "stream_options" in body:
                sent["stream_options"] = body["stream_options"]
            return sent, False
        return sent, hidden

    def usage(self, answer: Any, call: Call) -> Usage | None:
        reported = answer.get("usage") if isinstance(answer, dict) else None
        return self.adjusted(self.route.usage(answer, call), reported)

    def tally(self, call: Call, hidden_usage: bool) -> Tally:
        return _CompatibleTally(self, self.route.tally(call, hidden_usage))

    def adjusted(self, usage: Usage | None, reported: Any) -> Usage | None:
        """usage as the provider bills it, from the usage object it reported."""
        if usage is None or not isinstance(reported, dict):
            return usage
        if self.name == XAI:
            usage = replace(usage, output_tokens=usage.output_tokens + _unreported(reported))
        if self.name in hosts.REPORTS_COST:
            usage = with_cost(usage, reported_cost(reported))
        return usage


# xAI (genai-prices "x-ai": its chat extractor adds completion_tokens_details
# .reasoning_tokens to completion_tokens): its completion_tokens leave the reasoning out.
XAI = "x-ai"
# Providers that end every chat stream with its usage, asked or not: their streams are sent
# as the caller wrote them, and the caller sees the usage as it would unmetered. Mistral
# (its API validates strictly, and may refuse an argument it does not know; notes-45 4.3)
# and OpenRouter ("stream_options ... deprecated and have no effect": its usage
# accounting docs).
STREAMS_USAGE_UNASKED = frozenset({"mistral", "openrouter"})
# Providers whose chat API documents max_tokens as its maximum, and not OpenAI's newer
# max_completion_tokens (their API references; ../shared/notes' provider table): the cap is
# told as max_tokens, which they read, whether or not the caller named the newer one.
MAX_TOKENS_ONLY = frozenset({"deepseek", "mistral", "openrouter", "together"})


def _told_max_tokens(body: dict[str, Any], sent: dict[str, Any], cap: int | None) -> dict[str, Any]:
    """sent with its maximum under max_tokens: the cap (None: the caller's
    max_completion_tokens, where it named no max_tokens); max_completion_tokens kept only
    where the caller named it."""
    newer = "max_completion_tokens"
    limit = cap if cap is not None else sent.get(newer)
    if limit is None or (cap is None and body.get("max_tokens")):
        return sent
    told = {k: v for k, v in sent.items() if k != newer}
    if newer in body:
        told[newer] = sent[newer]
    return {**told, "max_tokens": limit}


def _unreported(usage: dict[str, Any]) -> int:
    """The reasoning tokens xAI's completion_tokens leave out: its reasoning_tokens, unless
    total_tokens says completion_tokens counted them (then none)."""
    details = usage.get("completion_tokens_details")
    reasoning = number(details.get("reasoning_tokens")) if isinstance(details, dict) else 0
    total = usage.get("total_tokens")
    counted = number(usage.get("prompt_tokens")) + number(usage.get("completion_tokens"))
    if isinstance(total, int) and not isinstance(total, bool) and total == counted:
        return 0
    return min(reasoning, limits.tokens_per_request_max)


class _CompatibleTally:
    """A stream's tally, its usage adjusted as the route's (from the last usage object the
    stream carried: the usage chunk's, or Groq's x_groq)."""

    def __init__(self, route: Compatible, tally: Tally) -> None:
        self.route, self.tally = route, tally
        self._reported: Any = None

    def keep(self, event: str, data: Any) -> bool:
        if isinstance(data, dict) and isinstance(data.get("usage"), dict):
            self._reported = data["usage"]
        return self.tally.keep(event, data)

    def usage(self) -> Usage | None:
        return self.route.adjusted(self.tally.usage(), self._reported)


def unwrapped(route: object) -> object:
    """The provider's own route inside Azure's or a reporting provider's."""
    while isinstance(route, Deployed | Compatible):
        route = route.route
    return route


def provider(name: str = PROVIDER, prefix: str = "/v1", azure: Azure | None = None) -> Provider:
    """OpenAI (or an OpenAI-compatible API, priced under name) under a base URL whose own
    path is prefix, its SDK's base error and its websocket surfaces; with azure, Azure
    OpenAI's deployments (Deployed). A provider whose answers differ from OpenAI's has
    its routes read as it bills (Compatible)."""
    import openai

    errors = Raising(openai.OpenAIError)
    deployments = None if azure is None else replace(azure, errors=errors)
    differs = (
        name in hosts.REPORTS_COST
        or name in STREAMS_USAGE_UNASKED
        or name in MAX_TOKENS_ONLY
        or name == XAI
    )

    def routed(path: str) -> Route | str | None:
        deployment, path = _deployed(path, prefix)
        found = ROUTES.routing(path, prefix)
        if found is None or isinstance(found, str):
            return found
        if deployments is not None:
            found = Deployed(found, deployments, deployment)
        return Compatible(found, name) if differs else found

    return Provider(name, routed, openai.OpenAIError, SOCKETS)


assert limits.llm_prompt_chars_per_token > 0
