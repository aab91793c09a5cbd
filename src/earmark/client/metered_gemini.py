"""metered() of google-genai's Client (the Gemini API and Vertex AI) (issue 45):

    llm = metered(genai.Client(api_key=...), earmark, "task-142")
    reply = llm.models.generate_content(model="gemini-2.5-flash", contents="...")
    reply = await llm.aio.models.generate_content(...)   # metered too
    assert isinstance(llm, genai.Client)

It gives back a copy of the Client, of its class, whose requests go through wire_transport's
metering (wire_gemini routes them): generate_content and generate_content_stream, their
client.aio twins and chats are held for their prompt and maxOutputTokens (thinking
included: the cap the budget pays is told in the body sent; without one the model's
ceiling is held and told), refused unsent when the budget cannot pay, and settled from the
answer's usageMetadata (prompt and tool-use prompt as input, the cached part at the cache
rate, candidates and thoughts as output), a stream's from its last chunk (one that ends
without it stays in doubt). embed_content is held for its input and settled from the
usageMetadata an answer gives (in doubt without one); count_tokens, compute_tokens and file
uploads pass free; every other POST (images, videos, batches, caches, tunings, the
interactions API...) is refused unsent. The live websockets (aio.live.connect,
aio.live.music.connect) raise SocketNotMeteredError before connecting.

One Client meters both surfaces when it is metered with the sync Client: the sync ones
as the other sync SDK clients are, client.aio with its held calls' steps run on the
Client's loop (awaited without blocking the caller's). Metered with an AsyncClient it
meters client.aio, and its sync surfaces raise SyncNotMeteredError unsent.

google-genai sends with httpx2 (its default backend, on which Earmark depends); client.aio
would send with aiohttp when that is installed, which a metering transport never sees:
the copy is given httpx2 clients for both (HttpOptions.httpx_client and
httpx_async_client, which also turns aiohttp and google-auth's mTLS sessions off), around
the ones the Client had. Those are google-genai's private attributes (BaseApiClient's
_httpx_client, _async_httpx_client, _http_options, _retry): the range pinned in pyproject
is the one tested, and tests/client/test_metered_gemini.py fails loudly if they move.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

import httpx2

from earmark.client import wire_gemini
from earmark.client.aio import AsyncClient
from earmark.client.gemini_transport import (
    ClosingAsyncTransport,
    ClosingTransport,
    CrossLoopTransport,
    RefusedSync,
    gemini_raising,
)
from earmark.client.llm import NOWHERE, _refuse
from earmark.client.meter import Meter
from earmark.client.sync import Client
from earmark.client.wire_transport import Metering

SDK = TypeVar("SDK")

# The Client's and client.aio's module caches built on first use from the API client's HTTP
# clients (google-genai 3.6.1's "next-gen" surfaces: interactions, agents...): a copy builds
# its own from the metered ones.
LAZY = (
    "_nextgen_client_instance",
    "_agents",
    "_interactions",
    "_webhooks",
    "_triggers",
    "_environments",
    "_credentials",
    "_voices",
    "_decisions",
)


def _prefix(api: Any) -> str:
    """The path of the API client's base URL: the routes are the paths after it."""
    base = getattr(api._http_options, "base_url", None) or "/"
    return httpx2.URL(str(base)).path.rstrip("/")


def metered(sdk_client: SDK, earmark: Client | AsyncClient, budget_id: str, **meter: Any) -> SDK:
    """A copy of sdk_client (google.genai.Client), of its class, whose calls are metered on
    budget_id (see the module). meter takes Meter's other fields, as llm.metered() does;
    retry sets the SDK's own attempts (HttpRetryOptions.attempts), each on its own hold."""
    import tenacity
    from google import genai
    from google.genai import _api_client, types

    if not isinstance(sdk_client, genai.Client):
        raise TypeError(f"metered() takes a google.genai.Client, not {type(sdk_client).__name__}")
    if not isinstance(earmark, Client | AsyncClient):
        raise TypeError(f"metered() meters with a Client or AsyncClient, not {type(earmark)}")
    api = getattr(sdk_client, "_api_client", None)
    sync_inner = getattr(api, "_httpx_client", None)
    async_inner = getattr(api, "_async_httpx_client", None)
    if not isinstance(api, _api_client.BaseApiClient) or not isinstance(sync_inner, httpx2.Client):
        raise TypeError(
            "metered() takes a google.genai.Client sending with httpx2 (its default; unset "
            f"GOOGLE_GENAI_HTTP_CLIENT=httpx), not one sending with {type(sync_inner).__name__}"
        )
    if not isinstance(async_inner, httpx2.AsyncClient):
        raise TypeError(
            "metered() takes a google.genai.Client whose client.aio has an httpx2 client, not "
            f"{type(async_inner).__name__} (google-auth's async mTLS session is not metered)"
        )
    name = meter.pop("provider", None) or wire_gemini.PROVIDER
    settings = Meter(budget_id, provider=name, **meter)
    provider = wire_gemini.provider(name, _prefix(api))
    error = gemini_raising()

    def metering(on: AsyncClient) -> Metering:
        made = Metering(provider, on, settings)
        made.error = error
        return made

    sync_http: httpx2.Client
    async_http: httpx2.AsyncClient
    if isinstance(earmark, Client):
        sync_transport = ClosingTransport(
            sync_inner, metering(earmark._async), earmark._run, earmark._submit_later
        )
        sync_http = httpx2.Client(transport=sync_transport)
        cross = CrossLoopTransport(async_inner, metering(earmark._async), earmark)
        async_http = httpx2.AsyncClient(transport=cross)
    else:
        sync_http = httpx2.Client(transport=RefusedSync(error))
        async_transport = ClosingAsyncTransport(async_inner, metering(earmark))
        async_http = httpx2.AsyncClient(transport=async_transport)

    metered_api = copy.copy(api)
    options: dict[str, Any] = {"httpx_client": sync_http, "httpx_async_client": async_http}
    if "retry" in meter:
        given = api._http_options.retry_options
        attempts = settings.retry.attempts_max
        retrying = (
            given.model_copy(update={"attempts": attempts})
            if given is not None
            else types.HttpRetryOptions(attempts=attempts)
        )
        options["retry_options"] = retrying
        kwargs = _api_client.retry_args(retrying)
        metered_api._retry = tenacity.Retrying(**kwargs)
        metered_api._async_retry = tenacity.AsyncRetrying(**kwargs)
    metered_api._http_options = api._http_options.model_copy(update=options)
    metered_api._httpx_client = sync_http
    metered_api._async_httpx_client = async_http
    metered_api._aiohttp_sessions = {}
    metered_api._authorized_session = None
    # The copy's close() and aclose() close the HTTP clients it sends with (the SDK leaves
    # clients given in HttpOptions to whoever gave them): the given Client's, which it shares.
    setattr(metered_api, "close", sync_http.close)  # noqa: B010
    setattr(metered_api, "aclose", async_http.aclose)  # noqa: B010
    # The copy sends through the given Client's HTTP clients, which the given Client closes
    # when it is collected (its __del__): it is kept alive as long as the copy is.
    setattr(metered_api, "_earmark_given", sdk_client)  # noqa: B010

    def nowhere(*args: Any, **kwargs: Any) -> str:
        return NOWHERE

    # Websockets go nowhere a websocket library connects to, whatever surface opens one.
    setattr(metered_api, "_websocket_base_url", nowhere)  # noqa: B010
    client = _rebound(sdk_client, api, metered_api)
    for surface in provider.sockets:
        _refuse(client, surface, f"google-genai {surface}()")
    return client


def _rebound(owner: SDK, api: object, metered_api: object) -> SDK:
    """A copy of owner (the Client, client.aio, a module), on metered_api where it was on
    api, its modules copied the same way, its lazily built surfaces left to be built again."""
    from google.genai import _api_module
    from google.genai import client as genai_client

    copied = copy.copy(owner)
    for name, value in vars(copied).items():
        if value is api:
            setattr(copied, name, metered_api)
        elif isinstance(value, _api_module.BaseModule | genai_client.AsyncClient):
            setattr(copied, name, _rebound(value, api, metered_api))
        elif name in LAZY:
            setattr(copied, name, None)
    return copied


__all__ = ["metered"]
