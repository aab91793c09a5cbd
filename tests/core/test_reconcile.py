"""Reconciliation's pure rules: what a bucket of a usage report proves, and what it cannot."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

from earmark.core.model import HoldState
from earmark.core.reconcile import (
    Billed,
    Class,
    Reconciliation,
    Reported,
    Sent,
    Tokens,
    model_family,
    reconcile,
)

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
SINCE = datetime(2026, 12, 1, tzinfo=UTC)
UNTIL = SINCE + timedelta(days=1)
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def sent(
    rid: str,
    state: HoldState,
    usage: Tokens | None = None,
    *,
    at: datetime = T0,
    budget: str = "b1",
    amount: int = 100,
    used: int | None = None,
    label: str = "key_1",
    unit: str = "usd_micros",
    model: str = "gpt-4o",
) -> Sent:
    settled = used if used is not None else (None if state is not HoldState.SETTLED else 50)
    return Sent(rid, budget, model, "", at + timedelta(seconds=10), state, amount, 10, usage,
                settled, label, unit)  # fmt: skip


def run(
    reported: list[Reported],
    calls: list[Sent],
    billed: tuple[Billed, ...] = (),
    *,
    counts_requests: bool = True,
    scope: str = "key_1",
) -> Reconciliation:
    return reconcile(list(reported), calls, list(billed), since=SINCE, until=UNTIL, now=NOW,
                     where="openai key_1", counts_requests=counts_requests,
                     scope=scope)  # fmt: skip


def resolved(result: Reconciliation) -> list[tuple[str, Tokens | None]]:
    return [(r.reservation_id, r.tokens) for r in result.resolutions]


def classes(result: Reconciliation) -> list[Class]:
    return [b.cls for b in result.buckets]


def test_one_in_doubt_call_alone_with_a_surplus_is_resolved_at_it() -> None:
    """An in-doubt call alone in its minute with one unexplained request ran: its usage is
    the surplus, cache writes included."""
    result = run(
        [Reported(T0, "gpt-4o-2024-08-06", Tokens(150, 0, 340, 2, 30))],
        [sent("a", HoldState.SETTLED, Tokens(50, 0, 40, 1)), sent("b", HoldState.IN_DOUBT)],
    )
    assert ([Class.MATCHED], [("b", Tokens(100, 0, 300, 1, 30))]) == (
        classes(result),
        resolved(result),
    )


def test_no_unexplained_requests_resolves_every_in_doubt_call_at_zero() -> None:
    """Three retried attempts in doubt with nothing unexplained were none of them billed."""
    result = run([], [sent(rid, HoldState.IN_DOUBT) for rid in "abc"])
    (bucket,) = result.buckets
    assert (Class.MATCHED, [None, None, None]) == (
        bucket.cls,
        [r.tokens for r in bucket.resolutions],
    )
    assert "not billed" in bucket.resolutions[0].evidence


def test_as_many_unexplained_requests_as_in_doubt_calls_apportions_the_surplus() -> None:
    """Three attempts that all ran share the surplus by what each held, exactly in sum,
    marked apportioned when their budgets differ."""
    calls = [
        sent("a", HoldState.IN_DOUBT, amount=100, budget="b1"),
        sent("b", HoldState.IN_DOUBT, amount=100, budget="b1"),
        sent("c", HoldState.IN_DOUBT, amount=200, budget="b2"),
    ]
    result = run([Reported(T0, "gpt-4o", Tokens(1001, 0, 33, 3))], calls)
    (bucket,) = result.buckets
    tokens = [r.tokens for r in bucket.resolutions if r.tokens is not None]
    assert (1001, 33, [True] * 3) == (
        sum(t.input for t in tokens),
        sum(t.output for t in tokens),
        [r.apportioned for r in bucket.resolutions],
    )
    assert [250, 250, 501] == sorted(t.input for t in tokens)


def test_fewer_unexplained_requests_than_in_doubt_calls_leaves_them_in_doubt() -> None:
    """One unexplained request cannot say which of two in-doubt calls ran."""
    calls = [sent("a", HoldState.IN_DOUBT), sent("b", HoldState.IN_DOUBT)]
    result = run([Reported(T0, "gpt-4o", Tokens(100, 0, 300, 1))], calls)
    assert ([Class.UNRESOLVED], [], True) == (classes(result), resolved(result), result.failing())


def test_what_the_minute_cannot_vouch_for_leaves_its_in_doubt_calls_alone() -> None:
    """A released hold or a call settled by an amount (tokens unknown), a settled call of
    several requests, an in-doubt call of no key label, or a busy neighbouring minute (a
    call near the edge may be billed in the next) each leave the in-doubt call in doubt."""
    doubt = sent("d", HoldState.IN_DOUBT)
    cases = [
        ([sent("r", HoldState.EXPIRED), doubt], [Reported(T0, "gpt-4o", Tokens(500, 0, 50, 2))]),
        ([sent("s", HoldState.SETTLED, used=70), doubt],
         [Reported(T0, "gpt-4o", Tokens(1500, 0, 150, 2))]),
        ([sent("m", HoldState.SETTLED, Tokens(10, 0, 10, 3)), doubt],
         [Reported(T0, "gpt-4o", Tokens(10, 0, 10, 2))]),
        ([sent("u", HoldState.IN_DOUBT, label="")], []),
        ([doubt], [Reported(T0 + MINUTE, "gpt-4o", Tokens(100, 0, 300, 1))]),
        ([doubt, sent("h", HoldState.HELD, at=T0 - MINUTE)], []),
        ([doubt], [Reported(T0, "gpt-4o-latest-alias", Tokens(100, 0, 300, 1))]),
    ]  # fmt: skip
    found = []
    for calls, reported in cases:
        result = run(reported, calls)
        (mine,) = [b for b in result.buckets if (b.start, b.model) == (T0, "gpt-4o")]
        found.append((mine.cls, resolved(result)))
    assert [(Class.UNRESOLVED, [])] * len(cases) == found


def test_buckets_are_classed_by_what_each_side_has() -> None:
    """Billed and not in the ledger, in the ledger and not billed, both but miscounted,
    and too young to say."""
    young = NOW - 2 * MINUTE
    result = run(
        [
            Reported(T0, "gpt-4o", Tokens(10, 0, 10, 1)),
            Reported(T0 + 4 * MINUTE, "gpt-4o", Tokens(500, 0, 300, 1)),
            Reported(young, "gpt-4o", Tokens(1, 0, 1, 1)),
        ],
        [
            sent("a", HoldState.SETTLED, Tokens(10, 0, 10, 1), at=T0 + 2 * MINUTE),
            sent("b", HoldState.SETTLED, Tokens(100, 0, 300, 1), at=T0 + 4 * MINUTE),
        ],
    )
    assert [Class.PROVIDER_ONLY, Class.LOCAL_ONLY, Class.MISMATCH, Class.PENDING] == classes(result)


def test_a_stale_price_is_drift_with_its_ratio() -> None:
    """A day billed at 1.83 times what the ledger priced is drift beyond tolerance; calls on
    a budget in tokens price nothing in dollars."""
    calls = [
        sent("a", HoldState.SETTLED, Tokens(10, 0, 10, 1), used=1_000_000),
        sent("t", HoldState.SETTLED, Tokens(10, 0, 10, 1), used=55_000, unit="tokens"),
    ]
    result = run(
        [Reported(T0, "gpt-4o", Tokens(20, 0, 20, 2))],
        calls,
        (Billed(date(2026, 12, 1), "gpt-4o-2024-08-06", 1_830_000),),
    )
    (drift,) = result.drift
    assert (1.83, True, True) == (drift.ratio, drift.beyond, result.failing())


def test_a_cost_report_without_priority_tier_costs_is_unverifiable_not_drift() -> None:
    """A day with priority-tier calls, whose costs Anthropic's cost report leaves out, is
    unverifiable: no ratio and no drift; without them the same day is drift."""
    claude = "claude-sonnet-4"
    calls = [
        replace(sent("a", HoldState.SETTLED, used=1_000_000, model=claude), service_tier=tier)
        for tier in ("standard", "priority")
    ]
    billed = (Billed(date(2026, 12, 1), claude, 1_000_000),)

    def judged(tiers: frozenset[str]) -> Reconciliation:
        return reconcile([], calls, list(billed), since=SINCE, until=UNTIL, now=NOW,
                         where="anthropic w", counts_requests=False, scope="key_1",
                         uncosted_tiers=tiers)  # fmt: skip

    (unverifiable,) = judged(frozenset({"priority"})).drift
    (drift,) = judged(frozenset()).drift
    assert (None, False, True, 0.5, True) == (
        unverifiable.ratio,
        unverifiable.beyond,
        unverifiable.unverifiable.startswith("the cost report leaves out priority-tier calls"),
        drift.ratio,
        drift.beyond,
    )


def test_a_snapshot_name_is_its_alias() -> None:
    """Dated snapshots compare under the alias a call named."""
    assert ["gpt-4o", "claude-sonnet-4", "o3"] == [
        model_family(m) for m in ("gpt-4o-2024-08-06", "claude-sonnet-4-20250514", "o3")
    ]


def test_without_request_counts_one_in_doubt_call_takes_the_surplus_tokens() -> None:
    """A report without request counts (Anthropic's) resolves one in-doubt call alone by its
    surplus tokens, and one with no surplus at 0; an empty report is no request count."""
    later = T0 + 2 * MINUTE
    calls = [
        sent("a", HoldState.IN_DOUBT, model="claude-sonnet-4"),
        sent("b", HoldState.IN_DOUBT, model="claude-sonnet-4", at=later),
    ]
    billed_bucket = Reported(T0, "claude-sonnet-4-20250514", Tokens(120, 0, 80, None))
    result = run([billed_bucket], calls, counts_requests=False)
    empty = run([], calls[:1], counts_requests=False)
    assert [("a", Tokens(120, 0, 80, 1)), ("b", None)] == resolved(result)
    assert ([Class.MATCHED], [("a", None)]) == (classes(empty), resolved(empty))


def test_an_in_doubt_call_is_judged_over_its_whole_window() -> None:
    """A call that can have run until 3 minutes after it was sent is billed in its
    completion minute: judged before its window is whole it stays pending, after it is
    resolved at that minute's surplus."""
    long = replace(sent("a", HoldState.IN_DOUBT), ends_by=T0 + 3 * MINUTE)
    booked = [Reported(T0 + 3 * MINUTE, "gpt-4o", Tokens(100, 0, 30, 1))]
    early = reconcile([], [long], [], since=SINCE, until=UNTIL, now=T0 + 10 * MINUTE,
                      where="openai key_1", scope="key_1")  # fmt: skip
    late = run(booked, [long])
    assert ([Class.PENDING], []) == (classes(early), resolved(early))
    assert ([Class.MATCHED, Class.MATCHED], [("a", Tokens(100, 0, 30, 1))]) == (
        classes(late),
        resolved(late),
    )


def test_an_in_doubt_call_from_before_the_range_leaves_the_windows_it_touches_pending() -> None:
    """A call sent before --since that can have ended inside the range may be billed
    there: the in-doubt call whose window it touches is not resolved by that minute's
    request."""
    before = replace(sent("a", HoldState.IN_DOUBT, at=SINCE - 2 * MINUTE),
                     ends_by=SINCE + 5 * MINUTE)  # fmt: skip
    inside = replace(sent("b", HoldState.IN_DOUBT, at=SINCE + 4 * MINUTE),
                     ends_by=SINCE + 6 * MINUTE)  # fmt: skip
    result = run([Reported(SINCE + 5 * MINUTE, "gpt-4o", Tokens(100, 0, 30, 1))], [before, inside])
    assert ([], {Class.PENDING}) == (resolved(result), set(classes(result)))
