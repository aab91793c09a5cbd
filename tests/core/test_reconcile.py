"""Reconciliation's pure rules: what a bucket of a usage report proves."""

from __future__ import annotations

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
) -> Sent:
    settled = used if used is not None else (None if state is not HoldState.SETTLED else 50)
    return Sent(rid, budget, "gpt-4o", "", at + timedelta(seconds=10), state, amount, 10,
                usage, settled)  # fmt: skip


def run(
    reported: list[Reported], calls: list[Sent], billed: tuple[Billed, ...] = ()
) -> Reconciliation:
    return reconcile(list(reported), calls, list(billed), since=SINCE, until=UNTIL, now=NOW,
                     where="openai key_1")  # fmt: skip


def test_one_in_doubt_call_alone_with_a_surplus_is_resolved_at_it() -> None:
    """An in-doubt call alone in its bucket with one unexplained request ran: its usage is
    the surplus."""
    result = run(
        [Reported(T0, "gpt-4o-2024-08-06", Tokens(150, 0, 340, 2))],
        [sent("a", HoldState.SETTLED, Tokens(50, 0, 40, 1)), sent("b", HoldState.IN_DOUBT)],
    )
    (bucket,) = result.buckets
    assert Class.MATCHED == bucket.cls
    assert [("b", Tokens(100, 0, 300, 1))] == [
        (r.reservation_id, r.tokens) for r in bucket.resolutions
    ]


def test_no_unexplained_requests_resolves_every_in_doubt_call_at_zero() -> None:
    """Three retried attempts in doubt with nothing unexplained were none of them billed."""
    calls = [sent(rid, HoldState.IN_DOUBT) for rid in "abc"]
    result = run([], calls)
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
    (bucket,) = result.buckets
    assert (Class.UNRESOLVED, (), True) == (
        bucket.cls,
        bucket.resolutions,
        result.failing(),
    )


def test_buckets_are_classed_by_what_each_side_has() -> None:
    """Billed and not in the ledger, in the ledger and not billed, both but miscounted,
    and too young to say."""
    other = T0 + timedelta(minutes=1)
    third = T0 + timedelta(minutes=2)
    young = NOW - timedelta(minutes=2)
    result = run(
        [
            Reported(T0, "gpt-4o", Tokens(10, 0, 10, 1)),
            Reported(third, "gpt-4o", Tokens(500, 0, 300, 1)),
            Reported(young, "gpt-4o", Tokens(1, 0, 1, 1)),
        ],
        [
            sent("a", HoldState.SETTLED, Tokens(10, 0, 10, 1), at=other),
            sent("b", HoldState.SETTLED, Tokens(100, 0, 300, 1), at=third),
        ],
    )
    classes = [b.cls for b in result.buckets]
    assert [Class.PROVIDER_ONLY, Class.LOCAL_ONLY, Class.MISMATCH, Class.PENDING] == classes


def test_a_stale_price_is_drift_with_its_ratio() -> None:
    """A day billed at 1.83 times what the ledger priced is drift beyond tolerance."""
    calls = [sent("a", HoldState.SETTLED, Tokens(10, 0, 10, 1), used=1_000_000)]
    result = run(
        [Reported(T0, "gpt-4o", Tokens(10, 0, 10, 1))],
        calls,
        (Billed(date(2026, 12, 1), "gpt-4o-2024-08-06", 1_830_000),),
    )
    (drift,) = result.drift
    assert (1.83, True, True) == (drift.ratio, drift.beyond, result.failing())


def test_a_snapshot_name_is_its_alias() -> None:
    """Dated snapshots compare under the alias a call named."""
    assert ["gpt-4o", "claude-sonnet-4", "o3"] == [
        model_family(m) for m in ("gpt-4o-2024-08-06", "claude-sonnet-4-20250514", "o3")
    ]


def test_without_request_counts_one_in_doubt_call_takes_the_surplus_tokens() -> None:
    """A report without request counts (Anthropic's) resolves one in-doubt call alone by
    its surplus tokens, and none by no surplus."""
    billed_bucket = Reported(T0, "claude-sonnet-4", Tokens(120, 0, 80, None))
    later = T0 + timedelta(minutes=1)
    calls = [
        Sent("a", "b1", "claude-sonnet-4", "", T0, HoldState.IN_DOUBT, 100, 10, None, None),
        Sent("b", "b1", "claude-sonnet-4", "", later, HoldState.IN_DOUBT, 100, 10, None, None),
    ]
    result = run([billed_bucket], calls)
    resolved = [(r.reservation_id, r.tokens) for r in result.resolutions]
    assert [("a", Tokens(120, 0, 80, 1)), ("b", None)] == resolved
