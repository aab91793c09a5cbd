"""The interception point: httpx2 transports that meter each request of a provider SDK's
client, async and sync, around the HTTP client the SDK had.

A request that bills is held before it leaves (its prompt charged in the Reserve), sent
with the cap the budget can pay, renewed while it runs, and settled from the provider's own
count: the JSON answer's usage, or the stream's final usage event. A stream that ends
without its usage, a timeout, a dropped connection and a 5xx leave the hold in doubt (the
provider may bill the call); a 4xx, or a connection refused before anything was sent,
settle at nothing. A refusal raises before anything is sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import httpx2

from earmark import limits
from earmark.client.aio import AsyncClient
from earmark.client.errors import EarmarkClientError, RefusedError
from earmark.client.hold import Hold
from earmark.client.meter import HoldCappedError, Meter, never_sent
from earmark.client.wire import (
    FREE,
    Call,
    EndpointNotMeteredError,
    Events,
    Provider,
    Route,
    answered,
    cap_to_send,
    is_stream,
    json_answer,
    json_body,
    rebuilt,
    shape_of,
)
from earmark.core.model import Outcome
from earmark.core.prices import Usage

T = TypeVar("T")
E = TypeVar("E", bound=EarmarkClientError)


class Metering:
    """What both transports share: which route a request takes, its hold, and how the
    hold ends. The hold is the async SDK's; a sync transport drives it through run."""

    def __init__(self, provider: Provider, earmark: AsyncClient, meter: Meter) -> None:
        self.provider = provider
        self.earmark = earmark
        self.meter = meter
        self._errors: dict[type[EarmarkClientError], type[EarmarkClientError]] = {}

    def route(self, request: httpx2.Request) -> Route | None:
        """The billable route of request; None when it passes through (it is no POST, or
        bills nothing); raises, unsent, for one that bills and cannot be priced."""
        if request.method != "POST":
            return None
        found = self.provider.routing(request.url.path)
        if found == FREE:
            return None
        if found is None or isinstance(found, str):
            raise self.error(EndpointNotMeteredError)(request.method, request.url.path)
        return found

    def error(self, kind: type[E]) -> type[E]:
        """kind, made a subclass of the provider SDK's base error too, so that the SDK
        raises it as it is (it wraps other errors of its HTTP client as connection errors,
        and retries them)."""
        base = self.provider.sdk_error
        if base is None:
            return kind
        if kind not in self._errors:
            self._errors[kind] = type(kind.__name__, (kind, base), {"__module__": kind.__module__})
        return self._errors[kind]  # type: ignore[return-value]

    def hold(self, call: Call) -> Hold:
        shape, prompt = shape_of(self.provider.name, call, self.meter)
        m = self.meter
        return self.earmark.hold(
            m.budget_id, 0, shape=shape, job=m.job, also_budget_ids=m.also_budget_ids,
            labels=m.hold_labels(), lease_seconds=m.lease_seconds, account=m.account,
            charge=prompt, degrade=m.degrade, raise_on_refusal=False,
        )  # fmt: skip

    def admitted(self, hold: Hold) -> None:
        """Raises the refusal, before anything is sent, when the hold was refused."""
        if hold.refusal is not None:
            raise self.error(RefusedError)(hold.refusal)

    def to_send(
        self,
        request: httpx2.Request,
        body: dict[str, Any],
        route: Route,
        call: Call,
        hold: Hold,
    ) -> tuple[httpx2.Request, bool]:
        reservation = hold.reservation
        assert reservation is not None
        told = reservation.max_output_tokens
        if call.has_output and 0 < told < call.choices * limits.llm_output_tokens_min:
            # n choices share what the hold covers, and it covers less than a token each.
            raise self.error(HoldCappedError)(
                hold.reservation_id, f"it covers {told} tokens for {call.choices} choices; not sent"
            )
        cap = cap_to_send(call, told, reservation.degraded)
        sent, hidden = route.sent(body, call, cap)
        # A body sent as the caller wrote it goes out as its own bytes.
        return (request if sent is body else rebuilt(request, sent)), hidden

    @staticmethod
    def failed(hold: Hold, error: BaseException) -> None:
        """How the hold ends when the exchange raised: at nothing when the request never
        left; in doubt otherwise, since the provider may have run it."""
        if isinstance(error, HoldCappedError) or never_sent(error):
            hold.used = 0
        else:
            hold.outcome = Outcome.UNKNOWN

    @staticmethod
    def status(hold: Hold, status: int) -> None:
        """How the hold ends on an error status: a 4xx billed nothing; a 5xx may have run."""
        if status >= 500:
            hold.outcome = Outcome.UNKNOWN
        else:
            hold.used, hold.outcome = 0, Outcome.FAILED

    def with_usage(self, hold: Hold, call: Call, usage: Usage | None) -> None:
        """The hold ends at the provider's usage, priced as the provider and model it was
        held for, or in doubt without one."""
        if usage is None:
            hold.outcome = Outcome.UNKNOWN
        else:
            hold.usage = replace(usage, provider=self.provider.name, model=call.model)


class AsyncMeteredTransport(httpx2.AsyncBaseTransport):
    """The async SDKs' transport: meters each request, then sends it with inner."""

    def __init__(self, inner: httpx2.AsyncClient, metering: Metering) -> None:
        self.inner = inner
        self.metering = metering

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        route = self.metering.route(request)
        if route is None:
            return await self.inner.send(request, stream=True)
        body = json_body(request)
        call = route.call(body, self.metering.meter)
        hold = self.metering.hold(call)
        await hold.__aenter__()
        self.metering.admitted(hold)
        try:
            sending, hidden = self.metering.to_send(request, body, route, call, hold)
            response = await self.inner.send(sending, stream=True)
        except BaseException as error:
            Metering.failed(hold, error)
            await hold.__aexit__(None, None, None)
            raise
        if response.status_code >= 400 or not is_stream(response):
            try:
                content = await response.aread()
            except BaseException as error:
                Metering.failed(hold, error)
                await hold.__aexit__(None, None, None)
                raise
            if response.status_code >= 400:
                Metering.status(hold, response.status_code)
            else:
                self.metering.with_usage(hold, call, route.usage(json_answer(content), call))
            # The answer goes to the caller now; its settle follows off the caller's path
            # (the client's close() and flush() wait for it).
            self.metering.earmark._in_background(hold.__aexit__(None, None, None))
            return answered(response, content=content)
        events = Events(route.tally(call, hidden))
        end = _Ending(self.metering, hold, call, events)
        return answered(response, stream=_AsyncEvents(response, events, end))


class _Ending:
    """How a stream's hold ends, once, whichever way the stream ends: at the usage the
    stream carried, or in doubt without it."""

    def __init__(self, metering: Metering, hold: Hold, call: Call, events: Events) -> None:
        self.metering, self.hold, self.call, self.events = metering, hold, call, events
        self.done = False

    def settling(self) -> Hold | None:
        """The hold to settle now, with its ending set; None when it was settled before."""
        if self.done:
            return None
        self.done = True
        self.metering.with_usage(self.hold, self.call, self.events.tally.usage())
        return self.hold


class _AsyncEvents(httpx2.AsyncByteStream):
    """A stream passed to the SDK as it arrives, read for its usage on the way, its hold
    settled once when it ends, fails or is closed."""

    def __init__(self, response: httpx2.Response, events: Events, end: _Ending) -> None:
        self.response, self.events, self.end = response, events, end

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.response.aiter_bytes():
                kept = self.events.feed(chunk)
                if kept:
                    yield kept
            rest = self.events.rest()
            if rest:
                yield rest
        finally:
            await self._settle()

    async def aclose(self) -> None:
        try:
            await self.response.aclose()
        finally:
            await self._settle()

    async def _settle(self) -> None:
        hold = self.end.settling()
        if hold is not None:
            self.end.metering.earmark._in_background(hold.__aexit__(None, None, None))


class MeteredTransport(httpx2.BaseTransport):
    """The sync SDKs' transport: the same steps, the hold driven on the Earmark client's
    own loop through run."""

    def __init__(
        self,
        inner: httpx2.Client,
        metering: Metering,
        run: Callable[[Coroutine[Any, Any, T]], T],
        submit: Callable[[Coroutine[Any, Any, Any]], None],
    ) -> None:
        self.inner = inner
        self.metering = metering
        self._run: Callable[[Coroutine[Any, Any, Any]], Any] = run
        self._submit = submit

    def _exit(self, hold: Hold) -> None:
        self._run(hold.__aexit__(None, None, None))

    def _later(self, hold: Hold) -> None:
        """Settles hold on the client's loop without the caller waiting."""
        self._submit(_in_background(self.metering.earmark, hold))

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        route = self.metering.route(request)
        if route is None:
            return self.inner.send(request, stream=True)
        body = json_body(request)
        call = route.call(body, self.metering.meter)
        hold = self._run(_entered(self.metering.hold(call)))
        self.metering.admitted(hold)
        try:
            sending, hidden = self.metering.to_send(request, body, route, call, hold)
            response = self.inner.send(sending, stream=True)
        except BaseException as error:
            Metering.failed(hold, error)
            self._exit(hold)
            raise
        if response.status_code >= 400 or not is_stream(response):
            try:
                content = response.read()
            except BaseException as error:
                Metering.failed(hold, error)
                self._exit(hold)
                raise
            if response.status_code >= 400:
                Metering.status(hold, response.status_code)
            else:
                self.metering.with_usage(hold, call, route.usage(json_answer(content), call))
            self._later(hold)
            return answered(response, content=content)
        events = Events(route.tally(call, hidden))
        end = _Ending(self.metering, hold, call, events)
        return answered(response, stream=_Events(response, events, end, self._later))


async def _entered(hold: Hold) -> Hold:
    return await hold.__aenter__()


async def _in_background(earmark: AsyncClient, hold: Hold) -> None:
    earmark._in_background(hold.__aexit__(None, None, None))


class _Events(httpx2.SyncByteStream):
    """_AsyncEvents for the sync SDKs."""

    def __init__(
        self, response: httpx2.Response, events: Events, end: _Ending, run: Callable[[Hold], None]
    ) -> None:
        self.response, self.events, self.end, self._exit = response, events, end, run

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self.response.iter_bytes():
                kept = self.events.feed(chunk)
                if kept:
                    yield kept
            rest = self.events.rest()
            if rest:
                yield rest
        finally:
            self._settle()

    def close(self) -> None:
        try:
            self.response.close()
        finally:
            self._settle()

    def _settle(self) -> None:
        hold = self.end.settling()
        if hold is not None:
            self._exit(hold)


__all__ = ["AsyncMeteredTransport", "MeteredTransport", "Metering"]
