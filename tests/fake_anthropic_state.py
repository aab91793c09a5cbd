"""The fake Anthropic's bill, the test's prices for it, and its state: what it answers and
what it saw. The server is tests/fake_anthropic.py, whose docstring says which published
facts it follows."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tests.http_fake import Received


@dataclass(frozen=True)
class Bill:
    """What one message would cost at the provider, as Anthropic counts it: input_tokens
    counts neither the cache reads nor the cache writes; ephemeral_1h_input_tokens is the
    part of the cache writes kept for an hour (priced higher than the five-minute rest).
    The model defaults to the one the tests price, so that a bill written with its token
    counts alone compares equal to it."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0
    web_search_requests: int = 0
    model: str = "claude-test"

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
    late_seconds: float = 2.0
    ignores_maximum: bool = False
    # Every request's JSON body, and the same with its path and headers.
    requests: list[dict[str, Any]] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    billed: list[Bill] = field(default_factory=list)
    # Streams whose reader went away before the last event.
    abandoned: int = 0
    # Set when the fake stops: a late answer is cut short.
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def bill(self, bill: Bill) -> None:
        with self.lock:
            self.billed.append(bill)

    def billed_micros(self) -> int:
        """The tally: what every answer so far cost at the test's prices."""
        with self.lock:
            return sum(self.rates.micros(bill) for bill in self.billed)
