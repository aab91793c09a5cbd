"""Earmark as LiteLLM's budget gate: a CustomLogger for LiteLLM's proxy that holds every
billable request on an Earmark budget before it is sent and settles it at the provider's
own usage.

    litellm_settings:
      callbacks: earmark.integrations.litellm.gate

The sidecar is reached at EARMARK_TARGET (Admin at EARMARK_ADMIN_TARGET), with the worker
token in the file EARMARK_TOKEN_FILE when the sidecar asks for one.

How each request goes (docs/litellm.md says it for operators):
- async_pre_call_hook: the budgets come from the key's, team's or organization's metadata
  (earmark_budget_id, earmark_also_budget_ids) or the x-earmark-budget header; the request
  is read as the metered clients read it (earmark.client.wire_openai) and held in one
  Reserve with its prompt charged; a refusal answers 429 with Earmark's reason and what is
  left. The request goes on with its output cap set to what the hold covers (no cap asked:
  the model's ceiling), with the stream's usage asked for, and with LiteLLM's own retries
  off, since a retry is a second bill on one hold. The hold renews while the call runs.
- log_pre_api_call: the request is being sent; from here the provider may bill it.
- async_log_success_event: settled at the response's usage (a stream's final usage).
- async_log_failure_event: a 4xx settles at nothing; a timeout or 5xx stays in doubt with
  its prompt charge (`earmark reconcile` or an operator resolves it).
- The request's task ending with the hold still open: never sent (another hook rejected
  it, or the client went away first) releases it; sent with no outcome logged within
  limits.litellm_outcome_grace_seconds (a client gone mid-stream) leaves it in doubt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fastapi import HTTPException
from litellm.integrations.custom_logger import CustomLogger

from earmark import limits
from earmark.client.aio import AsyncClient
from earmark.client.errors import EarmarkClientError
from earmark.client.hold import Hold
from earmark.client.meter import Meter
from earmark.client.wire import Call, Route, cap_to_send, shape_of
from earmark.integrations.litellm_rules import (
    GRACE_ENV,
    IN_DOUBT,
    LEASE_ENV,
    RELEASED,
    Budgets,
    Ending,
    GateError,
    budgets_of,
    failed,
    refusal_error,
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


@dataclass(eq=False)
class Flight:
    """One request between its hold and the hold's end."""

    call_id: str
    hold: Hold
    call: Call
    route: Route
    provider: str
    dispatched: bool = False
    ended: bool = False
    watch: asyncio.Task[None] | None = field(default=None, repr=False)


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
        self.lease_seconds: float | None = None
        lease = os.environ.get(LEASE_ENV)
        if lease:
            self.lease_seconds = seconds_of(LEASE_ENV, lease, limits.lease_seconds_default)
        self._flights: dict[str, Flight] = {}
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
            raise HTTPException(
                status_code=error.status,
                detail={"error": error.message},
                headers=error.headers or None,
            ) from None

    async def _hold(self, key: Any, data: dict[str, Any], call_type: str) -> dict[str, Any]:
        route = route_of(call_type)
        if route is None:
            return data
        call_id = str(data.get("litellm_call_id") or "")
        if not call_id or len(call_id) > limits.label_value_length_max:
            raise GateError(400, "the request has no usable LiteLLM call id")
        if call_id in self._flights:
            raise GateError(409, f"LiteLLM call id {call_id!r} is already in flight")
        budgets = budgets_of(
            getattr(key, "metadata", None),
            getattr(key, "team_metadata", None),
            getattr(key, "organization_metadata", None),
            _headers(data),
        )
        provider, model = priced_as(str(data.get("model", "")))
        meter = Meter(
            budgets.budget_id,
            provider=provider,
            also_budget_ids=budgets.also_budget_ids,
            labels={CALL_LABEL: call_id},
        )
        call = route.call({**data, "model": model}, meter)
        hold = self._reserve(meter, budgets, call)
        try:
            await hold.__aenter__()
        except EarmarkClientError as error:
            raise reserve_error(error) from error
        if hold.refusal is not None:
            raise refusal_error(hold.refusal)
        flight = Flight(call_id, hold, call, route, provider)
        self._flights[call_id] = flight
        try:
            reservation = hold.reservation
            assert reservation is not None
            cap = cap_to_send(call, reservation.max_output_tokens, reservation.degraded)
            sent, _ = route.sent({**data, "model": model}, call, cap)
            for name, value in sent.items():
                if name != "model":
                    data[name] = value
            # A retry inside LiteLLM would be a second bill on this one hold: the caller's
            # SDK retries instead, each attempt on a hold of its own.
            data["num_retries"] = 0
            data["max_retries"] = 0
            task = asyncio.current_task()
            if task is not None:
                task.add_done_callback(lambda _: self._request_done(flight))
        except BaseException:
            self._end(flight, RELEASED)
            raise
        return data

    def _reserve(self, meter: Meter, budgets: Budgets, call: Call) -> Hold:
        shape, prompt = shape_of(meter.provider, call, meter)
        return self.client().hold(
            budgets.budget_id, 0, shape=shape, also_budget_ids=budgets.also_budget_ids,
            labels=meter.hold_labels(), charge=prompt, raise_on_refusal=False,
            lease_seconds=self.lease_seconds,
        )  # fmt: skip

    # While it is sent and after.

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: dict[str, Any]) -> None:
        flight = self._flights.get(str(kwargs.get("litellm_call_id") or ""))
        if flight is not None:
            flight.dispatched = True

    async def async_log_success_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        flight = self._flights.get(str(kwargs.get("litellm_call_id") or ""))
        if flight is None:
            return
        answer = _dumped(response_obj)
        usage = flight.route.usage(answer, flight.call) if answer is not None else None
        # A stream whose client went away ends without the provider's usage chunk; the
        # usage LiteLLM logs for it is its own count of the chunks it read, not the bill.
        if usage is None or client_disconnected(kwargs):
            self._end(flight, IN_DOUBT)
            return
        provider = str(kwargs.get("custom_llm_provider") or flight.provider)
        model = str(kwargs.get("model") or flight.call.model)
        flight.hold.usage = replace(usage, provider=provider, model=model)
        self._end(flight, None)

    async def async_log_failure_event(
        self, kwargs: dict[str, Any], response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        flight = self._flights.get(str(kwargs.get("litellm_call_id") or ""))
        if flight is None:
            return
        error = kwargs.get("exception")
        self._end(flight, failed(error if isinstance(error, BaseException) else None))

    async def async_post_call_failure_hook(
        self,
        request_data: dict[str, Any],
        original_exception: Exception,
        user_api_key_dict: Any,
        traceback_str: str | None = None,
    ) -> None:
        """Another hook rejected the request, or sending it failed: a hold that was never
        sent is released now; one that was waits for its failure event."""
        flight = self._flights.get(str(request_data.get("litellm_call_id") or ""))
        if flight is not None and not flight.dispatched:
            self._end(flight, RELEASED)

    def _request_done(self, flight: Flight) -> None:
        if flight.ended:
            return
        if not flight.dispatched:
            self._end(flight, RELEASED)
            return
        flight.watch = asyncio.ensure_future(self._await_outcome(flight))

    async def _await_outcome(self, flight: Flight) -> None:
        """The outcome events are logged after the request's task ends; a sent request
        whose outcome never comes (its client went away mid-stream) stays in doubt."""
        await asyncio.sleep(self.outcome_grace_seconds)
        if not flight.ended:
            log.warning(
                "earmark: LiteLLM logged no outcome for call %s, which was sent; its hold "
                "stays in doubt",
                flight.call_id,
            )
            self._end(flight, IN_DOUBT)

    def _end(self, flight: Flight, ending: Ending | None) -> None:
        """Ends the hold once, off the caller's path: at its usage (ending None), or as
        ending says."""
        if flight.ended:
            return
        flight.ended = True
        self._flights.pop(flight.call_id, None)
        if flight.watch is not None and flight.watch is not asyncio.current_task():
            flight.watch.cancel()
        hold = flight.hold
        if ending is not None:
            hold.outcome, hold.used = ending.outcome, ending.used
        task = asyncio.ensure_future(self._settle(flight))
        self._endings.add(task)
        task.add_done_callback(self._endings.discard)

    async def _settle(self, flight: Flight) -> None:
        try:
            await flight.hold.__aexit__(None, None, None)
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


gate = EarmarkGate()
