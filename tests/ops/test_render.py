"""What the operator's commands print: dollars, signed ledger changes, aligned tables, and
a budget's policies (thresholds in percent, read back as they print)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from earmark import limits
from earmark.core.periods import Period
from earmark.ops import policies, render


def test_dollars_show_cents_and_every_micro_dollar() -> None:
    """Micro-dollars print as dollars with at least cents and no lost digit."""
    assert ["$5.00", "$0.045", "$0.000001", "-$0.40", "$1,234.50"] == [
        render.dollars(v) for v in (5_000_000, 45_000, 1, -400_000, 1_234_500_000)
    ]


def test_amounts_follow_the_unit() -> None:
    """usd_micros amounts are dollars; any other unit is a grouped count; a delta has a sign."""
    assert ("$0.50", "100,000", "+$0.40", "-", "-1,000") == (
        render.amount(500_000, "usd_micros"),
        render.amount(100_000, "tokens"),
        render.delta(400_000, "usd_micros"),
        render.delta(0, "tokens"),
        render.delta(-1_000, "tokens"),
    )


def test_table_aligns_amounts_right_and_the_rest_left() -> None:
    """Every column is as wide as its widest cell; amounts line up on the right."""
    out = render.table(("NAME", "AMOUNT"), [["a", "$5.00"], ["long-name", "$10.00"]], ["AMOUNT"])
    assert [
        "NAME        AMOUNT",
        "a            $5.00",
        "long-name   $10.00",
    ] == out.splitlines()


def test_thresholds_are_percents_to_a_basis_point() -> None:
    """A percent with up to two decimals, with or without its sign, is basis points; a
    list of them may be separated by commas or spaces."""
    assert ([8_000, 9_550, 10_000, 1, 100_000], (8_000, 9_500, 10_000)) == (
        [policies.bps_of_percent(t) for t in ("80", "95.5", "100%", "0.01", " 1000 ")],
        policies.thresholds_of_text("80, 95  100"),
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("80.125", "'80.125' is not a percent with at most 2 decimals"),
        ("-5", "'-5' is not a percent"),
        ("eighty", "'eighty' is not a percent"),
        ("", "'' is not a percent"),
        ("0", "0% is not from 0.01% to 1000%"),
        ("1000.01", "1000.01% is not from 0.01% to 1000%"),
    ],
)
def test_what_is_no_threshold_is_refused_with_its_reason(text: str, why: str) -> None:
    """Three decimals, a sign, words, nothing, 0 and past the largest threshold are
    refused, and the message says which."""
    with pytest.raises(policies.BadPercent) as refused:
        policies.bps_of_percent(text)
    assert str(refused.value).startswith(why)


@given(st.integers(1, limits.threshold_bps_max))
def test_a_printed_threshold_reads_back_as_itself(bps: int) -> None:
    """Whatever a threshold prints as reads back as the same basis points."""
    assert bps == policies.bps_of_percent(policies.percent_of_bps(bps))


def test_a_period_says_its_calendar() -> None:
    """A period in words: its length, the day it starts on when that is not the first,
    and its timezone (UTC when none)."""
    assert [
        "never",
        "day in America/New_York",
        "week in UTC",
        "week from Sunday in Europe/Berlin",
        "month from the 31st in UTC",
        "quarter from the 2nd in UTC",
        "year from the 13th in UTC",
    ] == [
        policies.period_text(Period.NEVER, "", 0),
        policies.period_text(Period.DAY, "America/New_York", 0),
        policies.period_text(Period.WEEK, "", 1),
        policies.period_text(Period.WEEK, "Europe/Berlin", 7),
        policies.period_text(Period.MONTH, "", 31),
        policies.period_text(Period.QUARTER, "", 2),
        policies.period_text(Period.YEAR, "UTC", 13),
    ]
