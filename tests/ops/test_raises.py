"""`earmark budgets update --limit N --until ISO8601 --reason TEXT` (issue 47's temporary
limits) over a live sidecar's Admin socket: the raise is set, shown in LIMIT with its end,
the limit after it and why, and a time that is not ISO 8601 is argparse's error."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from earmark import cli
from tests.conftest import Running
from tests.helpers import assert_invariants
from tests.ops.test_commands import columns, failure, rows, run, run_json


async def test_a_raise_is_set_and_shown_with_its_end(sidecar: Running) -> None:
    """update --until --reason sets a temporary limit; get and list show it as `500 until
    T, then 100: quarter end`, JSON as BudgetState's fields; a change of the limit without
    --until makes it permanent."""
    until = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    shown = until.strftime("%Y-%m-%dT%H:%M:%SZ")
    await run(sidecar, "budgets", "put", "q", "--unit", "tokens", "--limit", "100")
    updated = columns(
        await run(
            sidecar, "budgets", "update", "q", "--limit", "500", "--until",
            until.isoformat(), "--reason", "quarter end",
        )
    )  # fmt: skip
    header, line = rows(await run(sidecar, "budgets", "list"))
    state = await run_json(sidecar, "budgets", "get", "q")
    permanent = columns(await run(sidecar, "budgets", "update", "q", "--limit", "300"))
    expected = f"500 until {shown}, then 100: quarter end"
    assert (expected, expected) == (updated["LIMIT"], line[header.index("LIMIT")])
    assert ("500", shown, "100", "quarter end") == (
        state["limit"], state["limit_until"], state["limit_after"], state["limit_reason"],
    )  # fmt: skip
    assert "300" == permanent["LIMIT"]
    await assert_invariants(sidecar.dsn)


async def test_a_raise_without_a_limit_is_the_servers_refusal(sidecar: Running) -> None:
    """--until without --limit names limit_until, as UpdateBudget refuses it."""
    await run(sidecar, "budgets", "put", "n", "--unit", "tokens", "--limit", "100")
    until = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    refused = await failure(
        sidecar, "budgets", "update", "n", "--mode", "observe", "--until", until
    )
    assert ("INVALID_ARGUMENT", True) == (refused.split()[0], "limit_until" in refused)
    await assert_invariants(sidecar.dsn)


def test_until_that_is_not_iso_8601_is_argparses_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--until takes an ISO 8601 time; another is refused before anything is sent."""
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["budgets", "update", "x", "--limit", "5", "--until", "soon"])
    assert "--until: 'soon' is not an ISO 8601 time" in capsys.readouterr().err
