"""The fake Anthropic's bill, the test's prices for it, and its state: what it answers and
what it saw, and who called (the API key's id and workspace, and when, by the fake's
clock). The server is tests/fake_anthropic.py and its organization reports
tests/fake_anthropic_reports.py, whose docstrings say which published facts they follow."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.http_fake import Received

# Who a message is billed to when the fake does not know its API key. Anthropic reports
# the Default Workspace's usage and costs with workspace_id null.
UNKNOWN_KEY_ID = "key_unknown"
DEFAULT_WORKSPACE_ID = "wrkspc_default"


@dataclass(frozen=True)
class Bill:
    """What one message would cost at the provider, as Anthropic counts it: input_tokens
    counts neither the cache reads nor the cache writes; ephemeral_1h_input_tokens is the
    part of the cache writes kept for an hour (priced higher than the five-minute rest).
    The model defaults to the one the tests price, so that a bill written with its token
    counts alone compares equal to it. Who called and when (the fake clock's Unix seconds
    as the request arrived) do not take part in comparing bills."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0
    web_search_requests: int = 0
    model: str = "claude-test"
    at: float = field(default=0.0, compare=False)
    api_key_id: str = field(default=UNKNOWN_KEY_ID, compare=False)
    workspace_id: str = field(default=DEFAULT_WORKSPACE_ID, compare=False)

    def usage(self) -> dict[str, Any]:
        """The message's usage object, in the order the API sends its fields."""
        written = {
            "ephemeral_5m_input_tokens": self.cache_creation_input_tokens
            - self.ephemeral_1h_input_tokens,
            "ephemeral_1h_input_tokens": self.ephemeral_1h_input_tokens,
        }
        usage = {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "cache_creation": written,
            "output_tokens": self.output_tokens,
            "service_tier": "standard",
        }
        return {**usage, **self._server_tools()}

    def delta_usage(self) -> dict[str, Any]:
        """message_delta's usage: cumulative counts, without the cache_creation split."""
        usage = {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
            "output_tokens": self.output_tokens,
        }
        return {**usage, **self._server_tools()}

    def _server_tools(self) -> dict[str, Any]:
        """server_tool_use, sent only when a server tool ran."""
        if not self.web_search_requests:
            return {}
        uses = {"web_search_requests": self.web_search_requests, "web_fetch_requests": 0}
        return {"server_tool_use": uses}


@dataclass(frozen=True)
class Rates:
    """The test's prices, in micro-dollars per million tokens; one-hour cache writes at
    cache_write_long (0: at cache_write), and a web search at web_search micro-dollars."""

    input: int
    output: int
    cache_read: int
    cache_write: int
    cache_write_long: int = 0
    web_search: int = 0

    def micros(self, bill: Bill) -> int:
        """What the bill costs, rounded up once, as Earmark rounds."""
        long = bill.ephemeral_1h_input_tokens
        scaled = (
            bill.input_tokens * self.input
            + bill.output_tokens * self.output
            + bill.cache_read_input_tokens * self.cache_read
            + (bill.cache_creation_input_tokens - long) * self.cache_write
            + long * (self.cache_write_long or self.cache_write)
            + bill.web_search_requests * self.web_search * 1_000_000
        )
        return -(-scaled // 1_000_000)

    def times(self, factor: float) -> Rates:
        """These prices times factor, to the micro-dollar (a test's provider that charges
        more than Earmark's price list says)."""
        return Rates(
            input=round(self.input * factor),
            output=round(self.output * factor),
            cache_read=round(self.cache_read * factor),
            cache_write=round(self.cache_write * factor),
            cache_write_long=round(self.cache_write_long * factor),
            web_search=round(self.web_search * factor),
        )


@dataclass(frozen=True)
class Caller:
    """Who sent a message and when it arrived: what its bill is reported under."""

    at: float
    api_key_id: str = UNKNOWN_KEY_ID
    workspace_id: str = DEFAULT_WORKSPACE_ID


@dataclass
class AnthropicState:
    """What the fake answers and what it saw; the lock guards it."""

    rates: Rates
    output_tokens: int = 300
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    # The input tokens a web search's results add: the model reads them as input.
    search_result_tokens: int = 500
    # A stream sends this many tokens a text delta, and token i of an answer is
    # token_texts[i % len(token_texts)]; the defaults are what older tests read back.
    tokens_per_chunk: int = 1
    token_texts: tuple[str, ...] = ("tok ",)
    chunk_seconds: float = 0.0
    # How long a "late" message waits before it is answered (and billed), and an
    # "unstarted" one before its connection closes unanswered.
    late_seconds: float = 2.0
    ignores_maximum: bool = False
    # Every request's JSON body, and the same with its path and headers.
    requests: list[dict[str, Any]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    billed: list[Bill] = field(default_factory=list)
    # Streams whose reader went away before the last event.
    abandoned: int = 0
    # "unstarted" messages closed unanswered (and unbilled) so far.
    unstarted: int = 0
    # Set when the fake stops: a late answer (or an unstarted one's wait) is cut short.
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The fake's clock, Unix seconds: a bill's `at`, and "now" for the reports. A test
    # moves a fake clock to put messages in chosen buckets.
    clock: Callable[[], float] = time.time
    # A request's API key (x-api-key, or Authorization: Bearer) -> its key id, and -> its
    # workspace; keys not listed are billed to UNKNOWN_KEY_ID in the Default Workspace.
    api_key_ids: dict[str, str] = field(default_factory=dict)
    workspace_ids: dict[str, str] = field(default_factory=dict)
    # What the cost report charges a model, where it differs from `rates` (which the
    # tally, billed_micros, prices everything at).
    model_rates: dict[str, Rates] = field(default_factory=dict)
    # The Admin API keys the reports accept (x-api-key, or Authorization: Bearer).
    admin_keys: set[str] = field(default_factory=lambda: {"sk-ant-admin01-test"})
    # At most this many buckets a report page (None: the documented limits), so that a
    # short range spans several pages.
    report_page_buckets_max: int | None = None

    def caller(self, api_key: str | None) -> Caller:
        """Who sent a request with this API key, as it arrives."""
        key = api_key or ""
        return Caller(
            self.clock(),
            self.api_key_ids.get(key, UNKNOWN_KEY_ID),
            self.workspace_ids.get(key, DEFAULT_WORKSPACE_ID),
        )

    def rates_of(self, model: str) -> Rates:
        """What the cost report charges model."""
        return self.model_rates.get(model, self.rates)

    def bill(self, bill: Bill) -> None:
        with self.lock:
            self.billed.append(bill)

    def billed_micros(self) -> int:
        """The tally: what every answer so far cost at the test's prices."""
        with self.lock:
            return sum(self.rates.micros(bill) for bill in self.billed)
