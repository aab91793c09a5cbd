"""`earmark budgets list --account`: an account's billing-cycle budgets, the one listing of
budgets Admin has (ListCycles), on a sidecar with plans from a fake Kinde."""

from __future__ import annotations

from tests.conftest import Running
from tests.ops.test_commands import rows, run, run_json
from tests.service.test_plans import CLOCK_START, CYCLE, reserve, side

__all__ = ["CLOCK_START", "side"]


async def test_budgets_list_shows_the_accounts_cycles(side: Running) -> None:
    """After a Reserve by account, list shows its cycle budget with the plan's limit."""
    reply = await side.budget.Reserve(reserve("acct", 40_000, "job-1"))
    assert reply.admitted
    table = rows(await run(side, "budgets", "list", "--account", "acct"))
    assert [CYCLE, "tokens", "100,000", "0", "40,000", "60,000", "1"] == table[1][:7]
    listed = await run_json(side, "budgets", "list", "--account", "acct")
    assert [(CYCLE, "acct", "tokens")] == [
        (c["budget_id"], c["account"], c["feature"]) for c in listed["cycles"]
    ]
    empty = await run_json(side, "budgets", "list", "--account", "nobody")
    assert {} == empty
