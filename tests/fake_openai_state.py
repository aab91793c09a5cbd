"""The fake OpenAI's state, its bill, and how it plans an answer: which tokens it generates,
hidden or seen, and why it stops; who called (the API key's id and project, and when, by
the fake's clock) and the prices its cost report charges. The server (tests/fake_openai.py),
its Responses API (tests/fake_openai_responses.py) and its organization reports
(tests/fake_openai_reports.py) answer from these; the facts they follow are in their
docstrings."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tests.http_fake import Received

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
EMBEDDINGS = "/v1/embeddings"
# The headers a test may ask about; never the API key.
HEADERS = ("content-type", "user-agent", "x-stainless-retry-count", "idempotency-key")
# What the model writes into a string field of a JSON schema or tool's parameters.
FILLER = "fake"
# Generated JSON (tool arguments, structured output) is this many characters a token.
JSON_CHARS_PER_TOKEN = 3
# Who a call is billed to when the fake does not know its API key.
UNKNOWN_KEY_ID = "key_unknown"
DEFAULT_PROJECT_ID = "proj_default"


@dataclass(frozen=True)
class Billed:
    """What one call would cost at the provider: its quantities, and the endpoint, model and
    service tier that price them. prompt_tokens counts the cached and cache-written tokens
    among them, as OpenAI counts them; completion_tokens counts the reasoning tokens. The
    defaults are the common case (a gpt-4o chat completion at the default tier), so that a
    bill written with the first three fields alone compares equal to it. Who called and
    when (the fake clock's Unix seconds as the request arrived) do not take part in
    comparing bills."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    endpoint: str = CHAT
    model: str = "gpt-4o"
    service_tier: str = "default"
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0
    at: float = field(default=0.0, compare=False)
    api_key_id: str = field(default=UNKNOWN_KEY_ID, compare=False)
    project_id: str = field(default=DEFAULT_PROJECT_ID, compare=False)


@dataclass(frozen=True)
class Caller:
    """Who made a request and when it arrived: what its bill is reported under."""

    at: float
    api_key_id: str = UNKNOWN_KEY_ID
    project_id: str = DEFAULT_PROJECT_ID


@dataclass
class BackgroundRun:
    """A background response (background: true), running until the test finishes it or a
    cancel stops it: its answer (tests/fake_openai_responses.py's, opaque here), its bill,
    who asked, and its status ("queued", "in_progress", then "completed" or "incomplete"
    when finished, "cancelled" when cancelled first)."""

    answer: Any
    billed: Billed
    caller: Caller
    status: str = "queued"
    # A background stream's run is billed by the stream's own answer, not by finish().
    billed_already: bool = False

    @property
    def running(self) -> bool:
        return self.status in ("queued", "in_progress")


@dataclass(frozen=True)
class ModelRates:
    """A model's prices in USD per million tokens: input, cached input, output, and input
    written to the cache (None: at the input price)."""

    input: float
    cached_input: float = 0.0
    output: float = 0.0
    cache_write: float | None = None

    def times(self, factor: float) -> ModelRates:
        """These prices times factor (a test's provider that charges more than Earmark's
        price list says)."""
        write = None if self.cache_write is None else self.cache_write * factor
        return ModelRates(
            self.input * factor, self.cached_input * factor, self.output * factor, write
        )


def default_rates() -> dict[str, ModelRates]:
    """The prices of the models the tests call, as OpenAI lists them."""
    return {
        "gpt-4o": ModelRates(2.50, 1.25, 10.00),
        "o4-mini": ModelRates(1.10, 0.275, 4.40),
        "text-embedding-3-small": ModelRates(0.02),
    }


@dataclass
class OpenAIState:
    """What the fake answers and what it saw; the lock guards it."""

    completion_tokens: int = 300
    cached_tokens: int = 0
    # Prompt tokens written to the cache (prompt_tokens_details.cache_write_tokens).
    cache_write_tokens: int = 0
    # Hidden reasoning tokens of a "think" answer, generated before its text.
    reasoning_tokens: int = 64
    # A stream sends this many tokens a chunk, and token i of an answer is
    # token_texts[i % len(token_texts)]. The defaults are what older tests read back: one
    # "tok " a chunk (recorded Chat Completions streams do send one token a chunk).
    tokens_per_chunk: int = 1
    token_texts: tuple[str, ...] = ("tok ",)
    # An embedding's length when the request names no dimensions.
    dimensions: int = 8
    chunk_seconds: float = 0.0
    # How long a "late" request waits before it is answered (and billed), and an
    # "unstarted" one before its connection closes unanswered.
    late_seconds: float = 2.0
    # Generate past the request's maximum answer, as no real provider should.
    ignores_maximum: bool = False
    # Every request's JSON body, and the same with its path and headers.
    requests: list[dict[str, Any]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    retry_headers: list[str] = field(default_factory=list)
    billed: list[Billed] = field(default_factory=list)
    seen: Counter[str] = field(default_factory=Counter)
    # Streams whose reader went away before the last chunk.
    abandoned: int = 0
    # "unstarted" requests closed unanswered (and unbilled) so far.
    unstarted: int = 0
    # "slow" requests are answered once this is set (or after 30 s); "late" and
    # "unstarted" ones wait on it too.
    slow: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The fake's clock, Unix seconds: a bill's `at`, and "now" for the reports. A test
    # moves a fake clock to put calls in chosen buckets.
    clock: Callable[[], float] = time.time
    # A request's API key (Authorization: Bearer KEY) -> its key id, and -> its project;
    # keys not listed are billed to UNKNOWN_KEY_ID and DEFAULT_PROJECT_ID.
    api_key_ids: dict[str, str] = field(default_factory=dict)
    project_ids: dict[str, str] = field(default_factory=dict)
    # What the cost report charges, by the billed model; a model not listed costs nothing.
    rates: dict[str, ModelRates] = field(default_factory=default_rates)
    # The admin keys the reports accept (Authorization: Bearer KEY).
    admin_keys: set[str] = field(default_factory=lambda: {"sk-admin-test"})
    # At most this many buckets a report page (None: the documented limits), so that a
    # short range spans several pages.
    report_page_buckets_max: int | None = None
    # Background responses by id, and the numbers their ids are made from.
    background: dict[str, BackgroundRun] = field(default_factory=dict)
    # Fields a test changes in every Response GET /v1/responses/{id} answers: a provider
    # answering out of its published shape, or with another response.
    retrieved_changes: dict[str, Any] = field(default_factory=dict)
    background_numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def caller(self, authorization: str | None) -> Caller:
        """Who sent a request with this Authorization header, as it arrives."""
        key = (authorization or "").removeprefix("Bearer ").strip()
        return Caller(
            self.clock(),
            self.api_key_ids.get(key, UNKNOWN_KEY_ID),
            self.project_ids.get(key, DEFAULT_PROJECT_ID),
        )

    def finish(self, response_id: str | None = None) -> list[Billed]:
        """Finishes the background responses still running (or the one named), as the model
        would: completed (incomplete at the request's limit) and billed; their bills."""
        with self.lock:
            runs = [
                run
                for found, run in self.background.items()
                if run.running and response_id in (None, found)
            ]
            for run in runs:
                run.status = run.answer.status
        for run in runs:
            if not run.billed_already:
                self.bill(run.billed, run.caller)
        return [run.billed for run in runs]

    def bill(self, billed: Billed, caller: Caller | None = None) -> None:
        """Adds billed to the bill, as caller's (when given) at the time it arrived."""
        if caller is not None:
            billed = replace(
                billed, at=caller.at, api_key_id=caller.api_key_id, project_id=caller.project_id
            )
        with self.lock:
            self.billed.append(billed)


@dataclass(frozen=True)
class Plan:
    """One answer: its hidden reasoning tokens (generated first), its visible tokens (text,
    or a tool call's arguments) one string each, and whether it stopped at the request's
    limit."""

    reasoning: int
    tokens: list[str]
    capped: bool

    @property
    def completion(self) -> int:
        return self.reasoning + len(self.tokens)


def plan(state: OpenAIState, last: str, limit: int | None, json_text: str | None) -> Plan:
    """The answer to a request whose last message is last, with at most limit completion
    tokens (reasoning included) unless the fake ignores it; json_text, when given, is the
    answer (tool arguments or structured output) instead of the fake's words."""
    hidden = state.reasoning_tokens if last == "think" else 0
    if json_text is not None:
        tokens = split(json_text)
    else:
        texts = state.token_texts
        tokens = [texts[i % len(texts)] for i in range(state.completion_tokens)]
    if limit is None or state.ignores_maximum:
        return Plan(hidden, tokens, limit is not None and hidden + len(tokens) >= limit)
    capped = hidden + len(tokens) >= limit
    hidden = min(hidden, limit)
    return Plan(hidden, tokens[: limit - hidden], capped)


def split(text: str) -> list[str]:
    """Generated JSON as the fake tokenizes it: three characters a token."""
    size = JSON_CHARS_PER_TOKEN
    return [text[i : i + size] for i in range(0, len(text), size)]


def filled(schema: dict[str, Any]) -> str:
    """A JSON object that a JSON schema of flat properties accepts: strings are FILLER,
    numbers 1, booleans true, arrays and objects empty."""
    values = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    properties = schema.get("properties") or {}
    return json.dumps(
        {name: values.get(kind.get("type"), FILLER) for name, kind in properties.items()}
    )


def served_tier(requested: str | None) -> str:
    """The tier that served a request asking for requested: "auto" (or nothing) runs at
    the project's default, and "fast" is reported as "priority", as the API reports them."""
    tiers = {"priority": "priority", "fast": "priority", "flex": "flex", "scale": "scale"}
    return tiers.get(requested or "auto", "default")


def chars(content: Any) -> int:
    """The characters of a message's or input item's content: a string, or parts with text."""
    if isinstance(content, list):
        return sum(len(str(part.get("text", ""))) for part in content if isinstance(part, dict))
    return len(str(content or ""))


def last_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")
