"""The one table from Earmark's error types to gRPC status codes, and the status with its
ErrorInfo a failed call ends with (service/middleware.py applies it to every RPC)."""

from __future__ import annotations

import itertools
from typing import Any

import google.rpc.error_details_pb2 as error_details_pb2
import google.rpc.status_pb2 as status_pb2
import grpc
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

Context = grpc.aio.ServicerContext[Any, Any]

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
