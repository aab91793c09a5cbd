"""The store's contract for budget templates (issue 47), on the PostgreSQL Store and on the
Model alike (the harness is tests/store/test_contract.py's): put, list, replace and delete,
overlap and bounds, a budget made on first sight, and a newer version reaching it at its
next period unless it was changed by hand."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from earmark import limits
from earmark.core.model import RefusalReason
from earmark.core.ops import ReserveResult
from earmark.core.periods import Period
from earmark.core.specs import Fields
from earmark.core.templates import TemplateInput
from earmark.errors import Reason
from tests.helpers import FakeClock
from tests.store.test_contract import Backend, attempt, backend, counters, reserve, submit

__all__ = ["backend"]

USERS = Fields(budget_id="", limit=1_000, unit="tokens", max_open_holds=2)


def users(**changes: object) -> TemplateInput:
    return TemplateInput("users", "end-user/*", replace(USERS, **changes))  # type: ignore[arg-type]


async def test_templates_are_put_listed_replaced_and_deleted(backend: Backend) -> None:
    """A put replaces a template of its id with a higher version; list is in id order; a
    delete answers the template and a second one is NOT_FOUND."""
    store = backend.store
    first = await store.put_template(users())
    second = await store.put_template(users(limit=2_000))
    await store.put_template(TemplateInput("teams", "team/*", USERS))
    listed = await store.list_templates()
    assert ["teams", "users"] == [t.template_id for t in listed]
    assert (True, 2_000) == (second.version > first.version, listed[1].fields.limit)
    assert "users" == (await store.delete_template("users")).template_id
    assert ("NotFound", Reason.TEMPLATE_NOT_FOUND) == await attempt(store.delete_template("users"))


async def test_overlapping_patterns_and_one_too_many_are_refused(backend: Backend) -> None:
    """A pattern matching what another template's matches is TEMPLATES_OVERLAP; the template
    past limits.templates_max is TEMPLATES_FULL; a bad setting names budget.<field>."""
    store = backend.store
    await store.put_template(users())
    overlap = TemplateInput("other", "*/alice", USERS)
    assert ("FailedPrecondition", Reason.TEMPLATES_OVERLAP) == await attempt(
        store.put_template(overlap)
    )
    bad = TemplateInput("bad", "bad/*", replace(USERS, escrow_bps=-1))
    assert ("InvalidArgument", Reason.INVALID_FIELD) == await attempt(store.put_template(bad))
    for n in range(limits.templates_max - 1):
        await store.put_template(TemplateInput(f"t{n}", f"p{n}/*", USERS))
    full = TemplateInput("full", "full/*", USERS)
    assert ("FailedPrecondition", Reason.TEMPLATES_FULL) == await attempt(store.put_template(full))
    # Replacing one that exists is no template more.
    await store.put_template(users(limit=3))


async def test_a_reserve_makes_the_budget_its_template_matches(backend: Backend) -> None:
    """A Reserve on a missing budget a template matches is decided on the budget made from
    it, with the template's limits; an id it does not match is BUDGET_NOT_FOUND."""
    store = backend.store
    await store.put_template(users())
    results = [await store.submit(reserve("end-user/a", 400, f"k{n}")) for n in range(3)]
    made = await store.get_budget("end-user/a")
    assert [True, True, False] == [isinstance(r, ReserveResult) and r.admitted for r in results]
    third = results[2]
    assert isinstance(third, ReserveResult)
    assert RefusalReason.TOO_MANY_OPEN == third.reason
    assert ((1_000, 0, 800, 2), "users", 2) == (
        counters(made),
        made.template_id,
        made.admissions,
    )
    missing = store.submit(reserve("end-user/a/b", 1, "k"))
    assert ("NotFound", Reason.BUDGET_NOT_FOUND) == await attempt(missing)


async def test_a_newer_template_reaches_its_budgets_at_their_next_period(
    backend: Backend, clock: FakeClock
) -> None:
    """A daily template's new limit reaches a budget made from it when its next day starts,
    not before; one an operator changed by hand keeps its own."""
    store = backend.store
    await store.put_template(users(period=int(Period.DAY), max_open_holds=None))
    for budget_id in ("end-user/a", "end-user/b"):
        await submit(store, reserve(budget_id, 10, "first"), ReserveResult)
    await store.update_budget(Fields(budget_id="end-user/b", limit=50), frozenset({"limit"}))
    await store.put_template(users(period=int(Period.DAY), max_open_holds=None, limit=5_000))
    same_day = await store.get_budget("end-user/a")
    clock.advance(timedelta(days=1))
    await submit(store, reserve("end-user/a", 10, "next"), ReserveResult)
    await submit(store, reserve("end-user/b", 10, "next"), ReserveResult)
    a, b = await store.get_budget("end-user/a"), await store.get_budget("end-user/b")
    assert (1_000, 5_000, False) == (same_day.limit, a.limit, a.changed_by_hand)
    assert (50, True) == (b.limit, b.changed_by_hand)
    # Each change of a limit is a limit entry and a notice: b's by hand, a's by its template.
    limits_changed = [(b, k) for b, k, *_ in await backend.ledger() if k == "limit"]
    assert [("end-user/b", "limit"), ("end-user/a", "limit")] == limits_changed
    assert [("budget.limit_changed", "end-user/b"), ("budget.limit_changed", "end-user/a")] == [
        e for e in await backend.events() if e[0] == "budget.limit_changed"
    ]


async def test_a_template_makes_at_most_its_bound_of_budgets(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past limits.template_budgets_max budgets made, a Reserve on a new id a template
    matches is BUDGET_NOT_FOUND, as without it; the budgets made still admit."""
    monkeypatch.setattr(limits, "template_budgets_max", 2)
    store = backend.store
    await store.put_template(users())
    for budget_id in ("end-user/a", "end-user/b"):
        await submit(store, reserve(budget_id, 1, "k"), ReserveResult)
    third = store.submit(reserve("end-user/c", 1, "k"))
    assert ("NotFound", Reason.BUDGET_NOT_FOUND) == await attempt(third)
    await submit(store, reserve("end-user/a", 1, "again"), ReserveResult)
