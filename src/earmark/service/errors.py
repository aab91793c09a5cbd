"""The one table from Earmark's error types to gRPC status codes, and the RPC wrapper
that applies it at the edge."""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import google.rpc.error_details_pb2 as error_details_pb2
import google.rpc.status_pb2 as status_pb2
import grpc
import structlog
from grpc_status import rpc_status

from earmark import limits
from earmark.errors import (
    DOMAIN,
    AlreadyExists,
    EarmarkError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Reason,
    Unavailable,
)
from earmark.metrics import Metrics
from earmark.service.drain import Drain

STATUS_OF: dict[type[EarmarkError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}


def status_of(error: EarmarkError) -> grpc.StatusCode:
    """The code of error's most specific type in STATUS_OF."""
    for cls in type(error).__mro__:
        if cls in STATUS_OF:
            return STATUS_OF[cls]
    raise AssertionError(f"no status code for {type(error).__name__}")


Metadata = tuple[tuple[str, str | bytes], ...]


def error_details(
    code: grpc.StatusCode, message: str, reason: Reason, about: dict[str, str]
) -> Metadata:
    """The trailing metadata that carries a google.rpc.Status with one ErrorInfo: the
    stable reason and the fields it concerns, each value cut to a bounded length."""
    info = error_details_pb2.ErrorInfo(
        reason=reason.value,
        domain=DOMAIN,
        metadata={
            key: value[: limits.error_about_chars_max]
            for key, value in itertools.islice(about.items(), limits.error_about_keys_max)
        },
    )
    status = status_pb2.Status(code=code.value[0], message=message)
    status.details.add().Pack(info)
    return tuple(rpc_status.to_status(status).trailing_metadata)


async def abort(
    context: Context,
    code: grpc.StatusCode,
    message: str,
    reason: Reason,
    **about: str,
) -> None:
    """Ends the call with code and message, and the reason as an ErrorInfo."""
    await context.abort(code, message, error_details(code, message, reason, about))


Req = TypeVar("Req")
Resp = TypeVar("Resp")
Context = grpc.aio.ServicerContext[Any, Any]
Handler = Callable[[Any, Req, Context], Awaitable[Resp]]

log = structlog.get_logger("earmark.rpc")


# A caller may name its request in this metadata key; ids outside the bounds are replaced.
REQUEST_ID_KEY = "x-request-id"
request_id_length_max = 64
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]+$")


# Fresh ids: this process's random prefix and a counter, unique without a uuid4 per call.
_PROCESS_PREFIX = os.urandom(4).hex()
_next_request = itertools.count(1)


def request_id(context: Context) -> str:
    """The caller's x-request-id if it is short and plain, else a fresh one."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY and isinstance(value, str):
            if len(value) <= request_id_length_max and _REQUEST_ID.match(value):
                return value
            break
    return f"{_PROCESS_PREFIX}-{next(_next_request):x}"


def rpc(method: str) -> Callable[[Handler[Req, Resp]], Handler[Req, Resp]]:
    """Wraps a servicer method: binds the log context, times it, and turns an
    EarmarkError into its status code. Anything else is a bug: INTERNAL, logged."""

    def wrap(handler: Handler[Req, Resp]) -> Handler[Req, Resp]:
        @functools.wraps(handler)
        async def call(self: Any, request: Req, context: Context) -> Resp:
            metrics: Metrics = self.metrics
            drain: Drain = self.drain
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            structlog.contextvars.bind_contextvars(rpc=method, request_id=request_id(context))
            entered = False
            try:
                try:
                    # A hold's own calls may still come in while draining (see Drain).
                    drain.enter(getattr(request, "reservation_id", ""))
                    entered = True
                    return await handler(self, request, context)
                except asyncio.CancelledError:
                    # The caller went away (deadline, cancel): nothing to answer.
                    code = grpc.StatusCode.CANCELLED
                    raise
                except EarmarkError as error:
                    code = status_of(error)
                    log.info(
                        "rpc_error", code=code.name, reason=error.reason.value, error=error.message
                    )
                    message, reason, about = error.message, error.reason, error.about
                except Exception:
                    code = grpc.StatusCode.INTERNAL
                    log.exception("rpc_bug", code=code.name)
                    message, reason, about = (
                        "internal error; see the sidecar's log",
                        Reason.INTERNAL,
                        {},
                    )
                await abort(context, code, message, reason, **about)
                raise AssertionError("abort returned")  # pragma: no cover
            finally:
                if entered:
                    drain.leave()
                structlog.contextvars.unbind_contextvars("rpc", "request_id")
                metrics.rpc_duration.labels(method, code.name).observe(
                    time.perf_counter() - started
                )

        return call

    return wrap
