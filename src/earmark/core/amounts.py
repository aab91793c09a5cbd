"""What a Reserve holds and what usage costs, in the budget's unit: the caller's amount, a
shape priced at the price in effect, an estimate from the job's samples, or reported usage
priced when it is reported (that is what the provider bills)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from earmark import limits
from earmark.core import estimates, prices
from earmark.core.estimates import SampleKey
from earmark.core.model import Budget, EstimateSource, Hold, OveragePolicy
from earmark.core.ops import ReserveOp
from earmark.core.prices import Price, PriceBook, Shape, Usage
from earmark.errors import FailedPrecondition, InvalidArgument, Reason


@dataclass(frozen=True, slots=True)
class Priced:
    amount: int
    source: EstimateSource
    # 0 when no price was used.
    price_version: int = 0
    # For a hold reserved by shape, the most output tokens its call may be told to produce
    # (the shape's, or the model's ceiling); 0 otherwise.
    max_output_tokens: int = 0


def model_key(provider: str, model: str) -> str:
    return f"{provider}/{model}" if provider or model else ""


def sample_key(budget: Budget, job: str, model: str) -> SampleKey:
    """Where a Reserve on budget reads job's samples of model ("": of every model): under
    the budget's unit and its tenant's root (estimates.sample_root)."""
    return (budget.unit, estimates.sample_root(budget), job, model)


def sample_keys(budget: Budget, job: str, model: str) -> list[SampleKey]:
    """Where a settled usage of a hold on budget is remembered: per model, and for the
    whole job."""
    keys: list[SampleKey] = [sample_key(budget, job, "")]
    if model:
        keys.append(sample_key(budget, job, model))
    return keys


def reserve_amount(
    budget: Budget,
    op: ReserveOp,
    book: PriceBook,
    samples: Mapping[SampleKey, list[int]],
    now: datetime,
) -> Priced:
    if op.amount > 0:
        assert op.shape is None
        return Priced(op.amount, EstimateSource.CALLER)
    if op.shape is not None and not op.shape.names_model_only():
        shape = with_ceiling(op.shape, book, now)
        if op.shape.output_ceiling and budget.overage_policy is OveragePolicy.SOFT:
            # A SOFT budget holds the estimate and charges a miss as overshoot: the prompt,
            # or what the job's calls of this model have used, if more. The provider is
            # still told the ceiling: an estimate never cuts an answer short.
            bare = replace(shape, max_output_tokens=0, output_ceiling=False)
            prompt = priced_shape(budget, bare, book, now)
            key = sample_key(budget, op.job, model_key(shape.provider, shape.model))
            history = samples.get(key, []) if op.job else []
            learned = estimates.upper_median(history) if history else 0
            return replace(
                prompt,
                amount=max(prompt.amount, learned),
                max_output_tokens=shape.max_output_tokens,
            )
        return priced_shape(budget, shape, book, now)
    model = "" if op.shape is None else model_key(op.shape.provider, op.shape.model)
    history = samples.get(sample_key(budget, op.job, model), []) if op.job else []
    chosen = estimates.estimate(budget, history, op.job)
    return Priced(chosen.amount, chosen.source)


def held(priced: Priced) -> int:
    """What a Reserve priced so holds: at least 1 (a caller's amount, an estimate, a count
    of tokens), except a shape that a price version prices at exactly 0. The book saying
    the call is free is a fact, and the hold of 0 fits on any budget, a limit of 0
    included; an estimate of 0 is only a guess, and holds 1."""
    free = priced.source is EstimateSource.SHAPE and priced.price_version > 0
    if free and priced.amount == 0:
        return 0
    return max(1, priced.amount)


def ceiling_needs_samples(budget: Budget, shape: Shape) -> bool:
    """Whether a Reserve of shape reads its job's samples (a SOFT budget's estimate)."""
    return shape.output_ceiling and budget.overage_policy is OveragePolicy.SOFT


def with_ceiling(shape: Shape, book: PriceBook, now: datetime) -> Shape:
    """shape, with its max_output_tokens set to the model's ceiling when it asks for it
    (the price of its tier in effect says what the ceiling is)."""
    if not shape.output_ceiling:
        return shape
    price = book.at(shape.provider, shape.model, now, shape.service_tier, shape.input_tokens)
    if price is None or price.max_output_tokens <= 0:
        raise FailedPrecondition(
            f"shape.output_ceiling: no output ceiling for provider {shape.provider!r} model "
            f"{shape.model!r}: set the call's own maximum output, or add the model's "
            "max_output_tokens to its price with Admin.PutPrice",
            Reason.PRICE_NOT_FOUND,
            field="shape.output_ceiling",
            provider=shape.provider,
            model=shape.model,
        )
    return replace(shape, max_output_tokens=price.max_output_tokens)


def priced_shape(budget: Budget, shape: Shape, book: PriceBook, now: datetime) -> Priced:
    """What shape holds on budget: its tokens, or its cost at the price of its tier."""
    assert not shape.output_ceiling or shape.max_output_tokens > 0
    most = shape.max_output_tokens
    if budget.unit == prices.TOKENS:
        amount = _bounded("shape", prices.shape_tokens(shape))
        return Priced(amount, EstimateSource.SHAPE, max_output_tokens=most)
    price = _price_now(
        budget,
        "shape",
        shape.provider,
        shape.model,
        book,
        now,
        shape.service_tier,
        shape.input_tokens,
    )
    _require_tools_priced(price, "shape.max_tool_calls", shape.max_tool_calls)
    amount = _bounded("shape", prices.shape_cost(price, shape))
    return Priced(amount, EstimateSource.SHAPE, price.version, most)


def spent_amount(
    budget: Budget, amount: int, usage: Usage | None, hold: Hold, book: PriceBook, now: datetime
) -> tuple[int, int]:
    """What a Charge or Settle spends: its amount (price version 0), or its usage priced."""
    if usage is None:
        return amount, 0
    return usage_amount(budget, usage, hold, book, now)


def spent_again(
    budget: Budget, amount: int, usage: Usage | None, hold: Hold, book: PriceBook, version: int
) -> int | None:
    """What a retried Charge or Settle spends, priced at its first answer's version."""
    if usage is None:
        return amount
    return usage_amount_at(budget, usage, hold, book, version)


def usage_amount(
    budget: Budget, usage: Usage, hold: Hold, book: PriceBook, now: datetime
) -> tuple[int, int]:
    """(what the usage costs in the budget's unit, the price version; 0 for tokens)."""
    return usage_amount_of(budget, usage, hold.shape, hold.reservation_id, book, now)


def usage_amount_of(
    budget: Budget,
    usage: Usage,
    shape: Shape | None,
    reservation_id: str,
    book: PriceBook,
    now: datetime,
) -> tuple[int, int]:
    """usage_amount for the hold reserved with shape (its model and tier, where the usage
    names none), before the hold exists too (a Reserve's charge)."""
    if budget.unit == prices.TOKENS:
        return _bounded("usage", prices.usage_tokens(usage)), 0
    provider, model = usage_model_of(usage, shape, reservation_id)
    held_tier = shape.service_tier if shape is not None else ""
    _require_priced_unit(budget, "usage")
    # The tier the provider ran the call at; one the book has no price for (a request sent
    # with "auto") is priced at the tier it was held at, rather than refused, since a
    # refused Settle would lose what the provider billed.
    # A usage of several requests reports their tokens summed: it is priced in the tier of
    # that sum, which is never below the tier any one of its requests was billed in.
    price = book.at(provider, model, now, usage.service_tier or held_tier, usage.input_tokens)
    if price is None:
        price = _price_now(
            budget, "usage", provider, model, book, now, held_tier, usage.input_tokens
        )
    _require_tools_priced(price, "usage.tool_calls", usage.tool_calls)
    return _bounded("usage", prices.usage_cost(price, usage)), price.version


def usage_amount_at(
    budget: Budget, usage: Usage, hold: Hold, book: PriceBook, version: int
) -> int | None:
    """What the usage cost at an earlier answer's price version, so that a retry compares
    like with like after the price changed; None if that version is not the model's."""
    if budget.unit == prices.TOKENS:
        return prices.usage_tokens(usage)
    _require_priced_unit(budget, "usage")
    provider, model = usage_model(usage, hold)
    price = book.version(provider, model, version)
    return None if price is None else prices.usage_cost(price, usage)


def usage_model(usage: Usage, hold: Hold) -> tuple[str, str]:
    """The usage's own model, or the model the hold was shaped for."""
    return usage_model_of(usage, hold.shape, hold.reservation_id)


def usage_model_of(usage: Usage, shape: Shape | None, reservation_id: str) -> tuple[str, str]:
    if usage.provider and usage.model:
        return usage.provider, usage.model
    if shape is not None:
        return shape.provider, shape.model
    held = f"reservation {reservation_id}" if reservation_id else "the reservation"
    raise InvalidArgument(
        "usage",
        f"names no provider and model, and {held} was not reserved by shape: set "
        "usage.provider and usage.model",
    )


def repriced(budget: Budget, hold: Hold, book: PriceBook, now: datetime) -> Priced | None:
    """A hold reserved by shape and not yet charged, whose model's price in effect is no
    longer the one it was priced at, priced again; None when nothing changes."""
    if hold.source is not EstimateSource.SHAPE or hold.shape is None or hold.charged:
        return None
    if budget.unit != prices.USD_MICROS or ceiling_needs_samples(budget, hold.shape):
        # A SOFT budget's hold of a call without its own maximum is an estimate, not a
        # price: it stays what it was.
        return None
    shape = hold.shape
    price = book.at(shape.provider, shape.model, now, shape.service_tier, shape.input_tokens)
    if price is None or price.version == hold.price_version:
        return None
    if shape.output_ceiling:
        # The call was told the ceiling the hold was priced with; the new price's rates
        # apply to that many tokens. Without the version it was priced at, that ceiling is
        # not known: the hold stays what it was.
        ceiling = hold_output_tokens(hold, book)
        if ceiling <= 0:
            return None
        shape = replace(shape, max_output_tokens=ceiling)
    # A shape with no output tokens (an embedding's, say) is repriced at its input alone.
    if price.unpriced_tools(shape.max_tool_calls):
        return None
    amount = _bounded("shape", prices.shape_cost(price, shape))
    return Priced(amount, EstimateSource.SHAPE, price.version, shape.max_output_tokens)


def hold_output_tokens(hold: Hold, book: PriceBook) -> int:
    """The output ceiling a hold reserved by shape was priced with: its shape's own, or
    the ceiling of the price version it was priced at."""
    shape = hold.shape
    assert shape is not None
    if not shape.output_ceiling:
        return shape.max_output_tokens
    price = book.version(shape.provider, shape.model, hold.price_version)
    return 0 if price is None else price.max_output_tokens


def _price_now(
    budget: Budget,
    field: str,
    provider: str,
    model: str,
    book: PriceBook,
    now: datetime,
    service_tier: str = "",
    input_tokens: int = 0,
) -> Price:
    _require_priced_unit(budget, field)
    price = book.at(provider, model, now, service_tier, input_tokens)
    if price is None:
        tier = prices.tier(service_tier)
        at_tier = f" at service tier {tier!r}" if tier else ""
        raise FailedPrecondition(
            f"{field}: no price for provider {provider!r} model {model!r}{at_tier} in effect "
            f"at {now.isoformat()}; an operator adds one with Admin.PutPrice",
            Reason.PRICE_NOT_FOUND,
            field=field,
            provider=provider,
            model=model,
        )
    return price


def _require_tools_priced(price: Price, field: str, calls: prices.Counts) -> None:
    """Every kind of server tool call the shape or usage names has a fee in the price."""
    missing = price.unpriced_tools(calls)
    if missing:
        raise FailedPrecondition(
            f"{field}: the price of provider {price.provider!r} model {price.model!r} has no "
            f"fee for server tool {missing[0]!r}; an operator adds one with Admin.PutPrice "
            "(tool_usd_micros)",
            Reason.PRICE_NOT_FOUND,
            field=field,
            provider=price.provider,
            model=price.model,
        )


def _require_priced_unit(budget: Budget, field: str) -> None:
    if budget.unit not in prices.PRICED_UNITS:
        raise FailedPrecondition(
            f"{field}: budget {budget.budget_id!r} counts {budget.unit!r}; only "
            f"{' and '.join(prices.PRICED_UNITS)} budgets are priced from tokens",
            Reason.UNIT_NOT_PRICED,
            field=field,
            budget_id=budget.budget_id,
            unit=budget.unit,
        )


def _bounded(field: str, amount: int) -> int:
    if amount > limits.amount_units_max:
        raise InvalidArgument(
            field, f"comes to {amount} units; at most {limits.amount_units_max} per request"
        )
    return amount
