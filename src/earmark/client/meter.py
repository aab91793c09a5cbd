"""What metered provider calls share (earmark.client.llm, earmark.client.wire): where
calls are held (Meter), the errors a spent hold raises, and whether a failed exchange ever
left the machine.

This module imports no provider package, so that each provider needs only its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from earmark import limits
from earmark.client.errors import EarmarkClientError
from earmark.client.types import RetryPolicy

# The HTTP clients' errors raised before a request's bytes left (httpx's, and httpx2's, the
# fork that current openai and anthropic packages send with): the connection or the pool
# never gave a socket, so the provider saw nothing and billed nothing. Named rather than
# imported so that this module needs neither.
NOT_SENT = frozenset(
    {"ConnectError", "ConnectTimeout", "PoolTimeout", "UnsupportedProtocol", "ProxyError"}
)


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
    # Attempts in all, each on its own hold: given to metered(), it sets the provider SDK's
    # max_retries (the SDK's own backoff applies between them).
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(3, 0.5, 8.0))
    # The most output tokens one call's hold covers: a request asking for more (Anthropic's
    # required max_tokens is often set far above what a call needs) is held for this many
    # and sent with its maximum lowered to what the hold covers. None: the request's own.
    output_tokens_max: int | None = None
    # A call the budget cannot cover is sent with the largest output it covers (the
    # reservation says which) instead of being refused.
    degrade: bool = False
    # The server tool calls of each kind a request that names no maximum is held for.
    tool_calls_max: int = limits.llm_tool_calls_default
    # The id of the provider key (OpenAI's "key_...", Anthropic's "apikey_...") or project
    # the calls are sent with, never the key itself: recorded with each call (the label
    # "earmark.key") so that `earmark reconcile` compares that key's usage report with
    # these calls. "": the calls are reconciled with any key's report they are read with.
    key_label: str = ""

    def hold_labels(self) -> Mapping[str, str]:
        """The labels each call's hold carries: labels, and the key's id when given."""
        if not self.key_label:
            return self.labels
        return {**self.labels, "earmark.key": self.key_label}

    def __post_init__(self) -> None:
        if not 1 <= self.retry.attempts_max <= limits.llm_attempts_max:
            raise ValueError(
                f"retry.attempts_max must be from 1 to {limits.llm_attempts_max} for model "
                f"calls, not {self.retry.attempts_max}"
            )
        if self.output_tokens_max is not None and self.output_tokens_max < 1:
            raise ValueError(f"output_tokens_max must be at least 1, not {self.output_tokens_max}")


def _causes(error: BaseException) -> list[BaseException]:
    """error and what raised it, down the chain (the provider client wraps the HTTP
    client's error as its cause)."""
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def never_sent(error: BaseException) -> bool:
    """The HTTP client failed before the request left (a refused connection)."""
    return any(type(cause).__name__ in NOT_SENT for cause in _causes(error))
