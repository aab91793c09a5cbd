"""OpenTelemetry tracing, the `otel` extra (`pip install 'earmark[otel]'`): it needs only
opentelemetry-api; whoever runs the process picks the SDK and the exporter (for example
`opentelemetry-instrument earmark serve --tracing` with the OTEL_* variables).

- ServerTracing: a server interceptor that continues the caller's trace (W3C traceparent in
  the call's metadata) with a SERVER span per unary call, ended with the call's status code.
- client_interceptor(): the SDK's side, a CLIENT span per call whose context goes out as
  traceparent; `AsyncClient(..., interceptors=[client_interceptor()])`.
- add_trace_ids: a structlog processor that writes the current span's trace_id and span_id
  into every log line, so that a sidecar's decision is found from a trace and back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, cast

import grpc
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

TRACER_NAME = "earmark"

Context = grpc.aio.ServicerContext[Any, Any]
# grpc-stubs types handlers loosely and makes the interceptors generic; at run time they are
# not subscriptable.
MethodHandler = Any
if TYPE_CHECKING:
    _ServerInterceptor = grpc.aio.ServerInterceptor[Any, Any]
    _UnaryClientInterceptor = grpc.aio.UnaryUnaryClientInterceptor[Any, Any]
else:
    _ServerInterceptor = grpc.aio.ServerInterceptor
    _UnaryClientInterceptor = grpc.aio.UnaryUnaryClientInterceptor


def _attributes(method: str) -> dict[str, str]:
    """The RPC semantic conventions' attributes of a full method name (/pkg.Service/Method)."""
    service, _, name = method.lstrip("/").partition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


def _end(span: trace.Span, code: grpc.StatusCode | None) -> None:
    code = code or grpc.StatusCode.OK
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code is not grpc.StatusCode.OK:
        span.set_status(Status(StatusCode.ERROR, code.name))


class ServerTracing(_ServerInterceptor):
    """A SERVER span around each unary call, child of the caller's traceparent if any."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=provider)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[MethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> MethodHandler:
        handler = await continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner = handler.unary_unary
        method: str = details.method
        tracer = self._tracer

        async def behavior(request: object, context: Context) -> object:
            carrier = {
                key: value
                for key, value in context.invocation_metadata() or ()
                if isinstance(value, str)
            }
            with tracer.start_as_current_span(
                method.lstrip("/"),
                context=propagate.extract(carrier),
                kind=SpanKind.SERVER,
                attributes=_attributes(method),
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    return await inner(request, context)
                finally:
                    _end(span, context.code())

        return grpc.unary_unary_rpc_method_handler(
            behavior,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


class _ClientTracing(_UnaryClientInterceptor):
    def __init__(self, provider: TracerProvider | None) -> None:
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=provider)

    async def intercept_unary_unary(
        self,
        continuation: Callable[[grpc.aio.ClientCallDetails, Any], Any],
        client_call_details: grpc.aio.ClientCallDetails,
        request: Any,
    ) -> Any:
        method = client_call_details.method
        name = method.decode() if isinstance(method, bytes) else method
        with self._tracer.start_as_current_span(
            name.lstrip("/"),
            kind=SpanKind.CLIENT,
            attributes=_attributes(name),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            metadata = grpc.aio.Metadata(*(client_call_details.metadata or ()))
            for key, value in carrier.items():
                metadata.add(key, value)
            details = grpc.aio.ClientCallDetails(
                client_call_details.method,
                client_call_details.timeout,
                metadata,
                client_call_details.credentials,
                client_call_details.wait_for_ready,
            )
            call = await continuation(details, request)
            _end(span, await call.code())
            return call


def client_interceptor(provider: TracerProvider | None = None) -> grpc.aio.ClientInterceptor:
    """The SDK's tracing: pass it in AsyncClient's (or Client's) interceptors."""
    return cast(grpc.aio.ClientInterceptor, _ClientTracing(provider))


def add_trace_ids(
    logger: object, method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: the current span's trace_id and span_id, when there is one."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = format(context.trace_id, "032x")
        event["span_id"] = format(context.span_id, "016x")
    return event
