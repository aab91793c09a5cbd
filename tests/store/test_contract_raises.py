"""The store's contract for temporary limits (issue 47, core.raises), on the PostgreSQL Store
and on the Model alike (the harness is tests/store/test_contract.py's): a raise set, kept,
replaced and ended by a batch, the sweeper or a put, with the same ledger entries, notices
and refusals on both."""

from __future__ import annotations

from datetime import timedelta

import asyncpg

from earmark.core import raises
from earmark.core.model import RefusalReason
from earmark.core.ops import ReserveResult
from earmark.core.specs import Fields
from earmark.errors import Reason
from tests.helpers import FakeClock
from tests.store.test_contract import DAILY, Backend, attempt, backend, counters, reserve, submit

__all__ = ["backend"]

DAY = timedelta(days=1)
LIMIT = frozenset({"limit"})


async def limit_entries(backend: Backend) -> list[tuple[object, ...]]:
    """(budget, period_no, limit_before, limit_after, limit_until, reason) of every ledger
    entry of kind limit, in order."""
    if backend.model is not None:
        return [
            (e.budget_id, e.period_no, e.limit_before, e.limit_after, e.limit_until, e.reason)
            for e in backend.model.ledger
            if str(e.kind) == "limit"
        ]
    conn = await asyncpg.connect(backend.dsn)
    try:
        rows = await conn.fetch(
            "SELECT budget_id, period_no, limit_before, limit_after, limit_until, reason "
            "FROM ledger WHERE kind = 'limit' ORDER BY entry_id"
        )
    finally:
        await conn.close()
    return [tuple(r) for r in rows]


async def test_a_raise_admits_until_its_time_and_the_next_batch_ends_it(
    backend: Backend, clock: FakeClock
) -> None:
    """Raised 100 -> 500 for a day: 300 admitted, then past its time the next Reserve finds
    100 again and is refused (noticed: a new limit's first refusal); one entry and one notice
    for each change."""
    store = backend.store
    await store.put_budget("r", 100, "tokens", policies=DAILY)
    until = clock.at + timedelta(hours=6)
    set_ = await store.update_budget(
        Fields("r", limit=500), LIMIT, raised=raises.Raise(until, "launch")
    )
    admitted = await submit(store, reserve("r", 300, "during"), ReserveResult)
    clock.advance(timedelta(hours=6))
    refused = await submit(store, reserve("r", 1, "after"), ReserveResult)
    after = await store.get_budget("r")
    assert (
        (500, until, 100, "launch"),
        (True, False, RefusalReason.INSUFFICIENT_BUDGET),
        ((100, 0, 300, 1), None),
        [("r", 0, 100, 500, until, "launch"), ("r", 0, 500, 100, None, "launch")],
        [("budget.limit_changed", "r"), ("budget.limit_changed", "r"), ("budget.refusing", "r")],
    ) == (
        (set_.limit, set_.limit_until, set_.limit_after, set_.limit_reason),
        (admitted.admitted, refused.admitted, refused.reason),
        (counters(after), after.limit_until),
        await limit_entries(backend),
        await backend.events(),
    )


async def test_the_sweeper_ends_an_idle_raise_and_a_read_shows_it_first(
    backend: Backend, clock: FakeClock
) -> None:
    """Past its time a read shows the limit after a raise while the row still has it; the
    sweeper ends it in the period it ended in, before the day's roll (the closed period
    keeps the limit after it), and writes its entry and notice."""
    store = backend.store
    await store.put_budget("idle", 100, "tokens", policies=DAILY)
    until = clock.at + timedelta(hours=1)
    await store.update_budget(Fields("idle", limit=400), LIMIT, raised=raises.Raise(until, "x"))
    clock.advance(DAY)
    read = await store.get_budget("idle")
    before_sweep = len(await backend.events())
    await store.sweep_once()
    await store.sweep_once()
    swept = await store.get_budget("idle")
    assert (
        (100, None, 1),
        1,
        (100, None, 1),
        [("idle", 0, 100, 400, until, "x"), ("idle", 0, 400, 100, None, "x")],
        [("idle", 0, 100)],
    ) == (
        (read.limit, read.limit_until, read.period_no),
        before_sweep,
        (swept.limit, swept.limit_until, swept.period_no),
        await limit_entries(backend),
        [(b, n, limit) for b, n, _, limit, *_ in await backend.periods()],
    )


async def test_puts_keep_replace_and_end_raises(backend: Backend, clock: FakeClock) -> None:
    """A second raise keeps the limit to go back to; a put of the same limit keeps the raise,
    of another ends it; a raise that cannot be is refused naming its field and changes
    nothing."""
    store = backend.store
    await store.put_budget("p", 100, "tokens")
    await store.update_budget(Fields("p", limit=500), LIMIT, raised=raises.Raise(clock.at + DAY))
    second = await store.update_budget(
        Fields("p", limit=800), LIMIT, raised=raises.Raise(clock.at + 2 * DAY, "more")
    )
    kept = await store.put_budget("p", 800, "tokens")
    refused = [
        await attempt(store.update_budget(Fields("p", limit=9), LIMIT, raised=given))
        for given in (
            raises.Raise(clock.at),
            raises.Raise(clock.at + 400 * DAY),
            raises.Raise(clock.at + DAY, "y" * 1_000),
        )
    ]
    unnamed = await attempt(
        store.update_budget(Fields("p"), frozenset({"mode"}), raised=raises.Raise(clock.at + DAY))
    )
    ended = await store.put_budget("p", 300, "tokens")
    assert (
        (800, 100, "more"),
        (800, 100, "more"),
        [("InvalidArgument", Reason.INVALID_FIELD)] * 4,
        (300, None, None),
        [(100, 500), (500, 800), (800, 300)],
    ) == (
        (second.limit, second.limit_after, second.limit_reason),
        (kept.limit, kept.limit_after, kept.limit_reason),
        [*refused, unnamed],
        (ended.limit, ended.limit_until, ended.limit_after),
        [(before, after) for _, _, before, after, *_ in await limit_entries(backend)],
    )
