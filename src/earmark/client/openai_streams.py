"""The metered OpenAI client's streams: a chat completion streamed through a hold that is
charged as the chunks come and settled at the streamed usage (earmark.client.llm makes
them)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import openai
from openai.types.chat import ChatCompletionChunk
from openai.types.completion_usage import CompletionUsage

from earmark import limits
from earmark.client.hold import Hold
from earmark.client.meter import ProviderErrors, StreamCappedError, settle_failed
from earmark.client.sync import SyncHold
from earmark.core.prices import Usage

# A streamed answer comes about a token a chunk; a chunk counts at least one token, and
# one per this many characters when it is longer.
stream_chars_per_token = 4

ERRORS = ProviderErrors(status=openai.APIStatusError, connection=openai.APIConnectionError)


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


def streamed(request: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """The request as sent (usage asked for in the stream) and whether the caller asked for
    the usage chunk itself."""
    sent = dict(request)
    options = dict(sent.get("stream_options") or {})
    wanted = bool(options.get("include_usage"))
    options["include_usage"] = True
    sent["stream_options"] = options
    return sent, wanted


@dataclass
class Tally:
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


def _hides(chunk: ChatCompletionChunk, wanted: bool) -> bool:
    """The usage-only last chunk, which the caller did not ask for."""
    return not wanted and not chunk.choices and chunk.usage is not None


class MeteredStream:
    """A synchronous stream of chunks whose hold is charged as they come and settled at its
    end (or when it is closed early)."""

    def __init__(
        self, raw: openai.Stream[ChatCompletionChunk], hold: SyncHold, tally: Tally, wanted: bool
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
                self._end(settle_failed(self._hold, error, ERRORS))
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
        self, raw: openai.AsyncStream[ChatCompletionChunk], hold: Hold, tally: Tally, wanted: bool
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
                await self._end(settle_failed(self._hold, error, ERRORS))
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
