"""`earmark budgets put` and `update` with a budget's run limits (issue 47) over a live
sidecar's Admin socket: --max-open-holds, --max-admissions and --closes-at are set, shown
(HOLDS and ADMISSIONS of their most, CLOSES AT) and changed one at a time."""

from __future__ import annotations

import pytest

from earmark import cli
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants
from tests.ops.test_commands import columns, failure, rows, run, run_json


async def test_run_limits_are_put_shown_and_updated(sidecar: Running) -> None:
    """put sets the three run limits; get shows the open holds and the admissions of their
    most and when it closes, list too, JSON has them; update names only the flag given in
    its mask, and --clear removes one; a time that is not ISO 8601 is argparse's error."""
    put = await run(
        sidecar, "budgets", "put", "run", "--unit", "tokens", "--limit", "1000",
        "--max-open-holds", "2", "--max-admissions", "5", "--closes-at", "2036-01-01T00:00:00Z",
    )  # fmt: skip
    for key in ("a", "b", "c"):
        await sidecar.budget.Reserve(
            pb.ReserveRequest(budget_id="run", amount=10, idempotency_key=key)
        )
    got = columns(await run(sidecar, "budgets", "get", "run"))
    listed = rows(await run(sidecar, "budgets", "list"))
    state = await run_json(sidecar, "budgets", "get", "run")
    # A time with no zone is UTC.
    raised = await run_json(
        sidecar, "budgets", "update", "run", "--max-open-holds", "3", "--closes-at",
        "2037-06-30T12:00:00",
    )  # fmt: skip
    cleared = await run_json(sidecar, "budgets", "update", "run", "--clear", "max_admissions")
    nothing = await failure(sidecar, "budgets", "update", "run")
    assert ("0/2", "0/5", "2036-01-01T00:00:00Z") == (
        columns(put)["HOLDS"], columns(put)["ADMISSIONS"], columns(put)["CLOSES AT"],
    )  # fmt: skip
    # The third Reserve was refused TOO_MANY_OPEN: two open, two admitted.
    assert ("2/2", "2/5", "2036-01-01T00:00:00Z") == (
        got["HOLDS"],
        got["ADMISSIONS"],
        got["CLOSES AT"],
    )
    header, line = listed
    assert ["2/2", "2/5"] == [line[header.index("HOLDS")], line[header.index("ADMISSIONS")]]
    assert ("2", "5", "2036-01-01T00:00:00Z", "2") == (
        state["max_open_holds"], state["max_admissions"], state["closes_at"], state["admissions"],
    )  # fmt: skip
    assert ("3", "5", "2037-06-30T12:00:00Z", "1000") == (
        raised["max_open_holds"], raised["max_admissions"], raised["closes_at"], raised["limit"],
    )  # fmt: skip
    assert ("3", None, "2037-06-30T12:00:00Z") == (
        cleared["max_open_holds"], cleared.get("max_admissions"), cleared["closes_at"],
    )  # fmt: skip
    assert "name a setting to change (a put flag, --unlimited, --clear FIELD)" == nothing
    await assert_invariants(sidecar.dsn)


def test_a_bad_closes_at_is_argparses_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--closes-at that is not ISO 8601 exits 2 naming the flag, before any call."""
    with pytest.raises(SystemExit) as exited:
        cli.parser().parse_args(["budgets", "put", "x", "--unit", "t", "--closes-at", "soon"])
    assert 2 == exited.value.code
    assert "argument --closes-at: 'soon' is not an ISO 8601 time" in capsys.readouterr().err
