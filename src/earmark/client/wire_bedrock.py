"""Amazon Bedrock's runtime (boto3's bedrock-runtime client): which operations bill, how a
billable one is read into a Call and capped, and where its usage is, as botocore's service
model (bedrock-runtime 2023-09-30) and AWS's published API reference have them.

Bedrock is not metered at the HTTP client as OpenAI's, Anthropic's and Gemini's SDKs are:
boto3 signs every request (SigV4) and parses AWS's binary event streams itself, and its
public, documented extension point is its event hooks, per client (client.meta.events).
So this module reads what botocore's hooks are given, not HTTP requests:
- `before-parameter-build.bedrock-runtime.{Operation}` gets the operation's API parameters,
  a dict it may change in place, before anything is serialized or sent: `held()` reads
  them into the operation's reader and its Call (raising EndpointNotMeteredError or
  ToolNotMeteredError to refuse: botocore passes a hook's exception to the caller, and the
  server sees no request), and `Operation.sent()` gives them back with the cap set.
- `after-call.bedrock-runtime.{Operation}` gets the HTTP response and the parsed answer:
  `Operation.usage()` reads a Converse answer's usage (an InvokeModel's body is read first,
  and put back for the caller: `rewind()`); a stream's EventStream is wrapped
  (`MeteredStream`) so that its usage is read as the caller iterates it.
Nothing here registers a hook: the held-call sequence (next) does.

Operations (OPERATIONS): metered, Converse and ConverseStream (any model), InvokeModel and
InvokeModelWithResponseStream for the model families whose bodies Earmark reads (Anthropic's
Messages, Amazon Nova's messages-v1); free, CountTokens and reading async invocations;
refused, the rest (async invocations, which bill after their call; guardrails, billed per
text unit; the bidirectional stream; InvokeModel for other families).

The model: genai-prices' provider `aws` prices Bedrock's model ids, and AWS bills a global
cross-region inference profile (`global.`) below an in-region call or a geographic profile
(`us.`, `eu.`, `apac.`...), for the model families it prices apart; genai-prices names
those `global.{id}` and `regional.{id}` (price_name).

The usage: Converse's inputTokens EXCLUDES the cache reads and writes
(cacheReadInputTokens, cacheWriteInputTokens; genai-prices' aws extractor adds both to the
input), and Earmark's input counts every input token, so they are added; cacheDetails
splits the writes by TTL (1h apart). ConverseStream's usage is its last event's,
`metadata`; a stream that ends without it leaves the hold in doubt.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import unquote

from earmark.client.errors import EarmarkClientError
from earmark.client.meter import Meter
from earmark.client.wire import (
    FREE,
    Call,
    EndpointNotMeteredError,
    ToolNotMeteredError,
    number,
    prompt_estimate,
)
from earmark.client.wire_anthropic import Messages, messages_usage
from earmark.client.wire_usage import cache_parts, reported_count, served_tier
from earmark.core.prices import Usage

# genai-prices' provider id for Bedrock ("AWS Bedrock").
PROVIDER = "aws"

# The geographic prefixes of AWS's system-defined cross-region inference profiles, billed
# as an in-region call is ("regional"); global. is billed apart.
GEOGRAPHIES = ("us", "us-gov", "eu", "apac", "au", "jp", "ca", "in")
GLOBAL = "global."
REGIONAL = "regional."
# The model families genai-prices 0.2.3 prices apart for global and regional calls (its
# `regional.` ids); any other model has one price, under its bare id.
# tests/client/test_wire_bedrock.py checks this against the installed genai-prices.
REGIONAL_PRICED = (
    "anthropic.",
    "amazon.nova-2-lite",
    "moonshotai.",
    "openai.gpt-5.6",
    "openai.gpt-6",
    "zai.",
)
_ARN = re.compile(r"arn:aws[a-z-]*:bedrock:[^:]*:[^:]*:(?P<kind>[a-z-]+)/(?P<id>.+)")


def price_name(model_id: str) -> str:
    """The name the price book knows a Bedrock model id by (the modelId parameter, or the
    path's segment, percent-encoded): a foundation model's or a system-defined inference
    profile's ARN is read as its id; a geographic profile (us., eu....) and an in-region id
    are priced as genai-prices' regional id for a family it prices apart (else the bare
    id); a global profile keeps its global. name. Any other ARN (an application inference
    profile, a provisioned or custom model) names no model Earmark can see: named as
    given, so that an operator may put its price by hand."""
    name = unquote(model_id)
    arn = _ARN.fullmatch(name)
    if arn is not None:
        if arn["kind"] not in ("foundation-model", "inference-profile"):
            return name
        name = arn["id"]
    if name.startswith((GLOBAL, REGIONAL)):
        return name
    geography, dot, rest = name.partition(".")
    base = rest if dot and geography in GEOGRAPHIES else name
    return REGIONAL + base if base.startswith(REGIONAL_PRICED) else base


def _base(name: str) -> str:
    """A price name without its global. or regional. prefix: the model's family."""
    for prefix in (GLOBAL, REGIONAL):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def bedrock_usage(
    usage: Mapping[str, Any], read: str, written: str, tier: Any = None
) -> Usage | None:
    """A Bedrock usage (Converse's TokenUsage, or Nova's InvokeModel usage, whose cache
    counts are named read and written) as Earmark prices it: inputTokens counts neither
    cache reads nor writes, so both are added; the writes kept for an hour apart
    (cacheDetails); the tier the answer says it ran at. None when a count is out of
    bounds."""
    names = ("inputTokens", "outputTokens", read, written)
    found = [reported_count(usage.get(name)) for name in names]
    if None in found:
        return None
    fresh, output, reads, writes = (n or 0 for n in found)
    input_tokens = fresh + reads + writes
    cached, wrote = cache_parts(input_tokens, reads, writes)
    long = 0
    details = usage.get("cacheDetails")
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, Mapping) and detail.get("ttl") == "1h":
            long += number(detail.get("inputTokens"))
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output,
        cached_input_tokens=cached,
        cache_write_input_tokens=wrote,
        cache_write_long_input_tokens=min(max(0, long), wrote),
        service_tier=served_tier(tier.get("type") if isinstance(tier, Mapping) else None),
    )


def converse_usage(answer: Mapping[str, Any]) -> Usage | None:
    """The usage of a Converse answer or of ConverseStream's metadata event."""
    usage = answer.get("usage")
    if not isinstance(usage, Mapping):
        return None
    return bedrock_usage(
        usage, "cacheReadInputTokens", "cacheWriteInputTokens", answer.get("serviceTier")
    )


def metrics_usage(metrics: Mapping[str, Any]) -> Usage | None:
    """The usage `amazon-bedrock-invocationMetrics` reports on an InvokeModel stream's last
    chunk (inputTokenCount, outputTokenCount, and cacheRead/cacheWriteInputTokenCount):
    a fallback, read as Bedrock's other counts are (the input excluding the cache)."""
    renamed = {
        "inputTokens": metrics.get("inputTokenCount"),
        "outputTokens": metrics.get("outputTokenCount"),
        "read": metrics.get("cacheReadInputTokenCount"),
        "written": metrics.get("cacheWriteInputTokenCount"),
    }
    return bedrock_usage(renamed, "read", "written")


def header_usage(headers: Mapping[str, str]) -> Usage | None:
    """InvokeModel's token-count headers (x-amzn-bedrock-input-token-count and
    -output-token-count; not in botocore's service model, widely observed): a fallback
    for an answer whose body reports no usage. botocore gives the headers lower-cased."""
    found = []
    for name in ("x-amzn-bedrock-input-token-count", "x-amzn-bedrock-output-token-count"):
        value = headers.get(name, "")
        if not value.isdigit():
            return None
        found.append(int(value))
    return bedrock_usage({"inputTokens": found[0], "outputTokens": found[1]}, "", "")


class StreamTally(Protocol):
    """Reads a stream's events as botocore yields them ({"metadata": {...}}, {"chunk":
    {"bytes": b"..."}}) for the provider's final usage."""

    def keep(self, event: Mapping[str, Any]) -> None: ...

    def usage(self) -> Usage | None: ...


class Operation(Protocol):
    """One billable operation of bedrock-runtime, read from its API parameters."""

    def call(self, params: Mapping[str, Any], meter: Meter) -> Call: ...

    def sent(self, params: Mapping[str, Any], call: Call, cap: int | None) -> dict[str, Any]:
        """The parameters to send, the output cap set to cap (None: as they are)."""
        ...

    def usage(self, answer: Mapping[str, Any], headers: Mapping[str, str]) -> Usage | None:
        """The usage of a JSON answer (Converse's parsed answer; InvokeModel's body,
        decoded); None when it reports none."""
        ...

    def tally(self, call: Call) -> StreamTally: ...


def _text_chars(blocks: Any) -> int:
    """The characters of Converse content blocks the model reads as text: text, a tool's
    use or result, reasoning, guarded content."""
    chars = 0
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, Mapping):
            continue
        chars += len(str(block.get("text") or ""))
        for name in ("toolUse", "reasoningContent", "guardContent"):
            if block.get(name) is not None:
                chars += len(json.dumps(block[name], default=str))
        result = block.get("toolResult")
        if isinstance(result, Mapping):
            chars += _text_chars(result.get("content"))
            chars += sum(
                len(json.dumps(part.get("json"), default=str))
                for part in result.get("content") or []
                if isinstance(part, Mapping) and part.get("json") is not None
            )
    return chars


def _converse_prompt(params: Mapping[str, Any]) -> int:
    messages = [m for m in params.get("messages") or [] if isinstance(m, Mapping)]
    chars = _text_chars(params.get("system"))
    for message in messages:
        chars += _text_chars(message.get("content"))
    tools = params.get("toolConfig")
    if isinstance(tools, Mapping) and tools.get("tools"):
        chars += len(json.dumps(tools["tools"], default=str))
    return prompt_estimate(chars, len(messages))


def _refuse_unpriced(params: Mapping[str, Any]) -> None:
    """Raises for what a request asks that bills where Earmark has no price: guardrails
    (per text unit), latency-optimized inference (its own rates), AWS's system tools."""
    if params.get("guardrailConfig") is not None or params.get("guardrailIdentifier"):
        raise ToolNotMeteredError(
            "guardrail", "bills its text units apart from tokens, which Earmark cannot hold"
        )
    performance = params.get("performanceConfig")
    latency = (
        performance.get("latency")
        if isinstance(performance, Mapping)
        else params.get("performanceConfigLatency")
    )
    if latency not in (None, "standard"):
        raise ToolNotMeteredError(
            f"{latency} latency", "bills at rates the price book does not name"
        )
    tools = params.get("toolConfig")
    for tool in tools.get("tools") or [] if isinstance(tools, Mapping) else []:
        if not isinstance(tool, Mapping):
            continue
        for kind in tool:
            if kind == "systemTool":
                name = tool[kind].get("name") if isinstance(tool[kind], Mapping) else None
                raise ToolNotMeteredError(
                    str(name or kind), "runs at AWS for a fee Earmark cannot hold"
                )
            if kind not in ("toolSpec", "cachePoint"):
                raise ToolNotMeteredError(
                    kind, "is of a kind Earmark has not classified, and may bill a fee"
                )


def _tier(params: Mapping[str, Any]) -> str:
    """The service tier a request asks for ("" for the default): Converse's serviceTier
    {"type"}, InvokeModel's serviceTier (a header)."""
    given = params.get("serviceTier")
    kind = given.get("type") if isinstance(given, Mapping) else given
    return kind if isinstance(kind, str) and kind != "default" else ""


class Converse:
    """Converse and ConverseStream: any model, inferenceConfig.maxTokens its cap (absent,
    the model's maximum: "The default value is the maximum allowed value for the model")."""

    def __init__(self, stream: bool = False) -> None:
        self.stream = stream

    def call(self, params: Mapping[str, Any], meter: Meter) -> Call:
        _refuse_unpriced(params)
        config = params.get("inferenceConfig")
        asked = _positive(config.get("maxTokens")) if isinstance(config, Mapping) else None
        return Call(
            model=price_name(str(params.get("modelId", ""))),
            prompt_tokens=_converse_prompt(params),
            asked=asked,
            stream=self.stream,
            service_tier=_tier(params),
        )

    def sent(self, params: Mapping[str, Any], call: Call, cap: int | None) -> dict[str, Any]:
        if cap is None:
            return dict(params)
        config = params.get("inferenceConfig")
        given = dict(config) if isinstance(config, Mapping) else {}
        return {**params, "inferenceConfig": {**given, "maxTokens": cap}}

    def usage(self, answer: Mapping[str, Any], headers: Mapping[str, str]) -> Usage | None:
        return converse_usage(answer)

    def tally(self, call: Call) -> StreamTally:
        return ConverseTally()


class ConverseTally:
    """ConverseStream's usage: its metadata event, the last, and the only one with it."""

    def __init__(self) -> None:
        self._usage: Usage | None = None

    def keep(self, event: Mapping[str, Any]) -> None:
        metadata = event.get("metadata")
        if isinstance(metadata, Mapping):
            self._usage = converse_usage(metadata)

    def usage(self) -> Usage | None:
        return self._usage


def invoke_body(params: Mapping[str, Any]) -> dict[str, Any]:
    """An InvokeModel request's body (bytes, text or a file botocore reads), as JSON; a
    body that is not a JSON object is not sent."""
    body = params.get("body")
    if hasattr(body, "read"):
        raise EarmarkClientError("InvokeModel: a body given as a file is not read; not sent")
    try:
        found = json.loads(body if isinstance(body, (bytes, bytearray, str)) else b"")
    except ValueError:
        raise EarmarkClientError("InvokeModel: the body is not JSON; not sent") from None
    if not isinstance(found, dict):
        raise EarmarkClientError("InvokeModel: the body is not a JSON object; not sent")
    return found


def _with_body(params: Mapping[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    return {**params, "body": json.dumps(body, separators=(",", ":")).encode()}


class _ChunkTally:
    """An InvokeModel stream's chunks, decoded and given to the family's reader; the
    invocation metrics Bedrock adds to the last chunk are the fallback."""

    def __init__(self, read: Callable[[dict[str, Any]], None], final: Callable[[], Usage | None]):
        self._read, self._final = read, final
        self._metrics: Usage | None = None

    def keep(self, event: Mapping[str, Any]) -> None:
        chunk = event.get("chunk")
        raw = chunk.get("bytes") if isinstance(chunk, Mapping) else None
        try:
            data = json.loads(raw) if isinstance(raw, (bytes, str)) else None
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        metrics = data.get("amazon-bedrock-invocationMetrics")
        if isinstance(metrics, Mapping):
            self._metrics = metrics_usage(metrics)
        self._read(data)

    def usage(self) -> Usage | None:
        return self._final() or self._metrics


class InvokeAnthropic:
    """InvokeModel of an Anthropic model: the body is Anthropic's Messages request without
    its model (max_tokens required, the cap), the answer Anthropic's Message, the stream's
    chunks Anthropic's stream events; read as wire_anthropic reads them."""

    def __init__(self, stream: bool = False) -> None:
        self.stream = stream
        self._messages = Messages()

    def call(self, params: Mapping[str, Any], meter: Meter) -> Call:
        _refuse_unpriced(params)
        body = invoke_body(params)
        call = self._messages.call(body, meter)
        model = price_name(str(params.get("modelId", "")))
        return replace(call, model=model, stream=self.stream, service_tier=_tier(params))

    def sent(self, params: Mapping[str, Any], call: Call, cap: int | None) -> dict[str, Any]:
        if cap is None:
            return dict(params)
        sent, _ = self._messages.sent(invoke_body(params), call, cap)
        return _with_body(params, sent)

    def usage(self, answer: Mapping[str, Any], headers: Mapping[str, str]) -> Usage | None:
        usage = answer.get("usage")
        if isinstance(usage, dict):
            return messages_usage(usage)
        return header_usage(headers)

    def tally(self, call: Call) -> StreamTally:
        inner = self._messages.tally(call, False)

        def read(data: dict[str, Any]) -> None:
            inner.keep("", data)

        return _ChunkTally(read, inner.usage)


# Nova's max-tokens field: inferenceConfig.max_new_tokens in the Nova 1 request schema,
# maxTokens in Nova 2's (docs.aws.amazon.com/nova/latest/userguide/complete-request-schema.html,
# nova2-userguide/request-response-schema.html). UNVERIFIED against the live service; both are
# read, and the cap lowers each one given, or sets the family's when neither is.
_NOVA_CAPS = ("maxTokens", "max_new_tokens")


class InvokeNova:
    """InvokeModel of an Amazon Nova model (schemaVersion messages-v1): Converse's shapes,
    its cap in inferenceConfig; the answer's usage names its cache counts
    cacheRead/WriteInputTokenCount (public Nova fixtures; UNVERIFIED against AWS's docs);
    a stream's chunks are Converse-like events, usage in `metadata` (UNVERIFIED)."""

    def __init__(self, stream: bool = False) -> None:
        self.stream = stream

    def call(self, params: Mapping[str, Any], meter: Meter) -> Call:
        _refuse_unpriced(params)
        body = invoke_body(params)
        _refuse_unpriced(body)
        config = body.get("inferenceConfig")
        given = config if isinstance(config, Mapping) else {}
        asked = [n for n in (_positive(given.get(name)) for name in _NOVA_CAPS) if n]
        return Call(
            model=price_name(str(params.get("modelId", ""))),
            prompt_tokens=_converse_prompt(body),
            asked=min(asked) if asked else None,
            stream=self.stream,
            service_tier=_tier(params),
        )

    def sent(self, params: Mapping[str, Any], call: Call, cap: int | None) -> dict[str, Any]:
        if cap is None:
            return dict(params)
        body = invoke_body(params)
        config = body.get("inferenceConfig")
        given = dict(config) if isinstance(config, Mapping) else {}
        names = [name for name in _NOVA_CAPS if name in given]
        if not names:
            nova_2 = _base(call.model).startswith("amazon.nova-2")
            names = ["maxTokens" if nova_2 else "max_new_tokens"]
        return _with_body(
            params, {**body, "inferenceConfig": {**given, **dict.fromkeys(names, cap)}}
        )

    def usage(self, answer: Mapping[str, Any], headers: Mapping[str, str]) -> Usage | None:
        usage = answer.get("usage")
        if isinstance(usage, Mapping):
            return bedrock_usage(usage, "cacheReadInputTokenCount", "cacheWriteInputTokenCount")
        return header_usage(headers)

    def tally(self, call: Call) -> StreamTally:
        found: list[Usage | None] = []

        def read(data: dict[str, Any]) -> None:
            metadata = data.get("metadata")
            usage = metadata.get("usage") if isinstance(metadata, Mapping) else None
            if isinstance(usage, Mapping):
                found.append(
                    bedrock_usage(usage, "cacheReadInputTokenCount", "cacheWriteInputTokenCount")
                )

        return _ChunkTally(read, lambda: found[-1] if found else None)


def invoke_reader(model_id: str, stream: bool) -> Operation:
    """The reader of an InvokeModel body by the model's family; the families whose bodies
    Earmark does not read are refused (Converse meters any model)."""
    family = _base(price_name(model_id))
    if family.startswith("anthropic."):
        return InvokeAnthropic(stream)
    if family.startswith("amazon.nova-") and "sonic" not in family:
        return InvokeNova(stream)
    operation = "InvokeModelWithResponseStream" if stream else "InvokeModel"
    raise EndpointNotMeteredError(operation, f"/model/{model_id}: a body Earmark does not read")


# Every operation of bedrock-runtime (botocore's service model), by what Earmark does
# with it: a reader (metered), FREE, or REFUSED with why. tests/client/test_wire_bedrock.py
# reads the installed botocore's operations and fails on one not listed here.
METERED = ("Converse", "ConverseStream", "InvokeModel", "InvokeModelWithResponseStream")
OPERATIONS: dict[str, str] = {
    **dict.fromkeys(METERED, "metered"),
    # Free: counting tokens, and reading async invocations (GETs).
    "CountTokens": FREE,
    "GetAsyncInvoke": FREE,
    "ListAsyncInvokes": FREE,
    # Refused: an async invocation bills after its call returns; guardrails bill per text
    # unit; the bidirectional stream (speech) bills audio Earmark does not price.
    "StartAsyncInvoke": "refused",
    "ApplyGuardrail": "refused",
    "InvokeGuardrailChecks": "refused",
    "InvokeModelWithBidirectionalStream": "refused",
}


@dataclass(frozen=True)
class Held:
    """A metered operation's call as before-parameter-build read it: the reader, to cap
    its parameters and read its answer or stream, and the Call to hold."""

    operation: str
    reader: Operation
    call: Call


def held(operation: str, params: Mapping[str, Any], meter: Meter) -> Held | None:
    """What before-parameter-build.bedrock-runtime.{operation} reads of an operation's
    parameters: None for one that bills nothing (sent as it is); raises
    EndpointNotMeteredError (or ToolNotMeteredError) for one refused, before its hold."""
    what = OPERATIONS.get(operation)
    if what == FREE:
        return None
    if what != "metered":
        raise EndpointNotMeteredError(operation, "bedrock-runtime")
    stream = operation.endswith("Stream")
    model_id = str(params.get("modelId", ""))
    reader = (
        Converse(stream) if operation.startswith("Converse") else invoke_reader(model_id, stream)
    )
    return Held(operation, reader, reader.call(params, meter))


def rewind(parsed: dict[str, Any]) -> bytes:
    """An InvokeModel answer's body, read (for its usage) and put back as a new
    StreamingBody, so that the caller reads it whole."""
    from botocore.response import StreamingBody  # type: ignore[import-untyped]

    data: bytes = parsed["body"].read()
    parsed["body"] = StreamingBody(io.BytesIO(data), len(data))
    return data


def answer_usage(found: Held, parsed: dict[str, Any], headers: Mapping[str, str]) -> Usage | None:
    """What after-call reads of a non-stream answer: Converse's parsed answer, or an
    InvokeModel body (read and put back)."""
    if found.operation == "Converse":
        return found.reader.usage(parsed, headers)
    try:
        answer = json.loads(rewind(parsed))
    except ValueError:
        answer = None
    return found.reader.usage(answer if isinstance(answer, dict) else {}, headers)


class MeteredStream:
    """A botocore EventStream (ConverseStream's parsed['stream'], an InvokeModel stream's
    parsed['body']) as after-call puts it back: the caller iterates it as the original,
    each event read by the tally; ended is called once, with the stream's usage when it
    ran to its end, None when it raised (a modelled exception, a connection cut, a
    checksum mismatch; the stream is then closed, its connection released) or was closed
    or abandoned before it."""

    def __init__(
        self, inner: Any, tally: StreamTally, ended: Callable[[Usage | None], None]
    ) -> None:
        self._inner, self._tally, self._ended = inner, tally, ended
        self._done = False

    def __iter__(self) -> Iterator[Any]:
        try:
            for event in self._inner:
                self._tally.keep(event)
                yield event
        except BaseException:
            # The connection is released too: botocore leaves a stream that raised open.
            self.close()
            raise
        self._end(self._tally.usage())

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._end(None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _end(self, usage: Usage | None) -> None:
        if not self._done:
            self._done = True
            self._ended(usage)


def stream_key(operation: str) -> str:
    """Where the parsed answer of a stream operation holds its EventStream."""
    return "stream" if operation == "ConverseStream" else "body"
