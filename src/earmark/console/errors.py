"""The console's one map from what the SDK raises to what a page says: an HTTP status and
one line naming the code and Earmark's reason (the SDK's errors never carry a token)."""

from __future__ import annotations

import grpc

from earmark.client.errors import ClientError, EarmarkClientError

# A page's HTTP status for each gRPC code an Admin call can fail with; the rest are 502
# (the sidecar answered something the console cannot act on).
HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.UNAUTHENTICATED: 502,
    grpc.StatusCode.PERMISSION_DENIED: 502,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 503,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def described(error: EarmarkClientError) -> tuple[int, str]:
    """The HTTP status and the line a page shows for a failed call."""
    if not isinstance(error, ClientError):
        return 502, str(error)
    reason = f" {error.reason}" if error.reason else ""
    return HTTP_STATUS.get(error.code, 502), f"{error.code.name}{reason}: {error.details}"
