"""Budget templates (issue 47) through the SDK, over a live sidecar: put_template,
list_templates and delete_template round-trip their settings; a Reserve naming a budget
that does not exist but matches a pattern makes it from the template (its BudgetState
naming the template); an overlapping pattern is FailedPreconditionError."""

from __future__ import annotations

import pytest

from earmark.client import (
    AsyncClient,
    BudgetNotFoundError,
    FailedPreconditionError,
    Period,
    Reservation,
)
from tests.conftest import Running
from tests.helpers import assert_invariants


async def test_a_template_makes_a_budget_on_its_first_reserve(sidecar: Running) -> None:
    """A template of $5.00 a day with at most 2 open holds is put (and put again at a
    higher version), listed, makes end-user/alice on her first Reserve, and once deleted
    makes no more: end-user/bob is then BUDGET_NOT_FOUND, and alice's budget stays."""
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as earmark:
        first = await earmark.put_template(
            "end-users", "end-user/*", 4_000_000, "usd_micros", period=Period.DAY,
            max_open_holds=2,
        )  # fmt: skip
        put = await earmark.put_template(
            "end-users", "end-user/*", 5_000_000, "usd_micros", period=Period.DAY,
            max_open_holds=2, max_admissions=100,
        )  # fmt: skip
        listed = await earmark.list_templates()
        held = await earmark.reserve("end-user/alice", 1_000)
        assert isinstance(held, Reservation)
        alice = await earmark.get_budget("end-user/alice")
        with pytest.raises(FailedPreconditionError) as overlap:
            await earmark.put_template("overlap", "end-user/*", 1, "tokens")
        deleted = await earmark.delete_template("end-users")
        after = await earmark.list_templates()
        with pytest.raises(BudgetNotFoundError) as missing:
            await earmark.reserve("end-user/bob", 1_000)
        await earmark.settle(held.reservation_id, 1_000)
        kept = await earmark.get_budget("end-user/alice")
    assert put.version > first.version
    assert (
        "end-users", "end-user/*", 5_000_000, "usd_micros", Period.DAY, 2, 100, None, None,
    ) == (
        put.template_id, put.pattern, put.limit, put.unit, put.period, put.max_open_holds,
        put.max_admissions, put.closes_at, put.deleted_at,
    )  # fmt: skip
    assert put.updated_at is not None
    assert [put] == listed
    assert ("end-users", False, 5_000_000, "usd_micros", Period.DAY, 2, 100, 1) == (
        alice.template_id, alice.changed_by_hand, alice.limit, alice.unit, alice.period,
        alice.max_open_holds, alice.max_admissions, alice.admissions,
    )  # fmt: skip
    assert "TEMPLATES_OVERLAP" == overlap.value.reason
    assert ("end-users", True, []) == (deleted.template_id, deleted.deleted_at is not None, after)
    assert "BUDGET_NOT_FOUND" == missing.value.reason
    assert ("end-users", 1_000) == (kept.template_id, kept.used)
    await assert_invariants(sidecar.dsn)
