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
- charges the prompt before sending it, so that a worker that dies during the call leaves
  its hold IN_DOUBT (the provider may bill the call) rather than returned;
- calls the provider with the OpenAI client's own retries turned off, and retries itself
  (connection errors, timeouts, 429 and 5xx), `retry.attempts_max` attempts in all, each
  on a hold of its own after the failed one settled: a cheap first attempt never
  authorizes an expensive second one (the spend-caps article's two-stage rule);
- settles with the response's `usage` (cached input tokens included), or, when the call
  raises, FAILED before the exception propagates: at nothing when the provider answered no
  (a 4xx, so nothing was billed), else at what was charged (a timeout or a 5xx may have
  been billed).

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
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import openai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

from earmark import limits
from earmark.client.aio import AsyncClient
from earmark.client.errors import EarmarkClientError
from earmark.client.hold import Hold
from earmark.client.sync import Client, SyncHold
from earmark.client.types import RetryPolicy
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


class HoldCappedError(EarmarkClientError):
    """The call's hold is spent (a Charge came back capped): it was not sent, or, for a
    stream, reading stopped."""

    reason = "HOLD_CAPPED"

    def __init__(self, reservation_id: str, what: str) -> None:
        super().__init__(f"reservation {reservation_id}: the hold is spent; {what}")
        self.about = {"reservation_id": reservation_id}


class StreamCappedError(HoldCappedError):
    """A streamed answer was cut off: the stream was closed and the hold settled at the
    tokens read."""

    def __init__(self, reservation_id: str, output_tokens: int) -> None:
        super().__init__(
            reservation_id,
            f"the stream was closed after about {output_tokens} output tokens",
        )


@dataclass(frozen=True, slots=True)
class Meter:
    """Where and how calls are held: the budget (and the budgets it nests in), the provider
    the price book knows the models under, the job whose estimates learn, and the attempts."""

    budget_id: str
    provider: str = "openai"
    job: str = ""
    also_budget_ids: Sequence[str] = ()
    # Set (with budget_id ""): the calls hold on the account's current billing cycle, the
    # only way onto a cycle budget, which refuses to be named by its id.
    account: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    # The holds' lease; None: the sidecar's default. The hold renews while the call runs.
    lease_seconds: float | None = None
    # Attempts in all (each on its own hold), and the full-jitter backoff between them.
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(3, 0.5, 8.0))

    def __post_init__(self) -> None:
        if not 1 <= self.retry.attempts_max <= limits.llm_attempts_max:
            raise ValueError(
                f"retry.attempts_max must be from 1 to {limits.llm_attempts_max} for model "
                f"calls, not {self.retry.attempts_max}"
            )


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
    and the provider's usage once its last chunk came. The prompt was charged before the
    request was sent."""

    input_tokens: int
    output_tokens: int = 0
    uncharged: int = 0
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
        """The next charge: every limits.llm_stream_charge_tokens output tokens."""
        if self.uncharged < limits.llm_stream_charge_tokens:
            return None
        step, self.uncharged = Usage(0, self.uncharged), 0
        return step

    def truth(self) -> Usage:
        return usage_of(self.usage, Usage(self.input_tokens, self.output_tokens))


def _outcome_of(error: BaseException) -> BaseException:
    """What a hold settles as when its call ends in error: a spent hold was stopped on
    purpose (CANCELLED), anything else failed (FAILED)."""
    return asyncio.CancelledError() if isinstance(error, HoldCappedError) else error


def _unbilled(error: BaseException) -> bool:
    """The provider answered no (a 4xx: a bad request, a rate limit) or nothing was sent:
    nothing was billed. Anything else (a timeout, a 5xx, a dropped connection, the caller's
    own exception) may have been, so the hold keeps what was charged."""
    if isinstance(error, HoldCappedError) and not isinstance(error, StreamCappedError):
        return True
    return isinstance(error, openai.APIStatusError) and error.status_code < 500


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

    def create(self, **request: Any) -> ChatCompletion | MeteredStream:
        """chat.completions.create, held, called, and settled (see the module's text)."""
        m = self._meter
        request = _sendable(request)
        shape, prompt = shape_of(m.provider, request), prompt_tokens(request)
        for attempt in range(m.retry.attempts_max):
            # Entering reserves; a refusal raises before anything is sent.
            hold = self._earmark.hold(
                m.budget_id, 0, shape=shape, job=m.job, also_budget_ids=m.also_budget_ids,
                labels=m.labels, lease_seconds=m.lease_seconds, account=m.account,
            ).__enter__()  # fmt: skip
            try:
                # Charged before it is sent: a worker that dies now leaves the hold in doubt,
                # not returned, since the provider may bill the call.
                if hold.charge(usage=Usage(prompt, 0)).capped:
                    raise HoldCappedError(hold.reservation_id, "the call was not sent")
                if request.get("stream"):
                    sent, wanted = _streamed(request)
                    raw = self._openai.chat.completions.create(**sent)
                    assert isinstance(raw, openai.Stream)
                    return MeteredStream(raw, hold, _Tally(prompt), wanted)
                reply = self._openai.chat.completions.create(**request)
                assert isinstance(reply, ChatCompletion)
                hold.usage = usage_of(reply.usage, Usage(prompt, 0))
            except BaseException as error:
                hold.used = 0 if _unbilled(error) else None
                outcome = _outcome_of(error)
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

    async def create(self, **request: Any) -> ChatCompletion | AsyncMeteredStream:
        """chat.completions.create, held, called, and settled (see the module's text)."""
        m = self._meter
        request = _sendable(request)
        shape, prompt = shape_of(m.provider, request), prompt_tokens(request)
        for attempt in range(m.retry.attempts_max):
            hold = await self._earmark.hold(
                m.budget_id, 0, shape=shape, job=m.job, also_budget_ids=m.also_budget_ids,
                labels=m.labels, lease_seconds=m.lease_seconds, account=m.account,
            ).__aenter__()  # fmt: skip
            try:
                if (await hold.charge(usage=Usage(prompt, 0))).capped:
                    raise HoldCappedError(hold.reservation_id, "the call was not sent")
                if request.get("stream"):
                    sent, wanted = _streamed(request)
                    raw = await self._openai.chat.completions.create(**sent)
                    assert isinstance(raw, openai.AsyncStream)
                    return AsyncMeteredStream(raw, hold, _Tally(prompt), wanted)
                reply = await self._openai.chat.completions.create(**request)
                assert isinstance(reply, ChatCompletion)
                hold.usage = usage_of(reply.usage, Usage(prompt, 0))
            except BaseException as error:
                hold.used = 0 if _unbilled(error) else None
                outcome = _outcome_of(error)
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


def metered(
    openai_client: openai.OpenAI | openai.AsyncOpenAI,
    earmark: Client | AsyncClient,
    budget_id: str,
    **meter: Any,
) -> MeteredOpenAI | AsyncMeteredOpenAI:
    """The client, metered on budget_id; meter takes Meter's other fields (provider, job,
    also_budget_ids, account, labels, retry). OpenAI goes with Client, AsyncOpenAI with
    AsyncClient."""
    settings = Meter(budget_id, **meter)
    if isinstance(openai_client, openai.AsyncOpenAI):
        if not isinstance(earmark, AsyncClient):
            raise TypeError("AsyncOpenAI is metered with an earmark.client.AsyncClient")
        return AsyncMeteredOpenAI(openai_client, earmark, settings)
    if not isinstance(earmark, Client):
        raise TypeError("OpenAI is metered with an earmark.client.Client")
    return MeteredOpenAI(openai_client, earmark, settings)
