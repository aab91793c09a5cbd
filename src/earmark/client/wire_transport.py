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

The held call's steps are earmark.client.held_call's; the HTTP exchange around them is
written once, as a generator (_exchange) that yields what it needs done: a held call's step
to run on the Earmark client's loop (waited for, or in the background), a request to send,
an answer to read, a stream to hand over. Each transport only does those: the async one
awaits them, the sync one sends and reads in the caller's thread and runs the held call's
steps on its Client's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar, runtime_checkable

import httpx2

from earmark import limits
from earmark.client.aio import AsyncClient
from earmark.client.errors import EarmarkClientError
from earmark.client.held_call import (
    IN_DOUBT,
    Ending,
    HeldCall,
    HeldCallInput,
    Raising,
    answered_with,
    failed,
)
from earmark.client.meter import Meter
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
    is_stream,
    json_answer,
    json_body,
    rebuilt,
)
from earmark.core.model import Outcome

T = TypeVar("T")
E = TypeVar("E", bound=EarmarkClientError)
# A held call's step, run on the Earmark client's loop.
Settling = Coroutine[Any, Any, Any]
# A step that must run on the Earmark client's loop before the caller goes on (a call kept
# running is registered before the caller can read it again).
Now = Callable[[], None]

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

    held: HeldCall
    call_id: str
    later: Later
    # The Renew that records call_id on the hold, waited for before the hold settles: a
    # label sent after the Settle would find the hold closed, and reconcile without it.
    labelling: asyncio.Task[None] | None = None


# Requests that bill nothing whatever their path: reads and deletes.
PASSED_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})


class Metering:
    """What both transports share: which route a request takes, its held call, and the
    calls that run on after their answer. The held call's steps are the async SDK's; a
    sync transport runs them on its Client's loop."""

    def __init__(
        self, provider: Provider, earmark: AsyncClient, meter: Meter, host: str | None = None
    ) -> None:
        self.provider = provider
        self.earmark = earmark
        self.meter = meter
        self.error = Raising(provider.sdk_error)
        # The host the SDK client's base URL names, which named its provider: a billable
        # request to another (an absolute URL given a call) is refused (None: unchecked).
        self.host = host
        # The calls running on after their answer, by id, oldest first; changed on the
        # Earmark client's loop only.
        self.running: OrderedDict[str, Running] = OrderedDict()
        self._later: Later | None = None

    def route(self, request: httpx2.Request) -> Route | None:
        """The billable route of request; None when it passes through (a read or a delete,
        or a request the table says bills nothing); raises, unsent, for one that bills and
        cannot be priced. A write other than POST (PATCH, PUT: google-genai's caches.update
        extends a cache billed by the hour) is routed as a POST is, and refused unless the
        table says its path is free."""
        if request.method in PASSED_METHODS:
            return None
        found = self.provider.routing(request.url.path)
        if found == FREE:
            return None
        elsewhere = self.host is not None and request.url.host.lower() != self.host
        if found is None or isinstance(found, str) or request.method != "POST" or elsewhere:
            where = f"//{request.url.host}{request.url.path}" if elsewhere else request.url.path
            raise self.error(EndpointNotMeteredError)(request.method, where)
        return found

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

    def held(self, call: Call) -> HeldCall:
        """call's held call, on the meter's budget, its refusal and cap raised as the
        SDK's errors too."""
        what = HeldCallInput(self.provider.name, call, self.meter, self.error)
        return HeldCall(self.earmark, what)

    # Calls that run on after their answer.

    def keep(self, held: HeldCall, later: Later, call_id: str) -> None:
        """Keeps held's hold open, renewing, while its call runs on, and records call_id on
        it at once. Run on the Earmark client's loop. Past llm_background_holds_max
        running, the oldest goes in doubt (its id recorded: reconcile resolves it)."""
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
        running = Running(held, call_id, later)
        # In the background set, so that flush() waits for the id to be recorded too.
        running.labelling = self.earmark._in_background(self._label(running))
        self.running[call_id] = running
        self.earmark._kept[running] = partial(self.end_soon, running, None)

    @staticmethod
    async def _label(running: Running) -> None:
        try:
            await running.held.hold.label({running.later.label: running.call_id})
        except EarmarkClientError as error:
            log.warning(
                "earmark: the hold %s did not record %s yet (its next renewal carries it): %s",
                running.held.hold.reservation_id,
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
        """Ends running's hold as ended says; in doubt until a call says how it ended."""
        ending = IN_DOUBT
        if ended is not None and ended.usage is not None:
            # A failed or cancelled call bills what it ran, and teaches no estimate.
            failures = {"failed": Outcome.FAILED, "cancelled": Outcome.CANCELLED}
            priced = running.held.at(ended.usage)
            ending = Ending(usage=priced.usage, outcome=failures.get(ended.status))
        elif ended is not None and ended.billed_nothing:
            ending = Ending(used=0, outcome=Outcome.CANCELLED)
        if running.labelling is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await running.labelling
        await running.held.end(ending)


# What the exchange asks its transport to do; the transport sends back the answer (or
# throws in the exception) of each. Public: a transport for another SDK's loops
# (gemini_transport) drives the same exchange with the same steps.


@dataclass(frozen=True, slots=True)
class OnLoop:
    """Run a held call's step on the Earmark client's loop, and wait for it."""

    step: Settling


@dataclass(frozen=True, slots=True)
class Soon:
    """Run a held call's step on the Earmark client's loop without waiting for it: the
    answer goes to the caller now (the client's flush() and close() wait for the step)."""

    step: Settling


@dataclass(frozen=True, slots=True)
class Send:
    """Send request with the inner HTTP client; the answer is its response, streaming."""

    request: httpx2.Request


@dataclass(frozen=True, slots=True)
class Read:
    """Read response's whole body; the answer is its bytes."""

    response: httpx2.Response


@dataclass(frozen=True, slots=True)
class StreamOut:
    """Hand response to the SDK as a stream read for its usage on the way, end's step run
    once when it ends; the answer is the response the SDK gets."""

    response: httpx2.Response
    events: Events
    end: StreamEnd | Reading


Do = OnLoop | Soon | Send | Read | StreamOut
# One request's exchange, as the steps it asks for; it returns the SDK's response.
Exchange = Generator[Do, Any, httpx2.Response]


def _exchange(metering: Metering, request: httpx2.Request) -> Exchange:
    """The one exchange both transports drive: a request that bills is held, refused
    unsent, sent with the cap the hold covers, and its hold ended from the answer."""
    route = metering.route(request)
    if route is None:
        running = metering.reading(request)
        passed: httpx2.Response = yield Send(request)
        if running is None:
            return passed
        return (yield from _read_again(metering, passed, running))
    body = metering.body(request)
    call = metering.call(route, body)
    held = metering.held(call)
    yield OnLoop(held.open())
    held.admitted()
    try:
        sent, hidden = route.sent(body, call, held.cap())
        # A body sent as the caller wrote it goes out as its own bytes.
        response = yield Send(request if sent is body else rebuilt(request, sent))
    except BaseException as error:
        yield OnLoop(held.end(failed(error)))
        raise
    if response.status_code >= 400 or not is_stream(response):
        try:
            content = yield Read(response)
        except BaseException as error:
            yield OnLoop(held.end(failed(error)))
            raise
        if response.status_code >= 400:
            ending = answered_with(response.status_code)
        else:
            answer = json_answer(content)
            later = later_of(route)
            call_id = None if later is None else later.running(route, body, answer)
            if later is not None and call_id is not None:
                # Kept before the answer reaches the caller, who may read it at once.
                yield OnLoop(_step(partial(metering.keep, held, later, call_id)))
                return answered(response, content=content)
            ending = held.at(route.usage(answer, call))
        # The answer goes to the caller now; its settle follows off the caller's path.
        yield Soon(held.end(ending))
        return answered(response, content=content)
    events = Events(route.tally(call, hidden))
    end = StreamEnd(metering, held, events, later_of(route))
    streamed: httpx2.Response = yield StreamOut(response, events, end)
    return streamed


def _read_again(metering: Metering, response: httpx2.Response, running: Running) -> Exchange:
    """The answer to a request that read a running call again, its hold settled when the
    answer says the call ended; an error says nothing of the call."""
    if response.status_code >= 400:
        return response
    if is_stream(response):
        tally = running.later.resumed(running.call_id)
        events = Events(tally)
        streamed: httpx2.Response = yield StreamOut(
            response, events, Reading(metering, running, tally)
        )
        return streamed
    content = yield Read(response)
    ended = metering.ended_by(running, json_answer(content))
    if ended is not None:
        # Taken from the running calls before the caller goes on (a close() right after
        # must not end it in doubt); settled in the background.
        yield OnLoop(_step(partial(metering.end_soon, running, ended)))
    return answered(response, content=content)


async def _step(step: Now) -> None:
    step()


class StreamEnd:
    """How a stream's hold ends, once, whichever way the stream ends: at the usage the
    stream carried, or in doubt without it; kept open when the stream stopped before the
    end of a call that runs on after it (a background response)."""

    def __init__(
        self, metering: Metering, held: HeldCall, events: Events, later: Later | None
    ) -> None:
        self.metering, self.held, self.events, self.later = metering, held, events, later
        self.done = False

    def settling(self) -> Settling | Now | None:
        """What ends the hold now: a step to run in the background, or one to run on the
        loop at once (keeping the call); None when it ended before."""
        if self.done:
            return None
        self.done = True
        usage = self.events.tally.usage()
        call_id = None
        if usage is None and self.later is not None:
            call_id = self.later.left_running(self.events.tally)
        if self.later is not None and call_id is not None:
            return partial(self.metering.keep, self.held, self.later, call_id)
        return self.held.end(self.held.at(usage))


class Reading:
    """How a stream that reads a running call again ends its hold: once an event said how
    the call ended; a stream that stops before one leaves it running."""

    def __init__(self, metering: Metering, running: Running, tally: Ends) -> None:
        self.metering, self.running, self.tally = metering, running, tally
        self.done = False

    def settling(self) -> Settling | Now | None:
        ended = self.tally.ended()
        if self.done or ended is None:
            return None
        self.done = True
        return self.metering.end(self.running, ended)


class AsyncMeteredTransport(httpx2.AsyncBaseTransport):
    """The async SDKs' transport: drives each request's exchange, sending with inner."""

    def __init__(self, inner: httpx2.AsyncClient, metering: Metering) -> None:
        self.inner = inner
        self.metering = metering

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange = _exchange(self.metering, request)
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                do = exchange.send(answer) if error is None else exchange.throw(error)
            except StopIteration as done:
                response: httpx2.Response = done.value
                return response
            answer, error = None, None
            try:
                answer = await self._do(do)
            except BaseException as raised:
                error = raised

    async def _do(self, do: Do) -> Any:
        match do:
            case OnLoop(step):
                return await step
            case Soon(step):
                self.metering.earmark._in_background(step)
                return None
            case Send(request):
                return await self.inner.send(request, stream=True)
            case Read(response):
                return await response.aread()
            case StreamOut(response, events, end):
                background = self.metering.earmark._in_background
                stream = AsyncEventStream(response, events, end, background)
                return answered(response, stream=stream)


class AsyncEventStream(httpx2.AsyncByteStream):
    """A stream passed to the SDK as it arrives, read for its usage on the way, its hold
    ended once when it ends, fails or is closed: a settling coroutine through later, a
    settling step through now (on the Earmark client's loop, at once, by default; a
    driver whose caller runs on another loop passes both across)."""

    def __init__(
        self,
        response: httpx2.Response,
        events: Events,
        end: StreamEnd | Reading,
        later: Callable[[Settling], object],
        now: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.response, self.events, self.end = response, events, end
        self._later = later
        # The stream ends on the Earmark client's loop: the call is kept at once.
        self._now = now or (lambda step: step())

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
            self._settle()

    async def aclose(self) -> None:
        try:
            await self.response.aclose()
        finally:
            self._settle()

    def _settle(self) -> None:
        settling = self.end.settling()
        if isinstance(settling, Coroutine):
            self._later(settling)
        elif settling is not None:
            self._now(settling)


class MeteredTransport(httpx2.BaseTransport):
    """The sync SDKs' transport: the same exchange, its requests sent and read in the
    caller's thread, its held call's steps run on the Earmark client's own loop through
    run (waited for) and submit (not: a settle, which Client._submit_later starts a moment
    later)."""

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

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        exchange = _exchange(self.metering, request)
        answer: Any = None
        error: BaseException | None = None
        while True:
            try:
                do = exchange.send(answer) if error is None else exchange.throw(error)
            except StopIteration as done:
                response: httpx2.Response = done.value
                return response
            answer, error = None, None
            try:
                answer = self._do(do)
            except BaseException as raised:
                error = raised

    def _do(self, do: Do) -> Any:
        match do:
            case OnLoop(step):
                return self._run(step)
            case Soon(step):
                self._later(step)
                return None
            case Send(request):
                return self.inner.send(request, stream=True)
            case Read(response):
                return response.read()
            case StreamOut(response, events, end):
                return answered(response, stream=EventStream(response, events, end, self._later))

    def _later(self, settling: Settling) -> None:
        """Runs settling on the client's loop without the caller waiting."""
        self._submit(settling)


class EventStream(httpx2.SyncByteStream):
    """AsyncEventStream for the sync SDKs: the hold's end runs on the Earmark client's loop."""

    def __init__(
        self,
        response: httpx2.Response,
        events: Events,
        end: StreamEnd | Reading,
        later: Callable[[Settling], None],
    ) -> None:
        self.response, self.events, self.end, self._later = response, events, end, later

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
        if isinstance(settling, Coroutine):
            self._later(settling)
        elif settling is not None:
            self._later(_step(settling))


__all__ = [
    "AsyncEventStream",
    "AsyncMeteredTransport",
    "Do",
    "EventStream",
    "Exchange",
    "MeteredTransport",
    "Metering",
    "OnLoop",
    "Read",
    "Reading",
    "Send",
    "Soon",
    "StreamEnd",
    "StreamOut",
]
