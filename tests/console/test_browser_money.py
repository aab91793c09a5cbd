"""The console speaking money, in a real browser (Debian's chromium, headless) against a live
sidecar: a dollar budget's cards, chart axis and limit form in dollars ("10.00" taken);
its spend by model, job and UTC day; and every budget's in-doubt holds resolved and
released from their own page, a released hold then reading "released". Each action moves
its budget by exactly what the ledger says. Screenshots as in test_browser.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from earmark.console.app import serving
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.console.conftest import Browser, Console, console_settings
from tests.console.test_browser import budget, in_doubt, page, shoot, state_of
from tests.helpers import FakeClock, assert_invariants
from tests.service.test_calls import call, cost, price, stamp

ROWS = "#spend tbody tr"


async def rows_of(browser: Browser, css: str) -> list[str]:
    """Each row's text, its cells' words joined by single spaces."""
    rows = await browser.run(lambda d: [r.text for r in d.find_elements("css selector", css)])
    return [" ".join(row.split()) for row in rows]


async def test_a_dollar_budget_is_shown_and_changed_in_dollars(
    sidecar: Running, console: Console, browser: Browser, tmp_path: Path
) -> None:
    """Cards in dollars and the chart's axis labelled in dollars too; "10.00" typed as the
    new limit is confirmed as $10.00 and set as 10,000,000 micro-dollars; seven decimals
    are refused naming limit, and the limit stays."""
    await budget(sidecar, "acme/usd", 5_000_000, "usd_micros")
    settled = await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="acme/usd", amount=2_000_000, idempotency_key="a")
    )
    await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=settled.reservation_id, used=1_250_000)
    )
    running = await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="acme/usd", amount=1_000_000, idempotency_key="b")
    )
    await sidecar.budget.Charge(
        pb.ChargeRequest(reservation_id=running.reservation_id, amount=250_000, idempotency_key="c")
    )
    await browser.open(page(console, "/budget", id="acme/usd"))
    await browser.wait_text("#chart", lambda t: "used" in t, "the chart is drawn")
    cards = [await browser.text(f"#{name}") for name in ("limit", "used", "held", "remaining")]
    axis = await browser.run(
        lambda d: d.find_element("id", "chart").get_attribute("data-y-labels") or ""
    )
    assert ["$5.00", "$1.50", "$0.75", "$2.75"] == cards
    assert axis
    assert all(label.startswith("$") for label in axis.split())
    assert "New limit (dollars)" in await browser.text("label[for=new-limit]")
    await shoot(browser, tmp_path, "budget-dollars")
    await browser.type("#new-limit", "10.00")
    await browser.click("#change-limit")
    what = await browser.wait_text("#what", lambda t: t.startswith("Change"), "the confirm")
    assert "Change acme/usd's limit from $5.00 to $10.00." == what
    await browser.click("#confirm")
    await browser.wait_text("#limit", lambda t: t == "$10.00", "the page shows the new limit")
    assert 10_000_000 == (await state_of(sidecar, "acme/usd")).limit
    await browser.type("#new-limit", "12.3456789")
    await browser.click("#change-limit")
    problem = await browser.wait_text("#problem", bool, "the refusal")
    assert problem.startswith("limit: '12.3456789' has 7 decimals; at most 6")
    assert 10_000_000 == (await state_of(sidecar, "acme/usd")).limit
    assert [] == [e for e in await browser.errors() if "400" not in e["message"]]
    await assert_invariants(sidecar.dsn)


async def calls_over_two_days(side: Running, clock: FakeClock) -> None:
    """On acme/team (usd_micros), on 2026-12-01: calls to openai/gpt-5 for jobs summarize
    and translate, and a hold of job translate naming no model settled at $0.02; on
    2026-12-02 one more call for summarize."""
    await side.admin.PutPrice(price(effective_from=stamp(clock() - timedelta(days=1))))
    await budget(side, "acme/team", 50_000_000, "usd_micros")

    async def sent(key: str, job: str, output: int) -> None:
        request = call("acme/team", key, 1_000)
        request.job = job
        held = await side.budget.Reserve(request)
        usage = pb.TokenUsage(input_tokens=1_000, output_tokens=output)
        await side.budget.Settle(pb.SettleRequest(reservation_id=held.reservation_id, usage=usage))

    await sent("c1", "summarize", 400)
    await sent("c2", "translate", 800)
    plain = await side.budget.Reserve(
        pb.ReserveRequest(
            budget_id="acme/team", amount=30_000, idempotency_key="p", job="translate"
        )
    )
    await side.budget.Settle(pb.SettleRequest(reservation_id=plain.reservation_id, used=20_000))
    clock.advance(timedelta(days=1))
    await sent("c3", "summarize", 100)


async def test_spend_by_model_job_and_day(
    clocked: Running, clock: FakeClock, browser: Browser, tmp_path: Path
) -> None:
    """The budget's page links its spend; by model, by job and by day the rows are what
    the calls cost, in dollars, summing to what the budget used; a range of days keeps
    only its own."""
    await calls_over_two_days(clocked, clock)
    used = (await state_of(clocked, "acme/team")).used
    c1, c2, c3 = cost(1_000, 400), cost(1_000, 800), cost(1_000, 100)
    assert c1 + c2 + c3 + 20_000 == used
    async with serving(console_settings(clocked), clock) as (_, url):
        console = Console(url, console_settings(clocked))
        await browser.open(page(console, "/budget", id="acme/team"))
        await browser.click("#spend-links a:first-of-type")
        await browser.wait_text("h1", lambda t: t.endswith("by model"), "the spend page")
        by_model = await rows_of(browser, ROWS)
        total = await browser.text("#total")
        await shoot(browser, tmp_path, "spend")
        await browser.click("#groups a:nth-of-type(2)")
        await browser.wait_text("h1", lambda t: t.endswith("by job"), "spend by job")
        by_job = await rows_of(browser, ROWS)
        await browser.click("#groups a:nth-of-type(3)")
        await browser.wait_text("h1", lambda t: t.endswith("by day"), "spend by day")
        by_day = await rows_of(browser, ROWS)
        await browser.run(
            lambda d: d.execute_script("document.getElementById('from').value = '2026-12-02'")
        )
        await browser.click("#range button")
        await browser.wait_text(ROWS, lambda t: t.startswith("2026-12-02"), "the range")
        late = await rows_of(browser, ROWS)
        assert [] == await browser.errors()

    def dollars(micros: int) -> str:
        return f"${micros / 1_000_000:,.6f}".rstrip("0").rstrip(".")

    share = round(100 * (c1 + c2 + c3) / used, 2)
    assert [
        f"openai/gpt-5 {dollars(c1 + c2 + c3)} 3 {share}%",
        f"(no model) $0.02 1 {round(100 - share, 2)}%",
    ] == by_model
    assert dollars(used) == total
    assert ["summarize", "translate"] == sorted(row.split()[0] for row in by_job)
    assert [f"2026-12-02 {dollars(c3)} 1", f"2026-12-01 {dollars(c1 + c2 + 20_000)} 3"] == [
        row.rsplit(" ", 1)[0] for row in by_day
    ]
    assert [f"2026-12-02 {dollars(c3)} 1 100.0%"] == late
    await assert_invariants(clocked.dsn)


async def test_in_doubt_holds_are_resolved_and_released_from_their_own_page(
    sidecar: Running, console: Console, browser: Browser, tmp_path: Path
) -> None:
    """Every budget's in-doubt holds on one page, each amount in its budget's unit: the
    dollar one resolved there at "0.75" (its budget moves by the resolve's ledger entry),
    the other released there; the budget's list of holds then says "released"."""
    await budget(sidecar, "ops/usd", 5_000_000, "usd_micros")
    await budget(sidecar, "ops/tokens", 100_000)
    dollar = await in_doubt(sidecar, "ops/usd", 2_000_000, 500_000)
    tokens = await in_doubt(sidecar, "ops/tokens", 10_000, 2_000)
    # Beside it on ops/tokens, a hold settled and one still running.
    for key, used in (("settled", 3_000), ("running", 0)):
        held = await sidecar.budget.Reserve(
            pb.ReserveRequest(budget_id="ops/tokens", amount=5_000, idempotency_key=key)
        )
        if used:
            await sidecar.budget.Settle(
                pb.SettleRequest(reservation_id=held.reservation_id, used=used)
            )
    before = await state_of(sidecar, "ops/usd")
    await browser.open(page(console, "/holds", state="in-doubt"))
    rows = await rows_of(browser, "#holds tbody tr")
    prefilled = await browser.run(
        lambda d: d.find_element("id", f"used-{dollar}").get_attribute("value")
    )
    await shoot(browser, tmp_path, "holds")
    assert 2 == len(rows)
    assert "0.50" == prefilled
    await browser.type(f"#used-{dollar}", "0.75")
    await browser.click(f"tr[data-hold-id='{dollar}'] button.resolve")
    what = await browser.wait_text("#what", lambda t: t.startswith("Resolve"), "the confirm")
    assert what.startswith(f"Resolve hold {dollar} at $0.75 spent")
    await browser.click("#confirm")
    await browser.wait_text("h1", lambda t: t.startswith("In-doubt holds"), "back on the page")
    await browser.click(f"tr[data-hold-id='{tokens}'] button.release")
    await browser.wait_text("#what", lambda t: t.startswith("Release"), "the release's confirm")
    await browser.click("#confirm")
    await browser.wait_text("#holds", lambda t: "No in-doubt holds." in t, "both are gone")
    after = await state_of(sidecar, "ops/usd")
    ledger = await sidecar.admin.ListLedger(pb.ListLedgerRequest(budget_id="ops/usd"))
    resolve = ledger.entries[-1]
    await browser.open(page(console, "/holds", budget="ops/tokens"))
    states = await browser.run(
        lambda d: [
            r.get_attribute("data-state") or ""
            for r in d.find_elements("css selector", "#holds tbody tr")
        ]
    )
    state = await browser.text(f"tr[data-hold-id='{tokens}'] td:nth-of-type(2)")
    await shoot(browser, tmp_path, "budget-holds")
    assert (after.used - before.used, after.held - before.held) == (
        resolve.used_delta,
        resolve.held_delta,
    )
    assert ("resolve", 750_000, 0) == (resolve.kind, after.used, after.held)
    assert "released" == state
    assert ["held", "released", "settled"] == sorted(states)
    assert [] == await browser.errors()
    await assert_invariants(sidecar.dsn)
