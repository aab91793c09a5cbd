"""The worker SDK: AsyncClient (grpc.aio) and Client (synchronous), with hold()."""

from earmark.client.aio import (
    AsyncClient,
    BudgetState,
    Charged,
    Reservation,
    RetryPolicy,
    Settled,
)
from earmark.client.errors import (
    AlreadyExistsError,
    ClientError,
    DeadlineExceededError,
    FailedPreconditionError,
    HoldLostError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    Refusal,
    RefusedError,
    UnauthenticatedError,
    UnavailableError,
)
from earmark.client.hold import Hold
from earmark.client.sync import Client, SyncHold
from earmark.core.model import EstimatePolicy, EstimateSource, HoldState, Outcome, RefusalReason
from earmark.core.prices import Shape, Usage

__all__ = [
    "AlreadyExistsError",
    "AsyncClient",
    "BudgetState",
    "Charged",
    "Client",
    "ClientError",
    "DeadlineExceededError",
    "EstimatePolicy",
    "EstimateSource",
    "FailedPreconditionError",
    "Hold",
    "HoldLostError",
    "HoldState",
    "InvalidArgumentError",
    "NotFoundError",
    "Outcome",
    "PermissionDeniedError",
    "Refusal",
    "RefusalReason",
    "RefusedError",
    "Reservation",
    "RetryPolicy",
    "Settled",
    "Shape",
    "SyncHold",
    "UnauthenticatedError",
    "UnavailableError",
    "Usage",
]
