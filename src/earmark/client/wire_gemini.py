"""Gemini at the wire: the Gemini API's and Vertex AI's generateContent held, capped and
settled from the usageMetadata Google reports (the google-genai SDK's GenerateContentResponse
and its UsageMetadata), as the published REST API has them
(ai.google.dev/api/generate-content; cloud.google.com/vertex-ai/generative-ai/docs/reference/rest).

Routing is by the `:method` that ends the path, whatever the API version and the resource
form before the model (`/v1/models/{model}`, `/v1beta/...`, Vertex's
`/v1beta1/publishers/google/models/{model}` and
`/v1beta1/projects/{p}/locations/{l}/publishers/google/models/{model}`): metered,
generateContent and streamGenerateContent (held for their output), embedContent and
batchEmbedContents (held for their input: genai-prices prices gemini-embedding-001 and
-2 by input tokens alone, and an embedding answer may report usageMetadata.promptTokenCount;
without it the hold stays in doubt with the estimate charged); free, countTokens and
computeTokens (they bill nothing), and uploading files (kept for free); every other POST
(Vertex's :predict embeddings of models genai-prices does not price, image and video
generation, batches, tuned models and deployed endpoints, cached contents, which bill their
storage by the hour) is refused before it is sent. The model is the path's, as genai-prices
names Google's models (gemini-2.5-flash).

What a request may ask that Earmark cannot price is refused before anything is held: a tool
that bills a fee per call (Google Search and Maps grounding, Vertex AI Search, file search:
their fees are counted per prompt or per query in groundingMetadata, which is not settled
yet), an output modality other than text (images and speech, billed at their own rates),
and audio input (billed above the text rate). Images and video in the prompt bill as input
tokens at the text rate on the Gemini 2.x models genai-prices prices.

The usage: promptTokenCount counts the whole prompt, the cached part
(cachedContentTokenCount) included; toolUsePromptTokenCount, the tool results fed back,
bills as input; thoughtsTokenCount, the thinking, is not inside candidatesTokenCount and
bills as output (ai.google.dev/gemini-api/docs/pricing: "output price (including thinking
tokens)"; genai-prices' google extractor adds both). A stream's events are JSON
GenerateContentResponse chunks (`data:` lines, no event names, no [DONE]); early chunks
may carry a partial usageMetadata, the last one the whole: the last one read wins, once a
chunk has said the answer ended (a finishReason, or a blocked prompt). A stream that stops
before that leaves the hold in doubt.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from earmark import limits
from earmark.client.meter import Meter
from earmark.client.wire import (
    FREE,
    Call,
    EndpointNotMeteredError,
    Provider,
    Route,
    Tally,
    ToolNotMeteredError,
    prompt_estimate,
)
from earmark.client.wire_usage import cache_parts, reported_count, served_tier
from earmark.core.prices import Usage

# genai-prices' name for Google's models, the Gemini API's and Vertex AI's both.
PROVIDER = "google"

# A path's API version segment: v1, v1beta, v1beta1, v1alpha, v2...
_VERSION = r"v\d+(?:(?:alpha|beta)\d*)?"
# The resource before the model: none (the Gemini API), publishers/google (Vertex express
# mode and global), or a project's location's (Vertex).
_PARENT = r"(?:projects/[^/]+/locations/[^/]+/)?(?:publishers/google/)?"
_MODEL_PATH = re.compile(
    rf"/{_VERSION}/{_PARENT}models/(?P<model>(?!\.\.?:)[^/:]+):(?P<method>[A-Za-z]+)"
)
# The methods that generate text, held for their output; the stream's flag.
GENERATE = {"generateContent": False, "streamGenerateContent": True}
EMBED = ("embedContent", "batchEmbedContents")
# Files (the Gemini API's uploads, their resumable parts and registrations): a standing cost
# that Google does not bill, passed as free.
_FILES = re.compile(rf"(?:/upload)?/{_VERSION}/files(?::register)?")
FREE_METHODS = ("countTokens", "computeTokens")

# A Gemini tool is an object whose one key names its kind (the published Tool message:
# functionDeclarations, googleSearch...); each kind by what it bills beyond its tokens.
# A kind not listed is refused. The SDK sends camelCase; protobuf's JSON reader takes the
# snake_case names too, so both are listed.
_GROUNDING = (
    "bills a fee per grounded prompt or search query (counted in groundingMetadata), "
    "which Earmark does not hold and settle yet"
)
_PARTNER_SEARCH = "bills each search query at its partner's rate, which Earmark cannot hold"
TOOLS: dict[str, str] = {
    # Tokens only: the caller's own functions, code run in Gemini's sandbox (billed as
    # tokens), URLs fetched into the context, a computer the caller drives.
    "functionDeclarations": "",
    "function_declarations": "",
    "codeExecution": "",
    "code_execution": "",
    "urlContext": "",
    "url_context": "",
    "computerUse": "",
    "computer_use": "",
    # Remote MCP servers Gemini calls for the model: their results are tokens, and the
    # servers bill their owner, not Google (as the Responses API's mcp tool).
    "mcpServers": "",
    "mcp_servers": "",
    # Refused: fees per call Earmark does not hold yet.
    "googleSearch": _GROUNDING,
    "google_search": _GROUNDING,
    "googleSearchRetrieval": _GROUNDING,
    "google_search_retrieval": _GROUNDING,
    "enterpriseWebSearch": _GROUNDING,
    "enterprise_web_search": _GROUNDING,
    "googleMaps": _GROUNDING,
    "google_maps": _GROUNDING,
    "retrieval": "bills Vertex AI Search or RAG Engine queries, which Earmark cannot hold",
    "fileSearch": "bills the embeddings of the stores it searches, which Earmark cannot hold",
    "file_search": "bills the embeddings of the stores it searches, which Earmark cannot hold",
    # Vertex AI's partner web search (Exa, Parallel): billed per query.
    "exaAiSearch": _PARTNER_SEARCH,
    "exa_ai_search": _PARTNER_SEARCH,
    "parallelAiSearch": _PARTNER_SEARCH,
    "parallel_ai_search": _PARTNER_SEARCH,
}


class ModalityNotMeteredError(EndpointNotMeteredError):
    """A generateContent request with input or output Earmark prices at the wrong rate
    (audio in; images or speech out): refused before anything is held or sent."""

    def __init__(self, what: str) -> None:
        EndpointNotMeteredError.__init__(self, "POST", "generateContent")
        self.args = (f"{what} bills at rates Earmark does not price; not sent",)
        self.about = {"modality": what}


def _field(holder: Any, camel: str, snake: str) -> Any:
    """A field of a request object by either of its JSON names (camelCase first)."""
    if not isinstance(holder, dict):
        return None
    value = holder.get(camel)
    return holder.get(snake) if value is None else value


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _part_chars(part: Any) -> int:
    """The characters of a Part the model reads as text: its text, and a function call's
    or response's, or code's, JSON."""
    if not isinstance(part, dict):
        return len(part) if isinstance(part, str) else 0
    chars = len(str(part.get("text") or ""))
    for camel, snake in (
        ("functionCall", "function_call"),
        ("functionResponse", "function_response"),
        ("executableCode", "executable_code"),
        ("codeExecutionResult", "code_execution_result"),
    ):
        value = _field(part, camel, snake)
        if value is not None:
            chars += len(json.dumps(value, default=str))
    return chars


def _audio(part: Any) -> bool:
    """Whether a Part may carry audio (inline or a file), which bills above the text rate:
    an audio mimeType, or a file that names none (the REST API's fileData.mimeType is
    optional, and Google reads the file's own type)."""
    for camel, snake in (("inlineData", "inline_data"), ("fileData", "file_data")):
        blob = _field(part, camel, snake)
        mime = _field(blob, "mimeType", "mime_type")
        if isinstance(mime, str) and mime.lower().startswith("audio/"):
            return True
        if camel == "fileData" and isinstance(blob, dict) and not mime:
            return True
    return False


def _contents(value: Any) -> list[Any]:
    """A request's contents: a list of Content, or one (a string is one text part)."""
    if isinstance(value, list):
        return value
    return [] if value is None else [value]


def _content_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    parts = content.get("parts") if isinstance(content, dict) else None
    found = parts if isinstance(parts, list) else []
    if any(_audio(part) for part in found):
        raise ModalityNotMeteredError("audio input")
    return sum(_part_chars(part) for part in found)


def check_tools(given: Any) -> None:
    """Raises ToolNotMeteredError for a tool that bills a fee Earmark cannot hold, and for a
    kind it has not classified."""
    for tool in given if isinstance(given, list) else []:
        if not isinstance(tool, dict):
            continue
        for kind in tool:
            why = TOOLS.get(kind)
            if why is None:
                raise ToolNotMeteredError(
                    kind,
                    "is of a kind Earmark has not classified, and may bill a fee it cannot hold",
                )
            if why:
                raise ToolNotMeteredError(kind, why)


def generation_config(body: dict[str, Any]) -> dict[str, Any]:
    config = _field(body, "generationConfig", "generation_config")
    return config if isinstance(config, dict) else {}


def _prompt(body: dict[str, Any]) -> int:
    contents = _contents(body.get("contents"))
    chars = sum(_content_chars(content) for content in contents)
    system = _field(body, "systemInstruction", "system_instruction")
    if system is not None:
        chars += _content_chars(system)
    tools = body.get("tools")
    if tools:
        chars += len(json.dumps(tools, default=str))
    return prompt_estimate(chars, len(contents) + (system is not None))


@dataclass(frozen=True)
class GenerateContent:
    """POST .../models/{model}:generateContent and :streamGenerateContent."""

    model: str
    stream: bool = False

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        # Read first: what cannot be priced refuses the request before its hold.
        check_tools(body.get("tools"))
        config = generation_config(body)
        modalities = _field(config, "responseModalities", "response_modalities")
        other = [m for m in modalities or [] if str(m).upper() != "TEXT"]
        if other or _field(config, "speechConfig", "speech_config") is not None:
            raise ModalityNotMeteredError(f"{(other or ['AUDIO'])[0]} output".lower())
        return Call(
            model=self.model,
            prompt_tokens=_prompt(body),
            # Thinking counts against maxOutputTokens: the cap covers it.
            asked=_positive(_field(config, "maxOutputTokens", "max_output_tokens")),
            choices=_positive(_field(config, "candidateCount", "candidate_count")) or 1,
            stream=self.stream,
            service_tier=requested_tier(body),
        )

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        return capped(body, cap), False

    def usage(self, answer: Any, call: Call) -> Usage | None:
        usage = answer.get("usageMetadata") if isinstance(answer, dict) else None
        return gemini_usage(usage) if isinstance(usage, dict) else None

    def tally(self, call: Call, hidden_usage: bool) -> Tally:
        return GenerateTally(call.choices)


def capped(body: dict[str, Any], cap: int | None) -> dict[str, Any]:
    """body with generationConfig.maxOutputTokens set to cap (None: as it is). The config
    keeps the name the caller gave it; a snake_case max_output_tokens is replaced, not kept
    beside it (two names of one field are refused by protobuf's JSON reader)."""
    if cap is None:
        return body
    snake = "generation_config" in body and "generationConfig" not in body
    name = "generation_config" if snake else "generationConfig"
    given = body.get(name)
    config = {k: v for k, v in (given if isinstance(given, dict) else {}).items()}
    config.pop("max_output_tokens", None)
    config["maxOutputTokens"] = cap
    return {**body, name: config}


def _audio_billed(usage: dict[str, Any]) -> bool:
    """Whether a usageMetadata says audio tokens were billed (its prompt's or its cached
    content's modality details): at a rate above the text one that the hold was not made
    for (audio in a cached content, a file's own type), so the call is left in doubt."""
    for name in ("promptTokensDetails", "cacheTokensDetails"):
        details = usage.get(name)
        for detail in details if isinstance(details, list) else []:
            if (
                isinstance(detail, dict)
                and str(detail.get("modality", "")).upper() == "AUDIO"
                and reported_count(detail.get("tokenCount")) != 0
            ):
                return True
    return False


def gemini_usage(usage: dict[str, Any]) -> Usage | None:
    """A usageMetadata as Earmark prices it: every input token (the prompt, cached part
    included, and the tool-use prompt), the cached part apart, and the output with its
    thinking; None when a count is out of bounds."""
    found = [
        reported_count(usage.get(name))
        for name in (
            "promptTokenCount",
            "toolUsePromptTokenCount",
            "candidatesTokenCount",
            "thoughtsTokenCount",
        )
    ]
    if None in found or _audio_billed(usage):
        return None
    prompt, tool_use, candidates, thoughts = (n or 0 for n in found)
    cached, _ = cache_parts(prompt + tool_use, usage.get("cachedContentTokenCount"), 0)
    return Usage(
        input_tokens=prompt + tool_use,
        output_tokens=candidates + thoughts,
        cached_input_tokens=cached,
        service_tier=SERVED_TIERS.get(str(usage.get("trafficType", "")).upper(), ""),
    )


# The service tiers a request asks for (GenerateContentConfig.service_tier, the body's
# serviceTier) that bill at the standard rates: the price book's default tier ("").
STANDARD_TIERS = frozenset({"", "standard", "unspecified", "service_tier_unspecified"})
# The tier an answer says it was billed at (usageMetadata.trafficType, Vertex AI's): the
# price book's tier names; any other (provisioned throughput...) says nothing, and the call
# is priced at the tier it was held at.
SERVED_TIERS = {
    "ON_DEMAND": "default",
    "ON_DEMAND_PRIORITY": "priority",
    "ON_DEMAND_FLEX": "flex",
}


def requested_tier(body: dict[str, Any]) -> str:
    """The service tier a request asks for, as the price book names it ("" the standard
    one): a priority or flex call is held and priced at that tier's rates, refused where
    the book has none."""
    tier = _field(body, "serviceTier", "service_tier")
    name = tier.lower() if isinstance(tier, str) else ""
    if name in STANDARD_TIERS:
        return ""
    # A name the book cannot hold is sent to it as asked, and refused there, unsent.
    return served_tier(name) or name[: limits.service_tier_length_max + 1]


def finished(chunk: dict[str, Any]) -> tuple[set[int], bool]:
    """What a chunk says ended: the indexes of the candidates it gives a finishReason, and
    whether the prompt was blocked (promptFeedback.blockReason, sent with no candidates),
    which ends the answer whole."""
    candidates = chunk.get("candidates")
    done = set()
    for candidate in candidates if isinstance(candidates, list) else []:
        if isinstance(candidate, dict) and candidate.get("finishReason"):
            index = candidate.get("index", 0)
            done.add(index if isinstance(index, int) and not isinstance(index, bool) else 0)
    feedback = chunk.get("promptFeedback")
    return done, isinstance(feedback, dict) and bool(feedback.get("blockReason"))


class GenerateTally:
    """A stream's usage: the last usageMetadata a chunk carried, known once the answer has
    ended, every one of its candidates (candidateCount) with a finishReason, or its
    prompt blocked; earlier ones may be partial (the prompt alone, or a candidate still
    running when the stream was cut)."""

    def __init__(self, candidates: int = 1) -> None:
        self._usage: dict[str, Any] | None = None
        self._candidates = candidates
        self._finished: set[int] = set()
        self._blocked = False

    def keep(self, event: str, data: Any) -> bool:
        if isinstance(data, dict):
            if isinstance(data.get("usageMetadata"), dict):
                self._usage = data["usageMetadata"]
            done, blocked = finished(data)
            self._finished |= done
            self._blocked = self._blocked or blocked
        return True

    def usage(self) -> Usage | None:
        ended = self._blocked or len(self._finished) >= self._candidates
        if not ended or self._usage is None:
            return None
        return gemini_usage(self._usage)


@dataclass(frozen=True)
class Embed:
    """POST .../models/{model}:embedContent and :batchEmbedContents: the input alone is
    billed."""

    model: str

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        requests = body.get("requests")
        each = requests if isinstance(requests, list) else [body]
        chars, count = 0, 0
        for request in each:
            for content in _contents(request.get("content") if isinstance(request, dict) else None):
                chars += _content_chars(content)
                count += 1
        return Call(model=self.model, prompt_tokens=prompt_estimate(chars, count), has_output=False)

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        return body, False

    def usage(self, answer: Any, call: Call) -> Usage | None:
        usage = answer.get("usageMetadata") if isinstance(answer, dict) else None
        if not isinstance(usage, dict) or usage.get("promptTokenCount") is None:
            return None
        tokens = reported_count(usage.get("promptTokenCount"))
        return None if tokens is None else Usage(tokens, 0)

    def tally(self, call: Call, hidden_usage: bool) -> Tally:
        raise AssertionError("embeddings are not streamed")


@dataclass(frozen=True)
class Target:
    """What a POST's path names: its model and its method."""

    model: str
    method: str


def target(path: str, prefix: str = "") -> Target | None:
    """The model and method of a POST to a model's method under a base URL whose own path
    is prefix; None for any other path."""
    if not path.startswith(prefix + "/"):
        return None
    found = _MODEL_PATH.fullmatch(path, len(prefix))
    return None if found is None else Target(found["model"], found["method"])


def routing(path: str, prefix: str = "") -> Route | str | None:
    """The route of a POST to path (its query apart), under a base URL whose own path is
    prefix; FREE for one that bills nothing; None otherwise (refused)."""
    found = target(path, prefix)
    if found is None:
        files = path.startswith(prefix + "/") and _FILES.fullmatch(path, len(prefix))
        return FREE if files else None
    if found.method in GENERATE:
        return GenerateContent(found.model, GENERATE[found.method])
    if found.method in EMBED:
        return Embed(found.model)
    return FREE if found.method in FREE_METHODS else None


# The google-genai package's websocket surfaces, which a metered client refuses (the live
# interactions' socket is built from the HTTP base URL, not the websocket one, so only this
# refusal stops it). tests/client/test_metered_gemini.py fails on a module of the installed
# package that opens a websocket and is not one of SOCKET_MODULES.
SOCKETS = ("aio.live.connect", "aio.live.music.connect", "aio.interactions.connect")
SOCKET_MODULES = ("live.py", "_interactions_websocket.py")


def provider(name: str = PROVIDER, prefix: str = "") -> Provider:
    """Gemini (the Gemini API or Vertex AI, priced under name) under a base URL whose own
    path is prefix, and its SDK's base error."""
    from google.genai import errors

    def routed(path: str) -> Route | str | None:
        return routing(path, prefix)

    return Provider(name, routed, errors.APIError, SOCKETS)
