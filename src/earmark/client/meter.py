"""What the metered provider clients share (earmark.client.llm for OpenAI,
earmark.client.anthropic for Anthropic): where calls are held (Meter), the errors a spent
hold raises, how a failed call's hold settles, and the maximum answer a hold covers.

This module imports no provider package, so that each wrapper needs only its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from earmark import limits
from earmark.client.errors import EarmarkClientError
from earmark.client.types import Charged, RetryPolicy
from earmark.core.model import Outcome
from earmark.core.prices import TOKENS_PER_RATE

log = logging.getLogger("earmark.client")

# The HTTP clients' errors raised before a request's bytes left (httpx's, and httpx2's, the
# fork that current openai and anthropic packages send with): the connection or the pool
# never gave a socket, so the provider saw nothing and billed nothing. Named rather than
# imported so that this module needs neither.
NOT_SENT = frozenset(
    {"ConnectError", "ConnectTimeout", "PoolTimeout", "UnsupportedProtocol", "ProxyError"}
)
# Transport errors after sending (a read timed out, the connection dropped): whether the
# provider ran the call is unknown. Their common base, in httpx and httpx2 alike.
TRANSPORT_ERROR = "TransportError"


class HoldCappedError(EarmarkClientError):
    """The call's hold is spent (a Charge came back capped, or it covers no answer): it
    was not sent, or, for a stream, reading stopped."""

    reason = "HOLD_CAPPED"

    def __init__(self, reservation_id: str, what: str) -> None:
        super().__init__(f"reservation {reservation_id}: the hold is spent; {what}")
        self.about = {"reservation_id": reservation_id}


class StreamCappedError(HoldCappedError):
    """A streamed answer was cut off: the stream was closed and the hold settled at the
    tokens read."""

    def __init__(self, reservation_id: str, output_tokens: int) -> None:
        super().__init__(
            reservation_id,
            f"the stream was closed after about {output_tokens} output tokens",
        )


@dataclass(frozen=True, slots=True)
class Meter:
    """Where and how calls are held: the budget (and the budgets it nests in), the provider
    the price book knows the models under, the job whose estimates learn, and the attempts."""

    budget_id: str
    # The provider the price book names the models under (metered() sets "anthropic" for
    # an Anthropic client).
    provider: str = "openai"
    job: str = ""
    also_budget_ids: Sequence[str] = ()
    # Set (with budget_id ""): the calls hold on the account's current billing cycle, the
    # only way onto a cycle budget, which refuses to be named by its id.
    account: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    # The holds' lease; None: the sidecar's default. The hold renews while the call runs.
    lease_seconds: float | None = None
    # Attempts in all (each on its own hold), and the full-jitter backoff between them.
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(3, 0.5, 8.0))
    # The most output tokens one call's hold covers: a request asking for more (Anthropic's
    # required max_tokens is often set far above what a call needs) is held for this many
    # and sent with its maximum lowered to what the hold covers. None: the request's own.
    output_tokens_max: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.retry.attempts_max <= limits.llm_attempts_max:
            raise ValueError(
                f"retry.attempts_max must be from 1 to {limits.llm_attempts_max} for model "
                f"calls, not {self.retry.attempts_max}"
            )
        if self.output_tokens_max is not None and self.output_tokens_max < 1:
            raise ValueError(f"output_tokens_max must be at least 1, not {self.output_tokens_max}")


class Settling(Protocol):
    """What a failed call sets on its hold (a Hold or a SyncHold) before it settles."""

    used: int | None
    outcome: Outcome | None


def _causes(error: BaseException) -> list[BaseException]:
    """error and what raised it, down the chain (the provider client wraps the HTTP
    client's error as its cause)."""
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _type_names(error: BaseException) -> set[str]:
    return {kind.__name__ for kind in type(error).__mro__}


def never_sent(error: BaseException) -> bool:
    """The HTTP client failed before the request left (a refused connection)."""
    return any(type(cause).__name__ in NOT_SENT for cause in _causes(error))


@dataclass(frozen=True, slots=True)
class ProviderErrors:
    """A provider package's error classes: an answer with a status, and a failure to get
    one (a timeout is one of these in both packages)."""

    status: type[BaseException]
    connection: type[BaseException]


def unbilled(error: BaseException, errors: ProviderErrors) -> bool:
    """The provider answered no (a 4xx: a bad request, a rate limit) or nothing was sent
    (a spent hold, a refused connection): nothing was billed."""
    if isinstance(error, HoldCappedError):
        return not isinstance(error, StreamCappedError)
    if isinstance(error, errors.status):
        return int(getattr(error, "status_code", 500)) < 500
    return isinstance(error, errors.connection) and never_sent(error)


def unknown(error: BaseException, errors: ProviderErrors) -> bool:
    """The request was sent and no answer says what became of it: a timeout, a dropped
    connection or a 5xx. The provider may have run (and billed) it."""
    if unbilled(error, errors):
        return False
    if isinstance(error, errors.status | errors.connection):
        return True
    return any(TRANSPORT_ERROR in _type_names(cause) for cause in _causes(error))


def settle_failed(hold: Settling, error: BaseException, errors: ProviderErrors) -> BaseException:
    """Sets how hold settles after error and returns the exception its exit is given: at
    nothing when nothing was billed; UNKNOWN (in doubt at once, with what was charged)
    when the provider may have billed it; else FAILED at what was charged, or CANCELLED
    when a spent hold stopped it on purpose."""
    if unbilled(error, errors):
        hold.used = 0
    elif unknown(error, errors):
        hold.outcome = Outcome.UNKNOWN
    return asyncio.CancelledError() if isinstance(error, HoldCappedError) else error


def covered_tokens(charged: Charged) -> int | None:
    """The output tokens what is left of the hold after the prompt's charge buys: tokens
    one for one on a tokens budget (its charge has no price version), else at the output
    rate the sidecar priced the prompt's charge at (None: output is free, or the charge
    was not priced)."""
    if charged.price_version == 0:
        return charged.hold_remaining
    if charged.output_per_mtok <= 0:
        return None
    return charged.hold_remaining * TOKENS_PER_RATE // charged.output_per_mtok


def lowered(
    reservation_id: str, asked: int | None, covered: int | None, choices: int = 1
) -> int | None:
    """The maximum answer to send instead of asked (None: send the request as it is), so
    that the provider itself stops where the hold ends; HoldCappedError when the hold
    covers less than limits.llm_output_tokens_min tokens of each of the choices."""
    if covered is None:
        return None
    each = covered // max(1, choices)
    if asked is not None and asked <= each:
        return None
    if each < limits.llm_output_tokens_min:
        raise HoldCappedError(reservation_id, "it covers no answer after the prompt; not sent")
    return each


def asked_most(request: Mapping[str, Any]) -> int | None:
    """The maximum answer the caller set, if any (OpenAI's two names, Anthropic's one)."""
    most = request.get("max_completion_tokens") or request.get("max_tokens")
    return int(most) if most else None


def held_most(request: Mapping[str, Any], ceiling: int | None) -> int | None:
    """The maximum answer the hold covers: the caller's, at most the meter's ceiling."""
    most = [n for n in (asked_most(request), ceiling) if n is not None]
    return min(most) if most else None


def needs_cover(request: Mapping[str, Any], ceiling: int | None) -> bool:
    """Whether the hold may cover less than the request lets the provider answer."""
    asked = asked_most(request)
    return asked is None or (ceiling is not None and asked > ceiling)


def covered_request(
    request: dict[str, Any], reservation_id: str, charged: Charged
) -> dict[str, Any]:
    """The request with its maximum answer lowered to what the hold covers after the
    prompt's charge (n choices share it), under the name the caller used
    (max_completion_tokens when it named none); as it is when it asks no more."""
    covered = covered_tokens(charged)
    choices = int(request.get("n") or 1)
    most = lowered(reservation_id, asked_most(request), covered, choices)
    if most is None:
        return request
    name = "max_tokens" if "max_tokens" in request else "max_completion_tokens"
    return {**request, name: most}
