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

OpenAI-compatible APIs and Azure OpenAI are metered through the openai SDK's clients:
- the provider the calls are priced under (genai-prices' id) is provider=, or the one the
  base URL's host names (earmark.client.hosts: api.deepseek.com is deepseek, api.groq.com
  groq, api.mistral.ai mistral, api.together.xyz together, openrouter.ai openrouter,
  api.x.ai x-ai, Azure's hosts azure); OpenAI's own API, no base URL and a loopback host
  are openai; any other host raises ProviderNotNamedError until provider= names one;
- Azure OpenAI (AzureOpenAI, AsyncAzureOpenAI, or a client on Azure's v1 API) takes
  deployments={"my-gpt4o": "gpt-4o"}: each call is priced under azure as its deployment's
  base model (the path's deployment, else the body's model), and one to a deployment it
  does not map raises DeploymentNotMappedError before anything is held or sent; a chat
  stream under an api-version that streams no usage (before 2024-10-21 GA or
  2024-09-01-preview) raises StreamUsageNotReportedError, unsent, as its hold could only
  go in doubt. An Azure OpenAI client without deployments= raises a TypeError: a
  deployment's name says nothing of the model it runs, so it cannot be priced;
- a provider's own usage fields are read (DeepSeek's cache hits, Groq's streamed
  x_groq.usage), and OpenRouter's reported usage.cost is what a budget in usd_micros is
  charged (earmark.client.reported).

Each POST is routed by its provider's table (wire_openai.ROUTES, wire_anthropic.ROUTES),
its whole path after the base URL's own path: metered, free, or refused before it is sent;
a POST the table does not list is refused. What the HTTP client does not carry is refused
too: the SDK's websocket surfaces (openai's realtime.connect(), responses.connect()...)
raise SocketNotMeteredError before any connection is made, and the client's
websocket_base_url goes nowhere a websocket library connects to, so that a surface an SDK
upgrade adds fails before connecting as well. A copy of the metered client (with_options,
copy) is metered and refused the same way, around the HTTP client it is given if any.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, TypeVar

import httpx2

from earmark.client import hosts
from earmark.client.aio import AsyncClient
from earmark.client.hosts import ProviderNotNamedError
from earmark.client.meter import HoldCappedError, Meter, StreamCappedError
from earmark.client.reported import ReportingMetering
from earmark.client.sync import Client
from earmark.client.wire import (
    EndpointNotMeteredError,
    Provider,
    SocketNotMeteredError,
    ToolNotMeteredError,
)
from earmark.client.wire_openai import DeploymentNotMappedError, StreamUsageNotReportedError
from earmark.client.wire_transport import AsyncMeteredTransport, MeteredTransport, Metering

__all__ = [
    "DeploymentNotMappedError",
    "EndpointNotMeteredError",
    "HoldCappedError",
    "Meter",
    "ProviderNotNamedError",
    "SocketNotMeteredError",
    "StreamCappedError",
    "StreamUsageNotReportedError",
    "ToolNotMeteredError",
    "metered",
    "prompt_tokens",
]

SDK = TypeVar("SDK")
# A metered client's websocket_base_url: a scheme no websocket library connects to (the
# websockets package refuses any but ws and wss before opening a socket), on a host that
# resolves nowhere. The known surfaces raise before reaching it; a connection manager built
# by hand, or a surface an SDK upgrade adds, fails on it before connecting.
NOWHERE = "earmark-not-metered://websockets-are-refused.invalid/"


def prompt_tokens(request: dict[str, Any]) -> int:
    """The prompt tokens a chat completion request is held and charged for: a
    conservative count from its messages and tools."""
    from earmark.client import wire_openai

    return wire_openai.Chat().call(request, Meter("")).prompt_tokens


def _prefix(sdk_client: object) -> str:
    """The path of sdk_client's base URL ("/v1" for OpenAI's, "" for Anthropic's): the
    routes are the paths after it."""
    return httpx2.URL(str(getattr(sdk_client, "base_url", "/"))).path.rstrip("/")


# An AzureOpenAI base URL's deployment (azure_deployment=), which its routes take from the
# path instead: the routes are under the endpoint's /openai, where /responses goes too.
_BASE_DEPLOYMENT = re.compile(r"/deployments/[^/]+$")


def _is_azure(sdk_client: object) -> bool:
    """Whether sdk_client is the openai package's AzureOpenAI or AsyncAzureOpenAI."""
    return any(
        kind.__module__ == "openai.lib.azure" and kind.__name__ == "BaseAzureClient"
        for kind in type(sdk_client).__mro__
    )


def _deployments(given: Any) -> Mapping[str, str] | None:
    """metered()'s deployments= as a map of deployment to base model; raises TypeError for
    one that is not."""
    if given is None:
        return None
    if not isinstance(given, Mapping) or not all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in given.items()
    ):
        raise TypeError(
            'deployments= maps each Azure deployment\'s name to its base model: {"my-gpt4o": '
            '"gpt-4o"}'
        )
    return dict(given)


def _provider(
    sdk_client: object, name: str | None, deployments: Mapping[str, str] | None = None
) -> Provider:
    """The provider whose routes meter sdk_client: Anthropic's for its SDK's clients,
    OpenAI's otherwise, priced under name, or the provider its base URL's host names
    (hosts.named); Azure OpenAI's deployments, priced as their base models, when given
    deployments (an Azure OpenAI client without them raises a TypeError)."""
    if type(sdk_client).__module__.partition(".")[0] == "anthropic":
        from earmark.client import wire_anthropic

        return wire_anthropic.provider(name or wire_anthropic.PROVIDER, _prefix(sdk_client))
    from earmark.client import wire_openai

    prefix = _prefix(sdk_client)
    azure = _is_azure(sdk_client)
    base_url = str(getattr(sdk_client, "base_url", "") or "")
    named = name or (hosts.AZURE if deployments is not None else hosts.named(base_url))
    if deployments is None and (azure or named == hosts.AZURE):
        raise TypeError(
            'metered() of an Azure OpenAI client takes deployments={"deployment": '
            '"base-model"} (e.g. {"my-gpt4o": "gpt-4o"}), the model each deployment is '
            "priced as"
        )
    if deployments is None:
        return wire_openai.provider(named, prefix)
    if azure:
        prefix = _BASE_DEPLOYMENT.sub("", prefix)
    version = getattr(sdk_client, "_api_version", None) if azure else None
    settings = wire_openai.Azure(deployments, version if isinstance(version, str) else None)
    return wire_openai.provider(named, prefix, settings)


def metered(sdk_client: SDK, earmark: Client | AsyncClient, budget_id: str, **meter: Any) -> SDK:
    """sdk_client (openai.OpenAI or AsyncOpenAI, anthropic.Anthropic or AsyncAnthropic), as
    a client of the same class whose calls are metered on budget_id, and whose websocket
    surfaces are refused. meter takes Meter's other fields (provider, job, also_budget_ids,
    account, labels, lease_seconds, output_tokens_max, degrade, tool_calls_max, and retry,
    which sets the SDK's max_retries to its attempts less one). The async SDK clients go
    with AsyncClient, the sync ones with Client. provider= names the provider an openai
    client's calls are priced under (by default the one its base URL's host names: see the
    module), and deployments= an Azure OpenAI client's base model of each deployment.
    google-genai's Client and boto3's
    bedrock-runtime client are metered by their own modules: metered_gemini (a copy of the
    Client on wire_transport's httpx2 metering, routed by wire_gemini) and metered_bedrock
    (botocore's event hooks on the client itself, routed by wire_bedrock)."""
    package = type(sdk_client).__module__.partition(".")[0]
    if package == "google":
        from earmark.client import metered_gemini

        return metered_gemini.metered(sdk_client, earmark, budget_id, **meter)
    if package == "botocore":
        from earmark.client import metered_bedrock

        return metered_bedrock.metered(sdk_client, earmark, budget_id, **meter)
    name = meter.pop("provider", None)
    deployments = _deployments(meter.pop("deployments", None))
    if deployments is not None and package != "openai":
        raise TypeError("deployments= (Azure OpenAI) takes an openai SDK client")
    # A retry policy given here sets the SDK's own retries (each attempt on its own hold).
    options: dict[str, Any] = {}
    if "retry" in meter:
        options["max_retries"] = meter["retry"].attempts_max - 1
    settings = Meter(budget_id, provider=_provider(sdk_client, name, deployments).name, **meter)
    inner = getattr(sdk_client, "_client", None)
    if getattr(sdk_client, "with_options", None) is None or not isinstance(
        inner, httpx2.Client | httpx2.AsyncClient
    ):
        raise TypeError(
            f"metered() takes an openai or anthropic SDK client sending with httpx2, not "
            f"{type(sdk_client).__name__}"
        )
    if isinstance(inner, httpx2.AsyncClient) and not isinstance(earmark, AsyncClient):
        raise TypeError(f"{type(sdk_client).__name__} is metered with an AsyncClient")
    if isinstance(inner, httpx2.Client) and not isinstance(earmark, Client):
        raise TypeError(f"{type(sdk_client).__name__} is metered with a Client")
    return _Metered(earmark, settings, name, deployments).copy(sdk_client, inner, options)


class _Metered:
    """How metered() meters an SDK client, kept so that the metered client's own copies
    (with_options, copy) are metered and refused the same way."""

    def __init__(
        self,
        earmark: Client | AsyncClient,
        settings: Meter,
        name: str | None,
        deployments: Mapping[str, str] | None = None,
    ) -> None:
        self.earmark, self.settings, self.name = earmark, settings, name
        self.deployments = deployments

    def copy(
        self,
        sdk_client: SDK,
        inner: httpx2.Client | httpx2.AsyncClient,
        options: dict[str, Any],
    ) -> SDK:
        """A copy of sdk_client, of its class, sending through a metered HTTP client around
        inner, routed under its own base URL."""
        provider = _provider(sdk_client, self.name, self.deployments)
        # The class's own copy: sdk_client may be a metered client, whose copy is this.
        copy: Callable[..., SDK] = getattr(type(sdk_client), "with_options")  # noqa: B009
        host = hosts.host_of(str(getattr(sdk_client, "base_url", "") or ""))
        client = copy(sdk_client, http_client=self._http(provider, inner, host), **options)
        return self._sealed(client, provider, inner)

    def _http(
        self, provider: Provider, inner: httpx2.Client | httpx2.AsyncClient, host: str
    ) -> httpx2.Client | httpx2.AsyncClient:
        # A provider that reports its calls' cost settles at it where the budget counts
        # money (earmark.client.reported).
        metering_of = ReportingMetering if provider.name in hosts.REPORTS_COST else Metering
        if isinstance(inner, httpx2.AsyncClient) and isinstance(self.earmark, AsyncClient):
            metering = metering_of(provider, self.earmark, self.settings, host or None)
            return httpx2.AsyncClient(transport=AsyncMeteredTransport(inner, metering))
        if isinstance(inner, httpx2.Client) and isinstance(self.earmark, Client):
            # The sync client's holds run on its own loop, as every call of Client does.
            metering = metering_of(provider, self.earmark._async, self.settings, host or None)
            transport = MeteredTransport(
                inner, metering, self.earmark._run, self.earmark._submit_later
            )
            return httpx2.Client(transport=transport)
        raise TypeError(
            f"a {type(inner).__name__} cannot be metered with {type(self.earmark).__name__}"
        )

    def _sealed(
        self, client: SDK, provider: Provider, inner: httpx2.Client | httpx2.AsyncClient
    ) -> SDK:
        """client with its websocket surfaces refused and its websockets sent nowhere, its
        copies metered and sealed in turn: sharing its metered HTTP client, or around the
        HTTP client a copy is given, or under the base URL a copy is given."""
        package = type(client).__module__.partition(".")[0]
        for surface in provider.sockets:
            _refuse(client, surface, f"{package} {surface}()")
        if hasattr(client, "websocket_base_url"):
            setattr(client, "websocket_base_url", NOWHERE)  # noqa: B010
        own_copy: Callable[..., SDK] = getattr(type(client), "with_options")  # noqa: B009
        routed = _routed_as(client)

        def copy(**changes: Any) -> SDK:
            given = changes.pop("http_client", None)
            copied = own_copy(client, **changes)
            if given is None and _routed_as(copied) == routed:
                return self._sealed(copied, provider, inner)
            return self.copy(copied, inner if given is None else given, {})

        setattr(client, "copy", copy)  # noqa: B010
        setattr(client, "with_options", copy)  # noqa: B010
        return client


def _routed_as(client: object) -> tuple[str, str, object]:
    """What a client's routes are made from: its base URL's host (which names the provider
    where provider= did not) and path, and an Azure client's api-version (a copy given
    another is routed, and its provider named, anew)."""
    host = hosts.host_of(str(getattr(client, "base_url", "") or ""))
    return host, _prefix(client), getattr(client, "_api_version", None)


def _refuse(client: object, surface: str, named: str) -> None:
    """The surface of client ("beta.realtime.connect") raises SocketNotMeteredError when
    called, before it connects; a surface this SDK version lacks is left as it is."""
    *path, method = surface.split(".")
    owner: object = client
    for name in path:
        owner = getattr(owner, name, None)
    if owner is None or not callable(getattr(owner, method, None)):
        return

    def refused(*args: Any, **kwargs: Any) -> NoReturn:
        raise SocketNotMeteredError(named)

    setattr(owner, method, refused)
