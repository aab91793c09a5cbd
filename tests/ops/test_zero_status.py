"""`earmark budgets list` and `get` say why a budget with a limit of 0 refuses: its STATUS
reads zero-limit (and refusing once it has refused), in the same column layout."""

from __future__ import annotations

from earmark.ops.budgets import HEADERS
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants
from tests.ops.test_commands import columns, rows, run


async def test_a_zero_budget_reads_zero_limit(sidecar: Running) -> None:
    """A limit of 0 reads zero-limit before any Reserve, zero-limit,refusing after one is
    refused; an unlimited budget and one of 100 read ok."""
    await run(sidecar, "budgets", "put", "zero", "--unit", "tokens", "--limit", "0")
    await run(sidecar, "budgets", "put", "some", "--unit", "tokens", "--limit", "100")
    await run(sidecar, "budgets", "put", "open", "--unit", "tokens")
    before = columns(await run(sidecar, "budgets", "get", "zero"))["STATUS"]
    refused = await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="zero", amount=1, idempotency_key="one")
    )
    listed = {r[0]: r for r in rows(await run(sidecar, "budgets", "list"))}
    header = listed["BUDGET"]
    status = header.index("STATUS")
    assert (False, 0) == (refused.admitted, refused.remaining)
    assert list(HEADERS) == header
    assert ("zero-limit", "zero-limit,refusing", "ok", "ok") == (
        before,
        listed["zero"][status],
        listed["some"][status],
        listed["open"][status],
    )
    await assert_invariants(sidecar.dsn)
