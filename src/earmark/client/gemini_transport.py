"""The transports metered_gemini adds to wire_transport's: client.aio of a google-genai Client
metered with the sync Client (the exchange sent and read in the caller's loop, its held
call's steps run on the Client's own loop, as the sync transport runs them), and the sync
surfaces of one metered with an AsyncClient, which are refused (an AsyncClient's holds run
on its loop, which a sync call may be blocking)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import httpx2

from earmark.client.errors import EarmarkClientError
from earmark.client.held_call import Raising
from earmark.client.sync import Client
from earmark.client.wire import EndpointNotMeteredError, answered
from earmark.client.wire_transport import (
    AsyncEventStream,
    AsyncMeteredTransport,
    Do,
    MeteredTransport,
    Metering,
    OnLoop,
    Soon,
    StreamOut,
)

Settling = Coroutine[Any, Any, Any]


class SyncNotMeteredError(EndpointNotMeteredError):
    """A sync surface of a google-genai Client metered with an AsyncClient: refused before
    anything is held or sent (meter the Client with a Client for its sync surfaces)."""

    def __init__(self, method: str, path: str) -> None:
        EarmarkClientError.__init__(
            self,
            f"{method} {path}: a google-genai Client metered with an AsyncClient meters "
            "client.aio alone; meter it with a Client for its sync surfaces; not sent",
        )
        self.about = {"endpoint": f"{method} {path}"}


def gemini_raising() -> Raising:
    """Raising for google-genai: Earmark's errors made subclasses of its APIError too, so
    that the SDK raises them as they are. APIError's constructor takes an HTTP answer's
    JSON, which they have none of: they are made on a base that takes a message as
    Exception does, whose code (0: no HTTP status), which the SDK's retry predicate reads of
    every APIError (HttpRetryOptions), never retries them."""
    from google.genai import errors

    class EarmarkAPIError(errors.APIError):
        code = 0
        details = None

        def __init__(self, *args: Any) -> None:
            Exception.__init__(self, *args)

        def __str__(self) -> str:
            return Exception.__str__(self)

    EarmarkAPIError.__module__ = __name__
    return Raising(EarmarkAPIError)


class ClosingTransport(MeteredTransport):
    """wire_transport's sync transport, closing the HTTP client it sends with when it is
    closed (the metered Client's close())."""

    def close(self) -> None:
        self.inner.close()


class ClosingAsyncTransport(AsyncMeteredTransport):
    """wire_transport's async transport, closing the HTTP client it sends with when it is
    closed (the metered client.aio's aclose(), in the loop whose pool it closes)."""

    async def aclose(self) -> None:
        await self.inner.aclose()


class CrossLoopTransport(ClosingAsyncTransport):
    """client.aio's transport under the sync Client: the request sent and its answer read
    in the caller's loop; the held call's steps run on the Client's loop (waited for
    without blocking the caller's), and a stream's end settled there."""

    def __init__(self, inner: httpx2.AsyncClient, metering: Metering, earmark: Client) -> None:
        super().__init__(inner, metering)
        self.client = earmark

    async def _do(self, do: Do) -> Any:
        match do:
            case OnLoop(step):
                return await self._on_loop(step)
            case Soon(step):
                self._later(step)
                return None
            case StreamOut(response, events, end):
                stream = AsyncEventStream(
                    response, events, end, self._later, lambda step: self._later(_now(step))
                )
                return answered(response, stream=stream)
        return await super()._do(do)

    async def _on_loop(self, step: Settling) -> Any:
        loop = self.client._loop
        if loop.is_closed():
            step.close()
            raise RuntimeError("this Client is closed")
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(step, loop))

    def _later(self, settling: Settling) -> None:
        """Runs settling on the Client's loop without the caller waiting (its flush() and
        close() wait for it)."""
        self.client._submit_later(settling)


async def _now(step: Any) -> None:
    step()


class RefusedSync(httpx2.BaseTransport):
    """The sync surfaces' transport of a Client metered with an AsyncClient: every request
    refused, unsent, as the SDK's error too."""

    def __init__(self, error: Raising) -> None:
        self.error = error

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        raise self.error(SyncNotMeteredError)(request.method, request.url.path)


__all__ = [
    "ClosingAsyncTransport",
    "ClosingTransport",
    "CrossLoopTransport",
    "RefusedSync",
    "SyncNotMeteredError",
    "gemini_raising",
]
