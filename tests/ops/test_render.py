"""What the operator's commands print: dollars, signed ledger changes, aligned tables."""

from __future__ import annotations

from earmark.ops import render


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
