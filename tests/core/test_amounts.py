"""Amounts as pure rules: a hold reserved by shape priced again at a price's cutover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from earmark.core.amounts import Priced, repriced
from earmark.core.model import Budget, EstimateSource, Hold
from earmark.core.prices import Price, PriceBook, Shape

NOW = datetime(2026, 8, 15, 12, tzinfo=UTC)
CUTOVER = NOW + timedelta(hours=1)
MODEL = "text-embedding-3-large"


def embedding_price(version: int, at: datetime, input_per_mtok: int) -> Price:
    return Price("openai", MODEL, version, at, None, input_per_mtok, 0)


def test_an_input_only_shape_is_repriced_at_the_cutover() -> None:
    """An embedding's hold, priced by a shape with no output tokens, moves to the new input
    rate once it takes effect, and not before."""
    book = PriceBook(
        [embedding_price(1, NOW - timedelta(days=1), 130_000), embedding_price(2, CUTOVER, 65_000)]
    )
    shape = Shape("openai", MODEL, input_tokens=1_000_000, max_output_tokens=0)
    hold = Hold(
        "r", "b", "k", 130_000, timedelta(minutes=5), NOW + timedelta(days=1), NOW,
        source=EstimateSource.SHAPE, price_version=1, shape=shape,
    )  # fmt: skip
    budget = Budget("b", 1_000_000, "usd_micros")
    assert (None, Priced(65_000, EstimateSource.SHAPE, 2, 0)) == (
        repriced(budget, hold, book, CUTOVER - timedelta(seconds=1)),
        repriced(budget, hold, book, CUTOVER),
    )
