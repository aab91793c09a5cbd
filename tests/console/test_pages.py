"""The console's listings over real HTTP on 127.0.0.1: budgets a page at a time (one Admin
call each) with a link to the next, searched by id prefix, and the JSON a page polls
answering the same page."""

from __future__ import annotations

import re

import httpx

from earmark import limits
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.console.conftest import Console

ROW = re.compile(r'<tr data-budget-id="([^"]+)">')
NEXT = re.compile(r'href="(/budgets\?q=[^"]*&amp;page=[^"]+)" rel="next"')


async def test_budgets_are_paged_and_searched_by_prefix(sidecar: Running, console: Console) -> None:
    """120 budgets: pages of console_page_rows_max in id order whose next links reach every
    budget once; a prefix finds only its own; /api/budgets answers the first page too."""
    ids = [f"org{i % 3}/team{i:03d}" for i in range(120)]
    for budget_id in ids:
        await sidecar.admin.PutBudget(
            pb.PutBudgetRequest(budget_id=budget_id, limit=1_000, unit="tokens")
        )
    seen: list[str] = []
    pages = 0
    async with httpx.AsyncClient(base_url=console.url) as http:
        path: str | None = "/budgets"
        while path is not None:
            page = await http.get(path)
            assert 200 == page.status_code
            seen.extend(ROW.findall(page.text))
            pages += 1
            found = NEXT.search(page.text)
            path = found[1].replace("&amp;", "&") if found else None
        searched = ROW.findall((await http.get("/budgets", params={"q": "org1/"})).text)
        polled = (await http.get("/api/budgets")).json()
    assert sorted(ids) == seen
    assert -(-120 // limits.console_page_rows_max) == pages
    assert sorted(i for i in ids if i.startswith("org1/")) == searched
    assert seen[: limits.console_page_rows_max] == [b["id"] for b in polled["budgets"]]
