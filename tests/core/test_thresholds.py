"""Which thresholds a change of a budget's spend crosses: each once on the way up, none
on the way down, levels rounded up, and what names no thresholds refused."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from earmark import limits
from earmark.core.thresholds import BadThresholds, checked, crossed, exceeded, level


def test_a_rise_crosses_the_thresholds_between_its_ends() -> None:
    """From 700 to 960 of 1,000, 80% and 95% are crossed; reaching a level exactly crosses
    it; starting at it does not."""
    assert [[8000, 9500], [8000], [], []] == [
        crossed(1_000, 700, 960, [10000, 9500, 8000]),
        crossed(1_000, 700, 800, [8000, 9500]),
        crossed(1_000, 800, 900, [8000]),
        crossed(1_000, 960, 700, [8000, 9500]),
    ]


def test_levels_round_up_and_unlimited_budgets_cross_nothing() -> None:
    """80% of 999 is reached at 800 (799.2 rounded up); a budget without a limit has no
    thresholds to cross."""
    assert (800, [], [8000]) == (
        level(999, 8000),
        crossed(999, 0, 799, [8000]),
        crossed(999, 0, 800, [8000]),
    )
    assert [] == crossed(None, 0, 10**12, [8000])


def test_exceeded_is_the_step_past_the_limit() -> None:
    """Going past the limit exceeds it; reaching it exactly or staying past it does not."""
    assert [True, False, False] == [
        exceeded(1_000, 900, 1_001),
        exceeded(1_000, 900, 1_000),
        exceeded(1_000, 1_001, 1_200),
    ]


@pytest.mark.parametrize(
    ("given_bps", "why"),
    [
        ([0], "0 is not from 1"),
        ([limits.threshold_bps_max + 1], "is not from 1"),
        ([8000, 8000], "each threshold at most once"),
        (list(range(1, limits.thresholds_max + 2)), "at most"),
    ],
)
def test_what_names_no_thresholds_is_refused_naming_the_field(
    given_bps: list[int], why: str
) -> None:
    """Zero, past the bound, twice, or too many: refused, naming threshold_bps."""
    with pytest.raises(BadThresholds, match=why) as refused:
        checked(given_bps)
    assert str(refused.value).startswith("threshold_bps: ")


@given(
    limit=st.integers(1, 10**9),
    steps=st.lists(st.integers(0, 10**8), max_size=40),
    thresholds=st.sets(st.integers(1, limits.threshold_bps_max), max_size=limits.thresholds_max),
)
def test_a_rising_spend_tells_each_threshold_it_reaches_once(
    limit: int, steps: list[int], thresholds: set[int]
) -> None:
    """Along any rising path of spends from 0, each threshold whose level the last spend
    reaches is told exactly once, in the step that reached it, and no other is told."""
    spends = list(itertools.accumulate(steps, initial=0))
    told = [bps for before, after in itertools.pairwise(spends)
            for bps in crossed(limit, before, after, sorted(thresholds))]  # fmt: skip
    reached = sorted(bps for bps in thresholds if level(limit, bps) <= spends[-1])
    assert reached == sorted(told)
    assert len(set(told)) == len(told)
