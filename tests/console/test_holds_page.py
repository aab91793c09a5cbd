"""The console's holds page over real HTTP: every budget's in-doubt holds, oldest first, a
page at a time, each linked to its budget; linked from the budgets page's navigation."""

from __future__ import annotations

import re

import httpx
import pytest

from earmark import limits
from earmark.console.app import serving
from tests.conftest import Running
from tests.console.conftest import console_settings
from tests.helpers import FakeClock, assert_invariants
from tests.service.test_holds_across import MADE_ON, in_doubt_across

ROW = re.compile(r'<tr data-hold-id="([^"]+)" data-budget-id="([^"]+)" class="doubt">')
NEXT = re.compile(r'href="(/holds\?state=in-doubt&amp;page=[^"]+)" rel="next"')


async def test_in_doubt_holds_across_budgets_page(
    clocked: Running, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With pages of 2, the page's next links reach the 5 in-doubt holds of budgets a, b
    and c oldest first, each linked to its budget; the budgets page links to it; a state
    it does not list is a 400 naming state."""
    doubted, _ = await in_doubt_across(clocked, clock)
    monkeypatch.setattr(limits, "console_page_rows_max", 2)
    seen: list[tuple[str, str]] = []
    pages = 0
    async with (
        serving(console_settings(clocked), clock) as (_, url),
        httpx.AsyncClient(base_url=url) as http,
    ):
        budgets = await http.get("/budgets")
        path: str | None = "/holds?state=in-doubt"
        first = ""
        while path is not None:
            page = await http.get(path)
            assert 200 == page.status_code
            first = first or page.text
            seen.extend(ROW.findall(page.text))
            pages += 1
            found = NEXT.search(page.text)
            path = found[1].replace("&amp;", "&") if found else None
        wrong = await http.get("/holds", params={"state": "settled"})
    assert list(zip(doubted, MADE_ON, strict=True)) == seen
    assert 3 == pages
    assert '<a href="/holds?state=in-doubt"' in budgets.text
    assert '<a href="/budget?id=c">c</a>' in first
    assert (400, True) == (wrong.status_code, "state: &#39;settled&#39;" in wrong.text)
    await assert_invariants(clocked.dsn)
