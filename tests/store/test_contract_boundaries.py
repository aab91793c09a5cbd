"""The store's contract at period boundaries for issue 47's budgets, on the PostgreSQL Store
and on the Model alike (the harness is tests/store/test_contract.py's): holds open across a
boundary still count for max_open_holds, a template's change reaches only the budgets its
pattern matches, brings its calendar with it, is taken by a period the sweeper closes, and
leaves the closed period's audit ceiling alone; a billing cycle is not raised by hand."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from earmark.core.model import Outcome, Policies, RefusalReason
from earmark.core.ops import ReserveResult, SettleOp
from earmark.core.periods import Calendar, Period
from earmark.core.raises import Raise
from earmark.core.specs import Fields
from earmark.core.templates import TemplateInput
from earmark.errors import Reason
from tests.helpers import FakeClock
from tests.store.test_contract import Backend, attempt, backend, cycle, reserve, submit

__all__ = ["backend"]

HOUR = timedelta(hours=1)
DAILY = Fields(budget_id="", limit=1_000, unit="tokens", period=int(Period.DAY))


async def test_holds_open_across_a_boundary_count_for_max_open_holds(
    backend: Backend, clock: FakeClock
) -> None:
    """A daily budget of max_open_holds 1 with a hold from 23:59 still open at 00:01
    refuses a second hold TOO_MANY_OPEN, and admits one once the old hold settles."""
    store = backend.store
    clock.set(datetime(2026, 12, 1, 23, 59, tzinfo=UTC))
    daily = Policies(calendar=Calendar(Period.DAY), max_open_holds=1)
    await store.put_budget("r", 1_000, "tokens", policies=daily)
    first = await submit(store, reserve("r", 10, "a", lease=HOUR), ReserveResult)
    clock.set(datetime(2026, 12, 2, 0, 1, tzinfo=UTC))
    second = await submit(store, reserve("r", 10, "b", lease=HOUR), ReserveResult)
    await store.submit(SettleOp(first.reservation_id, 10, Outcome.SUCCEEDED))
    third = await submit(store, reserve("r", 10, "c", lease=HOUR), ReserveResult)
    assert (False, RefusalReason.TOO_MANY_OPEN, True) == (
        second.admitted,
        second.reason,
        third.admitted,
    )


async def test_a_template_id_put_again_with_another_pattern_leaves_old_budgets(
    backend: Backend, clock: FakeClock
) -> None:
    """A template removed and put again under its id with another pattern does not reach
    the budgets the old pattern made."""
    store = backend.store
    await store.put_template(TemplateInput("users", "end-user/*", DAILY))
    await submit(store, reserve("end-user/a", 10, "k1"), ReserveResult)
    await store.delete_template("users")
    await store.put_template(TemplateInput("users", "vip/*", replace(DAILY, limit=900_000)))
    clock.advance(timedelta(days=1))
    await submit(store, reserve("end-user/a", 10, "k2"), ReserveResult)
    assert 1_000 == (await store.get_budget("end-user/a")).limit


async def test_a_templates_new_calendar_starts_at_the_boundary(
    backend: Backend, clock: FakeClock
) -> None:
    """A daily template made monthly reaches its budget at the next midnight with a period
    from that midnight to the month's end."""
    store = backend.store
    await store.put_template(TemplateInput("users", "end-user/*", DAILY))
    await submit(store, reserve("end-user/a", 10, "k1"), ReserveResult)
    monthly = replace(DAILY, period=int(Period.MONTH), limit=30_000)
    await store.put_template(TemplateInput("users", "end-user/*", monthly))
    clock.set(datetime(2026, 12, 2, 0, 30, tzinfo=UTC))
    await submit(store, reserve("end-user/a", 10, "k2"), ReserveResult)
    made = await store.get_budget("end-user/a")
    assert (30_000, Period.MONTH, datetime(2026, 12, 2, tzinfo=UTC)) == (
        made.limit,
        made.period,
        made.period_start,
    )
    assert datetime(2027, 1, 1, tzinfo=UTC) == made.period_end


async def test_a_period_the_sweeper_closes_takes_its_templates_change(
    backend: Backend, clock: FakeClock
) -> None:
    """When a hold's expiry closes the period, the budget takes its template's new limit as
    a batch would, and refuses what the new limit has no room for."""
    store = backend.store
    clock.set(datetime(2026, 12, 1, 23, 59, 50, tzinfo=UTC))
    await store.put_template(TemplateInput("users", "end-user/*", DAILY))
    await submit(store, reserve("end-user/a", 10, "k1", lease=timedelta(seconds=5)), ReserveResult)
    await store.put_template(TemplateInput("users", "end-user/*", replace(DAILY, limit=50)))
    clock.set(datetime(2026, 12, 2, 0, 0, 30, tzinfo=UTC))
    await store.sweep_once()
    after = await store.get_budget("end-user/a")
    refused = await submit(store, reserve("end-user/a", 500, "k2"), ReserveResult)
    assert (50, False) == (after.limit, refused.admitted)


async def test_a_templates_change_leaves_the_closed_periods_ceiling(
    backend: Backend, clock: FakeClock
) -> None:
    """The period a template's raise closes keeps the audit ceiling of its own limit."""
    store = backend.store
    await store.put_template(TemplateInput("users", "end-user/*", DAILY))
    await submit(store, reserve("end-user/a", 10, "k1"), ReserveResult)
    await store.put_template(TemplateInput("users", "end-user/*", replace(DAILY, limit=900_000)))
    clock.advance(timedelta(days=1))
    await submit(store, reserve("end-user/a", 10, "k2"), ReserveResult)
    if backend.model is not None:
        return  # the audit's ceiling is the database's
    rows = await backend._fetch("SELECT limit_units, ceiling_max FROM budget_periods")
    assert [(1_000, 1_000)] == [tuple(r) for r in rows]


async def test_a_billing_cycle_is_not_raised_by_hand(backend: Backend, clock: FakeClock) -> None:
    """A temporary limit on an account's cycle budget is FAILED_PRECONDITION naming
    limit_until: the plan's next read would undo it, and its end would restore a stale
    limit."""
    store = backend.store
    spec = cycle("acme", "chat", datetime(2026, 12, 1, tzinfo=UTC), 100, clock())
    await store.ensure_cycle(spec)
    raised = store.update_budget(
        Fields(budget_id=spec.budget_id, limit=500),
        frozenset({"limit"}),
        raised=Raise(until=clock() + HOUR, reason="quarter end"),
    )
    assert ("FailedPrecondition", Reason.CYCLE_BUDGET_NEEDS_ACCOUNT) == await attempt(raised)
    assert 100 == (await store.get_budget(spec.budget_id)).limit
