"""A call's cost as its provider reports it (OpenRouter's usage.cost, in dollars of its
credits: openrouter.ai/docs/use-cases/usage-accounting), and a hold settled at it where the
budget counts money.

Why settle at it: OpenRouter bills what it reports, whichever upstream provider served the
call and at whatever rate; the book's price of the model under "openrouter" is a list
price. The hold is made as any other (its shape priced from the book, or counted in
tokens), and ends:
- where the budget counts money (usd_micros): at the reported cost, in micro-dollars
  (Ending(used=...)); a budget counts money exactly when its hold's shape was priced at a
  price version (a tokens budget prices none: Reservation.price_version is 0), so no
  setting can say it wrongly;
- where it counts tokens: at the usage's tokens, as every call.
A cost out of its published shape (not a finite number, below 0, past
limits.llm_reported_cost_usd_micros_max) is not believed: the call settles at its tokens,
priced by the book. A BYOK call (usage.is_byok) is charged OpenRouter's fee (cost) and the
upstream provider's own bill (cost_details.upstream_inference_cost) both.

The held call's steps are held_call's: ReportingMetering gives the transports a HeldCall
whose at() settles at the cost a ReportedUsage carries (see the module's end).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from earmark import limits
from earmark.client.held_call import Ending, HeldCall, HeldCallInput
from earmark.client.wire import Call
from earmark.client.wire_transport import Metering
from earmark.core.prices import Usage

log = logging.getLogger("earmark.client")
MICROS_PER_DOLLAR = 1_000_000


@dataclass(frozen=True, slots=True)
class ReportedUsage(Usage):
    """A usage whose provider also reported what the call cost, in micro-dollars."""

    cost_usd_micros: int = 0


def dollars_to_micros(value: Any) -> int | None:
    """A reported amount in dollars as micro-dollars, rounded up as Earmark rounds; None
    for one not believed (not a number, not finite, below 0, past the bound)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    try:
        # The number as the JSON wrote it (0.95 is 950,000, not 949,999.99...).
        exact = Decimal(repr(value)) * MICROS_PER_DOLLAR
    except InvalidOperation:
        return None
    micros = int(exact.to_integral_value(rounding="ROUND_CEILING"))
    if not 0 <= micros <= limits.llm_reported_cost_usd_micros_max:
        return None
    return micros


def reported_cost(usage: Any) -> int | None:
    """The cost an OpenRouter usage object reports, in micro-dollars: cost, plus the
    upstream provider's for a BYOK call; None when it reports none, or one not believed."""
    if not isinstance(usage, dict) or "cost" not in usage:
        return None
    cost = dollars_to_micros(usage.get("cost"))
    if cost is not None and usage.get("is_byok") is True:
        details = usage.get("cost_details")
        upstream = details.get("upstream_inference_cost") if isinstance(details, dict) else None
        added = None if upstream is None else dollars_to_micros(upstream)
        if upstream is not None and added is None:
            cost = None
        elif added is not None:
            cost += added
    if cost is None or cost > limits.llm_reported_cost_usd_micros_max:
        log.warning(
            "earmark: the call's reported cost %r is not believed (at most $%s, finite, not "
            "below 0); it is priced from its tokens",
            usage.get("cost"),
            limits.llm_reported_cost_usd_micros_max // MICROS_PER_DOLLAR,
        )
        return None
    return cost


def with_cost(usage: Usage | None, cost: int | None) -> Usage | None:
    """usage carrying cost (None: as it is)."""
    if usage is None or cost is None:
        return usage
    return ReportedUsage(
        usage.input_tokens,
        usage.output_tokens,
        cached_input_tokens=usage.cached_input_tokens,
        requests=usage.requests,
        provider=usage.provider,
        model=usage.model,
        cache_write_input_tokens=usage.cache_write_input_tokens,
        cache_write_long_input_tokens=usage.cache_write_long_input_tokens,
        service_tier=usage.service_tier,
        tool_calls=usage.tool_calls,
        cost_usd_micros=cost,
    )


class ReportedHeldCall(HeldCall):
    """A held call that ends at the cost its usage reports where its budget counts money."""

    def at(self, usage: Usage | None) -> Ending:
        ending = super().at(usage)
        reservation = self.hold.reservation
        if (
            isinstance(usage, ReportedUsage)
            and reservation is not None
            and reservation.price_version > 0
        ):
            return Ending(used=usage.cost_usd_micros)
        return ending


class ReportingMetering(Metering):
    """The transports' Metering for a provider that reports its calls' cost."""

    def held(self, call: Call) -> HeldCall:
        what = HeldCallInput(self.provider.name, call, self.meter, self.error)
        return ReportedHeldCall(self.earmark, what)


__all__ = [
    "ReportedHeldCall",
    "ReportedUsage",
    "ReportingMetering",
    "dollars_to_micros",
    "reported_cost",
    "with_cost",
]
