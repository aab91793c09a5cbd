"""Metered model calls: an OpenAI-compatible client whose every chat completion is held,
called and settled through Earmark (`pip install 'earmark[openai]'`).

    llm = metered(OpenAI(), earmark_client, "job-142")        # or AsyncOpenAI, AsyncClient
    reply = llm.chat.completions.create(model="gpt-4o-mini", max_tokens=300, messages=...)

Each `chat.completions.create` call:
- estimates its shape from the request: the model, the prompt's size (characters of the
  messages and tools, counted conservatively) and max_completion_tokens or max_tokens (times
  n); without a maximum it holds the budget's estimate for the model (a shape that names the
  model only);
- reserves that hold, with a new idempotency key, and raises RefusedError before any HTTP
  request when it is refused;
- calls the provider with the OpenAI client's own retries turned off, and retries itself
  (connection errors, timeouts, 429 and 5xx) at most `attempts` times in all, each attempt
  on a hold of its own, after settling the failed one: a cheap first attempt never
  authorizes an expensive second one (the spend-caps article's two-stage rule);
- settles with the response's `usage` (cached input tokens included), or, when the call
  raises, FAILED at what was charged, before the exception propagates.

A streaming call asks for usage in the stream (and hides that last chunk unless the caller
asked for it), charges the hold as tokens arrive, and stops reading when a charge is capped:
the stream closes, the hold settles at the tokens counted, and StreamCappedError is raised.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

from earmark import limits
from earmark.client.aio import AsyncClient, RetryPolicy
from earmark.client.errors import EarmarkClientError
from earmark.client.hold import Hold
from earmark.client.sync import Client, SyncHold
from earmark.core.prices import Shape, Usage

# A prompt is counted as one token per this many characters: fewer than the usual four, so
# that the hold errs high. Each message adds its role and framing.
prompt_chars_per_token = 3
message_overhead_tokens = 4
reply_overhead_tokens = 3
# A streamed answer comes about a token a chunk; a chunk counts at least one token, and
# one per this many characters when it is longer.
stream_chars_per_token = 4

# What the provider answers that is worth a new attempt on a new hold.
RETRYABLE = (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError)


class StreamCappedError(EarmarkClientError):
    """A streamed answer was cut off: its hold was spent (a Charge came back capped), so the
    stream was closed and the hold settled at the tokens read."""

    reason = "HOLD_CAPPED"

    def __init__(self, reservation_id: str, output_tokens: int) -> None:
        super().__init__(
            f"reservation {reservation_id}: the hold was spent after about {output_tokens} "
            "output tokens; the stream was closed"
        )
        self.about = {"reservation_id": reservation_id}


@dataclass(frozen=True, slots=True)
class Meter:
    """Where and how calls are held: the budget (and the budgets it nests in), the provider
    the price book knows the models under, the job whose estimates learn, and the attempts."""

    budget_id: str
    provider: str = "openai"
    job: str = ""
    also_budget_ids: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    # Attempts in all (each on its own hold), and the full-jitter backoff between them.
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(3, 0.5, 8.0))

    def __post_init__(self) -> None:
        assert 1 <= self.retry.attempts_max <= limits.llm_attempts_max


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


def shape_of(provider: str, request: Mapping[str, Any]) -> Shape:
    """What the call may cost: its prompt and its maximum answer (times n), or, without a
    maximum, the model alone so that the sidecar holds its estimate."""
    model = str(request.get("model", ""))
    most = request.get("max_completion_tokens") or request.get("max_tokens")
    if not most:
        return Shape(provider, model, 0, 0)
    choices = int(request.get("n") or 1)
    return Shape(provider, model, prompt_tokens(request), int(most) * max(1, choices))


def usage_of(usage: CompletionUsage | None, fallback: Usage) -> Usage:
    """The provider's usage (cached input tokens included), or fallback when it sent none."""
    if usage is None:
        return fallback
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    return Usage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.completion_tokens,
        cached_input_tokens=min(cached, usage.prompt_tokens),
    )


def _streamed(request: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The request as sent (usage asked for in the stream) and whether the caller asked for
    the usage chunk itself."""
    sent = dict(request)
    options = dict(sent.get("stream_options") or {})
    wanted = bool(options.get("include_usage"))
    options["include_usage"] = True
    sent["stream_options"] = options
    return sent, wanted


@dataclass
class _Tally:
    """What a stream has read: output tokens counted from its text, those not yet charged,
    and the provider's usage once its last chunk came."""

    input_tokens: int
    output_tokens: int = 0
    uncharged: int = 0
    charged_input: bool = False
    usage: CompletionUsage | None = None

    def read(self, chunk: ChatCompletionChunk) -> None:
        for choice in chunk.choices:
            text = choice.delta.content if choice.delta is not None else None
            if text:
                tokens = max(1, math.ceil(len(text) / stream_chars_per_token))
                self.output_tokens += tokens
                self.uncharged += tokens
        if chunk.usage is not None:
            self.usage = chunk.usage

    def due(self) -> Usage | None:
        """The next charge: the prompt with the first text, then every
        limits.llm_stream_charge_tokens output tokens."""
        if not self.charged_input and self.uncharged:
            self.charged_input = True
            step, self.uncharged = Usage(self.input_tokens, self.uncharged), 0
            return step
        if self.uncharged >= limits.llm_stream_charge_tokens:
            step, self.uncharged = Usage(0, self.uncharged), 0
            return step
        return None

    def truth(self) -> Usage:
        return usage_of(self.usage, Usage(self.input_tokens, self.output_tokens))


def _outcome_of(error: BaseException) -> BaseException:
    """What a stream's hold settles as: a capped stream was stopped on purpose (CANCELLED),
    anything else failed (FAILED)."""
    return asyncio.CancelledError() if isinstance(error, StreamCappedError) else error


def _hides(chunk: ChatCompletionChunk, wanted: bool) -> bool:
    """The usage-only last chunk, which the caller did not ask for."""
    return not wanted and not chunk.choices and chunk.usage is not None


class MeteredStream:
    """A synchronous stream of chunks whose hold is charged as they come and settled at its
    end (or when it is closed early)."""

    def __init__(
        self, raw: openai.Stream[ChatCompletionChunk], hold: SyncHold, tally: _Tally, wanted: bool
    ) -> None:
        self._raw, self._hold, self._tally, self._wanted = raw, hold, tally, wanted
        self._chunks = iter(raw)
        self._open = True

    def __iter__(self) -> Iterator[ChatCompletionChunk]:
        return self

    def __next__(self) -> ChatCompletionChunk:
        while self._open:
            try:
                chunk = next(self._chunks)
                self._tally.read(chunk)
                step = self._tally.due()
                if step is not None and self._hold.charge(usage=step).capped:
                    self._capped()
            except StopIteration:
                self._end(None)
                raise
            except BaseException as error:
                self._end(_outcome_of(error))
                raise
            if not _hides(chunk, self._wanted):
                return chunk
        raise StopIteration

    def _capped(self) -> None:
        self._raw.close()
        raise StreamCappedError(self._hold.reservation_id, self._tally.output_tokens)

    def _end(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        self._raw.close()
        self._hold.usage = self._tally.truth()
        self._hold.__exit__(type(error) if error else None, error, None)

    def close(self) -> None:
        """Stops reading: the hold settles CANCELLED at the tokens read so far."""
        self._end(asyncio.CancelledError() if self._open else None)

    def __enter__(self) -> MeteredStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMeteredStream:
    """MeteredStream for AsyncOpenAI."""

    def __init__(
        self, raw: openai.AsyncStream[ChatCompletionChunk], hold: Hold, tally: _Tally, wanted: bool
    ) -> None:
        self._raw, self._hold, self._tally, self._wanted = raw, hold, tally, wanted
        self._chunks = raw.__aiter__()
        self._open = True

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self

    async def __anext__(self) -> ChatCompletionChunk:
        while self._open:
            try:
                chunk = await self._chunks.__anext__()
                self._tally.read(chunk)
                step = self._tally.due()
                if step is not None and (await self._hold.charge(usage=step)).capped:
                    await self._raw.close()
                    raise StreamCappedError(self._hold.reservation_id, self._tally.output_tokens)
            except StopAsyncIteration:
                await self._end(None)
                raise
            except BaseException as error:
                await self._end(_outcome_of(error))
                raise
            if not _hides(chunk, self._wanted):
                return chunk
        raise StopAsyncIteration

    async def _end(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        await self._raw.close()
        self._hold.usage = self._tally.truth()
        await self._hold.__aexit__(type(error) if error else None, error, None)

    async def close(self) -> None:
        """Stops reading: the hold settles CANCELLED at the tokens read so far."""
        await self._end(asyncio.CancelledError() if self._open else None)

    async def __aenter__(self) -> AsyncMeteredStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Completions:
    def __init__(self, openai_client: openai.OpenAI, earmark: Client, meter: Meter) -> None:
        # The provider's own retries are off: each attempt is held on its own hold here.
        self._openai = openai_client.with_options(max_retries=0)
        self._earmark, self._meter = earmark, meter
        self._rng = random.Random()

    def _hold(self, shape: Shape) -> SyncHold:
        m = self._meter
        return self._earmark.hold(
            m.budget_id, 0, shape=shape, job=m.job, also_budget_ids=m.also_budget_ids,
            labels=m.labels,
        )  # fmt: skip

    def create(self, **request: Any) -> ChatCompletion | MeteredStream:
        """chat.completions.create, held, called, and settled (see the module's text)."""
        shape = shape_of(self._meter.provider, request)
        for attempt in range(self._meter.retry.attempts_max):
            try:
                if request.get("stream"):
                    return self._stream(shape, request)
                with self._hold(shape) as hold:
                    reply = self._openai.chat.completions.create(**request)
                    assert isinstance(reply, ChatCompletion)
                    hold.usage = usage_of(reply.usage, Usage(shape.input_tokens, 0))
                return reply
            except RETRYABLE:
                if attempt + 1 == self._meter.retry.attempts_max:
                    raise
            time.sleep(self._meter.retry.backoff(attempt, self._rng))
        raise AssertionError("unreachable")  # pragma: no cover

    def _stream(self, shape: Shape, request: Mapping[str, Any]) -> MeteredStream:
        sent, wanted = _streamed(request)
        hold = self._hold(shape).__enter__()
        try:
            raw = self._openai.chat.completions.create(**sent)
        except BaseException as error:
            hold.__exit__(type(error), error, None)
            raise
        assert isinstance(raw, openai.Stream)
        return MeteredStream(raw, hold, _Tally(prompt_tokens(request)), wanted)


class _AsyncCompletions:
    def __init__(
        self, openai_client: openai.AsyncOpenAI, earmark: AsyncClient, meter: Meter
    ) -> None:
        self._openai = openai_client.with_options(max_retries=0)
        self._earmark, self._meter = earmark, meter
        self._rng = random.Random()

    def _hold(self, shape: Shape) -> Hold:
        m = self._meter
        return self._earmark.hold(
            m.budget_id, 0, shape=shape, job=m.job, also_budget_ids=m.also_budget_ids,
            labels=m.labels,
        )  # fmt: skip

    async def create(self, **request: Any) -> ChatCompletion | AsyncMeteredStream:
        """chat.completions.create, held, called, and settled (see the module's text)."""
        shape = shape_of(self._meter.provider, request)
        for attempt in range(self._meter.retry.attempts_max):
            try:
                if request.get("stream"):
                    return await self._stream(shape, request)
                async with self._hold(shape) as hold:
                    reply = await self._openai.chat.completions.create(**request)
                    assert isinstance(reply, ChatCompletion)
                    hold.usage = usage_of(reply.usage, Usage(shape.input_tokens, 0))
                return reply
            except RETRYABLE:
                if attempt + 1 == self._meter.retry.attempts_max:
                    raise
            await asyncio.sleep(self._meter.retry.backoff(attempt, self._rng))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _stream(self, shape: Shape, request: Mapping[str, Any]) -> AsyncMeteredStream:
        sent, wanted = _streamed(request)
        hold = await self._hold(shape).__aenter__()
        try:
            raw = await self._openai.chat.completions.create(**sent)
        except BaseException as error:
            await hold.__aexit__(type(error), error, None)
            raise
        assert isinstance(raw, openai.AsyncStream)
        return AsyncMeteredStream(raw, hold, _Tally(prompt_tokens(request)), wanted)


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


def metered(
    openai_client: openai.OpenAI | openai.AsyncOpenAI,
    earmark: Client | AsyncClient,
    budget_id: str,
    **meter: Any,
) -> MeteredOpenAI | AsyncMeteredOpenAI:
    """The client, metered on budget_id; meter takes Meter's other fields (provider, job,
    also_budget_ids, labels, retry). OpenAI goes with Client, AsyncOpenAI with AsyncClient."""
    settings = Meter(budget_id, **meter)
    if isinstance(openai_client, openai.AsyncOpenAI):
        if not isinstance(earmark, AsyncClient):
            raise TypeError("AsyncOpenAI is metered with an earmark.client.AsyncClient")
        return AsyncMeteredOpenAI(openai_client, earmark, settings)
    if not isinstance(earmark, Client):
        raise TypeError("OpenAI is metered with an earmark.client.Client")
    return MeteredOpenAI(openai_client, earmark, settings)
