"""Reconciliation: a provider's usage report held against the ledger's calls, one minute
bucket of one model at a time, and the in-doubt holds whose outcome a bucket proves.

A usage report counts per (minute, model, key or project); it names no request. So what a
bucket can prove is only what its counts prove (docs/reconcile.md):
- every call the ledger settled with its usage explains its tokens and its request; what
  the provider counted beyond those is unexplained;
- no unexplained request: none of the bucket's in-doubt calls was billed, each is resolved
  at 0 (the prompt charged before sending returns too);
- as many unexplained requests as in-doubt calls: all of them ran, each is resolved at the
  unexplained usage apportioned by what each held (exact in sum; marked apportioned when
  they are not all on one budget);
- anything else (fewer unexplained requests than in-doubt calls, or more): the evidence
  cannot separate them, and they stay in doubt, listed.
A provider whose report counts no requests (Anthropic's) proves a bucket by its tokens:
none unexplained, or one in-doubt call alone with the surplus.

Pure: plain data in, a report and the resolutions to make out; `now` is an argument.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from enum import StrEnum

from earmark import limits
from earmark.core.model import HoldState

BUCKET = timedelta(minutes=1)
DAY = timedelta(days=1)
# A model's dated snapshot ("gpt-4o-2024-08-06", "claude-sonnet-4-20250514") is reported
# under its date; a call names the alias it asked for. Both are compared without it.
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


def model_family(model: str) -> str:
    return _SNAPSHOT.sub("", model)


@dataclass(frozen=True, slots=True)
class Tokens:
    """Token counts and requests; requests None where the provider does not count them."""

    input: int = 0
    cached: int = 0
    output: int = 0
    requests: int | None = 0

    def __add__(self, other: Tokens) -> Tokens:
        requests = (
            None
            if self.requests is None or other.requests is None
            else self.requests + other.requests
        )
        return Tokens(
            self.input + other.input,
            self.cached + other.cached,
            self.output + other.output,
            requests,
        )

    def __sub__(self, other: Tokens) -> Tokens:
        negated = Tokens(
            -other.input,
            -other.cached,
            -other.output,
            None if other.requests is None else -other.requests,
        )
        return self + negated

    def empty(self) -> bool:
        return self.input == 0 and self.output == 0 and not self.requests


@dataclass(frozen=True, slots=True)
class Reported:
    """One result of the provider's usage report: a minute, a model, its counts."""

    start: datetime
    model: str
    tokens: Tokens


@dataclass(frozen=True, slots=True)
class Sent:
    """One call of the ledger (its record and its hold)."""

    reservation_id: str
    budget_id: str
    model: str
    service_tier: str
    sent_at: datetime
    state: HoldState
    amount: int
    charged: int
    # The usage its Settle or resolve reported; None when none did.
    usage: Tokens | None
    settled_used: int | None


@dataclass(frozen=True, slots=True)
class Billed:
    """One row of the provider's cost report: a day's dollars for a model."""

    day: date
    model: str
    usd_micros: int


class Class(StrEnum):
    MATCHED = "matched"
    # Billed, not in the ledger: an in-doubt call that ran, or spend outside Earmark.
    PROVIDER_ONLY = "provider-only"
    # In the ledger, not billed.
    LOCAL_ONLY = "local-only"
    # Both, beyond the tolerance: tokens miscounted.
    MISMATCH = "mismatch"
    # In-doubt calls the evidence cannot separate.
    UNRESOLVED = "unresolved"
    # Still filling (younger than the billing delay) or with calls still in flight.
    PENDING = "pending"


FAILING = frozenset({Class.PROVIDER_ONLY, Class.MISMATCH, Class.UNRESOLVED})


@dataclass(frozen=True, slots=True)
class Resolution:
    """An in-doubt call resolved by a bucket's evidence: at its tokens (None: at 0)."""

    reservation_id: str
    model: str
    service_tier: str
    tokens: Tokens | None
    evidence: str
    apportioned: bool


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    model: str
    cls: Class
    provider: Tokens
    ledger: Tokens
    unexplained: Tokens
    in_doubt: tuple[Sent, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    note: str = ""


@dataclass(frozen=True, slots=True)
class Drift:
    """A day's cost report for a model against the ledger's priced calls."""

    day: date
    model: str
    provider_usd_micros: int
    ledger_usd_micros: int
    beyond: bool

    @property
    def ratio(self) -> float | None:
        if self.ledger_usd_micros == 0:
            return None
        return self.provider_usd_micros / self.ledger_usd_micros


@dataclass(frozen=True, slots=True)
class Tolerance:
    # Tokens of a bucket agree within this share of the larger count.
    tokens_share: float = limits.reconcile_tokens_tolerance_share
    # A day's dollars agree within this share of the ledger's.
    drift_share: float = limits.reconcile_drift_tolerance_share
    billing_delay: timedelta = timedelta(seconds=limits.reconcile_billing_delay_seconds)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    buckets: tuple[Bucket, ...]
    drift: tuple[Drift, ...]
    resolutions: tuple[Resolution, ...] = field(default=())

    def failing(self) -> bool:
        """Something is provider-only, mismatched, unresolved or drifted: exit status 3."""
        return any(b.cls in FAILING for b in self.buckets) or any(d.beyond for d in self.drift)


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _explained(call: Sent) -> Tokens | None:
    """What a settled call explains of its bucket; None: a request whose tokens are not
    known (settled by an amount). A call settled at 0 without usage was not billed."""
    if call.usage is not None:
        return call.usage
    if call.settled_used == 0:
        return Tokens()
    return None


def _agree(a: int, b: int, share: float) -> bool:
    return abs(a - b) <= share * max(abs(a), abs(b))


def _apportion(total: int, weights: list[int]) -> list[int]:
    """total split by weights, largest remainders first: the parts sum to total exactly."""
    whole = sum(weights)
    if whole <= 0:
        weights, whole = [1] * len(weights), len(weights)
    parts = [total * w // whole for w in weights]
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % whole), i))
    for i in order[: total - sum(parts)]:
        parts[i] += 1
    return parts


def _bounded(text: str) -> str:
    return text[: limits.evidence_length_max]


def decide_bucket(
    start: datetime,
    model: str,
    reported: Tokens,
    calls: list[Sent],
    where: str,
    tolerance: Tolerance,
) -> Bucket:
    """One bucket's class, and the resolutions its evidence proves."""
    settled = [c for c in calls if c.state in (HoldState.SETTLED, HoldState.EXPIRED)]
    in_doubt = tuple(c for c in calls if c.state is HoldState.IN_DOUBT)
    counted = reported.requests is not None
    ledger = Tokens(requests=0 if counted else None)
    unknown = 0
    for call in settled:
        explained = _explained(call)
        if explained is None:
            unknown += 1
            explained = Tokens(requests=1)
        if not counted:
            explained = Tokens(explained.input, explained.cached, explained.output, None)
        ledger += explained
    unexplained = reported - ledger
    label = f"{where} bucket {start:%Y-%m-%dT%H:%MZ} model {model}"
    if any(c.state is HoldState.HELD for c in calls):
        return Bucket(start, model, Class.PENDING, reported, ledger, unexplained, in_doubt,
                      note="calls still in flight")  # fmt: skip
    if in_doubt:
        return _decide_in_doubt(start, model, reported, ledger, unexplained, in_doubt, label,
                                unknown, tolerance)  # fmt: skip
    return Bucket(start, model, _classify(reported, ledger, unexplained, unknown, tolerance),
                  reported, ledger, unexplained)  # fmt: skip


def _classify(
    reported: Tokens, ledger: Tokens, unexplained: Tokens, unknown: int, tolerance: Tolerance
) -> Class:
    if reported.empty() and ledger.empty():
        return Class.MATCHED
    if ledger.empty():
        return Class.PROVIDER_ONLY
    if reported.empty():
        return Class.LOCAL_ONLY
    if unexplained.requests is not None and unexplained.requests != 0:
        return Class.PROVIDER_ONLY if unexplained.requests > 0 else Class.LOCAL_ONLY
    if unknown:
        return Class.MATCHED
    share = tolerance.tokens_share
    if _agree(reported.input, ledger.input, share) and _agree(
        reported.output, ledger.output, share
    ):
        return Class.MATCHED
    if unexplained.requests is None and unexplained.input > 0 and unexplained.output > 0:
        return Class.PROVIDER_ONLY
    return Class.MISMATCH


def _decide_in_doubt(
    start: datetime,
    model: str,
    reported: Tokens,
    ledger: Tokens,
    unexplained: Tokens,
    in_doubt: tuple[Sent, ...],
    label: str,
    unknown: int,
    tolerance: Tolerance,
) -> Bucket:
    n = len(in_doubt)
    share = tolerance.tokens_share
    if unexplained.requests is not None:
        none_ran = unexplained.requests <= 0
        all_ran = unexplained.requests == n
    else:
        none_ran = unexplained.input <= share * max(reported.input, 1) and unexplained.output <= 0
        all_ran = n == 1 and unexplained.input > 0
    if none_ran:
        evidence = _bounded(f"{label}: no unexplained requests for {n} in-doubt calls: not billed")
        resolutions = tuple(
            Resolution(c.reservation_id, c.model, c.service_tier, None, evidence, False)
            for c in in_doubt
        )
        cls = _classify(reported, ledger, unexplained, unknown, tolerance)
        return Bucket(start, model, cls, reported, ledger, unexplained, in_doubt, resolutions)
    if all_ran and min(unexplained.input, unexplained.cached, unexplained.output) >= 0:
        weights = [c.amount for c in in_doubt]
        shares = zip(
            _apportion(unexplained.input, weights),
            _apportion(unexplained.cached, weights),
            _apportion(unexplained.output, weights),
            strict=True,
        )
        apportioned = n > 1 and len({c.budget_id for c in in_doubt}) > 1
        how = "" if n == 1 else "; apportioned by held amount" if apportioned else "; shared"
        evidence = _bounded(
            f"{label}: {n} unexplained requests for {n} in-doubt calls: billed{how}"
        )
        resolutions = tuple(
            Resolution(c.reservation_id, c.model, c.service_tier,
                       Tokens(i, min(k, i), o, 1), evidence, apportioned)
            for c, (i, k, o) in zip(in_doubt, shares, strict=True)
        )  # fmt: skip
        return Bucket(start, model, Class.MATCHED, reported, ledger, unexplained, in_doubt,
                      resolutions)  # fmt: skip
    note = (
        f"{unexplained.requests} unexplained requests for {n} in-doubt calls"
        if unexplained.requests is not None
        else f"{unexplained.input} unexplained input tokens for {n} in-doubt calls"
    )
    return Bucket(start, model, Class.UNRESOLVED, reported, ledger, unexplained, in_doubt,
                  note=note)  # fmt: skip


def reconcile(
    reported: list[Reported],
    calls: list[Sent],
    billed: list[Billed],
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    where: str,
    tolerance: Tolerance = Tolerance(),
) -> Reconciliation:
    """Every bucket of [since, until) that either side has, oldest first; the days wholly
    inside it that the cost report has, against the ledger's priced calls."""
    filling_from = now - tolerance.billing_delay
    by_bucket: dict[tuple[datetime, str], Tokens] = {}
    counted = all(r.tokens.requests is not None for r in reported)
    for row in reported:
        key = (_minute(row.start), model_family(row.model))
        zero = Tokens(requests=0 if counted else None)
        by_bucket[key] = by_bucket.get(key, zero) + row.tokens
    sent: dict[tuple[datetime, str], list[Sent]] = defaultdict(list)
    for call in calls:
        sent[(_minute(call.sent_at), model_family(call.model))].append(call)
    buckets = []
    for start, model in sorted(by_bucket.keys() | sent.keys()):
        zero = Tokens(requests=0 if counted else None)
        tokens = by_bucket.get((start, model), zero)
        group = sent.get((start, model), [])
        if start + BUCKET > filling_from:
            buckets.append(Bucket(start, model, Class.PENDING, tokens, Tokens(), Tokens(),
                                  note="younger than the billing delay"))  # fmt: skip
            continue
        buckets.append(decide_bucket(start, model, tokens, group, where, tolerance))
    drift = _drift(billed, calls, since, until, filling_from, tolerance)
    resolutions = tuple(r for b in buckets for r in b.resolutions)
    return Reconciliation(tuple(buckets), drift, resolutions)


def _drift(
    billed: list[Billed],
    calls: list[Sent],
    since: datetime,
    until: datetime,
    filling_from: datetime,
    tolerance: Tolerance,
) -> tuple[Drift, ...]:
    """Each whole day of [since, until) that has ended a billing delay ago: the cost
    report's dollars per model against what the ledger priced its calls at (what each
    settled at, or has charged while open)."""
    provider: dict[tuple[date, str], int] = defaultdict(int)
    for row in billed:
        # A cost tied to no model (Anthropic's web search line) cannot be set against a
        # model's calls, whose priced amounts include their tool fees.
        if row.model:
            provider[(row.day, model_family(row.model))] += row.usd_micros
    ledger: dict[tuple[date, str], int] = defaultdict(int)
    for call in calls:
        spent = call.settled_used if call.settled_used is not None else call.charged
        ledger[(call.sent_at.date(), model_family(call.model))] += spent
    days = []
    for day, model in sorted(provider.keys() | ledger.keys()):
        start = datetime(day.year, day.month, day.day, tzinfo=since.tzinfo)
        if start < since or start + DAY > until or start + DAY > filling_from:
            continue
        theirs, ours = provider.get((day, model), 0), ledger.get((day, model), 0)
        beyond = not _agree(theirs, ours, tolerance.drift_share) if ours else theirs > 0
        days.append(Drift(day, model, theirs, ours, beyond))
    return tuple(days)
