"""The gauges a refresh replaces: a scrape that comes while a refresh runs never sees a
series that both refreshes have missing or at 0; a series that left drops out."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import Gauge

from earmark.core.model import Budget, UnitTotals
from earmark.metrics import Metrics


def kept(metrics: Metrics) -> tuple[float | None, ...]:
    """What a scrape reads now of the series both refreshes have: b2's gauges and the t
    unit's, and the dollars held."""
    read = metrics.registry.get_sample_value
    b2 = {"budget_id": "b2", "unit": "t"}
    return (
        read("earmark_budget_limit", b2),
        read("earmark_budget_used", b2),
        read("earmark_budget_held", b2),
        read("earmark_budget_remaining", b2),
        read("earmark_open_holds", {"unit": "t"}),
        read("earmark_held_dollars"),
    )


def test_a_refresh_never_shows_a_kept_series_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """After every step of the second refresh (each set and each removal), b2's gauges,
    the t unit's and the dollars held read what one of the two refreshes said; b1 and the
    tokens unit, which left, are gone at its end."""
    metrics = Metrics()
    first = [Budget("b1", 100, "t", used=90), Budget("b2", 100, "t", used=50, held=5)]
    metrics.set_budgets(first)
    metrics.set_open_holds(
        [
            UnitTotals("t", 3, 5, 140),
            UnitTotals("usd_micros", 1, 2e6, 0),
            UnitTotals("tokens", 1, 1, 1),
        ]
    )
    before = kept(metrics)
    steps: list[tuple[float | None, ...]] = []
    for name in ("set", "remove"):
        original = getattr(Gauge, name)

        def recorded(self: Gauge, *args: Any, _original: Any = original) -> Any:
            answer = _original(self, *args)
            steps.append(kept(metrics))
            return answer

        monkeypatch.setattr(Gauge, name, recorded)
    metrics.set_budgets([Budget("b2", 100, "t", used=60, held=5), Budget("b3", 100, "t")])
    metrics.set_open_holds([UnitTotals("t", 2, 5, 150), UnitTotals("usd_micros", 1, 3e6, 0)])
    after = kept(metrics)
    read = metrics.registry.get_sample_value
    assert (100, 50, 5, 45, 3, 2) == before
    assert (100, 60, 5, 35, 2, 3) == after

    def between(step: tuple[float | None, ...]) -> bool:
        return all(s in (b, a) for s, b, a in zip(step, before, after, strict=True))

    assert steps
    assert [] == [s for s in steps if not between(s)]
    assert (None, None) == (
        read("earmark_budget_used", {"budget_id": "b1", "unit": "t"}),
        read("earmark_open_holds", {"unit": "tokens"}),
    )
