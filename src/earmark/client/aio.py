"""AsyncClient: the worker SDK on grpc.aio, and the one description of every call: the
synchronous Client (sync.py) runs these coroutines, so the two cannot drift.

Every attempt has a deadline. UNAVAILABLE and DEADLINE_EXCEEDED are retried with bounded,
jittered backoff; that is safe because Reserve and Charge carry an idempotency key,
generated once per logical call and sent again on each retry, and Renew and Settle are
idempotent as they are (docs/clients.md).
A call whose channel never connected within its deadline raises UnavailableError naming the
target at once: another attempt would only wait another deadline for the same nobody.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import random
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from earmark import limits
from earmark.client.admin import AdminCalls
from earmark.client.errors import ClientError, from_rpc_error, unreachable
from earmark.client.hold import Hold, HoldInput
from earmark.client.journal import Journal
from earmark.client.types import (
    BudgetState,
    Charged,
    Refusal,
    Reservation,
    RetryPolicy,
    Settled,
    charged_of,
    check_timeout,
    duration_message,
    reserve_answer,
    settled_of,
    shape_message,
    usage_message,
)
from earmark.core.model import Outcome
from earmark.core.prices import Shape, Usage
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc

log = logging.getLogger("earmark.client")

# A Settle refused with one of these will be refused again (the hold is not there, or was
# settled otherwise, or the request can never be taken): its journal record is removed
# rather than sent again. PERMISSION_DENIED is not one: a record replayed under another
# worker token (a journal directory two callers share, a token changed) is still the spend
# of the caller that made the hold, and the recovery profile keeps records across
# authentication failures (docs/recovery-conformance.md).
FINAL_CODES = frozenset({
    grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.OUT_OF_RANGE,
})  # fmt: skip
# The states a Settle's answer can carry. An answer in any other state (or one that did not
# decode, which grpc.aio hands over as None) is not a settled answer: the Settle may have
# landed or not, so its journal record stays and recover() sends it again.
SETTLE_ANSWER_STATES = frozenset({
    pb.RESERVATION_STATE_SETTLED, pb.RESERVATION_STATE_EXPIRED, pb.RESERVATION_STATE_IN_DOUBT,
})  # fmt: skip


def _settle_answer(request: pb.SettleRequest, answer: object) -> pb.SettleResponse:
    """answer, when it is what a Settle answers; else a ClientError (INTERNAL, which is not
    final) saying the outcome is unknown."""
    if isinstance(answer, pb.SettleResponse):
        amounts = (answer.charged, answer.released, answer.overshoot)
        if answer.state in SETTLE_ANSWER_STATES and min(amounts) >= 0:
            return answer
        what = f"state {answer.state}, amounts {amounts}"
    else:
        what = "a body that is no SettleResponse"
    raise ClientError(
        grpc.StatusCode.INTERNAL,
        f"the settle of reservation {request.reservation_id} was answered with {what}: "
        "it may or may not have landed",
    )


# Re-exported: workers and tests import these from here since before types.py held them.
__all__ = [
    "ADMIN_TARGET_ENV",
    "DEFAULT_ADMIN_TARGET",
    "DEFAULT_TARGET",
    "TARGET_ENV",
    "AsyncClient",
    "BudgetState",
    "Charged",
    "Reservation",
    "RetryPolicy",
    "Settled",
]

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


class AsyncClient(AdminCalls):
    """Talks to one Earmark sidecar. Use as `async with AsyncClient() as client:`.

    token is the worker token, when the sidecar has --worker-token-file; credentials make
    the channel TLS (grpc.ssl_channel_credentials; Admin's too, unless it is a Unix
    socket). Admin calls (put_budget, list_holds...) go to admin_target, the
    sidecar's admin listener, with admin_token if it needs one (they are in admin.py, with
    prices, cycles, holds and the ledger). channel, when given, is
    used instead of one to target (and is not closed with the client)."""

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
        journal_dir: str | Path | None = None,
    ) -> None:
        self.timeout_seconds = check_timeout(timeout_seconds)
        # With a directory: every Settle is on disk before it is sent (earmark.client.journal),
        # and what a client that died left there is sent again by recover().
        self._journal = Journal(Path(journal_dir)) if journal_dir is not None else None
        self._interceptors = list(interceptors)
        self.target = target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET
        self.admin_target = admin_target or os.environ.get(ADMIN_TARGET_ENV) or DEFAULT_ADMIN_TARGET
        self.retry = retry or RetryPolicy()
        self._own_channel = channel is None
        self._credentials = credentials
        self._channel = channel if channel is not None else self._open(self.target, credentials)
        self._admin_channel: grpc.aio.Channel | None = None
        self._admin_stub: pb_grpc.AdminStub | None = None
        self._budget = pb_grpc.BudgetStub(self._channel)
        self._metadata = _bearer(token)
        self._admin_metadata = _bearer(admin_token)
        # The client whose admin channel this one uses (itself, unless it is a view).
        self._admin_owner: AsyncClient = self
        self._rng = random.Random()
        # Settles sent after their call returned to its caller (metered calls settle off
        # the caller's path): close() and flush() wait for them.
        self._background: set[asyncio.Task[Any]] = set()
        # Every Settle under way, whoever awaits it (a hold's exit, a caller's settle()):
        # flush() waits for these too. A view shares the set with its client.
        self._settles: set[asyncio.Task[Settled]] = set()
        # Holds a metered client keeps open after their call answered, while the call runs
        # on at the provider (a background response), each with what ends it in doubt
        # (its call's id recorded on it): close() ends them before it waits for settles.
        self._kept: dict[object, Callable[[], None]] = {}

    def options(
        self, *, timeout_seconds: float | None = None, metadata: Sequence[tuple[str, str]] = ()
    ) -> AsyncClient:
        """A view of this client for some calls: another deadline, and metadata added to
        every call (an `x-request-id`, which the sidecar logs; a W3C `traceparent`). It
        shares this client's channels: close the client, not the view."""
        view = copy.copy(self)
        if timeout_seconds is not None:
            view.timeout_seconds = check_timeout(timeout_seconds)
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

    def _admin(self) -> tuple[pb_grpc.AdminStub, grpc.aio.Channel]:
        """Admin has its own listener; its channel opens on the first admin call (on the
        client, when this is a view of it)."""
        if self._admin_owner is not self:
            return self._admin_owner._admin()
        if self._admin_stub is None or self._admin_channel is None:
            target = self.admin_target
            tls = self._credentials is not None and not target.startswith("unix:")
            self._admin_channel = self._open(target, self._credentials if tls else None)
            self._admin_stub = pb_grpc.AdminStub(self._admin_channel)
        return self._admin_stub, self._admin_channel

    async def __aenter__(self) -> AsyncClient:
        await self.recover()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _in_background(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Runs coroutine (a settle, a hold's label) without its caller waiting; flush()
        waits for it."""
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return task

    def _in_background_later(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """_in_background, coroutine started limits.client_sync_settle_start_seconds later:
        the settle of a sync caller's call, whose thread is still handing its answer back
        (see limits)."""
        return self._in_background(_started_later(coroutine))

    def _background_done(self, task: asyncio.Task[Any]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The hold stays open: its lease passes and the sweeper closes it (in doubt,
            # when it was charged), so the spend is not lost, only late.
            log.warning("earmark settle in the background failed: %s", task.exception())

    async def flush(self, timeout_seconds: float = limits.client_flush_seconds_max) -> bool:
        """Waits, at most timeout_seconds, for the settles under way: those in flight and
        those sent in the background. True when all of them were answered (or failed);
        False when some were still unanswered at the timeout. Those are not cancelled, and
        their journal records stay on disk for the next recover() (a worker shutting down
        may exit then: the next client sends them)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        # Again while the wait lasts: a background task may start its settle meanwhile.
        while pending := self._background | self._settles:
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.wait(pending, timeout=left)
        return True

    async def close(self) -> None:
        """Ends the holds kept open for calls still running at the provider, in doubt (see
        earmark.client.wire_transport), waits for the settles still under way (flush, with
        its longest wait), then closes the client's channels (a view's close does nothing:
        close its client). A settle still unanswered then fails, and its journal record
        stays for recover()."""
        if self._admin_owner is self:
            for end in list(self._kept.values()):
                end()
        await self.flush()
        if self._own_channel:
            await self._channel.close(grace=None)
        if self._admin_channel is not None and self._admin_owner is self:
            await self._admin_channel.close(grace=None)

    async def _budget_call(self, method: str, request: Any) -> Any:
        """Budget's method, with the worker token."""
        call = getattr(self._budget, method)
        return await self._unary(call, request, self._channel, self.target, self._metadata)

    async def _admin_call(self, method: str, request: Any) -> Any:
        """Admin's method, on the admin listener, with the admin token."""
        stub, channel = self._admin()
        call = getattr(stub, method)
        return await self._unary(call, request, channel, self.admin_target, self._admin_metadata)

    async def _unary(
        self,
        call: Callable[..., Awaitable[Any]],
        request: Any,
        channel: grpc.aio.Channel,
        target: str,
        metadata: tuple[tuple[str, str], ...] | None,
    ) -> Any:
        """Sends request, again after UNAVAILABLE or DEADLINE_EXCEEDED (the same request,
        so the same idempotency key), mapping a final failure to a ClientError."""
        for attempt in range(self.retry.attempts_max):
            try:
                return await call(request, timeout=self.timeout_seconds, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                code = error.code()
                # The whole deadline passed waiting for a connection: nobody listens there.
                connected = channel.get_state() == grpc.ChannelConnectivity.READY
                if code == grpc.StatusCode.DEADLINE_EXCEEDED and not connected:
                    raise unreachable(target, self.timeout_seconds) from None
                if code not in RETRIED_CODES or attempt + 1 == self.retry.attempts_max:
                    raise from_rpc_error(error, target) from None
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
        charge: Usage | None = None,
        degrade: bool = False,
    ) -> Reservation | Refusal:
        """Checks and holds part of budget_id (or, with account and budget_id "", of the
        account's current billing cycle for feature): amount, or what shape may cost at
        the price in effect, or (neither) the sidecar's estimate for job; the same on each
        of also_budget_ids, all or nothing. final marks the job's final phase, which may
        use a budget's output escrow. charge is charged on the new hold at once (a call's
        prompt, about to be sent); with degrade, a shape whose output does not fit is held
        for the largest output that does (Reservation.max_output_tokens). A refusal is
        returned, not raised."""
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
            request.shape.CopyFrom(shape_message(shape))
        if charge is not None:
            request.charge.CopyFrom(usage_message(charge))
        request.degrade = degrade
        if lease_seconds is not None:
            request.lease.CopyFrom(duration_message(lease_seconds))
        return reserve_answer(await self._budget_call("Reserve", request), budget_id)

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
            request.usage.CopyFrom(usage_message(usage))
        return charged_of(await self._budget_call("Charge", request))

    async def renew(
        self,
        reservation_id: str,
        lease_seconds: float | None = None,
        *,
        labels: Mapping[str, str] | None = None,
    ) -> datetime:
        """Extends the hold's lease; returns the new deadline. labels are added to the
        hold's (a key it has keeps its value: a different one is refused): what was
        learned after the Reserve, such as the provider's id for a call that runs on after
        its answer."""
        request = pb.RenewRequest(reservation_id=reservation_id, labels=dict(labels or {}))
        if lease_seconds is not None:
            request.lease.CopyFrom(duration_message(lease_seconds))
        reply: pb.RenewResponse = await self._budget_call("Renew", request)
        return reply.expires_at.ToDatetime(tzinfo=UTC)

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
            request.usage.CopyFrom(usage_message(usage))
        # A task of its own, so that flush() can wait for it; the caller's cancellation
        # still cancels it, as it cancelled the call before.
        task = asyncio.ensure_future(self._send_settle(request))
        self._settles.add(task)
        task.add_done_callback(self._settles.discard)
        return await task

    async def _send_settle(self, request: pb.SettleRequest) -> Settled:
        if self._journal is None:
            return settled_of(await self._budget_call("Settle", request))
        return await self._journaled(self._journal, request)

    async def _journaled(self, journal: Journal, request: pb.SettleRequest) -> Settled:
        """Settle, its request on disk before it leaves, removed once answered or refused
        for good; left for recover() when the answer may yet come."""
        try:
            record = await asyncio.to_thread(journal.write, request)
        except OSError as error:
            # The journal's own failure is the operator's to know, and it does not stop the
            # settle: sent without a record, the spend is only as safe as without a journal.
            log.error("earmark journal: the settle of %s could not be written (%s); "
                      "sending it without a record", request.reservation_id, error)  # fmt: skip
            return settled_of(_settle_answer(request, await self._budget_call("Settle", request)))
        try:
            answer = _settle_answer(request, await self._budget_call("Settle", request))
        except ClientError as error:
            if error.code in FINAL_CODES:
                await self._forget(journal, record, request)
            raise
        await self._forget(journal, record, request)
        return settled_of(answer)

    async def _forget(self, journal: Journal, record: Path, request: pb.SettleRequest) -> None:
        """Removes an answered record. A removal that fails is a warning, not the settle's
        failure: the record is sent again later and answered the same."""
        try:
            await asyncio.to_thread(journal.remove, record, request.reservation_id)
        except OSError as error:
            log.warning("earmark journal: the answered settle of %s stays on disk (%s)",
                        request.reservation_id, error)  # fmt: skip

    async def recover(self) -> int:
        """Sends again every Settle the journal holds (a client that died before its answer
        came), each as it was first sent; returns how many were answered or refused for
        good (and removed). Those that fail for now stay for the next recover()."""
        if self._journal is None:
            return 0
        done = 0
        for record, request in await asyncio.to_thread(self._journal.pending):
            try:
                _settle_answer(request, await self._budget_call("Settle", request))
            except ClientError as error:
                if error.code not in FINAL_CODES:
                    log.warning("earmark journal: settle of %s not sent yet: %s",
                                request.reservation_id, error)  # fmt: skip
                    continue
            await self._forget(self._journal, record, request)
            done += 1
        return done

    def hold(
        self,
        budget_id: str,
        amount: int = 0,
        *,
        lease_seconds: float | None = None,
        labels: Mapping[str, str] | None = None,
        raise_on_refusal: bool = True,
        account: str = "",
        feature: str = "",
        shape: Shape | None = None,
        job: str = "",
        also_budget_ids: Sequence[str] = (),
        final: bool = False,
        charge: Usage | None = None,
        degrade: bool = False,
    ) -> Hold:
        """A hold as an async context manager: reserve on enter, renew while the block
        runs, settle on exit (see earmark.client.hold.Hold). With account (and budget_id
        ""), the hold is on the account's current billing cycle for feature; with shape
        (and amount 0) it holds what the shape may cost, with job the job's estimate;
        final, as for reserve(), may reach the budget's output escrow; charge and degrade
        as for reserve()."""
        what = HoldInput(
            budget_id,
            amount,
            shape=shape,
            charge=charge,
            job=job,
            also_budget_ids=also_budget_ids,
            labels=labels or {},
            lease_seconds=lease_seconds,
            account=account,
            feature=feature,
            degrade=degrade,
            final=final,
            raise_on_refusal=raise_on_refusal,
        )
        return Hold(self, what)


async def _started_later(coroutine: Coroutine[Any, Any, Any]) -> Any:
    try:
        await asyncio.sleep(limits.client_sync_settle_start_seconds)
    except BaseException:
        coroutine.close()
        raise
    return await coroutine
