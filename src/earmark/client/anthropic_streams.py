"""The metered Anthropic client's streams: a message streamed through a hold that is
charged as its events come and settled at the stream's usage (earmark.client.anthropic
makes them).

The usage events say what the provider bills: message_start carries the input (cache
reads and writes apart), message_delta the cumulative output tokens. Between them the
hold is charged every limits.llm_stream_charge_tokens output tokens counted from the text
deltas (message_delta usually comes only at the end); once message_delta has said, its
count is the truth.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
from anthropic.lib.streaming import AsyncMessageStream, MessageStream
from anthropic.types import RawMessageStreamEvent
from anthropic.types import Usage as AnthropicUsage

from earmark import limits
from earmark.client.hold import Hold
from earmark.client.meter import ProviderErrors, StreamCappedError, settle_failed
from earmark.client.sync import SyncHold
from earmark.core.prices import Usage

# A delta counts at least one token, and one per this many characters when it is longer.
stream_chars_per_token = 4

ERRORS = ProviderErrors(status=anthropic.APIStatusError, connection=anthropic.APIConnectionError)


def usage_of(usage: AnthropicUsage) -> Usage:
    """Anthropic's usage as Earmark prices it: Anthropic's input_tokens counts neither the
    cache reads nor the cache writes, Earmark's input_tokens counts every input token."""
    read = usage.cache_read_input_tokens or 0
    written = usage.cache_creation_input_tokens or 0
    return Usage(
        input_tokens=usage.input_tokens + read + written,
        output_tokens=usage.output_tokens,
        cached_input_tokens=read,
        cache_write_input_tokens=written,
    )


def _delta_text(event: RawMessageStreamEvent) -> str:
    """What a content delta adds: text, a tool call's JSON, or thinking."""
    if event.type != "content_block_delta":
        return ""
    delta = event.delta
    if delta.type == "text_delta":
        return delta.text
    if delta.type == "input_json_delta":
        return delta.partial_json
    if delta.type == "thinking_delta":
        return delta.thinking
    return ""


@dataclass
class Tally:
    """What a stream has read: the input its message_start reported, output tokens counted
    from the deltas and those reported by message_delta, and how many were charged. The
    prompt (its estimate) was charged before the request was sent."""

    prompt: int
    input: Usage | None = None
    counted: int = 0
    reported: int | None = None
    charged: int = 0

    @property
    def output_tokens(self) -> int:
        return self.reported if self.reported is not None else self.counted

    def read(self, event: RawMessageStreamEvent) -> None:
        if event.type == "message_start":
            self.input = usage_of(event.message.usage)
            return
        if event.type == "message_delta":
            self.reported = event.usage.output_tokens
            return
        text = _delta_text(event)
        if text:
            self.counted += max(1, math.ceil(len(text) / stream_chars_per_token))

    def due(self) -> Usage | None:
        """The next charge: every limits.llm_stream_charge_tokens output tokens."""
        step = self.output_tokens - self.charged
        if step < limits.llm_stream_charge_tokens:
            return None
        self.charged += step
        return Usage(0, step)

    def truth(self) -> Usage:
        """What the provider bills: its reported input (else the prompt's estimate) and the
        output tokens reported (else counted)."""
        given = self.input or Usage(self.prompt, 0)
        return Usage(
            input_tokens=given.input_tokens,
            output_tokens=self.output_tokens,
            cached_input_tokens=given.cached_input_tokens,
            cache_write_input_tokens=given.cache_write_input_tokens,
        )


class MeteredEvents:
    """A synchronous stream of Anthropic's raw events (what `create(stream=True)` gives)
    whose hold is charged as they come and settled at its end, or when it is closed."""

    def __init__(
        self, raw: anthropic.Stream[RawMessageStreamEvent], hold: SyncHold, tally: Tally
    ) -> None:
        self._raw, self._hold, self.tally = raw, hold, tally
        self._events = iter(raw)
        self._open = True

    @property
    def response(self) -> Any:
        """The HTTP response, as the anthropic stream has it."""
        return self._raw.response

    def __iter__(self) -> Iterator[RawMessageStreamEvent]:
        return self

    def __next__(self) -> RawMessageStreamEvent:
        if not self._open:
            raise StopIteration
        try:
            event = next(self._events)
            self.tally.read(event)
            step = self.tally.due()
            if step is not None and self._hold.charge(usage=step).capped:
                self._raw.close()
                raise StreamCappedError(self._hold.reservation_id, self.tally.output_tokens)
        except StopIteration:
            self._end(None)
            raise
        except BaseException as error:
            self._end(settle_failed(self._hold, error, ERRORS))
            raise
        return event

    def _end(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        self._raw.close()
        self._hold.usage = self.tally.truth()
        self._hold.__exit__(type(error) if error else None, error, None)

    def close(self) -> None:
        """Stops reading: the hold settles CANCELLED at the tokens read so far."""
        self._end(asyncio.CancelledError() if self._open else None)

    def __enter__(self) -> MeteredEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncMeteredEvents:
    """MeteredEvents for AsyncAnthropic."""

    def __init__(
        self, raw: anthropic.AsyncStream[RawMessageStreamEvent], hold: Hold, tally: Tally
    ) -> None:
        self._raw, self._hold, self.tally = raw, hold, tally
        self._events = raw.__aiter__()
        self._open = True

    @property
    def response(self) -> Any:
        return self._raw.response

    def __aiter__(self) -> AsyncIterator[RawMessageStreamEvent]:
        return self

    async def __anext__(self) -> RawMessageStreamEvent:
        if not self._open:
            raise StopAsyncIteration
        try:
            event = await self._events.__anext__()
            self.tally.read(event)
            step = self.tally.due()
            if step is not None and (await self._hold.charge(usage=step)).capped:
                await self._raw.close()
                raise StreamCappedError(self._hold.reservation_id, self.tally.output_tokens)
        except StopAsyncIteration:
            await self._end(None)
            raise
        except BaseException as error:
            await self._end(settle_failed(self._hold, error, ERRORS))
            raise
        return event

    async def _end(self, error: BaseException | None) -> None:
        if not self._open:
            return
        self._open = False
        await self._raw.close()
        self._hold.usage = self.tally.truth()
        await self._hold.__aexit__(type(error) if error else None, error, None)

    async def close(self) -> None:
        """Stops reading: the hold settles CANCELLED at the tokens read so far."""
        await self._end(asyncio.CancelledError() if self._open else None)

    async def __aenter__(self) -> AsyncMeteredEvents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class MeteredStreamManager:
    """What `messages.stream()` gives: entering it holds, charges the prompt and sends the
    request; it yields anthropic's own MessageStream (text_stream, get_final_message...)
    read over the metered events, and leaving it closes the stream, which settles."""

    def __init__(self, send: Callable[[], MeteredEvents]) -> None:
        self._send = send
        self._stream: MessageStream[Any] | None = None

    def __enter__(self) -> MessageStream[Any]:
        # MessageStream reads any stream of raw events that can be closed.
        events: Any = self._send()
        self._stream = MessageStream(events, output_format=anthropic.NOT_GIVEN)
        return self._stream

    def __exit__(self, *exc: object) -> None:
        if self._stream is not None:
            self._stream.close()


class AsyncMeteredStreamManager:
    """MeteredStreamManager for AsyncAnthropic."""

    def __init__(self, send: Callable[[], Coroutine[Any, Any, AsyncMeteredEvents]]) -> None:
        self._send = send
        self._stream: AsyncMessageStream[Any] | None = None

    async def __aenter__(self) -> AsyncMessageStream[Any]:
        events: Any = await self._send()
        self._stream = AsyncMessageStream(events, output_format=anthropic.NOT_GIVEN)
        return self._stream

    async def __aexit__(self, *exc: object) -> None:
        if self._stream is not None:
            await self._stream.close()
