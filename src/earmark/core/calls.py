"""A provider call's Reserve: its prompt charged in the transaction that admits its hold,
the most output tokens the provider is told, and, when the caller asks, the largest output
the budgets cover instead of a refusal (degrade).

The cap a provider is told is what the budget can pay: the call's own maximum, or without
one the model's ceiling (Price.max_output_tokens). An estimate decides only how much a SOFT
budget holds; it never becomes the cap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from earmark import limits
from earmark.core import amounts, prices, rules
from earmark.core.amounts import Priced
from earmark.core.model import Budget, Hold, Phase
from earmark.core.ops import ReserveOp
from earmark.core.prices import PriceBook, Shape

# The idempotency key of a Reserve's charge: it has a space, which no key a worker sends
# may have, so no Charge of the worker's can be taken for it.
RESERVE_CHARGE_KEY = "reserve charge"


def degrade(
    budget: Budget,
    scope: Sequence[Budget],
    op: ReserveOp,
    priced: Priced,
    book: PriceBook,
    now: datetime,
) -> Priced | None:
    """With op.degrade, a shape whose output the budgets cannot cover at its full maximum,
    at the largest output they do cover; None when the full one fits, or nothing does (the
    Reserve is then refused as it would be without degrade)."""
    if not op.degrade or op.shape is None or priced.max_output_tokens <= 0:
        return None
    if amounts.ceiling_needs_samples(budget, op.shape):
        return None
    amount = amounts.held(priced)
    if all(rules.admit(each, amount, op.phase).admitted for each in scope):
        return None
    shape = amounts.with_ceiling(op.shape, book, now)
    return degraded(budget, scope, shape, priced, op.phase, book, now)


def degraded(
    budget: Budget,
    scope: Sequence[Budget],
    shape: Shape,
    priced: Priced,
    phase: Phase,
    book: PriceBook,
    now: datetime,
) -> Priced | None:
    """The shape with the largest output, below what it asked, whose cost every budget of
    scope admits, at least limits.llm_output_tokens_min tokens; None when not even that
    fits. The cost grows with the output, so the largest that fits is found by halving."""

    def fits(output_tokens: int) -> Priced | None:
        shaped = replace(shape, max_output_tokens=output_tokens, output_ceiling=False)
        candidate = amounts.priced_shape(budget, shaped, book, now)
        amount = amounts.held(candidate)
        if all(rules.admit(each, amount, phase).admitted for each in scope):
            return candidate
        return None

    low, high = limits.llm_output_tokens_min, priced.max_output_tokens - 1
    best = fits(low) if low <= high else None
    if best is None:
        return None
    while low < high:
        middle = (low + high + 1) // 2
        found = fits(middle)
        if found is None:
            high = middle - 1
        else:
            low, best = middle, found
    return best


def output_tokens_of(hold: Hold, budget: Budget, book: PriceBook) -> tuple[int, bool]:
    """The most output tokens a hold reserved by shape lets its call be told, and whether
    degrade lowered it, read back from the hold (for a retried Reserve's answer): the
    largest output whose cost at the hold's price version fits the hold's amount."""
    shape = hold.shape
    if shape is None or shape.names_model_only():
        return 0, False
    most = amounts.hold_output_tokens(hold, book)
    if most <= 0 or amounts.ceiling_needs_samples(budget, shape):
        return most, False
    if budget.unit == prices.TOKENS:
        cost: Callable[[int], int] = lambda n: prices.shape_tokens(  # noqa: E731
            replace(shape, max_output_tokens=n)
        )
    else:
        price = book.version(shape.provider, shape.model, hold.price_version)
        if price is None:
            return most, False
        cost = lambda n: prices.shape_cost(price, replace(shape, max_output_tokens=n))  # noqa: E731
    if cost(most) <= hold.amount:
        return most, False
    low, high = 0, most - 1
    while low < high:
        middle = (low + high + 1) // 2
        if cost(middle) <= hold.amount:
            low = middle
        else:
            high = middle - 1
    return low, True
