"""The console's edit forms change only what they show (issue 43): in a real browser
(Debian's chromium, headless) against a live sidecar, a limit changed on the page keeps
the budget's period, thresholds, basis, mode and windows, and a change another operator
made while the confirmation was open; the budget's page and the list show its threshold
basis, its refusals this period, and `refusing`."""

from __future__ import annotations

from google.protobuf.field_mask_pb2 import FieldMask
from selenium.webdriver.support.select import Select

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.console.conftest import Browser, Console
from tests.console.test_browser import budget, page, state_of
from tests.helpers import assert_invariants

KEPT = ("period", "timezone", "period_anchor", "threshold_bps", "threshold_basis", "mode",
        "admissions_per_minute", "units_per_minute", "escrow_bps", "default_estimate")  # fmt: skip


def kept(state: pb.BudgetState) -> dict[str, object]:
    """The settings a limit's form does not show."""
    return {name: getattr(state, name) for name in KEPT if name != "threshold_bps"} | {
        "threshold_bps": list(state.threshold_bps)
    }


async def test_a_limit_changed_on_the_page_keeps_every_other_setting(
    sidecar: Running, console: Console, browser: Browser
) -> None:
    """The limit form sends UpdateBudget of the limit alone: the period, thresholds and
    their basis, mode, windows, escrow and estimate stay, and so does a window another
    operator changed while the confirmation was on the screen."""
    await budget(
        sidecar, "keep", 100_000, escrow_bps=500, default_estimate=1_000, period=pb.PERIOD_MONTH,
        timezone="Europe/Berlin", period_anchor=15, threshold_bps=[8_000, 10_000],
        threshold_basis=pb.THRESHOLD_BASIS_USED, mode=pb.BUDGET_MODE_OBSERVE,
        admissions_per_minute=60, units_per_minute=50_000,
    )  # fmt: skip
    before = kept(await state_of(sidecar, "keep"))
    await browser.open(page(console, "/budget", id="keep"))
    assert "used" == await browser.text("#threshold-basis")
    await browser.type("#new-limit", "250,000")
    await browser.click("#change-limit")
    await browser.wait_text("#what", lambda t: t.startswith("Change"), "the confirm")
    meanwhile = pb.UpdateBudgetRequest(
        budget=pb.PutBudgetRequest(budget_id="keep", admissions_per_minute=90),
        update_mask=FieldMask(paths=["admissions_per_minute"]),
    )
    await sidecar.admin.UpdateBudget(meanwhile)
    await browser.click("#confirm")
    await browser.wait_text("#limit", lambda t: t == "250,000", "the page shows the new limit")
    after = await state_of(sidecar, "keep")
    assert (250_000, {**before, "admissions_per_minute": 90}) == (after.limit, kept(after))
    assert [] == await browser.errors()
    await assert_invariants(sidecar.dsn)


async def test_the_policies_form_changes_only_the_policies(
    sidecar: Running, console: Console, browser: Browser
) -> None:
    """The policies form names only what it shows (its threshold basis too): a limit
    another operator raised after the page was read stays."""
    await budget(sidecar, "pol", 100_000, escrow_bps=500, threshold_bps=[8_000])
    await browser.open(page(console, "/budget", id="pol"))
    raised = pb.UpdateBudgetRequest(
        budget=pb.PutBudgetRequest(budget_id="pol", limit=400_000),
        update_mask=FieldMask(paths=["limit"]),
    )
    await sidecar.admin.UpdateBudget(raised)
    await browser.run(
        lambda d: Select(d.find_element("id", "basis-choice")).select_by_value("used")
    )
    await browser.type("#admissions", "30")
    await browser.click("#change-policies")
    what = await browser.wait_text("#what", lambda t: t.startswith("Set"), "the confirm")
    await browser.click("#confirm")
    await browser.wait_text("#threshold-basis", lambda t: t == "used", "the page shows it")
    state = await state_of(sidecar, "pol")
    assert (
        (400_000, 500, [8_000], pb.THRESHOLD_BASIS_USED, 30),
        True,
    ) == (
        (state.limit, state.escrow_bps, list(state.threshold_bps), state.threshold_basis,
         state.admissions_per_minute),
        "notices at 80% of the limit (used)" in what,
    )  # fmt: skip
    await assert_invariants(sidecar.dsn)


async def test_a_refusing_budget_is_shown_refusing_with_its_refusals(
    sidecar: Running, console: Console, browser: Browser
) -> None:
    """A budget that refused Reserves for want of room shows `refusing` and how often it
    refused this period on its page and in the list; another shows none."""
    await budget(sidecar, "full", 100)
    await budget(sidecar, "fine", 100)
    for key, amount in (("a", 60), ("b", 50), ("c", 41)):
        request = pb.ReserveRequest(budget_id="full", amount=amount, idempotency_key=key)
        await sidecar.budget.Reserve(request)
    await browser.open(page(console, "/budget", id="full"))
    states = await browser.text("#summary [data-field='states']")
    refusals = await browser.text("#refusals")
    await browser.open(page(console, "/budgets"))
    full = await browser.text("tr[data-budget-id='full'] [data-field='states']")
    counts = [
        await browser.text(f"tr[data-budget-id='{b}'] [data-field='refusals_count']")
        for b in ("full", "fine")
    ]
    assert ("refusing", True, "refusing", ["2", "0"]) == (
        states,
        refusals.startswith("2 times, last "),
        full,
        counts,
    )
    assert [] == await browser.errors()
    await assert_invariants(sidecar.dsn)
