"""A fake Amazon Bedrock runtime: a real HTTP server on 127.0.0.1 that answers Converse,
ConverseStream, InvokeModel and InvokeModelWithResponseStream (Anthropic and Amazon Nova
bodies) and CountTokens as boto3's bedrock-runtime client expects them, with the usage a
test sets, and records every request it saw.

Wire facts followed, as botocore's service model (bedrock-runtime 2023-09-30, rest-json)
and AWS's API reference publish them, and as boto3 1.44.8 sent and parsed them
(/work/notes-45.md §2):
- `POST /model/{modelId}/{operation}` (converse, converse-stream, invoke,
  invoke-with-response-stream, count-tokens), the model id percent-encoded
  (`anthropic.claude-...-v1%3A0`); requests arrive SigV4-signed, which the fake does not
  check.
- Converse answers {output, stopReason, usage, metrics} (TokenUsage: inputTokens,
  outputTokens, totalTokens, cacheReadInputTokens, cacheWriteInputTokens; inputTokens
  excludes the cache counts), and serviceTier when the test sets one.
- A stream is `application/vnd.amazon.eventstream`: binary messages, each a prelude
  (total and headers length, CRC32), string headers (:message-type event|exception,
  :event-type or :exception-type, :content-type), a JSON payload and a CRC32 of the whole
  (AWS's event stream encoding; botocore/eventstream.py decodes it, and has no encoder,
  hence message() here). ConverseStream sends messageStart, contentBlockDelta...,
  contentBlockStop, messageStop, then metadata (usage, metrics), the last; each payload
  carries a `p` padding member, as AWS's do, which clients ignore.
- InvokeModel answers the model family's body: Anthropic's Message (usage as Anthropic's
  API reports it), Nova's {output, stopReason, usage} (cache counts named
  cacheRead/WriteInputTokenCount: public Nova fixtures, UNVERIFIED against AWS), with the
  x-amzn-bedrock-input/output-token-count headers. Its stream sends `chunk` events whose
  `bytes` are base64 of one family event each (Anthropic: message_start, deltas,
  message_delta, message_stop; Nova: Converse-like events, metadata last: UNVERIFIED), the
  last with amazon-bedrock-invocationMetrics.
- Errors: JSON {"message"} with x-amzn-errortype (ValidationException 400,
  ThrottlingException 429, InternalServerException 500...); in a stream, an exception
  message (:message-type exception, :exception-type throttlingException...).

Its bill: every answer it gives (a JSON answer, a stream it sent, also one it cut: AWS ran
the call) is billed at the usage it reports, recorded as a Bill; at the test's `rates`,
billed_micros() is what they cost, each rounded up once, as Earmark rounds.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from tests.fake_anthropic_state import Rates
from tests.http_fake import JsonHandler, Received, StateServer, serving

PATH = re.compile(r"/model/(?P<model>[^/]+)/(?P<operation>[a-z-]+)")
EVENT_STREAM = "application/vnd.amazon.eventstream"
# Converse's usage, self-consistent: total = input + cache reads + cache writes + output.
USAGE = {
    "inputTokens": 12,
    "outputTokens": 7,
    "totalTokens": 54,
    "cacheReadInputTokens": 30,
    "cacheWriteInputTokens": 5,
}
ANTHROPIC_USAGE = {
    "input_tokens": 12,
    "output_tokens": 7,
    "cache_creation_input_tokens": 5,
    "cache_read_input_tokens": 30,
}
NOVA_USAGE = {
    "inputTokens": 42,
    "outputTokens": 128,
    "totalTokens": 190,
    "cacheReadInputTokenCount": 20,
    "cacheWriteInputTokenCount": 0,
}
_ERRORS = {
    400: "ValidationException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


@dataclass(frozen=True)
class Bill:
    """One answer's usage as AWS bills it: input excluding the cache, cache reads, cache
    writes, output."""

    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int

    def micros(self, rates: Rates) -> int:
        scaled = (
            self.input_tokens * rates.input
            + self.cache_read_tokens * rates.cache_read
            + self.cache_write_tokens * rates.cache_write
            + self.output_tokens * rates.output
        )
        return -(-scaled // 1_000_000)


def converse_bill(usage: dict[str, Any]) -> Bill:
    return Bill(
        usage.get("inputTokens", 0),
        usage.get("cacheReadInputTokens", 0),
        usage.get("cacheWriteInputTokens", 0),
        usage.get("outputTokens", 0),
    )


def anthropic_bill(usage: dict[str, Any]) -> Bill:
    return Bill(
        usage.get("input_tokens", 0),
        usage.get("cache_read_input_tokens", 0),
        usage.get("cache_creation_input_tokens", 0),
        usage.get("output_tokens", 0),
    )


def nova_bill(usage: dict[str, Any]) -> Bill:
    return Bill(
        usage.get("inputTokens", 0),
        usage.get("cacheReadInputTokenCount", 0),
        usage.get("cacheWriteInputTokenCount", 0),
        usage.get("outputTokens", 0),
    )


@dataclass
class BedrockState:
    """What the fake answers and what it was asked; the lock guards it."""

    usage: dict[str, Any] = field(default_factory=lambda: dict(USAGE))
    anthropic_usage: dict[str, Any] = field(default_factory=lambda: dict(ANTHROPIC_USAGE))
    nova_usage: dict[str, Any] = field(default_factory=lambda: dict(NOVA_USAGE))
    # The serviceTier a Converse answer names (None: none).
    served_tier: str | None = None
    # A stream stops in the middle of its last message (the connection cut).
    cut: bool = False
    # A stream sends this modelled exception in place of its last event.
    exception: str | None = None
    # An error status every operation answers with (None: answers).
    error: int | None = None
    # How long an operation waits before it answers: the provider's own pace (the
    # benchmark's fixed answer time); 0, at once.
    delay_seconds: float = 0.0
    requests: list[Received] = field(default_factory=list)
    # What it billed, an answer at a time; priced at rates (the test's).
    billed: list[Bill] = field(default_factory=list)
    rates: Rates = field(
        default_factory=lambda: Rates(input=0, output=0, cache_read=0, cache_write=0)
    )
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bill(self, bill: Bill) -> None:
        with self.lock:
            self.billed.append(bill)

    def billed_micros(self) -> int:
        """What every answer so far cost at the test's rates."""
        with self.lock:
            return sum(bill.micros(self.rates) for bill in self.billed)


@dataclass(frozen=True)
class FakeBedrock:
    url: str
    state: BedrockState


def _header(name: str, value: str) -> bytes:
    """One string header (value type 7: a 2-byte length and UTF-8)."""
    key, text = name.encode(), value.encode()
    return struct.pack("!B", len(key)) + key + struct.pack("!BH", 7, len(text)) + text


def message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event stream message: prelude (total length, headers length), its CRC32, the
    headers, the payload, and the CRC32 of all before it."""
    encoded = b"".join(_header(k, v) for k, v in headers.items())
    prelude = struct.pack("!II", 12 + len(encoded) + len(payload) + 4, len(encoded))
    head = prelude + struct.pack("!I", zlib.crc32(prelude))
    whole = head + encoded + payload
    return whole + struct.pack("!I", zlib.crc32(whole))


def event(kind: str, data: dict[str, Any]) -> bytes:
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return message(headers, json.dumps({**data, "p": "abcdefgh"}).encode())


def exception(kind: str, text: str) -> bytes:
    headers = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return message(headers, json.dumps({"message": text}).encode())


def chunk(data: dict[str, Any]) -> bytes:
    """An InvokeModel stream's event: one family event, base64 in `bytes`."""
    return event("chunk", {"bytes": base64.b64encode(json.dumps(data).encode()).decode()})


def family(model_id: str) -> str:
    return "anthropic" if "anthropic." in model_id else "nova" if "amazon.nova" in model_id else ""


def converse_events(state: BedrockState) -> list[bytes]:
    metadata: dict[str, Any] = {"usage": state.usage, "metrics": {"latencyMs": 300}}
    if state.served_tier is not None:
        metadata["serviceTier"] = {"type": state.served_tier}
    return [
        event("messageStart", {"role": "assistant"}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "lo"}}),
        event("contentBlockStop", {"contentBlockIndex": 0}),
        event("messageStop", {"stopReason": "end_turn"}),
        event("metadata", metadata),
    ]


def _metrics(input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "inputTokenCount": input_tokens,
        "outputTokenCount": output_tokens,
        "invocationLatency": 100,
        "firstByteLatency": 50,
    }


def anthropic_events(state: BedrockState) -> list[dict[str, Any]]:
    usage = state.anthropic_usage
    start = {**usage, "output_tokens": 1}
    message_start = {
        "id": "msg_bdrk_fake",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude",
        "usage": start,
    }
    return [
        {"type": "message_start", "message": message_start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        {
            "type": "message_stop",
            "amazon-bedrock-invocationMetrics": _metrics(
                usage["input_tokens"], usage["output_tokens"]
            ),
        },
    ]


def nova_events(state: BedrockState) -> list[dict[str, Any]]:
    usage = state.nova_usage
    return [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": "Hi"}, "contentBlockIndex": 0}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "end_turn"}},
        {
            "metadata": {"usage": usage, "metrics": {}, "trace": {}},
            "amazon-bedrock-invocationMetrics": _metrics(
                usage["inputTokens"], usage["outputTokens"]
            ),
        },
    ]


class _Handler(JsonHandler):
    server: StateServer[BedrockState]

    def do_POST(self) -> None:
        state = self.server.state
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        body = json.loads(raw) if raw else {}
        names = ("content-type", "accept", "x-amzn-bedrock-accept", "amz-sdk-request")
        headers = {n: self.headers[n] for n in names if n in self.headers}
        signed = self.headers.get("authorization", "").startswith("AWS4-HMAC-SHA256 ")
        with state.lock:
            state.requests.append(
                Received("POST", self.path, body, {**headers, "signed": str(signed)})
            )
        found = PATH.fullmatch(self.path)
        if found is None:
            self._error(404, "UnknownOperationException", f"no such operation: {self.path}")
            return
        if state.error is not None:
            self._error(state.error, _ERRORS[state.error], "the fake was told to fail")
            return
        if state.delay_seconds:
            time.sleep(state.delay_seconds)
        model_id, operation = unquote(found["model"]), found["operation"]
        kind = family(model_id)
        if operation == "converse":
            self._converse(state)
        elif operation == "converse-stream":
            self._events(state, converse_events(state), converse_bill(state.usage))
        elif operation == "count-tokens":
            self._json(200, {"inputTokens": 10})
        elif operation in ("invoke", "invoke-with-response-stream") and kind:
            if operation == "invoke":
                self._invoke(state, kind)
            else:
                if kind == "anthropic":
                    parts, bill = anthropic_events(state), anthropic_bill(state.anthropic_usage)
                else:
                    parts, bill = nova_events(state), nova_bill(state.nova_usage)
                self._events(state, [chunk(p) for p in parts], bill)
        else:
            self._error(400, "ValidationException", f"{operation} of {model_id}: not served")

    def _json(self, status: int, body: Any, extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("x-amzn-requestid", "req-fake")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, kind: str, text: str) -> None:
        self._json(status, {"message": text}, {"x-amzn-errortype": kind})

    def _converse(self, state: BedrockState) -> None:
        answer: dict[str, Any] = {
            "output": {"message": {"role": "assistant", "content": [{"text": "Hello"}]}},
            "stopReason": "end_turn",
            "usage": state.usage,
            "metrics": {"latencyMs": 120},
        }
        if state.served_tier is not None:
            answer["serviceTier"] = {"type": state.served_tier}
        state.bill(converse_bill(state.usage))
        self._json(200, answer)

    def _invoke(self, state: BedrockState, kind: str) -> None:
        answer: dict[str, Any]
        if kind == "anthropic":
            usage = state.anthropic_usage
            answer = {
                "id": "msg_bdrk_fake",
                "type": "message",
                "role": "assistant",
                "model": "claude",
                "content": [{"type": "text", "text": "Hi"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": usage,
            }
            counts = (usage["input_tokens"], usage["output_tokens"])
            state.bill(anthropic_bill(usage))
        else:
            usage = state.nova_usage
            answer = {
                "output": {"message": {"role": "assistant", "content": [{"text": "Hi"}]}},
                "stopReason": "end_turn",
                "usage": usage,
            }
            counts = (usage["inputTokens"], usage["outputTokens"])
            state.bill(nova_bill(usage))
        self._json(
            200,
            answer,
            {
                "x-amzn-bedrock-input-token-count": str(counts[0]),
                "x-amzn-bedrock-output-token-count": str(counts[1]),
                "x-amzn-bedrock-invocation-latency": "100",
            },
        )

    def _events(self, state: BedrockState, messages: list[bytes], bill: Bill) -> None:
        if state.exception is not None:
            messages = [*messages[:-1], exception(state.exception, "Too many requests")]
        else:
            state.bill(bill)
        self.send_response(200)
        self.send_header("content-type", EVENT_STREAM)
        self.send_header("x-amzn-requestid", "req-fake")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()
        try:
            for at, each in enumerate(messages):
                last = at == len(messages) - 1
                self.send_chunk(each[: len(each) // 2] if last and state.cut else each)
            if state.cut:
                self.cut_events()
            else:
                self.end_events()
        except (BrokenPipeError, ConnectionResetError):
            # The caller closed the stream before its end: nobody to send the rest to.
            self.close_connection = True


@contextmanager
def fake_bedrock(state: BedrockState | None = None) -> Iterator[FakeBedrock]:
    server = StateServer(_Handler, state or BedrockState())
    with serving(server, "fake-bedrock") as port:
        yield FakeBedrock(f"http://127.0.0.1:{port}", server.state)
