"""The edge every call crosses before a servicer sees it, one interceptor per listener:
a body that does not decode is INVALID_ARGUMENT, a unary call's and every message of a
stream alike; a call without a valid token where one is required is UNAUTHENTICATED; and
long-lived streams beyond their caps are RESOURCE_EXHAUSTED, so that idle streams never
take the slots of unary calls.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from earmark import limits
from earmark.errors import Reason
from earmark.service.auth import CALLER, Caller, Tokens, bearer
from earmark.service.errors import abort

log = structlog.get_logger("earmark.edge")

Context = grpc.aio.ServicerContext[Any, Any]
Reject = Callable[[str], None]
# grpc's stubs type method handlers for the synchronous server; these are grpc.aio's.
MethodHandler = Any


class _Undecodable:
    """Stands in for a request whose bytes are not the method's message."""


_UNDECODABLE = _Undecodable()


class StreamSlots:
    """Counts open long-lived streams, in all and per connection (the peer address)."""

    def __init__(
        self,
        total_max: int = limits.streams_max,
        per_connection_max: int = limits.streams_per_connection_max,
    ) -> None:
        self.total_max = total_max
        self.per_connection_max = per_connection_max
        self.open = 0
        self._by_peer: dict[str, int] = {}

    def take(self, peer: str) -> bool:
        held = self._by_peer.get(peer, 0)
        if self.open >= self.total_max or held >= self.per_connection_max:
            return False
        self.open += 1
        self._by_peer[peer] = held + 1
        return True

    def give_back(self, peer: str) -> None:
        self.open -= 1
        held = self._by_peer.pop(peer) - 1
        if held:
            self._by_peer[peer] = held
        assert self.open >= 0


if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
else:
    # grpc-stubs makes the class generic; at run time it is not subscriptable.
    _Interceptor = grpc.aio.ServerInterceptor


class EdgeInterceptor(_Interceptor):
    """tokens: who may call the methods under the `protected` prefixes (None: anyone)."""

    def __init__(
        self,
        *,
        tokens: Tokens | None,
        protected: tuple[str, ...],
        streams: StreamSlots,
        on_reject: Reject | None = None,
    ) -> None:
        self._tokens = tokens
        self._protected = protected
        self._streams = streams
        self._on_reject = on_reject
        # Each method's wrapped handler, by method, beside the handler it wraps: the server's
        # handlers are made once, so wrapping them again on every call would be work for
        # nothing. Only methods the server has a handler for are kept, which bounds it.
        self._wrapped: dict[str, tuple[MethodHandler, MethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> MethodHandler:
        handler = await continuation(details)
        if handler is None:
            return None
        method: str = details.method
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self._wrap(handler, method)
        if method in self._wrapped or len(self._wrapped) < limits.edge_methods_max:
            self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: MethodHandler, method: str) -> MethodHandler:
        guarded = self._tokens is not None and method.startswith(self._protected)
        if handler.unary_unary is not None:
            return self._unary(handler, method, guarded)
        if handler.unary_stream is not None:
            return self._unary_stream(handler, method, guarded)
        if handler.stream_stream is not None:
            return self._stream_stream(handler, method, guarded)
        if handler.stream_unary is not None:
            return self._stream_unary(handler, method, guarded)
        return handler

    def _reject(self, reason: str, method: str) -> None:
        log.info("rpc_rejected", method=method, reason=reason)
        if self._on_reject is not None:
            self._on_reject(reason)

    async def _decoded(self, request: object, context: Context, method: str) -> None:
        """Aborts the call if request is a body that did not decode."""
        if request is _UNDECODABLE:
            self._reject("undecodable", method)
            await abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request: the body is not a valid message for {method}",
                Reason.INVALID_FIELD,
                field="request",
            )

    async def _checked(
        self, requests: AsyncIterator[object], context: Context, method: str
    ) -> AsyncIterator[object]:
        """A call's stream of requests, ending the call at the first message that did not
        decode just as a unary call's body is refused. The servicer must read its requests
        from this iterator: context.read() would hand it the stand-in itself."""
        async for request in requests:
            await self._decoded(request, context, method)
            yield request

    async def _admit(
        self, request: object, context: Context, method: str, guarded: bool
    ) -> Caller | None:
        """Aborts the call unless its body decoded and, where required, its token is known."""
        await self._decoded(request, context, method)
        if not guarded:
            return None
        assert self._tokens is not None
        token = bearer(context.invocation_metadata())
        caller = self._tokens.find(token) if token else None
        if caller is None:
            self._reject("unauthenticated", method)
            await abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                "authorization: this call needs metadata 'authorization: Bearer TOKEN' "
                "with a token the sidecar knows",
                Reason.TOKEN_UNKNOWN,
                field="authorization",
            )
        return caller

    @contextlib.asynccontextmanager
    async def _stream_slot(
        self, request: object, context: Context, method: str, guarded: bool
    ) -> AsyncIterator[None]:
        """Admits a long-lived stream and holds one of its slots while it runs."""
        await self._admit(request, context, method, guarded)
        peer = context.peer() or ""
        if not self._streams.take(peer):
            self._reject("streams", method)
            await abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"streams: at most {self._streams.per_connection_max} long-lived streams per "
                f"connection and {self._streams.total_max} in all",
                Reason.STREAMS_FULL,
            )
        try:
            yield
        finally:
            self._streams.give_back(peer)

    def _unary(self, handler: MethodHandler, method: str, guarded: bool) -> MethodHandler:
        inner = handler.unary_unary

        async def behavior(request: object, context: Context) -> object:
            # A decoded body on a method that needs no token has nothing to check: no
            # coroutine is made for it (two per call, on every Reserve and Settle).
            caller = None
            if guarded or request is _UNDECODABLE:
                caller = await self._admit(request, context, method, guarded)
            token = CALLER.set(caller)
            try:
                return await inner(request, context)
            finally:
                CALLER.reset(token)

        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def _unary_stream(self, handler: MethodHandler, method: str, guarded: bool) -> MethodHandler:
        inner = handler.unary_stream
        behavior: Callable[..., Any]
        if inspect.isasyncgenfunction(inner):

            async def generate(request: object, context: Context) -> AsyncIterator[object]:
                async with self._stream_slot(request, context, method, guarded):
                    async for reply in inner(request, context):
                        yield reply

            behavior = generate
        else:
            # A servicer that writes through context.write (health Watch): grpc.aio does
            # not let an async generator and context.write serve the same call.
            async def write(request: object, context: Context) -> None:
                async with self._stream_slot(request, context, method, guarded):
                    await inner(request, context)

            behavior = write
        return grpc.unary_stream_rpc_method_handler(
            behavior,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def _stream_stream(self, handler: MethodHandler, method: str, guarded: bool) -> MethodHandler:
        inner = handler.stream_stream

        async def behavior(
            requests: AsyncIterator[object], context: Context
        ) -> AsyncIterator[object]:
            async with self._stream_slot(None, context, method, guarded):
                async for reply in inner(self._checked(requests, context, method), context):
                    yield reply

        return grpc.stream_stream_rpc_method_handler(
            behavior,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )

    def _stream_unary(self, handler: MethodHandler, method: str, guarded: bool) -> MethodHandler:
        """A client stream (none is served yet): a long-lived call like the others, its
        token and every message checked the same way."""
        inner = handler.stream_unary

        async def behavior(requests: AsyncIterator[object], context: Context) -> object:
            async with self._stream_slot(None, context, method, guarded):
                return await inner(self._checked(requests, context, method), context)

        return grpc.stream_unary_rpc_method_handler(
            behavior,
            request_deserializer=_tolerant(handler.request_deserializer),
            response_serializer=handler.response_serializer,
        )


def _tolerant(deserialize: Callable[[bytes], object] | None) -> Callable[[bytes], object] | None:
    """A deserializer that answers _UNDECODABLE instead of raising, so that the call can be
    refused with INVALID_ARGUMENT rather than gRPC's UNKNOWN."""
    if deserialize is None:
        return None

    def decode(data: bytes) -> object:
        try:
            return deserialize(data)
        except Exception:
            return _UNDECODABLE

    return decode
