"""The console's view of issue 47 over real HTTP and in a real Chromium: a budget's page
shows its run limits (open holds and admissions of their most, when it closes), its
temporary raise and the template it was made from; the templates page lists every
template, read-only. Everything an operator typed is escaped."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.client.types import BudgetState, BudgetTemplate
from earmark.console import present
from earmark.core.periods import Period
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.console.conftest import Browser, Console
from tests.console.test_browser import page
from tests.helpers import assert_invariants

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
CLOSES = datetime(2036, 1, 1, tzinfo=UTC)


def stamp(at: datetime) -> Timestamp:
    value = Timestamp()
    value.FromDatetime(at)
    return value


def test_run_limits_a_raise_and_a_template_read_as_words() -> None:
    """Open holds and admissions read as a count of their most (a count alone without one),
    closes_at as UTC and closed once it has come, a raise with its expiry, what the limit
    becomes and why, and the template with whether it was since changed by hand."""
    plain = BudgetState("plain", 1_000, 0, 0, 1_000, "tokens", 3)
    limited = replace(
        plain, budget_id="limited", max_open_holds=5, max_admissions=100, admissions=42,
        closes_at=NOW + timedelta(hours=1), template_id="end-users", changed_by_hand=True,
        limit_until=NOW + timedelta(days=2), limit_after=500, limit_reason="launch week",
    )  # fmt: skip
    closed = replace(limited, closes_at=NOW, limit_until=None, template_id="")
    keys = ("open_of", "admissions", "run_limited", "closes_at", "closed", "raise",
            "template_id", "changed_by_hand")  # fmt: skip
    assert [
        ("3", "0", False, "", False, None, "", False),
        (
            "3 of 5", "42 of 100", True, "2026-12-01 13:00:00 UTC", False,
            {"until": "2026-12-03 12:00:00 UTC", "after": "500", "reason": "launch week"},
            "end-users", True,
        ),
        ("3 of 5", "42 of 100", True, "2026-12-01 12:00:00 UTC", True, None, "", True),
    ] == [
        tuple(present.budget_view(s, NOW)[k] for k in keys) for s in (plain, limited, closed)
    ]  # fmt: skip
    assert ([], ["closed"]) == (
        present.budget_view(limited, NOW)["states"],
        present.budget_view(closed, NOW)["states"],
    )
    template = BudgetTemplate(
        "end-users", "end-user/*", 5_000_000, "usd_micros", 3, updated_at=NOW,
        period=Period.DAY, max_open_holds=2,
    )  # fmt: skip
    assert {
        "id": "end-users", "pattern": "end-user/*", "limit": "$5.00", "unit_name": "dollars",
        "period": "day in UTC", "open_most": "2", "admissions_most": "no bound",
        "closes_at": "never", "version": 3, "updated_at": "2026-12-01 12:00:00 UTC",
        "deleted": False, "deleted_at": "",
    } == present.template_view(template)  # fmt: skip


async def test_a_budgets_page_shows_its_run_limits_and_raise(
    sidecar: Running, console: Console
) -> None:
    """A budget with run limits and a temporary raise: its page says 1 of 2 open holds, 1
    of 5 admitted, when it closes, and the raise with its reason escaped; /api/budget
    answers the same words; a budget without them says a count alone and no raise."""
    await sidecar.admin.PutBudget(
        pb.PutBudgetRequest(
            budget_id="run", limit=1_000, unit="tokens", max_open_holds=2, max_admissions=5,
            closes_at=stamp(CLOSES),
        )
    )  # fmt: skip
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="plain", limit=1, unit="tokens"))
    until = datetime.now(UTC).replace(microsecond=0) + timedelta(days=7)
    raised = pb.UpdateBudgetRequest(
        budget=pb.PutBudgetRequest(budget_id="run", limit=2_000),
        limit_until=stamp(until),
        reason="<b>launch</b> & co",
    )
    raised.update_mask.paths.append("limit")
    await sidecar.admin.UpdateBudget(raised)
    await sidecar.budget.Reserve(pb.ReserveRequest(budget_id="run", amount=10, idempotency_key="a"))
    async with httpx.AsyncClient(base_url=console.url) as http:
        shown = (await http.get("/budget", params={"id": "run"})).text
        bare = (await http.get("/budget", params={"id": "plain"})).text
        polled = (await http.get("/api/budget", params={"id": "run"})).json()
    assert 'id="open-holds">1 of 2</dd>' in shown
    assert 'id="admitted">1 of 5</dd>' in shown
    assert 'id="closes-at">2036-01-01 00:00:00 UTC</dd>' in shown
    assert (
        f'id="raise">2,000 until {until:%Y-%m-%d %H:%M:%S} UTC, then 1,000 '
        "(&lt;b&gt;launch&lt;/b&gt; &amp; co)</dd>"
    ) in shown
    assert "<b>launch</b>" not in shown
    assert 'id="open-holds">0</dd>' in bare
    assert 'id="admitted">0</dd>' in bare
    assert not any(f'id="{i}"' in bare for i in ("closes-at", "raise", "template"))
    assert ("1 of 2", "1 of 5", "<b>launch</b> & co") == (
        polled["open_of"],
        polled["admissions"],
        polled["raise"]["reason"],
    )
    await assert_invariants(sidecar.dsn)


async def test_the_page_polls_admissions_and_names_a_closed_budget(
    sidecar: Running, console: Console, browser: Browser
) -> None:
    """In Chromium, a Reserve admitted while the page is open moves its admissions and open
    holds without a reload; a budget past its closes_at reads closed, in a badge."""
    await sidecar.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="live", limit=1_000, unit="tokens", max_admissions=3)
    )
    past = datetime.now(UTC) - timedelta(minutes=1)
    await sidecar.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="shut", limit=1_000, unit="tokens", closes_at=stamp(past))
    )
    await browser.open(page(console, "/budget", id="live"))
    assert ("0", "0 of 3") == (await browser.text("#open-holds"), await browser.text("#admitted"))
    await sidecar.budget.Reserve(pb.ReserveRequest(budget_id="live", amount=5, idempotency_key="x"))
    await browser.wait_text("#admitted", lambda t: t == "1 of 3", "the admissions polled")
    assert "1" == await browser.text("#open-holds")
    assert [] == await browser.errors()
    await browser.open(page(console, "/budget", id="shut"))
    assert "closed" in await browser.text("#summary .badge.closed")
    assert "Closed at" in await browser.text("#summary")
    assert [] == await browser.errors()
    await assert_invariants(sidecar.dsn)


async def test_the_templates_page_lists_them_and_a_budget_names_its_own(
    sidecar: Running, console: Console, browser: Browser
) -> None:
    """The templates page lists each template's id, pattern (escaped), limit and unit,
    period, run limits and version; a budget made from one names it on its page, with a
    link to the list; with none, the page says how to add one."""
    async with httpx.AsyncClient(base_url=console.url) as http:
        none = (await http.get("/templates")).text
    await sidecar.admin.PutBudgetTemplate(
        pb.PutBudgetTemplateRequest(
            template_id="end-users",
            pattern="a<b>&c/*",
            budget=pb.PutBudgetRequest(
                limit=5_000_000, unit="usd_micros", period=pb.PERIOD_DAY, max_open_holds=2
            ),
        )
    )
    made = await sidecar.admin.ListBudgetTemplates(pb.ListBudgetTemplatesRequest())
    await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="a<b>&c/alice", amount=10, idempotency_key="a")
    )
    async with httpx.AsyncClient(base_url=console.url) as http:
        listed = (await http.get("/templates")).text
    assert "No templates: <code>earmark templates put</code> adds one." in none
    assert "<code>a&lt;b&gt;&amp;c/*</code>" in listed
    assert "a<b>" not in listed
    await browser.open(page(console, "/templates"))
    cells = await browser.run(
        lambda d: [c.text for c in d.find_elements("css selector", "#templates tbody tr > *")]
    )
    assert [
        "end-users", "a<b>&c/*", "$5.00", "dollars", "day in UTC", "2", "no bound", "never",
        str(made.templates[0].version),
    ] == cells[:9]  # fmt: skip
    assert "active" == cells[10]
    assert [] == await browser.errors()
    await browser.open(page(console, "/budget", id="a<b>&c/alice"))
    assert "end-users" == await browser.text("#template")
    await browser.click("#template a")
    await browser.wait_text("h1", lambda t: t == "Budget templates", "the templates page")
    assert [] == await browser.errors()
    await assert_invariants(sidecar.dsn)
