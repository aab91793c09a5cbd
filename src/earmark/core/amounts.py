"""What a Reserve holds and what usage costs, in the budget's unit: the caller's amount, a
shape priced at the price in effect, an estimate from the job's samples, or reported usage
priced when it is reported (that is what the provider bills)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from earmark import limits
from earmark.core import estimates, prices
from earmark.core.estimates import SampleKey
from earmark.core.model import Budget, EstimateSource, Hold
from earmark.core.ops import ReserveOp
from earmark.core.prices import Price, PriceBook, Shape, Usage
from earmark.errors import FailedPrecondition, InvalidArgument, Reason


@dataclass(frozen=True, slots=True)
class Priced:
    amount: int
    source: EstimateSource
    # 0 when no price was used.
    price_version: int = 0


def model_key(provider: str, model: str) -> str:
    return f"{provider}/{model}" if provider or model else ""


def sample_keys(unit: str, job: str, model: str) -> list[SampleKey]:
    """Where a job's settled usage is remembered: per model, and for the whole job."""
    keys: list[SampleKey] = [(unit, job, "")]
    if model:
        keys.append((unit, job, model))
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
        return _priced_shape(budget, op.shape, book, now)
    model = "" if op.shape is None else model_key(op.shape.provider, op.shape.model)
    history = samples.get((budget.unit, op.job, model), []) if op.job else []
    chosen = estimates.estimate(budget, history, op.job)
    return Priced(chosen.amount, chosen.source)


def _priced_shape(budget: Budget, shape: Shape, book: PriceBook, now: datetime) -> Priced:
    if budget.unit == prices.TOKENS:
        return Priced(_bounded("shape", prices.shape_tokens(shape)), EstimateSource.SHAPE)
    price = _price_now(budget, "shape", shape.provider, shape.model, book, now)
    amount = _bounded("shape", prices.shape_cost(price, shape))
    return Priced(amount, EstimateSource.SHAPE, price.version)


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
    if budget.unit == prices.TOKENS:
        return _bounded("usage", prices.usage_tokens(usage)), 0
    provider, model = usage_model(usage, hold)
    price = _price_now(budget, "usage", provider, model, book, now)
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
    if usage.provider and usage.model:
        return usage.provider, usage.model
    if hold.shape is not None:
        return hold.shape.provider, hold.shape.model
    raise InvalidArgument(
        "usage",
        f"names no provider and model, and reservation {hold.reservation_id} was not "
        "reserved by shape: set usage.provider and usage.model",
    )


def repriced(budget: Budget, hold: Hold, book: PriceBook, now: datetime) -> Priced | None:
    """A hold reserved by shape and not yet charged, whose model's price in effect is no
    longer the one it was priced at, priced again; None when nothing changes."""
    if hold.source is not EstimateSource.SHAPE or hold.shape is None or hold.charged:
        return None
    if budget.unit != prices.USD_MICROS:
        return None
    price = book.at(hold.shape.provider, hold.shape.model, now)
    if price is None or price.version == hold.price_version:
        return None
    amount = _bounded("shape", prices.shape_cost(price, hold.shape))
    return Priced(amount, EstimateSource.SHAPE, price.version)


def _price_now(
    budget: Budget, field: str, provider: str, model: str, book: PriceBook, now: datetime
) -> Price:
    _require_priced_unit(budget, field)
    price = book.at(provider, model, now)
    if price is None:
        raise FailedPrecondition(
            f"{field}: no price for provider {provider!r} model {model!r} in effect at "
            f"{now.isoformat()}; an operator adds one with Admin.PutPrice",
            Reason.PRICE_NOT_FOUND,
            field=field,
            provider=provider,
            model=model,
        )
    return price


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
