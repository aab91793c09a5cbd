"""Metrics.child: a labelled child looked up once, the same series labels() gives."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from earmark.metrics import Metrics


def test_a_child_is_the_labelled_series_and_is_looked_up_once() -> None:
    metrics = Metrics(CollectorRegistry())
    child = metrics.child(metrics.reservations, "admitted", "")
    assert child is metrics.reservations.labels("admitted", "")
    assert metrics.child(metrics.reservations, "admitted", "") is child
    child.inc()
    metrics.child(metrics.rpc_duration, "Reserve", "OK").observe(0.001)
    assert (
        metrics.registry.get_sample_value(
            "earmark_reservations_total", {"outcome": "admitted", "reason": ""}
        )
        == 1
    )
    assert (
        metrics.registry.get_sample_value(
            "earmark_rpc_duration_seconds_count", {"method": "Reserve", "code": "OK"}
        )
        == 1
    )
    # The same label values on another metric are another series.
    assert metrics.child(metrics.settles, "settled", "succeeded") is not child
