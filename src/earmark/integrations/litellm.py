"""Earmark as LiteLLM's budget gate: a CustomLogger for LiteLLM's proxy that holds every
billable request on an Earmark budget before it is sent and settles it at the provider's
own usage.

    litellm_settings:
      callbacks: earmark.integrations.litellm.gate

The sidecar is reached at EARMARK_TARGET (Admin at EARMARK_ADMIN_TARGET), with the worker
token in the file EARMARK_TOKEN_FILE when the sidecar asks for one.

How each request goes (docs/litellm.md says it for operators):
- async_pre_call_hook: the budgets come from the key's, team's or organization's metadata
  (earmark_budget_id, earmark_also_budget_ids; the x-earmark-budget header chooses only
  among earmark_allowed_budget_ids, or for the master key; a team's or organization's
  earmark_end_user_budget holds a request with an end user on that end user's budget,
  nested by the others); the request is read as the metered clients read it
  (earmark.client.wire_openai, or a pass-through's route) and held in one Reserve with its
  prompt charged; a refusal is LiteLLM's own budget error, or a 429
  with Retry-After where waiting mends it. The request goes on with its output cap set to
  what the hold covers (no cap asked: the model's ceiling), with the stream's usage asked
  for, and with LiteLLM's own retries off, since a retry is a second bill on one hold. The
  hold renews while the call runs.
- Each held request carries a random flight key in its LiteLLM metadata, and every event
  ends only the flight whose key it carries: a caller's call id, which it may choose and
  reuse, steers nothing.
- log_pre_api_call: the request is being sent; from here the provider may bill it (a
  pass-through counts as sent once its hook returns).
- async_log_success_event: settled at the response's usage (a stream's final usage, a
  pass-through's logged response body).
- async_log_failure_event: a 4xx settles at nothing; a timeout or 5xx stays in doubt with
  its prompt charge (`earmark reconcile` or an operator resolves it).
- The request's task ending with the hold still open: never sent (another hook rejected
  it, or the client went away first) releases it; sent with no outcome logged within
  limits.litellm_outcome_grace_seconds (a client gone mid-stream) leaves it in doubt.
- Importing this module inside the proxy puts litellm_routes' guard in front of the proxy's
  app: websockets, and the routes that call models outside any hook, are refused 403.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import sys
from collections import OrderedDict
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import HTTPException
from litellm.integrations.custom_logger import CustomLogger

from earmark import limits
from earmark.client import held_call
from earmark.client.aio import AsyncClient
from earmark.client.errors import EarmarkClientError
from earmark.client.held_call import HeldCall, HeldCallInput
from earmark.client.meter import Meter
from earmark.client.wire import Call, Route, ToolNotMeteredError
from earmark.core.model import Outcome
from earmark.core.prices import Usage
from earmark.integrations import litellm_routes
from earmark.integrations.litellm_rules import (
    BUDGET_EXCEEDED,
    GRACE_ENV,
    IN_DOUBT,
    LEASE_ENV,
    PASS_THROUGH_CALL_TYPES,
    RELEASED,
    ROUTES,
    TRUST_KEYS_ENV,
    Ending,
    GateError,
    budgets_of,
    failed,
    pass_through_of,
    refusal_error,
    refuse_unmetered,
    reserve_error,
    route_of,
    seconds_of,
)

# The standard library's logging, as the worker SDK's: the proxy's environment has the
# client install, not the server's structlog.
log = logging.getLogger("earmark.litellm")

TOKEN_FILE_ENV = "EARMARK_TOKEN_FILE"
# The hold's label that ties it to LiteLLM's call id (its logs and spend logs).
CALL_LABEL = "litellm.call_id"
# The request metadata field that carries a held request's flight key: a random token the
# gate makes, which LiteLLM logs with every event of that request. A caller may choose the
# call id (x-litellm-call-id) and reuse another's; it cannot guess this, and a value the
# caller sends under this name is overwritten or removed before LiteLLM reads it.
FLIGHT_FIELD = "earmark_flight"
# Where LiteLLM keeps a request's metadata: "litellm_metadata" on the routes whose provider
# API has a metadata parameter of its own (which "metadata" then is, and goes upstream),
# else "metadata".
METADATA_FIELDS = ("litellm_metadata", "metadata")
# Metadata fields LiteLLM reads as its own report on a request, which a caller's metadata
# must not carry (a pass-through merges the caller's body metadata into LiteLLM's).
REPORT_FIELDS = (FLIGHT_FIELD, "client_disconnected", "error_information")


@dataclass(eq=False)
class Flight:
    """One request between its hold and the hold's end."""

    # The token the gate put in the request's metadata: what its events are matched by.
    key: str = field(repr=False)
    call_id: str
    # The request's held call (earmark.client.held_call), its hold opened; LiteLLM sends
    # the request, and the gate's events end the hold.
    held: HeldCall
    route: Route
    provider: str
    # The request's LiteLLM Logging object: a second run of the hooks for the same request
    # (a fallback) is told from another request by it.
    request: Any = field(default=None, repr=False)
    pass_through: bool = False
    dispatched: bool = False
    ended: bool = False
    watch: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def call(self) -> Call:
        return self.held.call


class EarmarkGate(CustomLogger):
    """LiteLLM's proxy callback that makes Earmark its budget gate."""

    def __init__(
        self, client: AsyncClient | None = None, outcome_grace_seconds: float | None = None
    ) -> None:
        super().__init__()
        self._client = client
        given = (
            os.environ.get(GRACE_ENV) if outcome_grace_seconds is None else outcome_grace_seconds
        )
        self.outcome_grace_seconds = seconds_of(
            GRACE_ENV, given, limits.litellm_outcome_grace_seconds
        )
        self.trust_keys = os.environ.get(TRUST_KEYS_ENV, "") == "1"
        self.lease_seconds: float | None = None
        lease = os.environ.get(LEASE_ENV)
        if lease:
            self.lease_seconds = seconds_of(LEASE_ENV, lease, limits.lease_seconds_default)
        self._flights: dict[str, Flight] = {}
        # Holds left in doubt because their outcome had not come within the grace (a busy
        # logging queue, or a stream LiteLLM serves from another task): an outcome that
        # comes later still settles them, since a later Settle resolves a doubt.
        self._doubted: OrderedDict[str, Flight] = OrderedDict()
        self._endings: set[asyncio.Task[None]] = set()

    def client(self) -> AsyncClient:
        """The sidecar's client, opened on first use (in the proxy's event loop)."""
        if self._client is None:
            token_file = os.environ.get(TOKEN_FILE_ENV)
            token = Path(token_file).read_text().strip() if token_file else None
            self._client = AsyncClient(token=token)
        return self._client

    @property
    def open_holds(self) -> int:
        return len(self._flights)

    async def flush(self) -> None:
        """Waits for every hold's end under way (the settles)."""
        while self._endings:
            await asyncio.gather(*list(self._endings), return_exceptions=True)

    # Before the request is sent.

    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        try:
            return await self._hold(user_api_key_dict, data, call_type)
        except GateError as error:
            raise answer_of(error) from None

    async def _hold(self, key: Any, data: dict[str, Any], call_type: str) -> dict[str, Any]:
        request = data.get("litellm_logging_obj")
        earlier = self._flights.get(key_of(data))
        if earlier is not None and request is not None and earlier.request is request:
            if earlier.dispatched:
                raise GateError(409, "this request was sent already; not sent again")
            # The proxy runs the hooks again for the same request (a fallback to another
            # model group): its first hold, never sent, makes way for the new one.
            self._end(earlier, RELEASED)
        # Whatever the caller put under the gate's field, or under LiteLLM's own reports on
        # a request, is not theirs: removed before the request is classified, so that no
        # event of it can name another request's flight or claim its client went away.
        for name in METADATA_FIELDS:
            metadata = data.get(name)
            if isinstance(metadata, dict):
                for field_name in REPORT_FIELDS:
                    metadata.pop(field_name, None)
        pass_through = call_type in PASS_THROUGH_CALL_TYPES
        if pass_through:
            found = pass_through_of(getattr(key, "request_route", None), data)
            if found is None:
                return data
            route, provider, model = found.route, found.provider, str(data["model"])
            call_id = str(getattr(request, "litellm_call_id", "") or "")
        else:
            held = route_of(call_type)
            if held is None:
                return data
            refuse_unmetered(held, data)
            route, (provider, model) = held, priced_as(str(data.get("model", "")))
            call_id = str(data.get("litellm_call_id") or "")
        if not call_id or len(call_id) > limits.label_value_length_max:
            raise GateError(400, "the request has no usable LiteLLM call id")
        if data.get("no-log"):
            # LiteLLM runs no logging callback for a no-log request, so the gate would
            # never learn its usage.
            raise GateError(400, "no-log: a request through Earmark's gate is logged")
        budgets = budgets_of(
            getattr(key, "metadata", None),
            getattr(key, "team_metadata", None),
            getattr(key, "organization_metadata", None),
            # A pass-through's data is the caller's body: no header is read from it.
            {} if pass_through else _headers(data),
            master=is_master(key),
            trust_keys=self.trust_keys,
            end_user=end_user_of(key),
        )
        meter = Meter(
            budgets.budget_id,
            provider=provider,
            also_budget_ids=budgets.also_budget_ids,
            labels={CALL_LABEL: call_id},
            lease_seconds=self.lease_seconds,
        )
        try:
            call = route.call({**data, "model": model}, meter)
        except ToolNotMeteredError as refused:
            # A built-in tool whose fee Earmark cannot hold: not sent, as an unpriced call.
            raise GateError(403, str(refused)) from None
        holding = HeldCall(self.client(), HeldCallInput(provider, call, meter))
        try:
            refusal = await holding.open()
        except EarmarkClientError as error:
            answer = reserve_error(error)
            if answer.status >= 500:
                log.warning("earmark: the hold for call %s failed: %s", call_id, error)
            raise answer from None
        if refusal is not None:
            raise refusal_error(refusal, datetime.now(UTC), budget_status=budget_exceeded_status())
        flight = Flight(
            secrets.token_urlsafe(limits.litellm_flight_key_bytes), call_id, holding, route,
            provider, request, pass_through,
        )  # fmt: skip
        self._flights[flight.key] = flight
        try:
            self._mark(data, flight.key)
            self._to_send(data, flight, model)
            if pass_through:
                # LiteLLM runs a pass-through's hooks in a task of their own and logs no
                # pre-API event for it: from here the request may reach the provider, and
                # its outcome is waited for as long as the pass-through may run.
                flight.dispatched = True
                flight.watch = asyncio.ensure_future(
                    self._await_outcome(flight, limits.litellm_pass_through_outcome_seconds)
                )
            else:
                task = asyncio.current_task()
                if task is not None:
                    task.add_done_callback(lambda _: self._request_done(flight))
        except BaseException:
            self._end(flight, RELEASED)
            raise
        return data

    @staticmethod
    def _mark(data: dict[str, Any], key: str) -> None:
        """Puts the flight's key in the request's metadata, where LiteLLM logs it with each
        of the request's events (a pass-through's metadata is taken out of the body it
        sends upstream, and logged the same way)."""
        name = next((n for n in METADATA_FIELDS if isinstance(data.get(n), dict)), "metadata")
        data.setdefault(name, {})[FLIGHT_FIELD] = key

    def _to_send(self, data: dict[str, Any], flight: Flight, model: str) -> None:
        """The request as it goes out: its output cap set to what the hold covers and, on
        the proxy's own routes, the stream's usage asked for and LiteLLM's retries off."""
        cap = flight.held.cap()
        sent, hidden = flight.route.sent({**data, "model": model}, flight.call, cap)
        for name, value in sent.items():
            if name != "model":
                data[name] = value
        if flight.pass_through:
            # The body goes upstream as it is: no LiteLLM parameter is added to it.
            return
        if hidden:
            # The usage chunk the gate asked for, which the caller did not, is not passed
            # on (LiteLLM drops it when this is set).
            data["_litellm_strip_stream_usage"] = True
        # A retry or a fallback inside LiteLLM would be a second bill on this one hold: the
        # caller's SDK retries instead, each attempt on a hold of its own.
        data["num_retries"] = 0
        data["max_retries"] = 0
        data["disable_fallbacks"] = True

    # While it is sent and after.

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: dict[str, Any]) -> None:
        if kwargs.get("litellm_no_upstream_llm_call"):
            # The proxy logs its own failures through the same path: nothing was sent.
            return
        flight = self._flight_of(kwargs)
        if flight is not None:
            flight.dispatched = True

    def _flight_of(self, kwargs: Mapping[str, Any]) -> Flight | None:
        """The open hold an event is about: the flight whose key the event's request
        carries, and of the same kind of call."""
        flight = self._flights.get(key_of(kwargs))
        if flight is None or not same_kind(kwargs.get("call_type"), flight):
            return None
        return flight

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        flight = self._flight_of(kwargs)
        late = None
        if flight is None:
            # A hold left in doubt is settled only by its own request's outcome.
            doubted = self._doubted.get(key_of(kwargs))
            if doubted is not None and same_kind(kwargs.get("call_type"), doubted):
                late = self._doubted.pop(doubted.key)
        which = flight or late
        if which is None:
            return
        if kwargs.get("cache_hit"):
            # Answered from LiteLLM's cache: the provider was not called.
            if flight is not None:
                self._end(flight, Ending(Outcome.SUCCEEDED, 0))
            return
        if which.pass_through:
            usage = pass_through_usage(kwargs, which.route, which.call)
        else:
            usage = usage_of(response_obj, which.route, which.call)
        # A stream whose client went away ends without the provider's usage chunk; the
        # usage LiteLLM logs for it is its own count of the chunks it read, not the bill. A
        # pass-through streams nothing, and its metadata is the caller's.
        gone = not which.pass_through and client_disconnected(kwargs)
        if usage is None or gone:
            if flight is not None:
                self._end(flight, IN_DOUBT)
            return
        provider, model = settled_as(kwargs, which)
        usage = replace(usage, provider=provider, model=model)
        if flight is not None:
            self._end(flight, held_call.Ending(usage=usage))
        else:
            self._spawn(self._settle_late(which, usage))

    async def async_log_failure_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        error = kwargs.get("exception")
        if getattr(error, "earmark_gate", False):
            return
        flight = self._flight_of(kwargs)
        if flight is not None:
            problem = error if isinstance(error, BaseException) else None
            self._end(flight, failed(problem, flight.dispatched))

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        """Another hook rejected the request, or sending it failed: a hold that was never
        sent is released now; one that was waits for its failure event. A pass-through
        logs no failure event: an upstream answer it read ends its hold here."""
        if getattr(original_exception, "earmark_gate", False):
            return
        flight = self._flight_of(request_data)
        if flight is None:
            return
        if flight.pass_through and flight.dispatched:
            self._end(flight, pass_through_failed(request_data, original_exception))
        elif not flight.dispatched:
            self._end(flight, RELEASED)

    def _request_done(self, flight: Flight) -> None:
        if flight.ended:
            return
        if not flight.dispatched:
            self._end(flight, RELEASED)
            return
        flight.watch = asyncio.ensure_future(
            self._await_outcome(flight, self.outcome_grace_seconds)
        )

    async def _await_outcome(self, flight: Flight, seconds: float) -> None:
        """The outcome events are logged after the request's task ends; a sent request
        whose outcome never comes within seconds (its client went away mid-stream) stays
        in doubt."""
        await asyncio.sleep(seconds)
        if not flight.ended:
            log.warning(
                "earmark: LiteLLM logged no outcome for call %s, which was sent, within "
                "%gs; its hold is in doubt until its outcome comes or is resolved",
                flight.call_id,
                seconds,
            )
            self._end(flight, IN_DOUBT)
            self._doubted[flight.key] = flight
            while len(self._doubted) > limits.litellm_doubted_max:
                self._doubted.popitem(last=False)

    def _end(self, flight: Flight, ending: Ending | held_call.Ending) -> None:
        """Ends the hold once, off the caller's path, as ending says (the gate's rules'
        Ending: at used with outcome; the held call's: at the answer's usage)."""
        if flight.ended:
            return
        flight.ended = True
        # The request's LiteLLM objects (its messages, its answer) are not kept past its end.
        flight.request = None
        # Only this flight's own entry: an end never takes another request's.
        if self._flights.get(flight.key) is flight:
            del self._flights[flight.key]
        if flight.watch is not None and flight.watch is not asyncio.current_task():
            flight.watch.cancel()
        if isinstance(ending, Ending):
            ending = held_call.Ending(used=ending.used, outcome=ending.outcome)
        self._spawn(self._settle(flight, ending))

    def _spawn(self, settling: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(settling)
        self._endings.add(task)
        task.add_done_callback(self._endings.discard)

    async def _settle_late(self, flight: Flight, usage: Usage) -> None:
        """Settles a hold left in doubt at the usage that came after all."""
        try:
            await self.client().settle(flight.held.hold.reservation_id, 0, usage=usage)
        except Exception as error:
            log.warning("earmark: late settle of call %s failed: %s", flight.call_id, error)

    async def _settle(self, flight: Flight, ending: held_call.Ending) -> None:
        try:
            await flight.held.end(ending)
        except Exception as error:
            # The sidecar did not take the settle: the lease runs out and the sweeper
            # returns the hold, or its journal sends it again.
            log.warning("earmark: settle of call %s failed: %s", flight.call_id, error)


def client_disconnected(kwargs: dict[str, Any]) -> bool:
    """LiteLLM marks a stream whose client went away in the call's metadata."""
    params = kwargs.get("litellm_params") or {}
    for metadata in (params.get("metadata"), kwargs.get("metadata")):
        if isinstance(metadata, dict) and metadata.get("client_disconnected"):
            return True
    return False


def _headers(data: dict[str, Any]) -> dict[str, str]:
    request = data.get("proxy_server_request") or {}
    headers = request.get("headers") if isinstance(request, dict) else None
    return dict(headers) if isinstance(headers, dict) else {}


def key_of(event: Mapping[str, Any]) -> str:
    """The flight key an event's request carries: in its LiteLLM metadata (an event's
    litellm_params, or a request's own data), "" with none."""
    params = event.get("litellm_params")
    places = [params.get("metadata") if isinstance(params, dict) else None]
    places += [event.get(name) for name in METADATA_FIELDS]
    for metadata in places:
        if isinstance(metadata, dict):
            key = metadata.get(FLIGHT_FIELD)
            if isinstance(key, str) and key:
                return key
    return ""


def same_kind(call_type: Any, flight: Flight) -> bool:
    """An event of call_type is about flight's kind of call (no call type: assumed)."""
    if not isinstance(call_type, str) or not call_type:
        return True
    if flight.pass_through:
        return call_type in PASS_THROUGH_CALL_TYPES
    found = ROUTES.get(call_type)
    return found is not None and type(found) is type(flight.route)


def pass_through_usage(event: Mapping[str, Any], route: Route, call: Call) -> Usage | None:
    """The usage of a pass-through's answer: the provider's JSON body, as LiteLLM logs it
    in the event's passthrough_logging_payload."""
    payload = event.get("passthrough_logging_payload")
    answer = payload.get("response_body") if isinstance(payload, dict) else None
    return route.usage(answer, call) if isinstance(answer, dict) else None


def pass_through_failed(request_data: Mapping[str, Any], error: BaseException) -> Ending:
    """How a sent pass-through's hold ends when its answer was an error: the provider's own
    4xx (its answer read, other than a timeout) billed nothing; anything else may have run."""
    status = getattr(error, "status_code", None)
    answered = request_data.get("response_body") is not None
    if answered and isinstance(status, int) and 400 <= status < 500 and status != 408:
        return Ending(Outcome.FAILED, 0)
    return IN_DOUBT


def end_user_of(key: Any) -> str:
    """The request's end user as LiteLLM's auth resolved it (the body's `user`, or a
    customer header): "" with none."""
    end_user = getattr(key, "end_user_id", None)
    return end_user if isinstance(end_user, str) else ""


def is_master(key: Any) -> bool:
    """The request came with the proxy's master key (LiteLLM names it by an alias, with
    the proxy admin's role)."""
    from litellm.constants import LITELLM_PROXY_MASTER_KEY_ALIAS
    from litellm.proxy._types import LitellmUserRoles

    return bool(
        getattr(key, "api_key", None) == LITELLM_PROXY_MASTER_KEY_ALIAS
        and getattr(key, "user_role", None) == LitellmUserRoles.PROXY_ADMIN
    )


def budget_exceeded_status() -> int:
    """The status LiteLLM answers its own budget errors with (settable in LiteLLM)."""
    import litellm

    status = getattr(litellm, "budget_exceeded_status_code", None)
    return status if isinstance(status, int) and 400 <= status < 500 else 422


def answer_of(error: GateError) -> Exception:
    """A GateError as the proxy answers it: a budget refusal as LiteLLM's own budget error
    (its status and error type), anything else an HTTPException of its status. Either is
    marked, so that the failure events of a request the gate did not send are ignored."""
    answer: Exception
    if error.kind == BUDGET_EXCEEDED:
        from litellm.proxy._types import ProxyException

        answer = ProxyException(
            message=error.message, type=BUDGET_EXCEEDED, param=None, code=error.status,
            headers=dict(error.headers),
        )  # fmt: skip
    else:
        answer = HTTPException(
            status_code=error.status,
            detail={"error": error.message},
            headers=error.headers or None,
        )
    # Set by name: neither exception class declares the mark.
    setattr(answer, "earmark_gate", True)  # noqa: B010
    return answer


def settled_as(kwargs: dict[str, Any], flight: Flight) -> tuple[str, str]:
    """The provider and model the call was sent to, by the names the price book knows:
    the called deployment's earmark_provider and earmark_model when set, else LiteLLM's.
    A pass-through was sent as the gate held it: its prefix's provider, its body's model."""
    if flight.pass_through:
        return flight.provider, flight.call.model
    params = kwargs.get("litellm_params") or {}
    info = (params.get("model_info") if isinstance(params, dict) else None) or {}
    provider = info.get("earmark_provider") or kwargs.get("custom_llm_provider") or flight.provider
    model = info.get("earmark_model") or kwargs.get("model") or flight.call.model
    return str(provider), str(model)


def usage_of(response: Any, route: Route, call: Call) -> Usage | None:
    """The usage a LiteLLM response reports, read by the route it was held by. LiteLLM
    logs a Responses answer with a chat-style usage object (prompt_tokens,
    completion_tokens), so both namings are offered; a usage that counts no tokens of
    either kind while it counts some in all is no usage to settle at."""
    answer = _dumped(response)
    if answer is None:
        return None
    usage = (
        response.get("usage") if isinstance(response, dict) else getattr(response, "usage", None)
    )
    counted = _dumped(usage) if usage is not None else None
    if counted is None:
        return route.usage(answer, call)
    both = both_namings(counted)
    parts = [both.get(n) for n in ("input_tokens", "output_tokens")]
    total = both.get("total_tokens")
    if (
        not any(isinstance(p, int) and p > 0 for p in parts)
        and isinstance(total, int)
        and total > 0
    ):
        return None
    return route.usage({**answer, "usage": both}, call)


def both_namings(usage: dict[str, Any]) -> dict[str, Any]:
    """A usage object under chat's names and the Responses API's both."""
    pairs = (
        ("prompt_tokens", "input_tokens"),
        ("completion_tokens", "output_tokens"),
        ("prompt_tokens_details", "input_tokens_details"),
        ("completion_tokens_details", "output_tokens_details"),
    )
    both = dict(usage)
    for chat, responses in pairs:
        if both.get(chat) is None and both.get(responses) is not None:
            both[chat] = both[responses]
        elif both.get(responses) is None and both.get(chat) is not None:
            both[responses] = both[chat]
    return both


def _dumped(response: Any) -> dict[str, Any] | None:
    """A LiteLLM response (ModelResponse, EmbeddingResponse, ResponsesAPIResponse) as the
    OpenAI JSON it stands for."""
    if isinstance(response, dict):
        return response
    dump = getattr(response, "model_dump", None)
    if dump is None:
        return None
    with contextlib.suppress(Exception):
        dumped = dump()
        if isinstance(dumped, dict):
            return dumped
    return None


def priced_as(model_group: str) -> tuple[str, str]:
    """The provider and model the price book knows a model group's deployments by: the
    first deployment's model_info earmark_provider and earmark_model when set, else its
    litellm_params model as LiteLLM resolves it ("openai/gpt-4o": openai, gpt-4o)."""
    import litellm
    from litellm.proxy import proxy_server

    router = getattr(proxy_server, "llm_router", None)
    deployments = router.get_model_list(model_name=model_group) if router is not None else None
    deployment = (deployments or [{}])[0] or {}
    info = deployment.get("model_info") or {}
    params = deployment.get("litellm_params") or {}
    target = str(params.get("model") or model_group)
    try:
        model, provider, _, _ = litellm.get_llm_provider(model=target)
    except Exception:
        provider, _, model = target.rpartition("/")
    return str(info.get("earmark_provider") or provider or "openai"), str(
        info.get("earmark_model") or model
    )


def guard_proxy() -> None:
    """In LiteLLM's proxy, which imports this module from its config after its own server
    module, the guard goes in front of the proxy's app: websockets and the routes that call
    models outside any hook are refused (earmark.integrations.litellm_routes)."""
    server = sys.modules.get("litellm.proxy.proxy_server")
    app = getattr(server, "app", None)
    if app is not None:
        from litellm.proxy._types import LiteLLMRoutes

        litellm_routes.guard(app, LiteLLMRoutes.mapped_pass_through_routes.value)


gate = EarmarkGate()
guard_proxy()
