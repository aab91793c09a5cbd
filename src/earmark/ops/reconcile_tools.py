"""The ledger's built-in tool fees, per call, for `earmark reconcile`'s drift: a provider's
cost report bills web search, file search and code execution calls on lines of their own,
apart from the model's tokens, so the ledger's side is split the same way.

A call record keeps its usage's tokens, not its tool calls (migration 0016), and its
Settle priced both: so a call's tool fees are what it settled at less what its tokens cost
at its model's price in effect when it was sent (Admin's ListPrices, by provider, model
and tier), the same integer arithmetic the sidecar priced it with (core/prices.py: the
fees are whole micro-dollars, so the one rounding up is the tokens'). A call is given none
when that cannot be known: settled without its usage, on a budget not in micro-dollars, of
a model with no price then, or whose price has no tool fees. What this cannot see: a
price changed between a call's send and its Settle, or Anthropic's 1-hour cache writes
(the record does not keep them apart from the 5-minute ones), which move that difference
between the model's row and the tools' row.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC

from earmark.core import prices
from earmark.core.reconcile import Sent
from earmark.ops.connect import Admin
from earmark.v1 import budget_pb2 as pb


def price_of(p: pb.Price) -> prices.Price:
    """A price version as ListPrices gives it, in core's terms."""
    return prices.Price(
        provider=p.provider,
        model=p.model,
        version=p.version,
        effective_from=p.effective_from.ToDatetime(tzinfo=UTC),
        effective_to=p.effective_to.ToDatetime(tzinfo=UTC) if p.HasField("effective_to") else None,
        input_per_mtok=p.input_usd_micros_per_mtok,
        output_per_mtok=p.output_usd_micros_per_mtok,
        cached_input_per_mtok=p.cached_input_usd_micros_per_mtok,
        request_fee=p.request_usd_micros,
        daily_from_minute=p.daily_from_minute,
        daily_to_minute=p.daily_to_minute,
        cache_write_per_mtok=p.cache_write_usd_micros_per_mtok,
        max_output_tokens=p.max_output_tokens,
        cache_write_long_per_mtok=p.cache_write_long_usd_micros_per_mtok,
        service_tier=prices.tier(p.service_tier),
        tool_fees=prices.counts(p.tool_usd_micros.items()),
        input_tokens_above=p.input_tokens_above,
        window_timezone=p.window_timezone,
    )


def tool_fees(call: Sent, book: prices.PriceBook, provider: str) -> int:
    """Of what call settled at, its tool calls' fees (0 when that cannot be known)."""
    usage = call.usage
    if usage is None or call.settled_used is None or call.unit != prices.USD_MICROS:
        return 0
    price = book.at(provider, call.model, call.sent_at, call.service_tier, max(usage.input, 0))
    if price is None or not price.tool_fees:
        return 0
    cached = min(max(usage.cached, 0), max(usage.input, 0))
    written = min(max(usage.written, 0), max(usage.input, 0) - cached)
    tokens = prices.usage_cost(
        price,
        prices.Usage(
            input_tokens=max(usage.input, 0),
            output_tokens=max(usage.output, 0),
            cached_input_tokens=cached,
            requests=max(usage.requests or 1, 1),
            cache_write_input_tokens=written,
        ),
    )
    return max(0, call.settled_used - tokens)


def with_tool_fees(admin: Admin, provider: str, calls: list[Sent]) -> list[Sent]:
    """calls, each with its tool fees; the prices of their models read once each."""
    book_prices: list[prices.Price] = []
    for model in sorted({c.model for c in calls if c.usage is not None}):
        listed = admin.call(
            "ListPrices",
            pb.ListPricesRequest(provider=provider, model=model),
            pb.ListPricesResponse,
        )
        book_prices.extend(price_of(p) for p in listed.prices if p.model == model)
    if not any(p.tool_fees for p in book_prices):
        return calls
    book = prices.PriceBook(book_prices)
    return [replace(c, tool_fees=tool_fees(c, book, provider)) for c in calls]
