"""Metered model calls: an OpenAI-compatible client whose every chat completion is held,
called and settled through Earmark (`pip install 'earmark[openai]'`). metered() takes an
Anthropic client too (earmark.client.anthropic, `pip install 'earmark[anthropic]'`).

    llm = metered(OpenAI(), earmark_client, "job-142")        # or AsyncOpenAI, AsyncClient
    reply = llm.chat.completions.create(model="gpt-4o-mini", max_tokens=300, messages=...)

Each `chat.completions.create` call:
- estimates its shape from the request: the model, the prompt's size (characters of the
  messages and tools, counted conservatively) and max_completion_tokens or max_tokens (times
  n); without a maximum it holds the budget's estimate for the model (a shape that names the
  model only);
- reserves that hold, with a new idempotency key, and raises RefusedError before any HTTP
  request when it is refused;
- charges the prompt before sending it, so that a worker that dies during the call leaves
  its hold IN_DOUBT (the provider may bill the call) rather than returned;
- without a maximum answer (or with one above Meter.output_tokens_max), sends
  max_completion_tokens set to what the hold covers after the prompt, so that the provider
  itself stops there (HoldCappedError, unsent, when that is no token at all);
- calls the provider with the OpenAI client's own retries turned off, and retries itself
  (connection errors, timeouts, 429 and 5xx), `retry.attempts_max` attempts in all, each
  on a hold of its own after the failed one settled: a cheap first attempt never
  authorizes an expensive second one (the spend-caps article's two-stage rule);
- settles with the response's `usage` (cached input tokens included), or, when the call
  raises, before the exception propagates: at nothing when the provider answered no (a
  4xx) or the request never left (a refused connection), so nothing was billed; with
  Outcome.UNKNOWN when it was sent and no answer came (a timeout, a dropped connection, a
  5xx): the hold goes IN_DOUBT at once with the prompt charged and the rest still held,
  for ResolveHold to close at what the provider billed; else FAILED at what was charged.

A streaming call asks for usage in the stream (and hides that last chunk unless the caller
asked for it), charges the hold as tokens arrive, and stops reading when a charge is capped:
the stream closes, the hold settles at the tokens counted, and StreamCappedError is raised.
Read a stream to its end or close it (it is a context manager): until then its hold stays
open, renewed.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, overload

import openai
from openai.types.chat import ChatCompletion

from earmark.client.aio import AsyncClient
from earmark.client.hold import Hold
from earmark.client.meter import (
    HoldCappedError,
    Meter,
    StreamCappedError,
    covered_request,
    held_most,
    needs_cover,
    settle_failed,
)
from earmark.client.openai_streams import (
    ERRORS,
    AsyncMeteredStream,
    MeteredStream,
    Tally,
    streamed,
    usage_of,
)
from earmark.client.sync import Client, SyncHold
from earmark.client.types import Charged
from earmark.core.prices import Shape, Usage

if TYPE_CHECKING:
    import anthropic

    from earmark.client.anthropic import AsyncMeteredAnthropic, MeteredAnthropic

__all__ = [
    "RETRYABLE",
    "AsyncMeteredOpenAI",
    "AsyncMeteredStream",
    "HoldCappedError",
    "Meter",
    "MeteredOpenAI",
    "MeteredStream",
    "StreamCappedError",
    "metered",
    "prompt_tokens",
    "shape_of",
    "usage_of",
]

# A prompt is counted as one token per this many characters: fewer than the usual four, so
# that the hold errs high. Each message adds its role and framing.
prompt_chars_per_token = 3
message_overhead_tokens = 4
reply_overhead_tokens = 3


# What the provider answers that is worth a new attempt on a new hold.
RETRYABLE = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)


def _text_chars(content: Any) -> int:
    """Characters of a message's content: a string, or parts whose text counts."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(_text_chars(part.get("text", "")) for part in content if isinstance(part, dict))
    return 0


def prompt_tokens(request: Mapping[str, Any]) -> int:
    """A conservative count of the request's input tokens, from its messages and tools."""
    messages = request.get("messages") or []
    chars = 0
    for message in messages:
        if isinstance(message, Mapping):
            chars += _text_chars(message.get("content")) + len(str(message.get("name", "")))
            if message.get("tool_calls"):
                chars += len(json.dumps(message["tool_calls"], default=str))
    if request.get("tools"):
        chars += len(json.dumps(request["tools"], default=str))
    framing = message_overhead_tokens * len(messages) + reply_overhead_tokens
    return math.ceil(chars / prompt_chars_per_token) + framing


def _sendable(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request with its messages in a list: they are counted, then sent, and an
    iterator (which the openai client accepts) could be read only once."""
    sent = dict(request)
    if "messages" in sent and not isinstance(sent["messages"], list):
        sent["messages"] = list(sent["messages"])
    return sent


def shape_of(provider: str, request: Mapping[str, Any], ceiling: int | None = None) -> Shape:
    """What the call may cost: its prompt and its maximum answer (times n), or, without a
    maximum, the model alone so that the sidecar holds its estimate."""
    model = str(request.get("model", ""))
    most = held_most(request, ceiling)
    if not most:
        return Shape(provider, model, 0, 0)
    choices = int(request.get("n") or 1)
    return Shape(provider, model, prompt_tokens(request), most * max(1, choices))


class _Completions:
    def __init__(self, openai_client: openai.OpenAI, earmark: Client, meter: Meter) -> None:
        # The provider's own retries are off: each attempt is held on its own hold here.
        self._openai = openai_client.with_options(max_retries=0)
        self._earmark, self._meter = earmark, meter
        self._rng = random.Random()

    def _sent(
        self, request: dict[str, Any], shape: Shape, hold: SyncHold, charged: Charged
    ) -> dict[str, Any]:
        """The request as sent: its maximum answer lowered to what the hold covers."""
        if not needs_cover(request, self._meter.output_tokens_max):
            return request
        return covered_request(request, hold.reservation_id, charged)

    def create(self, **request: Any) -> ChatCompletion | MeteredStream:
        """chat.completions.create, held, called, and settled (see the module's text)."""
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
                # Charged before it is sent: a worker that dies now leaves the hold in doubt,
                # not returned, since the provider may bill the call.
                charged = hold.charge(usage=Usage(prompt, 0))
                if charged.capped:
                    raise HoldCappedError(hold.reservation_id, "the call was not sent")
                sent = self._sent(request, shape, hold, charged)
                if request.get("stream"):
                    sent, wanted = streamed(sent)
                    raw = self._openai.chat.completions.create(**sent)
                    assert isinstance(raw, openai.Stream)
                    return MeteredStream(raw, hold, Tally(prompt), wanted)
                reply = self._openai.chat.completions.create(**sent)
                assert isinstance(reply, ChatCompletion)
                hold.usage = usage_of(reply.usage, Usage(prompt, 0))
            except BaseException as error:
                outcome = settle_failed(hold, error, ERRORS)
                hold.__exit__(type(outcome), outcome, None)
                if not isinstance(error, RETRYABLE) or attempt + 1 == m.retry.attempts_max:
                    raise
                time.sleep(m.retry.backoff(attempt, self._rng))
                continue
            hold.__exit__(None, None, None)
            return reply
        raise AssertionError("unreachable")  # pragma: no cover


class _AsyncCompletions:
    def __init__(
        self, openai_client: openai.AsyncOpenAI, earmark: AsyncClient, meter: Meter
    ) -> None:
        self._openai = openai_client.with_options(max_retries=0)
        self._earmark, self._meter = earmark, meter
        self._rng = random.Random()

    async def _sent(
        self, request: dict[str, Any], shape: Shape, hold: Hold, charged: Charged
    ) -> dict[str, Any]:
        """The request as sent: its maximum answer lowered to what the hold covers."""
        if not needs_cover(request, self._meter.output_tokens_max):
            return request
        return covered_request(request, hold.reservation_id, charged)

    async def create(self, **request: Any) -> ChatCompletion | AsyncMeteredStream:
        """chat.completions.create, held, called, and settled (see the module's text)."""
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
                if request.get("stream"):
                    sent, wanted = streamed(sent)
                    raw = await self._openai.chat.completions.create(**sent)
                    assert isinstance(raw, openai.AsyncStream)
                    return AsyncMeteredStream(raw, hold, Tally(prompt), wanted)
                reply = await self._openai.chat.completions.create(**sent)
                assert isinstance(reply, ChatCompletion)
                hold.usage = usage_of(reply.usage, Usage(prompt, 0))
            except BaseException as error:
                outcome = settle_failed(hold, error, ERRORS)
                await hold.__aexit__(type(outcome), outcome, None)
                if not isinstance(error, RETRYABLE) or attempt + 1 == m.retry.attempts_max:
                    raise
                await asyncio.sleep(m.retry.backoff(attempt, self._rng))
                continue
            await hold.__aexit__(None, None, None)
            return reply
        raise AssertionError("unreachable")  # pragma: no cover


class _Chat:
    def __init__(self, completions: _Completions) -> None:
        self.completions = completions


class _AsyncChat:
    def __init__(self, completions: _AsyncCompletions) -> None:
        self.completions = completions


class MeteredOpenAI:
    """An OpenAI client whose chat completions go through Earmark; `.openai` is the
    client itself, for everything else."""

    def __init__(self, openai_client: openai.OpenAI, earmark: Client, meter: Meter) -> None:
        self.openai = openai_client
        self.chat = _Chat(_Completions(openai_client, earmark, meter))


class AsyncMeteredOpenAI:
    """MeteredOpenAI for AsyncOpenAI and AsyncClient."""

    def __init__(
        self, openai_client: openai.AsyncOpenAI, earmark: AsyncClient, meter: Meter
    ) -> None:
        self.openai = openai_client
        self.chat = _AsyncChat(_AsyncCompletions(openai_client, earmark, meter))


@overload
def metered(
    openai_client: openai.OpenAI, earmark: Client, budget_id: str, **meter: Any
) -> MeteredOpenAI: ...


@overload
def metered(
    openai_client: openai.AsyncOpenAI, earmark: AsyncClient, budget_id: str, **meter: Any
) -> AsyncMeteredOpenAI: ...


@overload
def metered(
    openai_client: anthropic.Anthropic, earmark: Client, budget_id: str, **meter: Any
) -> MeteredAnthropic: ...


@overload
def metered(
    openai_client: anthropic.AsyncAnthropic, earmark: AsyncClient, budget_id: str, **meter: Any
) -> AsyncMeteredAnthropic: ...


def metered(
    openai_client: Any,
    earmark: Client | AsyncClient,
    budget_id: str,
    **meter: Any,
) -> MeteredOpenAI | AsyncMeteredOpenAI | MeteredAnthropic | AsyncMeteredAnthropic:
    """The client, metered on budget_id; meter takes Meter's other fields (provider, job,
    also_budget_ids, account, labels, lease_seconds, retry, output_tokens_max). OpenAI
    and Anthropic go with Client, AsyncOpenAI and AsyncAnthropic with AsyncClient."""
    if type(openai_client).__module__.partition(".")[0] == "anthropic":
        # Imported here: a worker that meters OpenAI needs no anthropic package.
        from earmark.client.anthropic import metered as metered_anthropic

        return metered_anthropic(openai_client, earmark, budget_id, **meter)
    settings = Meter(budget_id, **meter)
    if isinstance(openai_client, openai.AsyncOpenAI):
        if not isinstance(earmark, AsyncClient):
            raise TypeError("AsyncOpenAI is metered with an earmark.client.AsyncClient")
        return AsyncMeteredOpenAI(openai_client, earmark, settings)
    if not isinstance(openai_client, openai.OpenAI):
        raise TypeError(f"metered() takes an OpenAI or Anthropic client, not {openai_client!r}")
    if not isinstance(earmark, Client):
        raise TypeError("OpenAI is metered with an earmark.client.Client")
    return MeteredOpenAI(openai_client, earmark, settings)
