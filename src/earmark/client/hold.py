"""hold(): the main way a worker uses Earmark.

    async with client.hold("acme/tokens", 40_000) as h:
        for step in steps:
            charged = await h.charge(step.estimate)
            if charged.capped:
                break                       # the hold is spent: stop
            await step.run()
        h.used = actual_total               # what the job really used

On enter it reserves (raising RefusedError, or handing back the refusal when asked to);
while the block runs it renews the lease at a third of its length; on exit it settles with
h.used (what was charged, if the block never set it). When the block raises, it settles
with outcome FAILED (CANCELLED for a cancellation) before the exception reaches the
caller. If a renewal finds the hold gone, the next charge raises HoldLostError.

Code whose hold spans no one block (a metered call settled when its stream ends, the
LiteLLM gate's hooks) drives the same steps by name: `await h.open()`, then `await
h.end(usage=...)` (or used=, outcome=) or `await h.end_in_doubt()`; the block is a thin
user of them. A hold ends once: an end after the first does nothing.

A retry of the expensive work must take a new hold: each hold() has its own idempotency
key, so a cheap first attempt never authorizes an expensive second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Protocol

from earmark import limits
from earmark.client.errors import (
    ClientError,
    HoldClosedError,
    HoldLostError,
    InvalidArgumentError,
    RefusedError,
    ReservationNotFoundError,
)
from earmark.client.types import Charged, Refusal, Reservation, Settled
from earmark.core.model import Outcome
from earmark.core.prices import Shape, Usage


class Calls(Protocol):
    """The calls a Hold makes, as it makes them: AsyncClient has them (with defaults). A
    protocol here, not AsyncClient, so that this module does not import the client that
    imports it."""

    async def reserve(
        self,
        budget_id: str,
        amount: int,
        *,
        shape: Shape | None,
        job: str,
        account: str,
        feature: str,
        idempotency_key: str | None,
        lease_seconds: float | None,
        labels: Mapping[str, str] | None,
        also_budget_ids: Sequence[str],
        final: bool,
        charge: Usage | None,
        degrade: bool,
    ) -> Reservation | Refusal: ...

    async def charge(
        self, reservation_id: str, amount: int, *, usage: Usage | None, idempotency_key: str | None
    ) -> Charged: ...

    async def renew(
        self,
        reservation_id: str,
        lease_seconds: float | None,
        *,
        labels: Mapping[str, str] | None,
    ) -> datetime: ...

    async def settle(
        self, reservation_id: str, used: int, outcome: Outcome, *, usage: Usage | None
    ) -> Settled: ...


log = logging.getLogger("earmark.client")


@dataclass(frozen=True, slots=True)
class HoldInput:
    """What a hold holds, as one value: AsyncClient.hold and Client.hold build it from
    their keywords, a metered call from its request (earmark.client.held_call), and each
    passes it down as it is, so that a field is added in one place."""

    budget_id: str
    amount: int = 0
    # With amount 0: what the call may cost at the price in effect.
    shape: Shape | None = None
    # Charged by the Reserve itself (a call's prompt): the hold is dispatched from the start.
    charge: Usage | None = None
    job: str = ""
    also_budget_ids: Sequence[str] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    # None: the sidecar's default lease (bounded by its --lease-seconds-max).
    lease_seconds: float | None = None
    # With budget_id "": the account's current billing cycle, for feature.
    account: str = ""
    feature: str = ""
    degrade: bool = False
    final: bool = False
    # False: a refusal is handed back on the Hold (Hold.refusal) instead of raised.
    raise_on_refusal: bool = True


# Renew when this fraction of the lease has passed, so two renewals can fail in a row
# before the hold expires.
renew_fraction = 1 / 3
# A Charge or Renew failing with one of these finds the hold gone: stop spending on it.
HOLD_GONE = (HoldClosedError, ReservationNotFoundError)
# Settles still running after their caller was cancelled again, kept from the collector.
_settling: set[asyncio.Task[Settled]] = set()


class Hold:
    """One reservation for the length of an `async with` block, or from open() to end."""

    def __init__(self, client: Calls, what: HoldInput) -> None:
        self.client = client
        # Charged on the hold by the Reserve itself (a call's prompt): the hold is
        # dispatched from the start, and charged counts it.
        self.prompt = what.charge
        self.degrade = what.degrade
        self.account = what.account
        self.feature = what.feature
        self.final = what.final
        self.budget_id = what.budget_id
        self.amount = what.amount
        self.shape = what.shape
        self.job = what.job
        self.also_budget_ids = tuple(what.also_budget_ids)
        # None: the sidecar's default lease (bounded by its --lease-seconds-max), learned
        # from the Reserve's answer for the renewals' pace.
        self.lease_seconds = what.lease_seconds
        self.labels = dict(what.labels)
        self.raise_on_refusal = what.raise_on_refusal
        self.idempotency_key = uuid.uuid4().hex
        # What the job used in all, set before the block ends: an amount, or the provider's
        # usage (priced by the sidecar; it wins over used).
        self.used: int | None = None
        self.usage: Usage | None = None
        # Set before the block ends to settle with this outcome instead of the one the
        # block's exit implies: Outcome.UNKNOWN when the caller cannot tell whether the
        # work ran (a provider call that timed out after it was sent), which keeps the hold
        # in doubt with what was charged until ResolveHold or a later Settle closes it.
        self.outcome: Outcome | None = None
        self.charged = 0
        self.reservation: Reservation | None = None
        self.refusal: Refusal | None = None
        self.settled: Settled | None = None
        self._lost: BaseException | None = None
        self._renewer: asyncio.Task[None] | None = None
        # Set by the first open() and the first end: a Hold reserves once and settles once.
        self._opened = False
        self._ended = False
        # Labels added by label() that no Renew has carried yet: the next renewal carries
        # them, so that a Renew that failed does not lose them.
        self._unsent: dict[str, str] = {}

    @property
    def admitted(self) -> bool:
        return self.reservation is not None

    @property
    def lost(self) -> bool:
        """A renewal (or a charge) found the hold gone: stop spending on it."""
        return self._lost is not None

    @property
    def reservation_id(self) -> str:
        if self.reservation is None:
            raise RefusedError(self._refusal())
        return self.reservation.reservation_id

    async def __aenter__(self) -> Hold:
        return await self.open()

    async def open(self) -> Hold:
        """Reserves and starts renewing; a refusal raises RefusedError, or with
        raise_on_refusal False is kept in refusal (nothing is held, and end does nothing).
        A Hold opens once: a retry takes a new hold, with its own idempotency key."""
        if self._opened:
            raise RuntimeError("this hold was opened already: a retry takes a new hold")
        self._opened = True
        result = await self.client.reserve(
            self.budget_id,
            self.amount,
            shape=self.shape,
            job=self.job,
            idempotency_key=self.idempotency_key,
            lease_seconds=self.lease_seconds,
            labels=self.labels,
            account=self.account,
            feature=self.feature,
            also_budget_ids=self.also_budget_ids,
            final=self.final,
            charge=self.prompt,
            degrade=self.degrade,
        )
        if isinstance(result, Refusal):
            self.refusal = result
            if self.raise_on_refusal:
                raise RefusedError(result)
            return self
        self.reservation = result
        self.charged = result.charged
        self._renewer = asyncio.create_task(self._renew_forever(), name="earmark-renew")
        return self

    async def charge(
        self, amount: int = 0, *, usage: Usage | None = None, idempotency_key: str | None = None
    ) -> Charged:
        """Debits one step against the hold before the step runs: an amount, or usage
        priced now."""
        rid = self.reservation_id
        if self._lost is not None:
            raise HoldLostError(f"reservation {rid} is gone: {self._lost}", self._lost) from (
                self._lost
            )
        try:
            result = await self.client.charge(
                rid, amount, usage=usage, idempotency_key=idempotency_key
            )
        except HOLD_GONE as error:
            self._lost = error
            raise HoldLostError(f"reservation {rid} is gone: {error.details}", error) from error
        self.charged = result.total_charged
        return result

    async def label(self, labels: Mapping[str, str]) -> None:
        """Adds labels to the hold now, in a Renew that carries them: what was learned
        after the Reserve (the provider's id for a call that runs on after its answer).
        When that Renew fails the next renewal carries them again; labels the sidecar
        refuses (INVALID_ARGUMENT) are dropped, and a hold that is gone raises
        HoldLostError."""
        rid = self.reservation_id
        self.labels.update(labels)
        self._unsent.update(labels)
        try:
            await self._renew(rid)
        except InvalidArgumentError:
            # Sent again, they would fail every renewal after this one, and the lease.
            for key in labels:
                self._unsent.pop(key, None)
            raise
        except HOLD_GONE as error:
            self._lost = error
            raise HoldLostError(f"reservation {rid} is gone: {error.details}", error) from error

    async def _renew(self, reservation_id: str) -> None:
        """One Renew, with the labels no Renew has carried yet; those it carried are not
        sent again."""
        carried = dict(self._unsent)
        await self.client.renew(reservation_id, self.lease_seconds, labels=carried)
        for key, value in carried.items():
            if self._unsent.get(key) == value:
                del self._unsent[key]

    def _lease_length(self) -> float:
        """The lease asked for, or what the sidecar granted (its default)."""
        if self.lease_seconds is not None:
            return self.lease_seconds
        assert self.reservation is not None
        granted = (self.reservation.expires_at - datetime.now(UTC)).total_seconds()
        return max(limits.lease_seconds_min, granted)

    async def _renew_forever(self) -> None:
        assert self.reservation is not None
        period = self._lease_length() * renew_fraction
        while True:
            await asyncio.sleep(period)
            try:
                await self._renew(self.reservation.reservation_id)
            except HOLD_GONE as error:
                self._lost = error
                return
            except InvalidArgumentError as error:
                # Labels the sidecar refuses would fail every renewal, and so the lease.
                rid = self.reservation.reservation_id
                log.warning("earmark: labels %s of reservation %s dropped: %s",
                            sorted(self._unsent), rid, error)  # fmt: skip
                self._unsent.clear()
            except ClientError as error:
                # Still unreachable after the client's retries: the lease may yet hold,
                # so try again at the next tick.
                log.warning(
                    "earmark renew of reservation %s failed (retried at the next renewal, "
                    "in %.1fs; the work goes on): %s",
                    self.reservation.reservation_id,
                    period,
                    error,
                )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._end(exc)

    async def end(
        self, *, usage: Usage | None = None, used: int | None = None, outcome: Outcome | None = None
    ) -> Settled | None:
        """Settles now: at usage (the provider's count, priced by the sidecar; it wins over
        used), or at used (None: what was charged), with outcome (None: SUCCEEDED). What is
        not given is what the code set on the hold (used, usage, outcome). Returns the
        settle's answer; None for a refused hold, and for an end after the first, which
        does nothing (a hold settles once)."""
        if self.reservation is None or self._ended:
            # Nothing to settle: what the hold says it settled at stays as it was.
            return None
        if usage is not None:
            self.usage = usage
        if used is not None:
            self.used = used
        if outcome is not None:
            self.outcome = outcome
        return await self._end(None)

    async def end_in_doubt(self) -> Settled | None:
        """Settles in doubt (Outcome.UNKNOWN) with what was charged: the work may have run
        (a provider call that timed out after it was sent); ResolveHold or a later Settle
        closes it."""
        return await self.end(outcome=Outcome.UNKNOWN)

    async def _end(self, exc: BaseException | None) -> Settled | None:
        """The one settle: its outcome the one set on the hold, else what exc (the block's
        exception, None for none) implies."""
        if self.reservation is None or self._ended:
            return None
        self._ended = True
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        if exc is None:
            outcome, used = Outcome.SUCCEEDED, self.used
        elif isinstance(exc, Exception):
            outcome, used = Outcome.FAILED, self.used
        else:
            # Cancellation, KeyboardInterrupt, SystemExit.
            outcome, used = Outcome.CANCELLED, self.used
        outcome = self.outcome or outcome
        used = self.charged if used is None else used
        # Shielded: a second cancellation must not leave the hold unsettled.
        task = asyncio.ensure_future(
            self.client.settle(
                self.reservation_id,
                0 if self.usage is not None else used,
                outcome,
                usage=self.usage,
            )
        )
        _settling.add(task)
        task.add_done_callback(_settling.discard)
        try:
            self.settled = await asyncio.shield(task)
        except ClientError as error:
            if exc is None:
                # Not settled: an end after this one sends the same Settle again (the
                # sidecar answers a repeated Settle the same).
                self._ended = False
                raise
            # The block's own exception matters more; the hold's lease lapses and the sweeper
            # ends it (in doubt when it was charged, returned when not).
            log.warning("earmark settle failed after %r: %s", exc, error)
        return self.settled

    def _refusal(self) -> Refusal:
        assert self.refusal is not None
        return self.refusal
