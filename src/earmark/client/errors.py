"""The client's exceptions, one per status code a caller can act on, and the typed refusal."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from earmark.core.model import RefusalReason


class ClientError(Exception):
    """A call failed; code and details are the server's (or the channel's)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


class InvalidArgumentError(ClientError):
    """The request had a malformed field; details name it."""


class NotFoundError(ClientError):
    """The budget or reservation does not exist."""


class AlreadyExistsError(ClientError):
    """An idempotency key was reused with other arguments."""


class FailedPreconditionError(ClientError):
    """The hold is no longer held (settled or expired), or the budget forbids the change."""


class UnauthenticatedError(ClientError):
    """The sidecar needs a token and this call carried none, or an unknown one."""


class PermissionDeniedError(ClientError):
    """The token may not use this budget, or the hold belongs to another token."""


class UnavailableError(ClientError):
    """The sidecar or its database stayed unreachable through every retry."""


class DeadlineExceededError(ClientError):
    """The call's deadline passed; it may or may not have taken effect."""


class HoldLostError(Exception):
    """The hold expired or was closed while the block ran: the worker must stop spending."""


ERROR_OF: dict[grpc.StatusCode, type[ClientError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def from_rpc_error(error: grpc.aio.AioRpcError) -> ClientError:
    """The most specific ClientError for a failed call."""
    code = error.code()
    return ERROR_OF.get(code, ClientError)(code, error.details() or "")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Reserve said no: a normal answer, with why and what is left."""

    budget_id: str
    amount: int
    reason: RefusalReason
    remaining: int | None
    message: str
    # Which budget refused: budget_id, or one of a nested Reserve's also_budget_ids.
    refused_budget_id: str = ""

    admitted = False


class RefusedError(Exception):
    """Raised by hold() on a refusal, unless the caller asked for the refusal back."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(f"{refusal.budget_id}: {refusal.message}")
        self.refusal = refusal
