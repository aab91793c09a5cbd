"""Metered model calls: metered() gives back the provider SDK's own client (an
openai.OpenAI stays an openai.OpenAI), whose every billable HTTP request is held, capped
and settled through Earmark (`pip install 'earmark[openai]'` or `'earmark[anthropic]'`).

    llm = metered(AsyncOpenAI(), earmark_client, "task-142")   # or OpenAI, Anthropic...
    reply = await llm.responses.create(model="gpt-5", input="...")
    assert isinstance(llm, AsyncOpenAI)

The metering is at the HTTP client the SDK takes (earmark.client.wire says why and how):
every surface of the SDK is covered, and so is any framework the client is handed. Each
billable request:
- is held by shape, its prompt (estimated conservatively from the request) charged in the
  same Reserve, and refused before it is sent when the budget cannot pay for it
  (RefusedError; EndpointNotMeteredError for an endpoint that bills and that Earmark
  cannot price);
- is sent with the cap the budget can pay: the caller's own maximum (the hold covers it),
  or without one the model's ceiling (Price.max_output_tokens, or the meter's
  output_tokens_max); never an estimate, so no answer is cut short by Earmark. With
  degrade=True a call the budget cannot cover is sent with the largest maximum it covers;
- is renewed while it runs and settled from the provider's own usage (the JSON answer's,
  or a stream's final usage event, asked for when the caller did not and then hidden from
  the caller); a timeout, a dropped connection, a 5xx or a stream that ends without its
  usage leave the hold in doubt for ResolveHold; a 4xx or a connection refused before
  sending settles at nothing.
The SDK's own retries (its max_retries) each go on a hold of their own.
"""

from __future__ import annotations

from typing import Any, TypeVar

import httpx2

from earmark.client.aio import AsyncClient
from earmark.client.meter import HoldCappedError, Meter, StreamCappedError
from earmark.client.sync import Client
from earmark.client.wire import EndpointNotMeteredError, Provider
from earmark.client.wire_transport import AsyncMeteredTransport, MeteredTransport, Metering

__all__ = [
    "EndpointNotMeteredError",
    "HoldCappedError",
    "Meter",
    "StreamCappedError",
    "metered",
    "prompt_tokens",
]

SDK = TypeVar("SDK")


def prompt_tokens(request: dict[str, Any]) -> int:
    """The prompt tokens a chat completion request is held and charged for: a
    conservative count from its messages and tools."""
    from earmark.client import wire_openai

    return wire_openai.Chat().call(request, Meter("")).prompt_tokens


def _provider(sdk_client: object, name: str | None) -> Provider:
    """The provider whose routes meter sdk_client: Anthropic's for its SDK's clients,
    OpenAI's otherwise (an OpenAI-compatible API is priced under name)."""
    if type(sdk_client).__module__.partition(".")[0] == "anthropic":
        from earmark.client import wire_anthropic

        return wire_anthropic.provider(name or wire_anthropic.PROVIDER)
    from earmark.client import wire_openai

    return wire_openai.provider(name or wire_openai.PROVIDER)


def metered(sdk_client: SDK, earmark: Client | AsyncClient, budget_id: str, **meter: Any) -> SDK:
    """sdk_client (openai.OpenAI or AsyncOpenAI, anthropic.Anthropic or AsyncAnthropic), as
    a client of the same class whose calls are metered on budget_id. meter takes Meter's
    other fields (provider, job, also_budget_ids, account, labels, lease_seconds,
    output_tokens_max, degrade, tool_calls_max, and retry, which sets the SDK's max_retries
    to its attempts less one). The async SDK clients go with AsyncClient, the sync ones with
    Client."""
    provider = _provider(sdk_client, meter.pop("provider", None))
    # A retry policy given here sets the SDK's own retries (each attempt on its own hold).
    options: dict[str, Any] = {}
    if "retry" in meter:
        options["max_retries"] = meter["retry"].attempts_max - 1
    settings = Meter(budget_id, provider=provider.name, **meter)
    inner = getattr(sdk_client, "_client", None)
    copy = getattr(sdk_client, "with_options", None)
    if copy is None or not isinstance(inner, httpx2.Client | httpx2.AsyncClient):
        raise TypeError(
            f"metered() takes an openai or anthropic SDK client sending with httpx2, not "
            f"{type(sdk_client).__name__}"
        )
    if isinstance(inner, httpx2.AsyncClient):
        if not isinstance(earmark, AsyncClient):
            raise TypeError(f"{type(sdk_client).__name__} is metered with an AsyncClient")
        metering = Metering(provider, earmark, settings)
        async_http = httpx2.AsyncClient(transport=AsyncMeteredTransport(inner, metering))
        metered_client: SDK = copy(http_client=async_http, **options)
        return metered_client
    if not isinstance(earmark, Client):
        raise TypeError(f"{type(sdk_client).__name__} is metered with a Client")
    # The sync client's holds run on its own loop, as every call of Client does.
    metering = Metering(provider, earmark._async, settings)
    transport = MeteredTransport(inner, metering, earmark._run, earmark._submit)
    sync_http = httpx2.Client(transport=transport)
    metered_sync: SDK = copy(http_client=sync_http, **options)
    return metered_sync
