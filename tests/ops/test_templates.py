"""`earmark templates put|list|delete` (issue 47) over a live sidecar's Admin socket: put
takes a pattern and the flags of `budgets put`, list shows each template as a table or JSON,
a budget made from one names it, an overlapping pattern is one line, delete removes it."""

from __future__ import annotations

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants
from tests.ops.test_commands import failure, rows, run, run_json

HEADER = [
    "TEMPLATE", "PATTERN", "UNIT", "LIMIT", "POLICY", "MODE", "PERIOD", "THRESHOLDS", "RATE",
    "OPEN HOLDS", "ADMISSIONS", "CLOSES AT", "VERSION", "UPDATED AT", "DELETED AT",
]  # fmt: skip


async def test_templates_are_put_listed_and_deleted(sidecar: Running) -> None:
    """put shows the template's settings, run limits and version; list shows the same, and
    JSON the proto's fields; a Reserve on a matching id makes a budget that names it; an
    overlapping pattern is FAILED_PRECONDITION in one line; delete says when, and the
    list is then empty; a template id that is not there is NOT_FOUND."""
    put = rows(
        await run(
            sidecar, "templates", "put", "end-users", "--pattern", "end-user/*", "--unit",
            "usd_micros", "--limit", "5000000", "--period", "day", "--threshold", "80",
            "--max-open-holds", "2", "--max-admissions", "100", "--closes-at",
            "2036-01-01T00:00:00Z", "--admissions-per-minute", "60",
        )
    )  # fmt: skip
    listed = rows(await run(sidecar, "templates", "list"))
    answer = await run_json(sidecar, "templates", "list")
    await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="end-user/alice", amount=1_000, idempotency_key="a")
    )
    made = await run_json(sidecar, "budgets", "get", "end-user/alice")
    overlap = await failure(
        sidecar, "templates", "put", "others", "--pattern", "end-user/*", "--unit", "tokens"
    )
    deleted = rows(await run(sidecar, "templates", "delete", "end-users"))
    empty = rows(await run(sidecar, "templates", "list"))
    missing = await failure(sidecar, "templates", "delete", "end-users")
    version = put[1][HEADER.index("VERSION")]
    assert [
        HEADER,
        [
            "end-users", "end-user/*", "usd_micros", "$5.00", "hard", "enforce", "day in UTC",
            "80%", "60 admissions/min", "2", "100", "2036-01-01T00:00:00Z", version,
        ],
    ] == [put[0], put[1][:13]]  # fmt: skip
    # Put at a time, and not deleted.
    assert (True, "-") == (put[1][13] != "-", put[1][14])
    assert put == listed
    (template,) = answer["templates"]
    assert ("end-users", "end-user/*", "5000000", "2", "100", "2036-01-01T00:00:00Z") == (
        template["template_id"], template["pattern"], template["budget"]["limit"],
        template["budget"]["max_open_holds"], template["budget"]["max_admissions"],
        template["budget"]["closes_at"],
    )  # fmt: skip
    assert ("end-users", "5000000", "2", "1") == (
        made["template_id"],
        made["limit"],
        made["max_open_holds"],
        made["admissions"],
    )
    assert overlap.startswith("FAILED_PRECONDITION TEMPLATES_OVERLAP: ")
    assert ("end-users", True) == (deleted[1][0], deleted[1][HEADER.index("DELETED AT")] != "-")
    assert [HEADER] == empty
    assert missing.startswith("NOT_FOUND TEMPLATE_NOT_FOUND: ")
    await assert_invariants(sidecar.dsn)
