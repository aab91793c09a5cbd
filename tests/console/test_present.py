"""What the console's pages show, from plain data: amounts as a person reads them, the
chart's running totals from the ledger, nesting from holds, a shape's cost now, and a
budget's policies."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from earmark import limits
from earmark.client.admin import HoldRecord, LedgerEntry
from earmark.client.types import BudgetState
from earmark.console import present
from earmark.core.model import BudgetMode, HoldState, LedgerKind, OveragePolicy
from earmark.core.periods import Period
from earmark.core.prices import Price, Shape

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def entry(i: int, used: int, held: int, seconds: int) -> LedgerEntry:
    return LedgerEntry(
        i, "b", f"r{i}", LedgerKind.CHARGE, held, used, NOW + timedelta(seconds=seconds)
    )


def hold(rid: str, budget_id: str, also: tuple[str, ...] = (), **f: object) -> HoldRecord:
    values: dict[str, object] = {"amount": 100, "charged": 0, "state": HoldState.HELD}
    values.update(f)
    return HoldRecord(
        rid,
        budget_id,
        created_at=NOW,
        expires_at=NOW,
        also_budget_ids=also,
        **values,  # type: ignore[arg-type]
    )


def test_amounts_read_as_dollars_or_grouped_numbers() -> None:
    """usd_micros as dollars with cents and only the micro-dollars that are not zero;
    other units grouped; no limit in words."""
    assert ["$5.00", "$0.045", "$0.000001", "-$1.50", "$1,234.567891"] == [
        present.amount(v, "usd_micros") for v in (5_000_000, 45_000, 1, -1_500_000, 1_234_567_891)
    ]
    assert ("200,000", "no limit") == (
        present.amount(200_000, "tokens"),
        present.amount(None, "tokens"),
    )


@given(
    st.lists(
        st.tuples(st.integers(-(10**6), 10**6), st.integers(-(10**6), 10**6), st.integers(0, 5)),
        max_size=60,
    )
)
def test_the_chart_ends_where_the_ledger_sums_to(moves: list[tuple[int, int, int]]) -> None:
    """The chart's last used and held are the sums of every entry it read, entries of one
    moment drawn as one point."""
    entries = [entry(i, u, h, s) for i, (u, h, s) in enumerate(sorted(moves, key=lambda m: m[2]))]
    drawn = present.series(entries, 1_000, [], cap=10_000)
    expected = (sum(u for u, _, _ in moves), sum(h for _, h, _ in moves)) if moves else None
    actual = (drawn.used[-1], drawn.held[-1]) if drawn.times else None
    assert expected == actual
    assert len(set(drawn.times)) == len(drawn.times) == len({s for _, _, s in moves})


def test_the_chart_reads_at_most_its_cap_and_counts_overshoot() -> None:
    """Past the cap the chart says it is truncated; settles past their hold are counted."""
    entries = [entry(i, 1, 0, i) for i in range(5)]
    holds = [
        hold("a", "b", amount=100, settled_used=130),
        hold("c", "b", amount=100, settled_used=90),
    ]
    drawn = present.series(entries, None, holds, cap=3)
    assert ([1, 2, 3], True, 1, 30) == (
        drawn.used,
        drawn.truncated,
        drawn.overshoots,
        drawn.overshoot,
    )


def test_nesting_is_read_from_the_holds() -> None:
    """Parents are what this budget's holds also hold on; children are budgets whose holds
    name this one."""
    holds = [hold("1", "team", ("org",)), hold("2", "task", ("team", "org")), hold("3", "team")]
    assert (["org"], ["task"]) == present.nesting("team", holds)


def test_a_shape_costs_what_a_reserve_would_hold_now() -> None:
    """The version in effect now prices the shape; none in effect is None."""
    old = Price(
        "openai",
        "gpt-4o",
        1,
        NOW - timedelta(days=9),
        NOW - timedelta(days=1),
        5_000_000,
        20_000_000,
    )
    new = Price("openai", "gpt-4o", 2, NOW - timedelta(days=1), None, 2_500_000, 10_000_000)
    shape = Shape("openai", "gpt-4o", input_tokens=1_000, max_output_tokens=500)
    priced = present.cost_now([old, new], shape, NOW)
    assert (2, 7_500) == (priced[0].version, priced[1]) if priced else None
    assert None is present.cost_now([old], shape, NOW)


def test_a_released_hold_reads_released_and_its_charge_is_typed_back() -> None:
    """An operator's release reads "released" (its wire state is EXPIRED, as a lapsed
    lease's is, which reads "expired"); the resolve form starts from the charge as a person
    types it, in dollars for usd_micros."""
    released = hold("r", "b", state=HoldState.EXPIRED, released=True, charged=2_500_000)
    lapsed = hold("l", "b", state=HoldState.EXPIRED)
    views = [present.hold_view(h, "usd_micros", NOW) for h in (released, lapsed)]
    assert [("released", "2.50", "$2.50"), ("expired", "0.00", "$0.00")] == [
        (v["state"], v["charged_typed"], v["charged"]) for v in views
    ]


def test_the_chart_is_told_to_draw_micro_dollars_as_dollars() -> None:
    """A usd_micros budget's series carries its unit and the micro-dollars in a dollar;
    any other unit draws its amounts as they are."""
    drawn = [present.series([], 5, [], 10, unit).to_json() for unit in ("usd_micros", "tokens")]
    assert [("usd_micros", 1_000_000), ("tokens", 1)] == [(d["unit"], d["scale"]) for d in drawn]


def test_a_budgets_policies_read_as_words_and_fill_its_form() -> None:
    """An OBSERVE dollar budget's month in Berlin reads with its period in local time and
    UTC, its thresholds in percent and its rate windows; its form starts from them as a
    person types them; a budget with none reads enforce, never, none and no bound."""
    start, end = datetime(2026, 11, 14, 23, tzinfo=UTC), datetime(2026, 12, 14, 23, tzinfo=UTC)
    policed = BudgetState(
        "team", 10_000_000, 0, 0, 10_000_000, "usd_micros", 0, period=Period.MONTH,
        timezone="Europe/Berlin", period_anchor=15, period_start=start, resets_at=end,
        mode=BudgetMode.OBSERVE, threshold_bps=(8_000, 9_550), admissions_per_minute=120,
        units_per_minute=1_500_000,
    )  # fmt: skip
    plain = BudgetState("plain", None, 0, 0, None, "tokens", 0)
    keys = ("mode", "observing", "period", "resets", "period_start", "resets_at", "thresholds",
            "rate", "typed")  # fmt: skip
    assert [
        (
            "observe", True, "month from the 15th in Europe/Berlin", True,
            "2026-11-15 00:00 Europe/Berlin (2026-11-14 23:00:00 UTC)",
            "2026-12-15 00:00 Europe/Berlin (2026-12-14 23:00:00 UTC)",
            "80%, 95.5%", "120 admissions/min, $1.50/min",
            {
                "period": "month", "timezone": "Europe/Berlin", "period_anchor": "15",
                "thresholds": "80, 95.5", "mode": "observe", "threshold_basis": "committed",
                "admissions_per_minute": "120", "units_per_minute": "1.50",
            },
        ),
        (
            "enforce", False, "never", False, "", "", "none", "no bound",
            {
                "period": "never", "timezone": "", "period_anchor": "0", "thresholds": "",
                "mode": "enforce", "threshold_basis": "committed", "admissions_per_minute": "",
                "units_per_minute": "",
            },
        ),
    ] == [
        tuple(present.budget_view(s, NOW)[k] for k in keys) for s in (policed, plain)
    ]  # fmt: skip


def test_refusing_is_said_while_refusals_are_recent_or_nothing_is_left() -> None:
    """A budget that refused this period reads refusing while its latest refusal is within
    limits.refusing_recent_seconds, or while nothing is left; an older refusal with room
    left reads only in its count, and a budget that never refused not at all; a SOFT budget,
    which admits past its limit, reads refusing only while its refusals are recent."""
    recent = NOW - timedelta(seconds=limits.refusing_recent_seconds)
    older = recent - timedelta(seconds=1)

    def view(
        refusals: int,
        remaining: int,
        last: datetime | None,
        policy: OveragePolicy = OveragePolicy.HARD,
    ) -> tuple[list[str], str]:
        state = BudgetState("r", 100, 100 - remaining, 0, remaining, "tokens", 0)
        state = replace(state, refusals=refusals, last_refused_at=last, first_refused_at=last)
        state = replace(state, overage_policy=policy)
        shown = present.budget_view(state, NOW)
        return shown["states"], shown["refusals"]

    assert [
        (["refusing"], "once, last 2026-12-01 11:55:00 UTC"),
        ([], "3 times, last 2026-12-01 11:54:59 UTC"),
        (["refusing"], "3 times, last 2026-12-01 11:54:59 UTC"),
        ([], "none"),
        ([], "3 times, last 2026-12-01 11:54:59 UTC"),
    ] == [
        view(1, 40, recent),
        view(3, 40, older),
        view(3, 0, older),
        view(0, 0, None),
        view(3, 0, older, OveragePolicy.SOFT),
    ]


def test_a_price_view_names_its_tier_prompts_zone_and_ceiling() -> None:
    """A long-prompt row in a zoned window reads as such, with its output ceiling."""
    price = Price(
        provider="google", model="gemini-2.5-pro", version=2, effective_from=NOW,
        effective_to=None, input_per_mtok=2_500_000, output_per_mtok=15_000_000,
        daily_from_minute=30, daily_to_minute=510, window_timezone="Asia/Shanghai",
        input_tokens_above=200_000, max_output_tokens=65_536, service_tier="priority",
    )  # fmt: skip
    view = present.price_view(price)
    assert ("priority", "over 200,000 tokens", "00:30-08:30 Asia/Shanghai", "65,536") == (
        view["tier"],
        view["prompts"],
        view["window"],
        view["ceiling"],
    )
