"""Amounts as people write them: money.parse reads what render.amount prints (dollars with
cents for usd_micros, whole numbers otherwise) and refuses the rest with its reason; the
console's forms take "10.00" for a dollar budget over real HTTP (a limit, and a budget's
policies with their rate of held dollars), and refuse what the parser refuses with a 400
naming the field, changing nothing."""

from __future__ import annotations

import re

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from earmark import limits
from earmark.ops import money, render
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.console.conftest import Console
from tests.console.test_security import csrf_of, limit_of
from tests.helpers import assert_invariants

# The line an error page says what was wrong in.
PROBLEM = re.compile(r'id="problem">([^<]*)</p>')


def test_dollars_are_read_to_the_micro_dollar() -> None:
    """Dollars with or without cents, a $, digit groups, a bare fraction; whole numbers
    for any other unit."""
    read = [
        money.parse(text, "usd_micros")
        for text in ("10.00", "10", "$1,234.5", "0.000001", ".5", " 7. ", "1_000", "1,000,000")
    ]
    assert [
        10_000_000, 10_000_000, 1_234_500_000, 1, 500_000, 7_000_000, 10**9, 10**12
    ] == read  # fmt: skip
    assert [200_000, 0] == [money.parse(text, "tokens") for text in ("200,000", "0")]


@pytest.mark.parametrize(
    ("text", "unit", "why"),
    [
        ("10.0000001", "usd_micros", "'10.0000001' has 7 decimals; at most 6"),
        ("-1", "usd_micros", "'-1' is negative"),
        ("-$1.00", "usd_micros", "'-$1.00' is negative"),
        ("ten", "usd_micros", "'ten' is not an amount of dollars"),
        ("$", "usd_micros", "'$' is not an amount of dollars"),
        ("1e9", "usd_micros", "'1e9' is not an amount of dollars"),
        ("1.2.3", "usd_micros", "'1.2.3' is not an amount of dollars"),
        ("", "usd_micros", "an amount is required"),
        ("10.00", "tokens", "'10.00' is not a whole number: tokens has no fractions"),
        ("$5", "tokens", "'$5' is not a whole number"),
        ("²", "tokens", "'²' is not a whole number"),
        ("9" * 41, "tokens", "is longer than 40 characters"),
        # A comma where a point was meant is no thousands separator: "0,50" is not $50.
        ("0,50", "usd_micros", "'0,50' is not an amount of dollars (digit groups"),
        ("10.000,00", "usd_micros", "'10.000,00' is not an amount of dollars"),
        ("1,5", "tokens", "'1,5' is not a whole number (digit groups are of three"),
        ("1,,,,0", "usd_micros", "'1,,,,0' is not an amount of dollars"),
        ("1,000_000", "usd_micros", "'1,000_000' is not an amount of dollars"),
    ],
)
def test_what_is_no_amount_is_refused_with_its_reason(text: str, unit: str, why: str) -> None:
    """Too many decimals, a sign, words, an exponent, fractions of a whole unit, digit
    groups that are not of three before the point, and overlong text are refused, and the
    message says which."""
    with pytest.raises(money.BadAmount) as refused:
        money.parse(text, unit)
    assert str(refused.value).startswith(why)


@given(st.integers(0, limits.limit_units_max), st.sampled_from(["usd_micros", "tokens"]))
def test_what_is_printed_reads_back_as_itself(value: int, unit: str) -> None:
    """Whatever render.amount prints (and what a form is filled with) parses back to the
    same amount: one notation, printed and read."""
    assert (value, value) == (
        money.parse(render.amount(value, unit), unit),
        money.parse(money.typed(value, unit), unit),
    )


async def test_a_dollar_limit_is_typed_in_dollars(sidecar: Running, console: Console) -> None:
    """ "10.00" on a usd_micros budget is confirmed as $10.00 and set as 10,000,000; seven
    decimals, a negative amount and words are a 400 naming limit; on a tokens budget
    "10.00" is refused the same way; no refused form changes a limit."""
    for budget_id, unit in (("usd", "usd_micros"), ("tok", "tokens")):
        await sidecar.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=5_000_000, unit=unit)
        )
    async with httpx.AsyncClient(base_url=console.url) as http:
        token = await csrf_of(http, "/budget?id=usd")
        asked = await http.post(
            "/actions/limit", data={"budget": "usd", "limit": "10.00", "csrf": token}
        )
        refused = [
            await http.post(
                "/actions/limit",
                data={"budget": budget_id, "limit": raw, "confirm": "yes", "csrf": token},
            )
            for budget_id, raw in (
                ("usd", "10.0000001"),
                ("usd", "-1"),
                ("usd", "ten"),
                ("tok", "10.00"),
            )
        ]
        elsewhere = await http.post(
            "/actions/limit",
            data={
                "budget": "usd",
                "limit": "10.00",
                "back": "//x",
                "confirm": "yes",
                "csrf": token,
            },
        )
        unchanged = [await limit_of(sidecar, b) for b in ("usd", "tok")]
        done = await http.post(
            "/actions/limit",
            data={"budget": "usd", "limit": "10.00", "confirm": "yes", "csrf": token},
        )
        page = await http.get("/budget?id=usd")
    assert "Change usd&#39;s limit from $5.00 to $10.00." in asked.text
    assert [400] * 4 == [answer.status_code for answer in refused]
    assert all("limit: " in answer.text for answer in refused)
    assert "has 7 decimals" in refused[0].text
    assert "tokens has no fractions" in refused[3].text
    assert (400, True) == (
        elsewhere.status_code,
        "back: &#39;//x&#39; is not one of" in elsewhere.text,
    )
    assert [5_000_000, 5_000_000] == unchanged
    assert (303, 10_000_000) == (done.status_code, await limit_of(sidecar, "usd"))
    assert '<dd data-field="limit" id="limit">$10.00</dd>' in page.text
    assert "New limit (dollars)" in page.text
    await assert_invariants(sidecar.dsn)


async def test_a_budgets_policies_are_set_from_its_form(sidecar: Running, console: Console) -> None:
    """The policies form on a dollar budget: confirmed in words, its rate of held amount
    typed in dollars, then set with the limit and every other setting kept; a threshold
    that is no percent, a mode or period that is none, or a timezone the sidecar does not
    know is a 400 naming the field, changing nothing; a changed limit keeps the policies."""
    await sidecar.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="usd", limit=5_000_000, unit="usd_micros", escrow_bps=500)
    )
    policies = {
        "budget": "usd", "mode": "observe", "period": "week", "timezone": "America/New_York",
        "period_anchor": "7", "thresholds": "80, 95.5", "admissions_per_minute": "120",
        "units_per_minute": "1.50",
    }  # fmt: skip
    async with httpx.AsyncClient(base_url=console.url) as http:
        token = await csrf_of(http, "/budget?id=usd")
        asked = await http.post("/actions/policies", data={**policies, "csrf": token})
        refused = [
            await http.post(
                "/actions/policies", data={**policies, **bad, "confirm": "yes", "csrf": token}
            )
            for bad in (
                {"thresholds": "80, 95.125"},
                {"mode": "shadow"},
                {"period": "fortnight"},
                {"timezone": "Mars/Base"},
                {"units_per_minute": "1.0000001"},
            )
        ]
        unchanged = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="usd"))
        done = await http.post(
            "/actions/policies", data={**policies, "confirm": "yes", "csrf": token}
        )
        await http.post(
            "/actions/limit",
            data={"budget": "usd", "limit": "7.00", "confirm": "yes", "csrf": token},
        )
        page = await http.get("/budget?id=usd")
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="usd"))
    assert (
        "Set usd&#39;s policies: observe mode (admits what it would refuse, and says so); "
        "resets every week from Sunday in America/New_York (from the next boundary); "
        "notices at 80%, 95.5% of the limit (used + held); at most 120 admissions/min and "
        "$1.50/min."
    ) in asked.text
    assert [400] * 5 == [answer.status_code for answer in refused]
    said = [found[1] if (found := PROBLEM.search(a.text)) else a.text for a in refused]
    assert [
        "thresholds: &#39;95.125&#39; is not a percent with at most 2 decimals",
        "mode: &#39;shadow&#39; is not one of enforce, observe",
        "period: &#39;fortnight&#39; is not one of never, day, week, month, quarter, year",
        "INVALID_ARGUMENT INVALID_FIELD: timezone: &#39;Mars/Base&#39; is no IANA timezone",
        "units_per_minute: &#39;1.0000001&#39; has 7 decimals; at most 6 (a micro-dollar is "
        "the smallest amount)",
    ] == said
    assert (pb.PERIOD_UNSPECIFIED, pb.BUDGET_MODE_ENFORCE, []) == (
        unchanged.period,
        unchanged.mode,
        list(unchanged.threshold_bps),
    )
    assert 303 == done.status_code
    assert (
        7_000_000, 500, pb.PERIOD_WEEK, "America/New_York", 7, [8_000, 9_550],
        pb.BUDGET_MODE_OBSERVE, 120, 1_500_000,
    ) == (
        state.limit, state.escrow_bps, state.period, state.timezone, state.period_anchor,
        list(state.threshold_bps), state.mode, state.admissions_per_minute,
        state.units_per_minute,
    )  # fmt: skip
    assert '<span class="badge observe">observe</span>' in page.text
    assert '<dd id="rate">120 admissions/min, $1.50/min</dd>' in page.text
    assert 'name="units_per_minute" inputmode="decimal" value="1.50"' in page.text
    await assert_invariants(sidecar.dsn)


async def test_the_spend_page_refuses_what_it_cannot_ask(
    sidecar: Running, console: Console
) -> None:
    """A grouping it does not know, a day that is no day, a range that ends before it
    starts are a 400 naming the field; an unknown budget is a 404."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="tokens"))
    async with httpx.AsyncClient(base_url=console.url) as http:
        answers = [
            await http.get("/spend", params=params)
            for params in (
                {"id": "b", "by": "week"},
                {"id": "b", "from": "2026-13-01"},
                {"id": "b", "to": "yesterday"},
                {"id": "b", "from": "2026-12-02", "to": "2026-12-01"},
                {"by": "day"},
                {"id": "nobody"},
            )
        ]
    said = [found[1] if (found := PROBLEM.search(a.text)) else a.text for a in answers]
    assert [400, 400, 400, 400, 400, 404] == [a.status_code for a in answers]
    assert [
        "by: &#39;week&#39; is not one of model, job, day",
        "from: &#39;2026-13-01&#39; is not a day (YYYY-MM-DD)",
        "to: &#39;yesterday&#39; is not a day (YYYY-MM-DD)",
        "to: 2026-12-01 is before from (2026-12-02)",
        "id: required",
        "NOT_FOUND BUDGET_NOT_FOUND: budget &#39;nobody&#39; not found",
    ] == said
    await assert_invariants(sidecar.dsn)
