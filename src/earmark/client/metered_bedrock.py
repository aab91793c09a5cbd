"""metered() of a boto3 bedrock-runtime client (issue 45): the same client, each billable
operation held, capped and settled through Earmark by hooks on the client's own events.

    runtime = metered(boto3.client("bedrock-runtime"), earmark_client, "task-142")
    answer = runtime.converse(modelId="us.anthropic.claude-...", messages=[...])

Why botocore's event hooks and not its HTTP layer: boto3 signs every request (SigV4) over
the serialized body, so a cap set at the HTTP layer would mean re-serializing and
re-signing the request; it retries inside its endpoint, so an HTTP layer sees each attempt
and not the call; and it parses AWS's binary event streams itself. Its hooks are its
public, per-client extension point (client.meta.events, the only object changed) and they
see what the metering needs, once per call: the API parameters before they are
serialized (the cap is set there, and signed with the rest), and the parsed answer or
EventStream after the last attempt. wire_bedrock reads what the hooks are given.

One call, through its hooks (earmark.client.held_call is the sequence driven; its async
steps run on the Earmark Client's loop, as every call of the sync Client does):
- before-parameter-build: a free operation passes; one Earmark cannot price, or a tool
  whose fee it cannot hold, is refused; the parameters are checked as botocore checks
  them (a mistake raises its ParamValidationError with nothing held); the call is held,
  its prompt charged in the same Reserve, refused before anything is sent when the budget
  cannot pay (RefusedError), and the cap the hold covers written into the parameters
  (Converse's inferenceConfig.maxTokens, the family's field of an InvokeModel body). What
  the hook raises reaches the caller, and nothing is sent.
- response-received (each attempt): an attempt answered 5xx, or lost after it may have
  reached AWS, leaves the call in doubt whatever the later attempts answer. botocore's
  retries all go on the call's one hold.
- after-call: an error status ends the hold (a 4xx at nothing, a 5xx in doubt); a JSON
  answer's usage settles it (InvokeModel's body read and put back), off the caller's
  path; a stream is handed back wrapped (wire_bedrock.MeteredStream) and settles from its
  final usage (ConverseStream's metadata event) as the caller reads it to its end; a
  stream that raises, is closed early or is dropped unread leaves the hold in doubt, and
  so does the Earmark client's close() with the stream still unfinished.
- after-call-error: a connection refused before any attempt was sent ends the hold at
  nothing; any other failure (a read timeout, a closed connection) in doubt.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from earmark.client import wire_bedrock
from earmark.client.aio import AsyncClient
from earmark.client.held_call import (
    IN_DOUBT,
    NOT_SENT,
    Ending,
    HeldCall,
    HeldCallInput,
    answered_with,
)
from earmark.client.meter import Meter, never_sent
from earmark.client.sync import Client
from earmark.client.wire_bedrock import Held, MeteredStream, answer_usage, held, stream_key
from earmark.core.prices import Usage

SDK = TypeVar("SDK")
SERVICE = "bedrock-runtime"
# Where a call's state rides between its hooks: botocore's per-call context dict.
CONTEXT_KEY = "earmark.bedrock"
# The attribute that marks a client metered (once: a second meter would hold twice).
MARK = "_earmark_metered"


def metered(sdk_client: SDK, earmark: Client | AsyncClient, budget_id: str, **meter: Any) -> SDK:
    """sdk_client (boto3's bedrock-runtime client), itself, its billable operations
    (Converse, ConverseStream, InvokeModel and InvokeModelWithResponseStream) metered on
    budget_id through hooks on its events; the operations Earmark cannot price refused
    before they are sent. meter takes Meter's other fields (provider, "aws" by default;
    job, also_budget_ids, account, labels, lease_seconds, output_tokens_max, degrade,
    key_label), not retry: boto3 retries as its Config says, every attempt on the call's
    one hold. boto3 is synchronous: the client is metered with Client."""
    meta = getattr(sdk_client, "meta", None)
    service = getattr(getattr(meta, "service_model", None), "service_name", None)
    if service != SERVICE or meta is None:
        raise TypeError(
            f"metered() takes boto3's bedrock-runtime client, not a {service or 'botocore'} "
            f"{type(sdk_client).__name__}"
        )
    if not isinstance(earmark, Client):
        raise TypeError(
            "boto3's bedrock-runtime client is synchronous: it is metered with a Client, "
            f"not {type(earmark).__name__}"
        )
    if "retry" in meter:
        raise TypeError(
            "boto3 retries as the client's Config(retries=...) says, every attempt on the "
            "call's one hold: metered() takes no retry for it"
        )
    if getattr(sdk_client, MARK, None) is not None:
        raise TypeError("this bedrock-runtime client is metered already")
    provider = meter.pop("provider", None) or wire_bedrock.PROVIDER
    hooks = _Hooks(earmark, Meter(budget_id, provider=provider, **meter), meta)
    hooks.register(meta.events)
    setattr(sdk_client, MARK, hooks)
    return sdk_client


class _End:
    """How one call's hold ends, once, whichever hook or collection ends it first; what
    its attempts did so far."""

    def __init__(self, hooks: _Hooks, call: HeldCall) -> None:
        self.hooks, self.call = hooks, call
        self.done = False
        # An attempt may have reached AWS (it answered, or was lost after sending).
        self.reached = False
        # An attempt answered 5xx, or was lost after sending: the call may have run.
        self.doubt = False
        # A stream was handed to the caller: its own end settles the hold.
        self.handed = False

    def __call__(self, ending: Ending, *, wait: bool = False) -> None:
        if self.done:
            return
        self.done = True
        if self.doubt:
            # An earlier attempt answered 5xx or was lost after it was sent: AWS may have
            # run it too, so a later attempt's answer does not say what the call billed.
            ending = IN_DOUBT
        step = self._end(ending)
        if wait:
            self.hooks.earmark._run(step)
        else:
            self.hooks.soon(step)

    async def _end(self, ending: Ending) -> None:
        self.hooks.earmark._async._kept.pop(self, None)
        await self.call.end(ending)

    def hand(self) -> None:
        """Its stream goes to the caller: kept with the Earmark client's holds of calls
        still running, so that its close() ends the hold in doubt if the stream has not
        ended by then."""
        self.handed = True
        # Waited for, not sent soon: a Client closed right after the call returns must find
        # the stream among its kept holds, or the hold would stay held until its lease.
        self.hooks.earmark._run(self._keep())

    async def _keep(self) -> None:
        if not self.done:
            self.hooks.earmark._async._kept[self] = self._closing

    def _closing(self) -> None:
        """The Earmark client closes with the stream unfinished (on its loop)."""
        if not self.done:
            self.done = True
            self.hooks.earmark._async._in_background(self._end(IN_DOUBT))

    def at(self, usage: Usage | None) -> None:
        """A stream's end: at its usage; in doubt without it."""
        self(self.call.at(usage))

    def lapse(self) -> None:
        """The call's state was dropped without an after-call (a step of botocore's between
        the parameters and the send raised; nothing left) or before its stream ended."""
        if not self.handed:
            self(IN_DOUBT if self.reached else NOT_SENT)

    def dropped(self, inner: Any) -> None:
        """Its stream was collected before it ended: its connection released, in doubt."""
        if self.done:
            return
        # A collected stream's close has no caller to tell of its failure.
        with contextlib.suppress(Exception):
            inner.close()
        self(IN_DOUBT)


class _Flight:
    """One metered call's state in botocore's context: its reading, and its end."""

    def __init__(self, found: Held, end: _End) -> None:
        self.found, self.end = found, end


class _Hooks:
    """A metered client's hooks: held before the parameters are built, ended after the
    call (see the module)."""

    def __init__(self, earmark: Client, meter: Meter, meta: Any) -> None:
        self.earmark, self.meter, self.meta = earmark, meter, meta

    def register(self, events: Any) -> None:
        name = f"earmark-{id(self)}"
        events.register_last(
            f"before-parameter-build.{SERVICE}", self.before, unique_id=f"{name}-before"
        )
        events.register(f"response-received.{SERVICE}", self.received, unique_id=f"{name}-rr")
        events.register(f"after-call.{SERVICE}", self.after, unique_id=f"{name}-after")
        events.register(f"after-call-error.{SERVICE}", self.failed, unique_id=f"{name}-error")

    def soon(self, step: Coroutine[Any, Any, Any]) -> None:
        """Runs step on the Earmark client's loop without the caller waiting (its flush()
        and close() wait for it); a closed client drops it (the hold lapses into doubt)."""
        try:
            self.earmark._submit_later(step)
        except RuntimeError:
            step.close()

    def before(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        operation = model.name
        if wire_bedrock.OPERATIONS.get(operation) == "metered":
            self._validate(params, model)
        found = held(operation, params, self.meter)
        if found is None:
            return
        call = HeldCall(
            self.earmark._async, HeldCallInput(self.meter.provider, found.call, self.meter)
        )
        self.earmark._run(call.open())
        call.admitted()
        try:
            sent = found.reader.sent(params, found.call, call.cap())
        except BaseException:
            self.earmark._run(call.end(NOT_SENT))
            raise
        params.clear()
        params.update(sent)
        end = _End(self, call)
        flight = _Flight(found, end)
        context[CONTEXT_KEY] = flight
        weakref.finalize(flight, end.lapse).atexit = False

    def _validate(self, params: Mapping[str, Any], model: Any) -> None:
        """botocore's own check of the parameters, before anything is held (it checks them
        again as it serializes them, after the hold)."""
        if getattr(self.meta.config, "parameter_validation", True):
            from botocore.validate import validate_parameters  # type: ignore[import-untyped]

            validate_parameters(params, model.input_shape)

    def received(
        self,
        context: dict[str, Any],
        exception: BaseException | None = None,
        response_dict: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> None:
        flight = context.get(CONTEXT_KEY)
        if not isinstance(flight, _Flight):
            return
        if response_dict is not None:
            flight.end.reached = True
            if int(response_dict.get("status_code", 0)) >= 500:
                flight.end.doubt = True
        elif exception is not None and not _unsent(exception):
            flight.end.reached = flight.end.doubt = True

    def after(
        self,
        http_response: Any,
        parsed: dict[str, Any],
        model: Any,
        context: dict[str, Any],
        **_: Any,
    ) -> None:
        flight = context.get(CONTEXT_KEY)
        if not isinstance(flight, _Flight):
            return
        end, found = flight.end, flight.found
        end.reached = True
        status = int(http_response.status_code)
        if status >= 300:
            end(IN_DOUBT if end.doubt else answered_with(status))
            return
        if found.call.stream:
            key = stream_key(found.operation)
            inner = parsed.get(key)
            if inner is None:
                end(IN_DOUBT)
                return
            stream = MeteredStream(inner, found.reader.tally(found.call), end.at)
            parsed[key] = stream
            end.hand()
            weakref.finalize(stream, end.dropped, inner).atexit = False
            return
        try:
            usage = answer_usage(found, parsed, http_response.headers)
        except BaseException:
            # The body could not be read whole: AWS ran the call.
            end(IN_DOUBT)
            raise
        end(end.call.at(usage))

    def failed(self, exception: BaseException, context: dict[str, Any], **_: Any) -> None:
        flight = context.get(CONTEXT_KEY)
        if not isinstance(flight, _Flight):
            return
        end = flight.end
        sent = end.reached or end.doubt or not _unsent(exception)
        end(IN_DOUBT if sent else NOT_SENT, wait=True)


def _unsent(error: BaseException) -> bool:
    """botocore failed before the attempt left: the connection was refused or timed out
    (its ConnectionError: EndpointConnectionError, ConnectTimeoutError,
    ProxyConnectionError)."""
    from botocore.exceptions import ConnectionError as NotConnected  # type: ignore[import-untyped]

    return isinstance(error, NotConnected) or never_sent(error)


__all__ = ["metered"]
