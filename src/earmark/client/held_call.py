"""The held-call sequence: how one billable provider call goes through its hold, whatever
carries it (an httpx2 transport around a provider SDK's HTTP client, wire_transport.py;
the LiteLLM gate's hooks; any other SDK's hooks or HTTP client).

    held = HeldCall(earmark, HeldCallInput(provider, call, meter))
    refusal = await held.open()   # held by shape, the prompt charged in the same Reserve
    held.admitted()               # a refusal raises, before anything is sent
    cap = held.cap()              # the per-choice output cap to tell the provider
    ...                           # the driver sends, with the cap
    await held.end(held.at(usage))         # the provider's own count (None: in doubt)
    await held.end(failed(error))          # it raised: never sent, or in doubt
    await held.end(answered_with(status))  # an error status: a 4xx, or a 5xx

The driver owns what is its own: where the request is read (the provider module's Route
reads the Call: model, caps, choices, prompt), how the cap is put in the request, how the
answer's usage is read, and when each step runs (a JSON answer's end off the caller's path,
a stream's when it ends). It drives async steps only: a sync driver runs them on the
Earmark Client's loop, as every call of the sync Client is run.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypeVar

from earmark import limits
from earmark.client.errors import EarmarkClientError, RefusedError
from earmark.client.hold import Calls, Hold, HoldInput
from earmark.client.meter import HoldCappedError, Meter, never_sent
from earmark.client.types import Refusal, Settled
from earmark.client.wire import Call, cap_to_send, shape_of
from earmark.core.model import Outcome
from earmark.core.prices import Usage

E = TypeVar("E", bound=EarmarkClientError)


class Raising:
    """Earmark's errors as a provider SDK is to get them: each made a subclass of the SDK's
    base error too, so that the SDK raises it as it is (it wraps other errors of its HTTP
    client as connection errors, and retries them). No base: Earmark's own."""

    def __init__(self, base: type[Exception] | None = None) -> None:
        self.base = base
        self._made: dict[type[EarmarkClientError], type[EarmarkClientError]] = {}

    def __call__(self, kind: type[E]) -> type[E]:
        if self.base is None:
            return kind
        if kind not in self._made:
            made = type(kind.__name__, (kind, self.base), {"__module__": kind.__module__})
            self._made[kind] = made
        return self._made[kind]  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class HeldCallInput:
    """What one billable call is held for: the provider's reading of its request (call),
    priced under provider (the name the price book knows), held where meter says, its
    refusals raised as errors says."""

    provider: str
    call: Call
    meter: Meter
    errors: Raising = field(default_factory=Raising)

    def hold(self) -> HoldInput:
        """The hold: the call's shape, its prompt charged in the Reserve; a refusal kept
        on the hold, for the driver to raise or answer as its caller expects."""
        shape, prompt = shape_of(self.provider, self.call, self.meter)
        m = self.meter
        return HoldInput(
            m.budget_id, 0, shape=shape, charge=prompt, job=m.job,
            also_budget_ids=m.also_budget_ids, labels=m.hold_labels(),
            lease_seconds=m.lease_seconds, account=m.account, degrade=m.degrade,
            raise_on_refusal=False,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Ending:
    """How a held call's hold ends: at usage (the provider's count), or at used (None:
    what was charged, its prompt) with outcome (None: SUCCEEDED)."""

    usage: Usage | None = None
    used: int | None = None
    outcome: Outcome | None = None


# The provider may have run the call and billed it (a 5xx, a timeout, a dropped
# connection, a stream that ended without its usage): in doubt with the prompt's charge,
# until `earmark reconcile`, ResolveHold or a later Settle closes it.
IN_DOUBT = Ending(outcome=Outcome.UNKNOWN)
# Nothing left the machine (the connection was refused, or the hold covers no answer).
NOT_SENT = Ending(used=0)
# The provider refused the call (a 4xx): it billed nothing.
REFUSED = Ending(used=0, outcome=Outcome.FAILED)


def failed(error: BaseException) -> Ending:
    """How the hold ends when sending or reading the answer raised: at nothing when the
    request never left; in doubt otherwise, since the provider may have run it."""
    if isinstance(error, HoldCappedError) or never_sent(error):
        return NOT_SENT
    return IN_DOUBT


def answered_with(status: int) -> Ending:
    """How the hold ends on an error status: a 4xx billed nothing; a 5xx may have run."""
    return IN_DOUBT if status >= 500 else REFUSED


class HeldCall:
    """One billable call from its hold to the hold's end (see the module)."""

    def __init__(self, earmark: Calls, what: HeldCallInput) -> None:
        self.what = what
        self.call = what.call
        self.hold = Hold(earmark, what.hold())

    async def open(self) -> Refusal | None:
        """Holds the call; its refusal (nothing held) or None. A Reserve that fails raises
        the client's error."""
        await self.hold.open()
        return self.hold.refusal

    def admitted(self) -> None:
        """Raises the refusal (as the SDK's error too), before anything is sent."""
        if self.hold.refusal is not None:
            raise self.what.errors(RefusedError)(self.hold.refusal)

    def cap(self) -> int | None:
        """The per-choice output cap to tell the provider (None: the caller's own): what
        the budget pays. Raises HoldCappedError, unsent, when the hold covers less than a
        token for each of the call's choices."""
        reservation = self.hold.reservation
        assert reservation is not None
        told = reservation.max_output_tokens
        call = self.call
        if call.has_output and 0 < told < call.choices * limits.llm_output_tokens_min:
            raise self.what.errors(HoldCappedError)(
                reservation.reservation_id,
                f"it covers {told} tokens for {call.choices} choices; not sent",
            )
        return cap_to_send(call, told, reservation.degraded)

    def at(self, usage: Usage | None) -> Ending:
        """The hold's end at the provider's usage, priced as the provider and model it was
        held for; in doubt without one."""
        if usage is None:
            return IN_DOUBT
        return Ending(usage=replace(usage, provider=self.what.provider, model=self.call.model))

    async def end(self, ending: Ending) -> Settled | None:
        """Settles the hold as ending says; once (a later end does nothing)."""
        return await self.hold.end(usage=ending.usage, used=ending.used, outcome=ending.outcome)

    async def end_in_doubt(self) -> Settled | None:
        return await self.end(IN_DOUBT)


__all__ = [
    "IN_DOUBT",
    "NOT_SENT",
    "REFUSED",
    "Ending",
    "HeldCall",
    "HeldCallInput",
    "Raising",
    "answered_with",
    "failed",
]
