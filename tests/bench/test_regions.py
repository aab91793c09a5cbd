"""Scenario 15 (bench/regions.py): its figures from what it reads, and its targets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bench import regions
from earmark.core.regions import RECLAIM_AFTER, SETTLE_GRACE, SHARE_LEASE, HomeShare

KILLED_AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_stranded_and_share_are_the_homes_outstanding_and_footprint() -> None:
    """The SQL's counts read as core.regions.HomeShare reads them."""
    for granted, returned, reclaimed_to, used in [
        (1_000, 200, 0, 300),
        (1_000, 0, 700, 300),
        (1_000, 100, 0, 1_200),
        (0, 0, 0, 0),
    ]:
        share = HomeShare(granted, returned, used, reclaimed_to)
        assert share.outstanding == regions.stranded(granted, returned, reclaimed_to, used)
        assert share.footprint == regions.share_of(granted, returned, reclaimed_to, used)


def test_back_after_the_kill_is_the_lease_end_plus_the_reclaim_delay() -> None:
    lease_until = KILLED_AT + timedelta(seconds=599)
    expected = 599 + RECLAIM_AFTER.total_seconds()
    assert expected == regions.back_after_seconds(lease_until, KILLED_AT)
    assert (SHARE_LEASE + SETTLE_GRACE).total_seconds() == regions.back_target_seconds()


def test_past_limit_and_ratio() -> None:
    assert 0 == regions.past_limit(150, 50, 200)
    assert 5 == regions.past_limit(155, 50, 200)
    assert 0.5 == regions.ratio(1, 2)
    assert regions.ratio(1, 0) != regions.ratio(1, 0)  # nan, not a division error


def figures(**overrides: float) -> dict[str, float]:
    """Medians that meet every target, but for overrides (by the constant's name)."""
    medians = {
        regions.P50_DIFF: 0.4,
        regions.TODAY_RESERVE: 330.0,
        regions.SKEW_RATIO: 0.99,
        regions.DEAD_RATIO: 0.95,
        regions.DEAD_BACK: 599.0,
        regions.PAST_LIMIT: 0.0,
    }
    for key, value in overrides.items():
        medians[getattr(regions, key)] = value
    return medians


def checked(medians: dict[str, float]) -> list[bool]:
    return [check()[1] for check in regions.targets(medians.__getitem__)]


def test_the_targets_are_met_and_missed_by_their_figures() -> None:
    assert [True, True, True, True] == checked(figures())
    assert [False, True, True, True] == checked(figures(P50_DIFF=1.5))
    assert [True, False, True, True] == checked(figures(SKEW_RATIO=0.94))
    assert [True, True, False, True] == checked(figures(DEAD_BACK=612.0))
    assert [True, True, False, True] == checked(figures(DEAD_RATIO=1.01))
    assert [True, True, True, False] == checked(figures(PAST_LIMIT=100))


def test_a_scenario_left_out_measures_no_target() -> None:
    """bench.__main__.targets passes over a target whose figure is missing (KeyError)."""
    empty: dict[str, float] = {}
    for check in regions.targets(empty.__getitem__):
        try:
            check()
        except KeyError:
            continue
        raise AssertionError("a target was checked without its figure")
