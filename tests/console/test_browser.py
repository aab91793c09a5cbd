"""The console in a real browser (Debian's chromium, headless) against a live sidecar with
an embedded database: every page loads without a console error, the Lab shows the
article's numbers, a hold in doubt is resolved and a limit and a budget's policies changed
from the page, each moving the budget by exactly what Admin says it moved. Screenshots of
each view are saved under the test's tmp_path, and into docs/console/ with
EARMARK_SCREENSHOTS=docs."""

from __future__ import annotations

import os
import shutil
import urllib.parse
from pathlib import Path
from typing import Any

from selenium.webdriver.support.select import Select

from earmark.console.app import serving
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import put_price
from tests.conftest import Running
from tests.console.conftest import SHOTS, Browser, Console, console_settings
from tests.helpers import assert_invariants


async def shoot(browser: Browser, tmp_path: Path, name: str) -> None:
    """The view's screenshot under the test's output; also into docs/ when asked."""
    path = tmp_path / "screenshots" / f"{name}.png"
    await browser.screenshot(path)
    if os.environ.get("EARMARK_SCREENSHOTS") == "docs":
        SHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SHOTS / f"{name}.png")


def page(console: Console, path: str, **query: str) -> str:
    return f"{console.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")


async def budget(side: Running, budget_id: str, limit: int, unit: str = "tokens", **f: Any) -> None:
    request = pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit=unit, **f)
    await side.admin.PutBudget(request)


async def in_doubt(side: Running, budget_id: str, amount: int, charged: int) -> str:
    """A hold of amount on budget_id whose worker charged `charged` and then could not tell
    whether its call ran (OUTCOME_UNKNOWN): in doubt at once."""
    held = await side.budget.Reserve(
        pb.ReserveRequest(budget_id=budget_id, amount=amount, idempotency_key=f"doubt-{budget_id}")
    )
    await side.budget.Settle(
        pb.SettleRequest(
            reservation_id=held.reservation_id, used=charged, outcome=pb.OUTCOME_UNKNOWN
        )
    )
    return held.reservation_id


async def state_of(side: Running, budget_id: str) -> pb.BudgetState:
    return await side.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))


async def test_every_page_loads_without_console_errors(
    sidecar: Running, console: Console, browser: Browser, tmp_path: Path
) -> None:
    """Budgets (dollars shown as dollars), a nested budget's page with its holds, chart
    and ledger, prices with a shape's cost now, the Lab and the confirmation of an action
    load with no error in the browser's console."""
    await budget(sidecar, "acme", 1_000_000)
    await budget(sidecar, "acme/task-1", 200_000)
    await budget(
        sidecar, "spend", 5_000_000, "usd_micros", mode=pb.BUDGET_MODE_OBSERVE,
        period=pb.PERIOD_MONTH, timezone="Europe/Berlin", threshold_bps=[8_000, 10_000],
    )  # fmt: skip
    await put_price(
        sidecar, "openai", "gpt-4o", input_usd_micros_per_mtok=2_500_000,
        output_usd_micros_per_mtok=10_000_000,
    )  # fmt: skip
    for i in range(3):
        held = await sidecar.budget.Reserve(
            pb.ReserveRequest(
                budget_id="acme/task-1", amount=40_000, idempotency_key=f"k{i}",
                also_budget_ids=["acme"],
            )
        )  # fmt: skip
        await sidecar.budget.Charge(
            pb.ChargeRequest(
                reservation_id=held.reservation_id, amount=9_000 + 4_000 * i, idempotency_key="c"
            )
        )
        if i < 2:
            await sidecar.budget.Settle(
                pb.SettleRequest(reservation_id=held.reservation_id, used=12_000 + 6_000 * i)
            )
    await in_doubt(sidecar, "acme/task-1", 30_000, 7_000)

    await browser.open(page(console, "/budgets"))
    rows = await browser.run(
        lambda d: [r.text for r in d.find_elements("css selector", "#budgets tbody tr")]
    )
    assert ["acme", "acme/task-1", "spend"] == [row.split()[0] for row in rows]
    assert "$5.00" in rows[2]
    # The mode, OBSERVE marked, the period with its timezone, and the thresholds.
    assert ["enforce", "enforce", "observe"] == await browser.run(
        lambda d: [c.text for c in d.find_elements("css selector", "td[data-field=mode]")]
    )
    assert 1 == len(await browser.run(lambda d: d.find_elements("css selector", ".badge.observe")))
    assert "month in Europe/Berlin" in rows[2]
    assert "80%, 100%" in rows[2]
    await shoot(browser, tmp_path, "budgets")
    assert [] == await browser.errors()

    await browser.open(page(console, "/budget", id="acme/task-1"))
    await browser.wait_text("#chart", lambda t: "used" in t, "the chart is drawn")
    assert "acme" in await browser.text("section[aria-labelledby=nesting]")
    holds = await browser.run(lambda d: d.find_elements("css selector", "#holds tbody tr"))
    assert 2 == len(holds)
    await shoot(browser, tmp_path, "budget")
    assert [] == await browser.errors()
    # On a phone's width the page does not scroll sideways: wide tables scroll in place.
    await browser.run(lambda d: d.set_window_size(412, 900))
    try:
        await browser.open(page(console, "/budget", id="acme/task-1"))
        await browser.wait_text("#chart", lambda t: "used" in t, "the chart is drawn")
        overflow = await browser.run(
            lambda d: d.execute_script(
                "return document.documentElement.scrollWidth - window.innerWidth"
            )
        )
        await shoot(browser, tmp_path, "budget-phone")
    finally:
        await browser.run(lambda d: d.set_window_size(1280, 1000))
    assert overflow <= 0
    assert [] == await browser.errors()

    await browser.open(
        page(console, "/prices", provider="openai", model="gpt-4o", input="1000", output="500")
    )
    # 1,000 input tokens at $2.50 and 500 output at $10.00 per million: $0.0075.
    assert "$0.0075" in await browser.text("#cost")
    await shoot(browser, tmp_path, "prices")
    assert [] == await browser.errors()

    await browser.open(page(console, "/lab"))
    assert "40000" == await browser.run(
        lambda d: d.find_element("id", "estimate").get_attribute("value")
    )
    assert [] == await browser.errors()

    await browser.open(page(console, "/budget", id="acme"))
    await browser.type("#new-limit", "900000")
    await browser.click("#change-limit")
    what = await browser.wait_text("#what", lambda t: t.startswith("Change"), "the confirm")
    assert "from 1,000,000 to 900,000 tokens" in what
    await shoot(browser, tmp_path, "confirm")
    assert [] == await browser.errors()
    # Cancelled: nothing changes.
    await browser.click("a.button.secondary")
    assert 1_000_000 == (await state_of(sidecar, "acme")).limit
    await assert_invariants(sidecar.dsn)


async def test_the_lab_with_its_defaults_shows_the_articles_numbers(
    sidecar: Running, console: Console, browser: Browser, tmp_path: Path
) -> None:
    """Run with the defaults (5 jobs of 40,000 on a plan of 100,000): the plain check
    spends 200,000, holds spend 80,000 with 2 admitted and 3 refused with 20,000 left, read
    from the page; the scratch budgets are archived afterwards."""
    await browser.open(page(console, "/lab"))
    await browser.click("#run")
    await browser.wait_text("#lab-status", lambda t: t == "Done.", "the Lab run ends")
    numbers = {
        name: await browser.text(f"#{name}")
        for name in ("check-spent", "hold-spent", "check-admitted", "hold-admitted", "hold-refused")
    }
    assert {
        "check-spent": "200,000",
        "hold-spent": "80,000",
        "check-admitted": "5",
        "hold-admitted": "2",
        "hold-refused": "3",
    } == numbers
    jobs = await browser.run(
        lambda d: [li.text for li in d.find_elements("css selector", "#hold-jobs li")]
    )
    assert 3 == sum("refused: 20,000 left" in job for job in jobs)
    await shoot(browser, tmp_path, "lab-run")
    assert [] == await browser.errors()
    scratch = await sidecar.admin.ListBudgets(pb.ListBudgetsRequest(prefix="lab-"))
    assert 2 == len(scratch.budgets)
    assert all(b.HasField("archived_at") for b in scratch.budgets)
    assert [200_000, 80_000] == sorted((b.used for b in scratch.budgets), reverse=True)
    await assert_invariants(sidecar.dsn)


async def test_a_hold_in_doubt_is_resolved_from_its_budget_page(
    sidecar: Running, console: Console, browser: Browser
) -> None:
    """A hold of 10,000 in doubt with 2,000 charged, resolved on its budget's page at 3,500
    and confirmed: the budget's used moves by exactly 1,500 and its held by -8,000, as the
    ledger's resolve entry says."""
    await budget(sidecar, "doubt", 50_000)
    rid = await in_doubt(sidecar, "doubt", 10_000, 2_000)
    before = await state_of(sidecar, "doubt")
    await browser.open(page(console, "/budget", id="doubt"))
    await browser.type(f"#used-{rid}", "3500")
    await browser.click(f"tr[data-hold-id='{rid}'] button.resolve")
    what = await browser.wait_text("#what", lambda t: t.startswith("Resolve"), "the confirm")
    assert f"Resolve hold {rid} at 3,500 spent" in what
    await browser.click("#confirm")
    await browser.wait_text("#holds", lambda t: "No open holds." in t, "the hold is gone")
    after = await state_of(sidecar, "doubt")
    ledger = await sidecar.admin.ListLedger(pb.ListLedgerRequest(budget_id="doubt"))
    resolve = ledger.entries[-1]
    assert (2_000, 8_000) == (before.used, before.held)
    assert (3_500, 0) == (after.used, after.held)
    assert (after.used - before.used, after.held - before.held) == (
        resolve.used_delta,
        resolve.held_delta,
    )
    assert [] == await browser.errors()
    await assert_invariants(sidecar.dsn)


async def test_a_limit_changed_on_the_page_is_what_get_budget_answers(
    sidecar: Running, console: Console, browser: Browser
) -> None:
    """A new limit typed, confirmed, and answered by GetBudget; the budget's other settings
    (escrow, overage, estimate, its policies) are kept. Then its policies changed in their
    form: observe mode, shown marked on the page, and a week in New York from Sunday."""
    await budget(
        sidecar, "plan", 100_000, escrow_bps=500, overage_policy=pb.OVERAGE_POLICY_SOFT,
        overage_limit=5_000, default_estimate=1_000, period=pb.PERIOD_DAY,
        timezone="America/New_York", threshold_bps=[8_000], units_per_minute=50_000,
    )  # fmt: skip
    await browser.open(page(console, "/budget", id="plan"))
    await browser.type("#new-limit", "250,000")
    await browser.click("#change-limit")
    await browser.wait_text("#what", lambda t: t.startswith("Change"), "the confirm")
    await browser.click("#confirm")
    await browser.wait_text("#limit", lambda t: t == "250,000", "the page shows the new limit")
    state = await state_of(sidecar, "plan")
    assert (250_000, 500, pb.OVERAGE_POLICY_SOFT, 5_000, 1_000) == (
        state.limit,
        state.escrow_bps,
        state.overage_policy,
        state.overage_limit,
        state.default_estimate,
    )
    assert (pb.PERIOD_DAY, "America/New_York", [8_000], pb.BUDGET_MODE_ENFORCE, 50_000) == (
        state.period,
        state.timezone,
        list(state.threshold_bps),
        state.mode,
        state.units_per_minute,
    )
    assert "day in America/New_York" == await browser.text("#period")
    assert "America/New_York" in await browser.text("#resets-at")
    await browser.run(
        lambda d: Select(d.find_element("id", "mode-choice")).select_by_value("observe")
    )
    await browser.run(
        lambda d: Select(d.find_element("id", "period-choice")).select_by_value("week")
    )
    await browser.type("#period-anchor", "7")
    await browser.type("#thresholds-typed", "80, 95.5")
    await browser.type("#admissions", "120")
    await browser.click("#change-policies")
    what = await browser.wait_text("#what", lambda t: t.startswith("Set"), "the confirm")
    assert "observe mode" in what
    assert "resets every week from Sunday in America/New_York" in what
    await browser.click("#confirm")
    await browser.wait_text("#mode", lambda t: t == "observe", "the page shows the mode")
    changed = await state_of(sidecar, "plan")
    assert (
        250_000, pb.PERIOD_WEEK, "America/New_York", 7, [8_000, 9_550], pb.BUDGET_MODE_OBSERVE,
        120, 50_000,
    ) == (
        changed.limit, changed.period, changed.timezone, changed.period_anchor,
        list(changed.threshold_bps), changed.mode, changed.admissions_per_minute,
        changed.units_per_minute,
    )  # fmt: skip
    assert "observe mode" in await browser.text("#observing")
    assert ("80%, 95.5%", "120 admissions/min, 50,000 tokens/min") == (
        await browser.text("#thresholds"),
        await browser.text("#rate"),
    )
    assert [] == await browser.errors()
    await assert_invariants(sidecar.dsn)


async def test_a_person_logs_in_before_any_page(
    sidecar: Running, browser: Browser, tmp_path: Path
) -> None:
    """With a login token, a page sends the browser to the login page; a wrong token is
    refused there, and the right one returns to the page first asked for."""
    token = tmp_path / "login"
    token.write_text("console-login-token-5b1d\n")
    await budget(sidecar, "guarded", 10)
    async with serving(console_settings(sidecar, login_token_file=token)) as (_, url):
        await browser.open(f"{url}/budget?id=guarded")
        await browser.wait_text("h1", lambda t: t == "Log in", "the login page")
        await shoot(browser, tmp_path, "login")
        await browser.type("#token", "not-the-token")
        await browser.click("button[type=submit]")
        # The refusal is a new page: wait for it, as for any page after a click.
        await browser.wait_text("[role=alert]", lambda t: "not the one" in t, "the refusal")
        await browser.type("#token", "console-login-token-5b1d")
        await browser.click("button[type=submit]")
        await browser.wait_text("h1", lambda t: t == "guarded", "the page first asked for")
        assert [] == [e for e in await browser.errors() if "401" not in e["message"]]
    await assert_invariants(sidecar.dsn)
