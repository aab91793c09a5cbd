"""Admin called at the wrong door: every Admin method on the workers' listener answers
UNIMPLEMENTED with a message naming Admin's own listener, rather than gRPC's bare
"Method not found!", which leaves an operator guessing."""

from __future__ import annotations

from typing import Any

import grpc

from earmark.errors import Reason
from earmark.service.errors import abort
from earmark.v1 import budget_pb2

ADMIN_SERVICE = budget_pb2.DESCRIPTOR.services_by_name["Admin"].full_name


# grpc's handler classes are generic only in their stubs, not at run time.
class AdminElsewhere(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """Answers each Admin method, whatever its body, with where Admin is; any other method
    is left to gRPC (UNIMPLEMENTED, "Method not found!")."""

    def __init__(self, admin_listener: str) -> None:
        self.handlers = {
            f"/{ADMIN_SERVICE}/{method.name}": _told(
                f"{ADMIN_SERVICE}/{method.name}", admin_listener
            )
            for method in budget_pb2.DESCRIPTOR.services_by_name["Admin"].methods
        }

    def service(
        self, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[bytes, bytes] | None:
        # One handler per method, made once: the edge interceptor caches by handler.
        return self.handlers.get(str(handler_call_details.method))


def _told(name: str, listener: str) -> grpc.RpcMethodHandler[bytes, bytes]:
    async def answer(request: bytes, context: Any) -> bytes:
        await abort(
            context,
            grpc.StatusCode.UNIMPLEMENTED,
            f"{name} is an Admin method: Admin is served on its own listener, "
            f"{listener} (--admin-listen), not on the workers' port",
            Reason.ADMIN_ON_ITS_OWN_LISTENER,
            method=name,
            admin_listener=listener,
        )
        raise AssertionError("abort returns only by raising")  # pragma: no cover

    # The body is never read: raw bytes in and out, so a request of any shape is told.
    return grpc.unary_unary_rpc_method_handler(
        answer, request_deserializer=None, response_serializer=None
    )
