"""Metered model calls for Anthropic: an Anthropic client whose every message is held,
called and settled through Earmark (`pip install 'earmark[anthropic]'`).

    llm = metered(Anthropic(), earmark_client, "job-142")     # or AsyncAnthropic, AsyncClient
    reply = llm.messages.create(model="claude-sonnet-4-5", max_tokens=300, messages=...)

(earmark.client.llm.metered takes an Anthropic client too; this module's metered needs
no openai package.) `messages.create`, `messages.create(stream=True)` and `messages.stream`
each:
- hold a shape read from the request: the model, the prompt (system, messages and tools,
  counted at 3 characters a token so that the hold errs high) and max_tokens, at most
  Meter.output_tokens_max; a refusal raises RefusedError before any request;
- charge the prompt before sending it, so that a worker that dies during the call leaves
  its hold IN_DOUBT rather than returned;
- send max_tokens lowered to what the hold covers after the prompt when it asks more, so
  that the provider itself stops there (HoldCappedError, unsent, when that is no token);
- retry connection errors, timeouts, 429 and 5xx themselves (the client's own retries are
  off), each attempt on a hold of its own;
- settle at the answer's usage, mapped onto Earmark's: input_tokens is Anthropic's
  input_tokens plus its cache reads and cache writes, each priced at its own rate. A call
  that raises settles as the OpenAI wrapper's does: at nothing after a 4xx or a refused
  connection, with Outcome.UNKNOWN (in doubt at once, the prompt charged) after a timeout,
  a dropped connection or a 5xx.
A stream charges the hold as it reads (see anthropic_streams) and, when a charge comes back
capped, closes, settles at the tokens read and raises StreamCappedError.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Mapping
from typing import Any, overload

import anthropic
from anthropic.types import Message

from earmark.client.aio import AsyncClient
from earmark.client.anthropic_streams import (
    ERRORS,
    AsyncMeteredEvents,
    AsyncMeteredStreamManager,
    MeteredEvents,
    MeteredStreamManager,
    Tally,
    usage_of,
)
from earmark.client.hold import Hold
from earmark.client.meter import (
    HoldCappedError,
    Meter,
    covered_request,
    held_most,
    needs_cover,
    settle_failed,
)
from earmark.client.sync import Client, SyncHold
from earmark.client.types import Charged
from earmark.core.prices import Shape, Usage

__all__ = [
    "AsyncMeteredAnthropic",
    "MeteredAnthropic",
    "metered",
    "prompt_tokens",
    "shape_of",
    "usage_of",
]

PROVIDER = "anthropic"
# As the OpenAI wrapper counts: fewer characters a token than the usual four, so that the
# hold errs high; each message adds its role and framing.
prompt_chars_per_token = 3
message_overhead_tokens = 4
reply_overhead_tokens = 3


def retryable(error: BaseException) -> bool:
    """Worth a new attempt on a new hold: no answer came, or a 429 or 5xx did."""
    if isinstance(error, anthropic.APIStatusError):
        return error.status_code == 429 or error.status_code >= 500
    return isinstance(error, anthropic.APIConnectionError)


def _chars(content: Any) -> int:
    """Characters of a system prompt or a message's content: a string, or blocks whose
    text counts (and whose other parts, a tool call's input say, count as JSON)."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list | tuple):
        total = 0
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "text":
                total += len(str(block.get("text", "")))
            else:
                total += len(json.dumps(block, default=str))
        return total
    return 0


def prompt_tokens(request: Mapping[str, Any]) -> int:
    """A conservative count of the request's input tokens: system, messages and tools."""
    messages = request.get("messages") or []
    chars = _chars(request.get("system"))
    chars += sum(_chars(m.get("content")) for m in messages if isinstance(m, Mapping))
    if request.get("tools"):
        chars += len(json.dumps(request["tools"], default=str))
    framing = message_overhead_tokens * len(messages) + reply_overhead_tokens
    return math.ceil(chars / prompt_chars_per_token) + framing


def _sendable(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request with its messages in a list: counted, then sent."""
    sent = dict(request)
    if "messages" in sent and not isinstance(sent["messages"], list):
        sent["messages"] = list(sent["messages"])
    return sent


def shape_of(provider: str, request: Mapping[str, Any], ceiling: int | None = None) -> Shape:
    """What the call may cost: its prompt and its max_tokens (at most ceiling)."""
    return Shape(
        provider,
        str(request.get("model", "")),
        prompt_tokens(request),
        held_most(request, ceiling) or 0,
    )


class _Messages:
    def __init__(self, client: anthropic.Anthropic, earmark: Client, meter: Meter) -> None:
        # The provider's own retries are off: each attempt is held on its own hold here.
        self._anthropic = client.with_options(max_retries=0)
        self._earmark, self._meter = earmark, meter
        self._rng = random.Random()

    def _sent(
        self, request: dict[str, Any], shape: Shape, hold: SyncHold, charged: Charged
    ) -> dict[str, Any]:
        """The request as sent: its max_tokens lowered to what the hold covers."""
        if not needs_cover(request, self._meter.output_tokens_max):
            return request
        return covered_request(request, hold.reservation_id, charged)

    def _call(self, request: dict[str, Any], stream: bool) -> Message | MeteredEvents:
        m = self._meter
        request = _sendable(request)
        shape, prompt = shape_of(m.provider, request, m.output_tokens_max), prompt_tokens(request)
        for attempt in range(m.retry.attempts_max):
            # Entering reserves; a refusal raises before anything is sent.
            hold = self._earmark.hold(
                m.budget_id, 0, shape=shape, job=m.job, also_budget_ids=m.also_budget_ids,
                labels=m.labels, lease_seconds=m.lease_seconds, account=m.account,
            ).__enter__()  # fmt: skip
            try:
                # Charged before it is sent: a worker that dies now leaves the hold in doubt.
                charged = hold.charge(usage=Usage(prompt, 0))
                if charged.capped:
                    raise HoldCappedError(hold.reservation_id, "the call was not sent")
                sent = self._sent(request, shape, hold, charged)
                if stream:
                    raw = self._anthropic.messages.create(**{**sent, "stream": True})
                    assert isinstance(raw, anthropic.Stream)
                    return MeteredEvents(raw, hold, Tally(prompt))
                reply = self._anthropic.messages.create(**sent)
                assert isinstance(reply, Message)
                hold.usage = usage_of(reply.usage)
            except BaseException as error:
                outcome = settle_failed(hold, error, ERRORS)
                hold.__exit__(type(outcome), outcome, None)
                if not retryable(error) or attempt + 1 == m.retry.attempts_max:
                    raise
                time.sleep(m.retry.backoff(attempt, self._rng))
                continue
            hold.__exit__(None, None, None)
            return reply
        raise AssertionError("unreachable")  # pragma: no cover

    def create(self, **request: Any) -> Message | MeteredEvents:
        """messages.create, held, called and settled (see the module's text); with
        stream=True, the metered stream of raw events."""
        stream = bool(request.pop("stream", False))
        return self._call(request, stream)

    def stream(self, **request: Any) -> MeteredStreamManager:
        """messages.stream: `with llm.messages.stream(...) as stream:` holds and sends on
        entering and gives anthropic's MessageStream, metered."""
        request.pop("stream", None)

        def send() -> MeteredEvents:
            events = self._call(request, stream=True)
            assert isinstance(events, MeteredEvents)
            return events

        return MeteredStreamManager(send)


class _AsyncMessages:
    def __init__(
        self, client: anthropic.AsyncAnthropic, earmark: AsyncClient, meter: Meter
    ) -> None:
        self._anthropic = client.with_options(max_retries=0)
        self._earmark, self._meter = earmark, meter
        self._rng = random.Random()

    async def _sent(
        self, request: dict[str, Any], shape: Shape, hold: Hold, charged: Charged
    ) -> dict[str, Any]:
        """The request as sent: its max_tokens lowered to what the hold covers."""
        if not needs_cover(request, self._meter.output_tokens_max):
            return request
        return covered_request(request, hold.reservation_id, charged)

    async def _call(self, request: dict[str, Any], stream: bool) -> Message | AsyncMeteredEvents:
        m = self._meter
        request = _sendable(request)
        shape, prompt = shape_of(m.provider, request, m.output_tokens_max), prompt_tokens(request)
        for attempt in range(m.retry.attempts_max):
            hold = await self._earmark.hold(
                m.budget_id, 0, shape=shape, job=m.job, also_budget_ids=m.also_budget_ids,
                labels=m.labels, lease_seconds=m.lease_seconds, account=m.account,
            ).__aenter__()  # fmt: skip
            try:
                charged = await hold.charge(usage=Usage(prompt, 0))
                if charged.capped:
                    raise HoldCappedError(hold.reservation_id, "the call was not sent")
                sent = await self._sent(request, shape, hold, charged)
                if stream:
                    raw = await self._anthropic.messages.create(**{**sent, "stream": True})
                    assert isinstance(raw, anthropic.AsyncStream)
                    return AsyncMeteredEvents(raw, hold, Tally(prompt))
                reply = await self._anthropic.messages.create(**sent)
                assert isinstance(reply, Message)
                hold.usage = usage_of(reply.usage)
            except BaseException as error:
                outcome = settle_failed(hold, error, ERRORS)
                await hold.__aexit__(type(outcome), outcome, None)
                if not retryable(error) or attempt + 1 == m.retry.attempts_max:
                    raise
                await asyncio.sleep(m.retry.backoff(attempt, self._rng))
                continue
            await hold.__aexit__(None, None, None)
            return reply
        raise AssertionError("unreachable")  # pragma: no cover

    async def create(self, **request: Any) -> Message | AsyncMeteredEvents:
        """messages.create for AsyncAnthropic (see _Messages.create)."""
        stream = bool(request.pop("stream", False))
        return await self._call(request, stream)

    def stream(self, **request: Any) -> AsyncMeteredStreamManager:
        """messages.stream for AsyncAnthropic: `async with llm.messages.stream(...)`."""
        request.pop("stream", None)

        async def send() -> AsyncMeteredEvents:
            events = await self._call(request, stream=True)
            assert isinstance(events, AsyncMeteredEvents)
            return events

        return AsyncMeteredStreamManager(send)


class MeteredAnthropic:
    """An Anthropic client whose messages go through Earmark; `.anthropic` is the client
    itself, for everything else."""

    def __init__(self, client: anthropic.Anthropic, earmark: Client, meter: Meter) -> None:
        self.anthropic = client
        self.messages = _Messages(client, earmark, meter)


class AsyncMeteredAnthropic:
    """MeteredAnthropic for AsyncAnthropic and AsyncClient."""

    def __init__(
        self, client: anthropic.AsyncAnthropic, earmark: AsyncClient, meter: Meter
    ) -> None:
        self.anthropic = client
        self.messages = _AsyncMessages(client, earmark, meter)


@overload
def metered(
    client: anthropic.Anthropic, earmark: Client, budget_id: str, **meter: Any
) -> MeteredAnthropic: ...


@overload
def metered(
    client: anthropic.AsyncAnthropic, earmark: AsyncClient, budget_id: str, **meter: Any
) -> AsyncMeteredAnthropic: ...


def metered(
    client: anthropic.Anthropic | anthropic.AsyncAnthropic,
    earmark: Client | AsyncClient,
    budget_id: str,
    **meter: Any,
) -> MeteredAnthropic | AsyncMeteredAnthropic:
    """The client, metered on budget_id; meter takes Meter's other fields (provider, job,
    also_budget_ids, account, labels, lease_seconds, retry, output_tokens_max). Anthropic
    goes with Client, AsyncAnthropic with AsyncClient."""
    settings = Meter(budget_id, **{"provider": PROVIDER, **meter})
    if isinstance(client, anthropic.AsyncAnthropic):
        if not isinstance(earmark, AsyncClient):
            raise TypeError("AsyncAnthropic is metered with an earmark.client.AsyncClient")
        return AsyncMeteredAnthropic(client, earmark, settings)
    if not isinstance(earmark, Client):
        raise TypeError("Anthropic is metered with an earmark.client.Client")
    return MeteredAnthropic(client, earmark, settings)
