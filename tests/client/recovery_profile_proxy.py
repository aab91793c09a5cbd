"""A Budget proxy for the recovery-profile tests: a real gRPC server on 127.0.0.1 that
passes each worker call to a real sidecar, byte for byte, and lets a test put a fault on
the calls of a method (an answer lost after the sidecar applied the call, an answer that
is no SettleResponse, a refusal, a call held until the test lets it go). It records every
request it received, as bytes, so that a test can say what left the worker and when."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import grpc

from earmark.v1 import budget_pb2 as pb

Context = grpc.aio.ServicerContext[Any, Any]
Forward = Callable[[], Awaitable[bytes]]
# A fault gets the request's bytes, a call that passes it to the sidecar and answers its
# answer, and the context (to abort); it answers the bytes the worker gets.
Fault = Callable[[bytes, Forward, Context], Awaitable[bytes]]
METHODS = ("Reserve", "Charge", "Renew", "Settle")
# The metadata a proxied call carries on: the worker token.
PASSED_METADATA = ("authorization",)


class Proxy:
    """Passes Budget's calls to upstream; faults[method] are used up one call each."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.target = ""
        self.seen: dict[str, list[bytes]] = defaultdict(list)
        self.faults: dict[str, list[Fault]] = defaultdict(list)
        # Called with each request's method and bytes as it arrives, before any fault.
        self.on_request: Callable[[str, bytes], None] | None = None
        self._channel = grpc.aio.insecure_channel(upstream)

    def settles(self) -> list[pb.SettleRequest]:
        """The Settle requests received, in order."""
        return [pb.SettleRequest.FromString(data) for data in self.seen["Settle"]]

    async def seen_at_least(self, method: str, count: int) -> bool:
        return len(self.seen[method]) >= count

    async def _handle(self, method: str, request: bytes, context: Context) -> bytes:
        self.seen[method].append(request)
        if self.on_request is not None:
            self.on_request(method, request)
        metadata = tuple(
            (key, value)
            for key, value in context.invocation_metadata() or ()
            if key in PASSED_METADATA and isinstance(value, str)
        )

        async def forward() -> bytes:
            call = self._channel.unary_unary(
                f"/earmark.v1.Budget/{method}",
                request_serializer=None,
                response_deserializer=None,
            )
            try:
                answer: bytes = await call(request, metadata=metadata or None, timeout=30)
                return answer
            except grpc.aio.AioRpcError as error:
                # The sidecar's refusal reaches the worker as it was, its ErrorInfo too.
                await context.abort(
                    error.code(), error.details() or "", cast(Any, error.trailing_metadata()) or ()
                )
                raise AssertionError("abort returns no answer") from error

        faults = self.faults[method]
        if not faults:
            return await forward()
        return await faults.pop(0)(request, forward, context)

    def _handlers(self) -> grpc.GenericRpcHandler[Any, Any]:
        def handler(method: str) -> grpc.RpcMethodHandler[Any, Any]:
            async def behavior(request: bytes, context: Context) -> bytes:
                return await self._handle(method, request, context)

            # No (de)serializers: the bytes pass as they came.
            return grpc.unary_unary_rpc_method_handler(behavior)

        return grpc.method_handlers_generic_handler(
            "earmark.v1.Budget", {method: handler(method) for method in METHODS}
        )

    async def close(self) -> None:
        await self._channel.close(grace=None)


@contextlib.asynccontextmanager
async def proxy(upstream: str) -> AsyncIterator[Proxy]:
    """A Proxy to upstream on 127.0.0.1 port 0 (its target set), stopped at the end; calls
    still held then end CANCELLED."""
    server = grpc.aio.server()
    middle = Proxy(upstream)
    server.add_generic_rpc_handlers((middle._handlers(),))
    middle.target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    await server.start()
    try:
        yield middle
    finally:
        await server.stop(grace=None)
        await middle.close()


# Faults.


def answer_lost(code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> Fault:
    """The sidecar applies the call; its answer is lost on the way back (the worker sees
    code, as when a connection drops after the request left)."""

    async def fault(request: bytes, forward: Forward, context: Context) -> bytes:
        await forward()
        await context.abort(code, "the proxy lost the answer")
        raise AssertionError("abort returns no answer")

    return fault


def answered_with(body: bytes) -> Fault:
    """The sidecar applies the call; the worker gets body (OK status) instead of its
    answer."""

    async def fault(request: bytes, forward: Forward, context: Context) -> bytes:
        await forward()
        return body

    return fault


def refused(code: grpc.StatusCode, details: str = "refused by the proxy") -> Fault:
    """The call never reaches the sidecar; the worker gets code."""

    async def fault(request: bytes, forward: Forward, context: Context) -> bytes:
        await context.abort(code, details)
        raise AssertionError("abort returns no answer")

    return fault


def applied_then_held(applied: asyncio.Event, release: asyncio.Event) -> Fault:
    """The sidecar applies the call (applied is set then); the answer waits for release,
    which a test that kills the worker never sets."""

    async def fault(request: bytes, forward: Forward, context: Context) -> bytes:
        answer = await forward()
        applied.set()
        await release.wait()
        return answer

    return fault


def held(release: asyncio.Event) -> Fault:
    """The call waits for release before it goes on to the sidecar."""

    async def fault(request: bytes, forward: Forward, context: Context) -> bytes:
        await release.wait()
        return await forward()

    return fault


def observed(check: Callable[[bytes], None]) -> Fault:
    """check(request) runs when the request arrives (before the sidecar sees it); then it
    goes on."""

    async def fault(request: bytes, forward: Forward, context: Context) -> bytes:
        check(request)
        return await forward()

    return fault
