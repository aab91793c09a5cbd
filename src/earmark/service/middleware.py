"""The RPC middleware every servicer method goes through: the request id and log context,
the drain, the duration metric, and the one mapping of errors to statuses (errors.py) at
the edge."""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
import structlog

from earmark import limits
from earmark.errors import EarmarkError, Reason
from earmark.metrics import Metrics
from earmark.service.drain import Drain
from earmark.service.errors import Context, abort, status_of

Req = TypeVar("Req")
Resp = TypeVar("Resp")
Handler = Callable[[Any, Req, Context], Awaitable[Resp]]

log = structlog.get_logger("earmark.rpc")


# A caller may name its request in this metadata key; ids outside the bounds are replaced.
REQUEST_ID_KEY = "x-request-id"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]+$")


# Fresh ids: this process's random prefix and a counter, unique without a uuid4 per call.
_PROCESS_PREFIX = os.urandom(4).hex()
_next_request = itertools.count(1)


def request_id(context: Context) -> str:
    """The caller's x-request-id if it is short and plain, else a fresh one."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_KEY and isinstance(value, str):
            if len(value) <= limits.request_id_length_max and _REQUEST_ID.match(value):
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
                metrics.child(metrics.rpc_duration, method, code.name).observe(
                    time.perf_counter() - started
                )

        return call

    return wrap
