"""The interception point: httpx2 transports that meter each request of a provider SDK's
client, async and sync, around the HTTP client the SDK had.

A request that bills is held before it leaves (its prompt charged in the Reserve), sent
with the cap the budget can pay, renewed while it runs, and settled from the provider's own
count: the JSON answer's usage, or the stream's final usage event. A stream that ends
without its usage, a timeout, a dropped connection and a 5xx leave the hold in doubt (the
provider may bill the call); a 4xx, or a connection refused before anything was sent,
settle at nothing. A refusal raises before anything is sent.

A call that runs on after its answer (OpenAI's background responses: its route's `later`)
keeps its hold open and renewing, the call's id recorded on the hold as soon as the answer
gives it (a Renew's labels). A request through the same client that reads the call again
(a retrieve, a resumed stream, a cancel) settles the hold once its answer says the call
ended; the Earmark client's close() leaves it in doubt, the id recorded for `earmark
reconcile`. A process that dies leaves it to lapse into doubt the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

import httpx2

from earmark import limits
from earmark.client.aio import AsyncClient
from earmark.client.errors import EarmarkClientError, RefusedError
from earmark.client.hold import Hold
from earmark.client.meter import HoldCappedError, Meter, never_sent
from earmark.client.openai_background import Ended
from earmark.client.wire import (
    FREE,
    Call,
    EndpointNotMeteredError,
    Events,
    Provider,
    Route,
    Tally,
    ToolNotMeteredError,
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
# What settles a hold, run on the Earmark client's loop.
Settling = Coroutine[Any, Any, None]

log = logging.getLogger("earmark.client")


class Ends(Tally, Protocol):
    """The tally of a stream that reads a running call again: how the call ended, once an
    event said so."""

    def ended(self) -> Ended | None: ...


@runtime_checkable
class Later(Protocol):
    """A route's calls that run on after their answer (wire_openai.Background): which
    answer leaves one running, which request reads one again, and how one ended."""

    # The hold label the call's id is recorded under.
    label: str

    def running(self, route: object, body: dict[str, Any], answer: Any) -> str | None:
        """The id of the call a billable request's JSON answer left running; None when
        the answer ends it."""
        ...

    def left_running(self, tally: object) -> str | None:
        """The id of the call a billable stream that stopped before its end left running."""
        ...

    def reads(self, method: str, path: str) -> str | None:
        """The id of the call a request reads again; None for any other request."""
        ...

    def ended(self, answer: Any, call_id: str) -> Ended | None:
        """How call_id ended, from a JSON answer that read it again; None while it runs.
        Raises a ValueError for an answer that is not the call's, or not in its shape."""
        ...

    def resumed(self, call_id: str) -> Ends:
        """The tally of a stream that reads call_id again."""
        ...


def later_of(route: Route) -> Later | None:
    """What route says of its calls that run on after their answer; None when none do."""
    found = getattr(route, "later", None)
    return found if isinstance(found, Later) else None


@dataclass(eq=False)
class Running:
    """A hold kept open after its call answered, while the call runs on at the provider."""

    hold: Hold
    call: Call
    call_id: str
    later: Later
    # The Renew that records call_id on the hold, waited for before the hold settles: a
    # label sent after the Settle would find the hold closed, and reconcile without it.
    labelling: asyncio.Task[None] | None = None


class Metering:
    """What both transports share: which route a request takes, its hold, and how the
    hold ends. The hold is the async SDK's; a sync transport drives it through run."""

    def __init__(self, provider: Provider, earmark: AsyncClient, meter: Meter) -> None:
        self.provider = provider
        self.earmark = earmark
        self.meter = meter
        self._errors: dict[type[EarmarkClientError], type[EarmarkClientError]] = {}
        # The calls running on after their answer, by id, oldest first; changed on the
        # Earmark client's loop only.
        self.running: OrderedDict[str, Running] = OrderedDict()
        self._later: Later | None = None

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

    def body(self, request: httpx2.Request) -> dict[str, Any]:
        """A billable request's JSON body; one that is not a JSON object raises, unsent, as
        the SDK's error too, so that the SDK neither wraps it as a connection error nor
        retries it."""
        try:
            return json_body(request)
        except EarmarkClientError as refused:
            raise self.error(EarmarkClientError)(str(refused)) from None

    def call(self, route: Route, body: dict[str, Any]) -> Call:
        """What route reads of a billable request; raises, before anything is held or
        sent, for a tool whose fee Earmark cannot hold, as the SDK's error too (the route
        raises Earmark's own, which the LiteLLM gate answers with a status)."""
        try:
            return route.call(body, self.meter)
        except ToolNotMeteredError as refused:
            raise self.error(ToolNotMeteredError)(refused.tool, refused.why) from None

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

    # Calls that run on after their answer.

    def keep(self, hold: Hold, call: Call, later: Later, call_id: str) -> None:
        """Keeps hold open, renewing, while its call runs on, and records call_id on it at
        once. Run on the Earmark client's loop. Past llm_background_holds_max running, the
        oldest goes in doubt (its id recorded: reconcile resolves it)."""
        # A hold ended before its call says how it ended stays in doubt.
        hold.outcome = Outcome.UNKNOWN
        self._later = later
        earlier = self.running.get(call_id)
        if earlier is not None:
            self.end_soon(earlier, None)
        while len(self.running) >= limits.llm_background_holds_max:
            oldest = next(iter(self.running.values()))
            log.warning(
                "earmark: %d calls of one metered client run on after their answer, the "
                "most it keeps; the hold of %s goes in doubt, its id recorded for earmark "
                "reconcile",
                len(self.running),
                oldest.call_id,
            )
            self.end_soon(oldest, None)
        running = Running(hold, call, call_id, later)
        # In the background set, so that flush() waits for the id to be recorded too.
        running.labelling = self.earmark._in_background(self._label(running))
        self.running[call_id] = running
        self.earmark._kept[running] = partial(self.end_soon, running, None)

    @staticmethod
    async def _label(running: Running) -> None:
        try:
            await running.hold.label({running.later.label: running.call_id})
        except EarmarkClientError as error:
            log.warning(
                "earmark: the hold %s did not record %s yet (its next renewal carries it): %s",
                running.hold.reservation_id,
                running.call_id,
                error,
            )

    def reading(self, request: httpx2.Request) -> Running | None:
        """The running call of this client that request reads again, if it is one."""
        later = self._later
        if later is None or not self.running:
            return None
        call_id = later.reads(request.method, request.url.path)
        return None if call_id is None else self.running.get(call_id)

    @staticmethod
    def ended_by(running: Running, answer: Any) -> Ended | None:
        """How an answer that read running again says it ended; None while it runs, and
        for an answer that is not its Response (nothing is settled from it)."""
        try:
            return running.later.ended(answer, running.call_id)
        except ValueError as error:
            log.warning(
                "earmark: an answer about %s is not its Response (%s); its hold stays open",
                running.call_id,
                error,
            )
            return None

    def _take(self, running: Running) -> bool:
        """Whether running was still kept (it is no more): the one that takes it settles
        it, so that it settles once."""
        if self.running.get(running.call_id) is not running:
            return False
        del self.running[running.call_id]
        self.earmark._kept.pop(running, None)
        return True

    def end_soon(self, running: Running, ended: Ended | None) -> None:
        """Settles running's hold in the background, once: as ended says, or in doubt
        (None). Run on the Earmark client's loop."""
        if self._take(running):
            self.earmark._in_background(self._settle(running, ended))

    async def end(self, running: Running, ended: Ended) -> None:
        """end_soon, as a coroutine another thread submits to the loop."""
        if self._take(running):
            await self._settle(running, ended)

    async def _settle(self, running: Running, ended: Ended | None) -> None:
        hold = running.hold
        if ended is not None and ended.usage is not None:
            # A failed or cancelled call bills what it ran, and teaches no estimate.
            failed = {"failed": Outcome.FAILED, "cancelled": Outcome.CANCELLED}
            hold.usage = replace(ended.usage, provider=self.provider.name, model=running.call.model)
            hold.outcome = failed.get(ended.status)
        elif ended is not None and ended.billed_nothing:
            hold.used, hold.outcome = 0, Outcome.CANCELLED
        if running.labelling is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await running.labelling
        await hold.__aexit__(None, None, None)


class AsyncMeteredTransport(httpx2.AsyncBaseTransport):
    """The async SDKs' transport: meters each request, then sends it with inner."""

    def __init__(self, inner: httpx2.AsyncClient, metering: Metering) -> None:
        self.inner = inner
        self.metering = metering

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        route = self.metering.route(request)
        if route is None:
            running = self.metering.reading(request)
            response = await self.inner.send(request, stream=True)
            return response if running is None else await self._read_again(response, running)
        body = self.metering.body(request)
        call = self.metering.call(route, body)
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
                answer = json_answer(content)
                later = later_of(route)
                call_id = None if later is None else later.running(route, body, answer)
                if later is not None and call_id is not None:
                    self.metering.keep(hold, call, later, call_id)
                    return answered(response, content=content)
                self.metering.with_usage(hold, call, route.usage(answer, call))
            # The answer goes to the caller now; its settle follows off the caller's path
            # (the client's close() and flush() wait for it).
            self.metering.earmark._in_background(hold.__aexit__(None, None, None))
            return answered(response, content=content)
        events = Events(route.tally(call, hidden))
        end = _Ending(self.metering, hold, call, events, later_of(route), _now)
        return answered(response, stream=_AsyncEvents(response, events, end))

    async def _read_again(self, response: httpx2.Response, running: Running) -> httpx2.Response:
        """The answer to a request that read a running call again, its hold settled when
        the answer says the call ended; an error says nothing of the call."""
        if response.status_code >= 400:
            return response
        if is_stream(response):
            tally = running.later.resumed(running.call_id)
            events = Events(tally)
            end = _Reading(self.metering, running, tally)
            return answered(response, stream=_AsyncEvents(response, events, end))
        content = await response.aread()
        ended = self.metering.ended_by(running, json_answer(content))
        if ended is not None:
            self.metering.end_soon(running, ended)
        return answered(response, content=content)


class _Ending:
    """How a stream's hold ends, once, whichever way the stream ends: at the usage the
    stream carried, or in doubt without it; kept open when the stream stopped before the
    end of a call that runs on after it (a background response), through on_loop, which
    runs a step on the Earmark client's loop."""

    def __init__(
        self,
        metering: Metering,
        hold: Hold,
        call: Call,
        events: Events,
        later: Later | None,
        on_loop: Callable[[Callable[[], None]], Settling | None],
    ) -> None:
        self.metering, self.hold, self.call, self.events = metering, hold, call, events
        self.later, self.on_loop = later, on_loop
        self.done = False

    def settling(self) -> Settling | None:
        """What settles the hold now (None: nothing, or it was settled before)."""
        if self.done:
            return None
        self.done = True
        usage = self.events.tally.usage()
        call_id = None
        if usage is None and self.later is not None:
            call_id = self.later.left_running(self.events.tally)
        if self.later is not None and call_id is not None:
            keep = partial(self.metering.keep, self.hold, self.call, self.later, call_id)
            return self.on_loop(keep)
        self.metering.with_usage(self.hold, self.call, usage)
        return self.hold.__aexit__(None, None, None)


class _Reading:
    """How a stream that reads a running call again ends its hold: once an event said how
    the call ended; a stream that stops before one leaves it running."""

    def __init__(self, metering: Metering, running: Running, tally: Ends) -> None:
        self.metering, self.running, self.tally = metering, running, tally
        self.done = False

    def settling(self) -> Settling | None:
        ended = self.tally.ended()
        if self.done or ended is None:
            return None
        self.done = True
        return self.metering.end(self.running, ended)


def _now(step: Callable[[], None]) -> None:
    """Runs step at once: an async transport's streams end on the Earmark client's loop."""
    step()


class _AsyncEvents(httpx2.AsyncByteStream):
    """A stream passed to the SDK as it arrives, read for its usage on the way, its hold
    settled once when it ends, fails or is closed."""

    def __init__(self, response: httpx2.Response, events: Events, end: _Ending | _Reading) -> None:
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
        settling = self.end.settling()
        if settling is not None:
            self.end.metering.earmark._in_background(settling)


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

    def _later(self, settling: Settling) -> None:
        """Runs settling on the client's loop without the caller waiting."""
        self._submit(_in_background(self.metering.earmark, settling))

    def _on_loop(self, step: Callable[[], None]) -> Settling:
        """step, as a coroutine to run on the client's loop."""
        return _step(step)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        route = self.metering.route(request)
        if route is None:
            running = self.metering.reading(request)
            response = self.inner.send(request, stream=True)
            return response if running is None else self._read_again(response, running)
        body = self.metering.body(request)
        call = self.metering.call(route, body)
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
                answer = json_answer(content)
                later = later_of(route)
                call_id = None if later is None else later.running(route, body, answer)
                if later is not None and call_id is not None:
                    # Kept before the answer reaches the caller, who may read it at once.
                    self._run(_step(partial(self.metering.keep, hold, call, later, call_id)))
                    return answered(response, content=content)
                self.metering.with_usage(hold, call, route.usage(answer, call))
            self._later(hold.__aexit__(None, None, None))
            return answered(response, content=content)
        events = Events(route.tally(call, hidden))
        end = _Ending(self.metering, hold, call, events, later_of(route), self._on_loop)
        return answered(response, stream=_Events(response, events, end, self._later))

    def _read_again(self, response: httpx2.Response, running: Running) -> httpx2.Response:
        """AsyncMeteredTransport._read_again for the sync SDKs."""
        if response.status_code >= 400:
            return response
        if is_stream(response):
            tally = running.later.resumed(running.call_id)
            events = Events(tally)
            end = _Reading(self.metering, running, tally)
            return answered(response, stream=_Events(response, events, end, self._later))
        content = response.read()
        ended = self.metering.ended_by(running, json_answer(content))
        if ended is not None:
            self._later(self.metering.end(running, ended))
        return answered(response, content=content)


async def _entered(hold: Hold) -> Hold:
    return await hold.__aenter__()


async def _in_background(earmark: AsyncClient, settling: Settling) -> None:
    earmark._in_background(settling)


async def _step(step: Callable[[], None]) -> None:
    step()


class _Events(httpx2.SyncByteStream):
    """_AsyncEvents for the sync SDKs."""

    def __init__(
        self,
        response: httpx2.Response,
        events: Events,
        end: _Ending | _Reading,
        run: Callable[[Settling], None],
    ) -> None:
        self.response, self.events, self.end, self._run = response, events, end, run

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
        settling = self.end.settling()
        if settling is not None:
            self._run(settling)


__all__ = ["AsyncMeteredTransport", "MeteredTransport", "Metering"]
