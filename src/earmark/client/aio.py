"""AsyncClient: the worker SDK on grpc.aio.

Every call has a deadline. UNAVAILABLE is retried with bounded, jittered backoff; that is
safe because every call that changes something carries an idempotency key, generated once
per logical call and sent again on each retry (Renew and Settle are idempotent as they are).
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import grpc
from google.protobuf.duration_pb2 import Duration

from earmark.client.errors import Refusal, from_rpc_error
from earmark.client.hold import Hold
from earmark.core.model import EstimatePolicy, EstimateSource, HoldState, Outcome, RefusalReason
from earmark.core.prices import Shape, Usage
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc

T = TypeVar("T")

DEFAULT_TARGET = "127.0.0.1:50051"
# Where `make run` serves Admin: a Unix socket in its data dir.
DEFAULT_ADMIN_TARGET = "unix:.earmark/admin.sock"
# Where a worker finds its sidecar when the code names none (deploy/kubernetes sets them).
TARGET_ENV = "EARMARK_TARGET"
ADMIN_TARGET_ENV = "EARMARK_ADMIN_TARGET"

# Every call waits for the channel to be ready, within its deadline, instead of failing at
# once: a worker that starts before its sidecar (pods start containers in parallel) gets
# its first answer as soon as the sidecar listens. Retries stay the client's own (below),
# since they reuse the idempotency key a call was given.
SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{"service": "earmark.v1.Budget"}, {"service": "earmark.v1.Admin"}],
                "waitForReady": True,
            }
        ]
    }
)
CHANNEL_OPTIONS = (("grpc.service_config", SERVICE_CONFIG),)
# What is retried: the sidecar unreachable or shutting down, and a deadline that passed (the
# call may have been decided; the same idempotency key makes a retry answer the same).
RETRIED_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def _bearer(token: str | None) -> tuple[tuple[str, str], ...] | None:
    return (("authorization", f"Bearer {token}"),) if token else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How UNAVAILABLE and DEADLINE_EXCEEDED are retried: at most attempts_max calls in
    all, with full-jitter exponential backoff between backoff_seconds_base and
    backoff_seconds_max."""

    attempts_max: int = 5
    backoff_seconds_base: float = 0.05
    backoff_seconds_max: float = 2.0

    def __post_init__(self) -> None:
        assert 1 <= self.attempts_max <= 100
        assert 0 < self.backoff_seconds_base <= self.backoff_seconds_max <= 60

    def backoff(self, attempt: int, rng: random.Random) -> float:
        ceiling = min(self.backoff_seconds_max, self.backoff_seconds_base * 2**attempt)
        return rng.uniform(0.0, ceiling)


@dataclass(frozen=True, slots=True)
class Reservation:
    """Reserve said yes: the hold's id, amount and lease deadline."""

    reservation_id: str
    budget_id: str
    amount: int
    remaining: int | None
    expires_at: datetime
    message: str
    estimate_source: EstimateSource = EstimateSource.CALLER
    # The price version a shape was priced at; 0 when none was.
    price_version: int = 0

    admitted = True


@dataclass(frozen=True, slots=True)
class Charged:
    charged: int
    capped: bool
    total_charged: int
    hold_remaining: int
    expires_at: datetime
    price_version: int = 0
    # What the Charge asked for: its amount, or its usage priced.
    requested: int = 0


@dataclass(frozen=True, slots=True)
class Settled:
    charged: int
    released: int
    overshoot: int
    state: HoldState
    price_version: int = 0


@dataclass(frozen=True, slots=True)
class BudgetState:
    budget_id: str
    limit: int | None
    used: int
    held: int
    remaining: int | None
    unit: str
    open_reservations: int
    default_estimate: int | None = None
    estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN
    exceeded: bool = False


def _shape(shape: Shape) -> pb.UsageShape:
    return pb.UsageShape(
        provider=shape.provider,
        model=shape.model,
        input_tokens=shape.input_tokens,
        max_output_tokens=shape.max_output_tokens,
        cached_input_tokens=shape.cached_input_tokens,
        attempts=shape.attempts,
    )


def _usage(usage: Usage) -> pb.TokenUsage:
    return pb.TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        requests=usage.requests,
        provider=usage.provider,
        model=usage.model,
    )


def _duration(seconds: float) -> Duration:
    whole = int(seconds)
    return Duration(seconds=whole, nanos=round((seconds - whole) * 1e9))


def _budget_state(reply: pb.BudgetState) -> BudgetState:
    return BudgetState(
        budget_id=reply.budget_id,
        limit=reply.limit if reply.HasField("limit") else None,
        used=reply.used,
        held=reply.held,
        remaining=reply.remaining if reply.HasField("remaining") else None,
        unit=reply.unit,
        open_reservations=reply.open_reservations,
        default_estimate=reply.default_estimate if reply.HasField("default_estimate") else None,
        estimate_policy=EstimatePolicy(reply.estimate_policy or EstimatePolicy.MEDIAN),
        exceeded=reply.exceeded,
    )


class AsyncClient:
    """Talks to one Earmark sidecar. Use as `async with AsyncClient() as client:`.

    token is the worker token, when the sidecar has --worker-token-file; credentials make
    the channel TLS (grpc.ssl_channel_credentials). Admin calls (put_budget, get_budget)
    go to admin_target, the sidecar's admin listener, with admin_token if it needs one."""

    def __init__(
        self,
        target: str | None = None,
        *,
        admin_target: str | None = None,
        token: str | None = None,
        admin_token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        timeout_seconds: float = 5.0,
        retry: RetryPolicy | None = None,
        channel: grpc.aio.Channel | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    ) -> None:
        assert 0 < timeout_seconds <= 600
        self._interceptors = list(interceptors)
        target = target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET
        self.target = target
        self.admin_target = admin_target or os.environ.get(ADMIN_TARGET_ENV) or DEFAULT_ADMIN_TARGET
        self.timeout_seconds = timeout_seconds
        self.retry = retry or RetryPolicy()
        self._own_channel = channel is None
        if channel is None:
            channel = self._open(target, credentials)
        self._channel = channel
        self._credentials = credentials
        self._admin_channel: grpc.aio.Channel | None = None
        self._admin_stub: pb_grpc.AdminStub | None = None
        self._budget = pb_grpc.BudgetStub(self._channel)
        self._metadata = _bearer(token)
        self._admin_metadata = _bearer(admin_token)
        # The client whose admin channel this one uses (itself, unless it is a view).
        self._admin_owner: AsyncClient = self
        self._rng = random.Random()

    def options(
        self, *, timeout_seconds: float | None = None, metadata: Sequence[tuple[str, str]] = ()
    ) -> AsyncClient:
        """A view of this client for some calls: another deadline, and metadata added to
        every call (an `x-request-id`, which the sidecar logs; a W3C `traceparent`). It
        shares this client's channels: close the client, not the view."""
        view = copy.copy(self)
        if timeout_seconds is not None:
            assert 0 < timeout_seconds <= 600
            view.timeout_seconds = timeout_seconds
        extra = tuple((key, value) for key, value in metadata)
        view._metadata = (*(self._metadata or ()), *extra) or None
        view._admin_metadata = (*(self._admin_metadata or ()), *extra) or None
        view._own_channel = False
        return view

    def _open(self, target: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
        """A channel to target, TLS with credentials, through the client's interceptors."""
        if credentials is not None:
            return grpc.aio.secure_channel(
                target, credentials, options=CHANNEL_OPTIONS, interceptors=self._interceptors
            )
        return grpc.aio.insecure_channel(
            target, options=CHANNEL_OPTIONS, interceptors=self._interceptors
        )

    def _admin(self) -> pb_grpc.AdminStub:
        """Admin has its own listener; its channel opens on the first admin call (on the
        client, when this is a view of it)."""
        if self._admin_owner is not self:
            return self._admin_owner._admin()
        if self._admin_stub is None:
            target = self.admin_target
            tls = self._credentials is not None and not target.startswith("unix:")
            self._admin_channel = self._open(target, self._credentials if tls else None)
            self._admin_stub = pb_grpc.AdminStub(self._admin_channel)
        return self._admin_stub

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._own_channel:
            await self._channel.close(grace=None)
        if self._admin_channel is not None and self._admin_owner is self:
            await self._admin_channel.close(grace=None)

    async def _call(self, call: Callable[[], Awaitable[T]]) -> T:
        """Runs call, again after UNAVAILABLE or DEADLINE_EXCEEDED (with the same request,
        so the same idempotency key), mapping a final failure to a ClientError."""
        for attempt in range(self.retry.attempts_max):
            try:
                return await call()
            except grpc.aio.AioRpcError as error:
                last_attempt = attempt + 1 == self.retry.attempts_max
                if error.code() not in RETRIED_CODES or last_attempt:
                    raise from_rpc_error(error) from None
            await asyncio.sleep(self.retry.backoff(attempt, self._rng))
        raise AssertionError("unreachable")  # pragma: no cover

    # Budget.

    async def reserve(
        self,
        budget_id: str,
        amount: int = 0,
        *,
        shape: Shape | None = None,
        job: str = "",
        account: str = "",
        feature: str = "",
        idempotency_key: str | None = None,
        lease_seconds: float | None = None,
        labels: Mapping[str, str] | None = None,
        also_budget_ids: Sequence[str] = (),
        final: bool = False,
    ) -> Reservation | Refusal:
        """Checks and holds part of budget_id (or, with account and budget_id "", of the
        account's current billing cycle for feature): amount, or what shape may cost at
        the price in effect, or (neither) the sidecar's estimate for job; the same on each
        of also_budget_ids, all or nothing. final marks the job's final phase, which may
        use a budget's output escrow. A refusal is returned, not raised."""
        request = pb.ReserveRequest(
            budget_id=budget_id,
            amount=amount,
            job=job,
            account=account,
            feature=feature,
            idempotency_key=idempotency_key or uuid.uuid4().hex,
            labels=dict(labels or {}),
            also_budget_ids=list(also_budget_ids),
            phase=pb.PHASE_FINAL if final else pb.PHASE_WORK,
        )
        if shape is not None:
            request.shape.CopyFrom(_shape(shape))
        if lease_seconds is not None:
            request.lease.CopyFrom(_duration(lease_seconds))
        reply = await self._call(
            lambda: self._budget.Reserve(
                request, timeout=self.timeout_seconds, metadata=self._metadata
            )
        )
        remaining = reply.remaining if reply.HasField("remaining") else None
        if not reply.admitted:
            return Refusal(
                reply.budget_id or budget_id,
                reply.amount,
                RefusalReason(reply.reason),
                remaining,
                reply.message,
                reply.refused_budget_id,
            )
        return Reservation(
            reservation_id=reply.reservation_id,
            budget_id=reply.budget_id or budget_id,
            amount=reply.amount,
            remaining=remaining,
            expires_at=reply.expires_at.ToDatetime(tzinfo=UTC),
            message=reply.message,
            estimate_source=EstimateSource(reply.estimate_source),
            price_version=reply.price_version,
        )

    async def charge(
        self,
        reservation_id: str,
        amount: int = 0,
        *,
        usage: Usage | None = None,
        idempotency_key: str | None = None,
    ) -> Charged:
        """Debits one step before it runs, an amount or usage priced now; `capped` means
        the worker must stop."""
        request = pb.ChargeRequest(
            reservation_id=reservation_id,
            amount=amount,
            idempotency_key=idempotency_key or uuid.uuid4().hex,
        )
        if usage is not None:
            request.usage.CopyFrom(_usage(usage))
        reply = await self._call(
            lambda: self._budget.Charge(
                request, timeout=self.timeout_seconds, metadata=self._metadata
            )
        )
        return Charged(
            charged=reply.charged,
            capped=reply.capped,
            total_charged=reply.total_charged,
            hold_remaining=reply.hold_remaining,
            expires_at=reply.expires_at.ToDatetime(tzinfo=UTC),
            price_version=reply.price_version,
            requested=reply.requested,
        )

    async def renew(self, reservation_id: str, lease_seconds: float | None = None) -> datetime:
        """Extends the hold's lease; returns the new deadline."""
        request = pb.RenewRequest(reservation_id=reservation_id)
        if lease_seconds is not None:
            request.lease.CopyFrom(_duration(lease_seconds))
        reply = await self._call(
            lambda: self._budget.Renew(
                request, timeout=self.timeout_seconds, metadata=self._metadata
            )
        )
        return reply.expires_at.ToDatetime(tzinfo=UTC)  # type: ignore[no-any-return]

    async def settle(
        self,
        reservation_id: str,
        used: int = 0,
        outcome: Outcome = Outcome.SUCCEEDED,
        *,
        usage: Usage | None = None,
    ) -> Settled:
        """Charges what the job used in all (an amount, or usage priced now) and returns
        the rest of the hold."""
        request = pb.SettleRequest(
            reservation_id=reservation_id,
            used=used,
            outcome=int(outcome),  # type: ignore[arg-type]
        )
        if usage is not None:
            request.usage.CopyFrom(_usage(usage))
        reply = await self._call(
            lambda: self._budget.Settle(
                request, timeout=self.timeout_seconds, metadata=self._metadata
            )
        )
        return Settled(
            reply.charged,
            reply.released,
            reply.overshoot,
            HoldState(reply.state),
            reply.price_version,
        )

    def hold(
        self,
        budget_id: str,
        amount: int,
        *,
        lease_seconds: float | None = None,
        labels: Mapping[str, str] | None = None,
        raise_on_refusal: bool = True,
        account: str = "",
        shape: Shape | None = None,
        job: str = "",
        also_budget_ids: Sequence[str] = (),
    ) -> Hold:
        """A hold as an async context manager: reserve on enter, renew while the block
        runs, settle on exit (see earmark.client.hold.Hold). With account (and budget_id
        ""), the hold is on the account's current billing cycle; with shape (and amount 0)
        it holds what the shape may cost, with job the job's estimate."""
        return Hold(
            self,
            budget_id,
            amount,
            lease_seconds=lease_seconds,
            labels=labels,
            raise_on_refusal=raise_on_refusal,
            account=account,
            shape=shape,
            job=job,
            also_budget_ids=also_budget_ids,
        )

    # Admin.

    async def put_budget(
        self,
        budget_id: str,
        limit: int | None,
        unit: str = "",
        *,
        default_estimate: int | None = None,
        estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN,
    ) -> BudgetState:
        request = pb.PutBudgetRequest(
            budget_id=budget_id,
            unit=unit,
            estimate_policy=int(estimate_policy),  # type: ignore[arg-type]
        )
        if limit is not None:
            request.limit = limit
        if default_estimate is not None:
            request.default_estimate = default_estimate
        reply = await self._call(
            lambda: self._admin().PutBudget(
                request, timeout=self.timeout_seconds, metadata=self._admin_metadata
            )
        )
        return _budget_state(reply)

    async def delete_budget(self, budget_id: str) -> BudgetState:
        """Archives a budget with no open holds (its ledger stays readable)."""
        request = pb.DeleteBudgetRequest(budget_id=budget_id)
        reply = await self._call(
            lambda: self._admin().DeleteBudget(
                request, timeout=self.timeout_seconds, metadata=self._admin_metadata
            )
        )
        return _budget_state(reply)

    async def get_budget(self, budget_id: str) -> BudgetState:
        request = pb.GetBudgetRequest(budget_id=budget_id)
        reply = await self._call(
            lambda: self._admin().GetBudget(
                request, timeout=self.timeout_seconds, metadata=self._admin_metadata
            )
        )
        return _budget_state(reply)
