"""core.raises: temporary limits as plain data, checked, applied, ended and read."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from earmark import limits
from earmark.core import bookkeeping, notices, puts, raises, resets
from earmark.core.batch import BatchDecision, BatchState
from earmark.core.model import Budget, LedgerEntry, LedgerKind
from earmark.core.periods import Period
from earmark.errors import InvalidArgument

NOW = datetime(2026, 12, 4, 12, tzinfo=UTC)
DAY = timedelta(days=1)
LIMIT = frozenset({"limit"})
DOC = Path(__file__).resolve().parents[2] / "docs" / "notices.md"


def raised(limit: int | None, until: datetime, after: int | None, reason: str = "") -> Budget:
    return Budget("b", limit, "t", limit_until=until, limit_after=after, limit_reason=reason)


def test_a_raise_is_checked_against_now_its_bound_and_the_mask() -> None:
    """limit_until after now and within the bound, with limit named, and a short reason,
    pass; each other case names its field."""
    far = NOW + timedelta(days=limits.limit_raise_days_max)
    cases = [
        (raises.Raise(NOW + DAY, "why"), LIMIT),
        (raises.Raise(far), LIMIT),
        (raises.Raise(None, "why"), LIMIT),
        (raises.Raise(NOW), LIMIT),
        (raises.Raise(far + timedelta(seconds=1)), LIMIT),
        (raises.Raise(NOW + DAY), frozenset({"mode"})),
        (raises.Raise(NOW + DAY, "x" * (limits.limit_reason_chars_max + 1)), LIMIT),
        (raises.Raise(None, "why"), frozenset()),
    ]
    named: list[str | None] = []
    for given, mask in cases:
        try:
            raises.check(given, mask, NOW)
            named.append(None)
        except InvalidArgument as error:
            named.append(error.field)
    expected = [None, None, None, "limit_until", "limit_until", "limit_until", "reason", "reason"]
    assert expected == named


def test_a_raise_goes_back_to_the_limit_before_any_raise() -> None:
    """The first raise's limit_after is the limit before it; a second while it is in force
    keeps that; one set after the first ended starts from the limit then."""
    plain = Budget("b", 100, "t")
    first, change = raises.applied(plain, replace(plain, limit=500), raises.Raise(NOW + DAY), NOW)
    on_top = raises.applied(first, replace(first, limit=800), raises.Raise(NOW + 2 * DAY), NOW)[0]
    later = NOW + 2 * DAY
    ended = raises.current(first, later)
    again = raises.applied(ended, replace(ended, limit=900), raises.Raise(later + DAY), later)[0]
    assert [100, 100, 100] == [first.limit_after, on_top.limit_after, again.limit_after]
    assert change == raises.LimitChange("b", 0, 100, 500, NOW + DAY, "", NOW)


def test_a_put_keeps_a_raise_for_the_same_limit_and_ends_it_for_another() -> None:
    """PutBudget's rule: the same limit keeps the raise, another one is permanent."""
    budget = raised(500, NOW + DAY, 100, "q4")
    same = puts.put(puts.PutInput(budget, Budget("b", 500, "t"), NOW))
    other = puts.put(puts.PutInput(budget, Budget("b", 300, "t"), NOW))
    assert ((NOW + DAY, 100, "q4"), (None, None, "")) == (
        (same.limit_until, same.limit_after, same.limit_reason),
        (other.limit_until, other.limit_after, other.limit_reason),
    )
    assert (None, raises.LimitChange("b", 0, 500, 300, None, "", NOW)) == (
        raises.applied(budget, same, raises.NONE, NOW)[1],
        raises.applied(budget, other, raises.NONE, NOW)[1],
    )


def test_a_raise_ends_at_its_time_with_an_entry_that_moves_nothing() -> None:
    """At limit_until the limit goes back to limit_after and the raise is cleared; the
    entry is of kind limit, moves nothing and carries the raise's reason."""
    budget = raised(500, NOW + DAY, None, "launch")
    assert raises.lapse(budget, NOW + DAY - timedelta(microseconds=1)) is None
    change = raises.lapse(budget, NOW + DAY)
    assert change is not None
    assert (
        (None, None, None, ""),
        LedgerEntry("b", None, LedgerKind.LIMIT, 0, 0, NOW + DAY, 0, 500, None, None, "launch"),
    ) == (
        (budget.limit, budget.limit_until, budget.limit_after, budget.limit_reason),
        change.entry(),
    )


def test_a_batch_ends_a_raise_before_its_operations_and_a_read_shows_it() -> None:
    """roll_due ends a due raise (entry, notice, the budget to write) in the period it
    ended in, before the roll; resets.current shows the same without changing anything."""
    budget = replace(
        raised(500, NOW + DAY, 100, "q"),
        period=Period.DAY,
        period_start=NOW,
        period_end=NOW + 2 * DAY,
        period_no=3,
    )
    later = NOW + 3 * DAY
    shown = resets.current(budget, later)
    state = BatchState(budget_id="b", budget=budget)
    decision = BatchDecision()
    bookkeeping.roll_due(state, decision, later)
    assert (
        (100, None, 4),
        (100, None, 4),
        [(3, 500, 100)],
        [notices.LIMIT_CHANGED],
        ["b"],
        100,
    ) == (
        (shown.limit, shown.limit_until, shown.period_no),
        (budget.limit, budget.limit_until, budget.period_no),
        [(e.period_no, e.limit_before, e.limit_after) for e in decision.ledger],
        [e.kind for e in decision.events],
        list(decision.lapsed),
        state.closed[("b", 3)].limit,
    )


@pytest.mark.parametrize("ended", [False, True])
def test_the_documented_notice_has_the_keys_the_sidecar_writes(ended: bool) -> None:
    """docs/notices.md's budget.limit_changed example carries exactly the data keys
    core.notices writes, for a raise and for its end."""
    until = None if ended else NOW + DAY
    event = notices.limit_changed_event(Budget("b", 1, "t"), 2, until, "why", ended, NOW)
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    (documented,) = [b for b in blocks if f'"type": "{notices.LIMIT_CHANGED}"' in b]
    assert sorted(json.loads(documented)["data"]) == sorted(event.payload["data"])
