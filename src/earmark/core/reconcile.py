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

An in-doubt call is judged over its window (the minutes from its send to when it can have
ended, Sent.ends_by), windows of one model that touch together, their counts summed; only
once the window and the minute each side of it are in the range and older than the billing
delay. Until then its calls are pending, the note saying from when.

Pure: plain data in, a report and the resolutions to make out; `now` is an argument.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from earmark import limits
from earmark.core.model import HoldState
from earmark.core.prices import USD_MICROS
from earmark.core.reconcile_model import (
    BUCKET,
    DAY,
    DEFAULT_TOLERANCE,
    FAILING,
    NOT_METERED,
    UNRECOGNISED,
    Billed,
    Bucket,
    Class,
    Drift,
    Kind,
    Reconciliation,
    Reported,
    Resolution,
    Sent,
    Tokens,
    Tolerance,
    model_family,
)

__all__ = [
    "FAILING",
    "Billed",
    "Bucket",
    "Class",
    "Drift",
    "Kind",
    "Reconciliation",
    "Reported",
    "Resolution",
    "Sent",
    "Tokens",
    "Tolerance",
    "model_family",
    "reconcile",
]


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


@dataclass(frozen=True, slots=True)
class Tally:
    """One bucket's two sides, before its in-doubt calls are judged."""

    start: datetime
    model: str
    reported: Tokens
    ledger: Tokens
    unexplained: Tokens
    in_doubt: tuple[Sent, ...]
    # Calls still held (in flight), settled calls whose tokens are not known (settled by
    # an amount, or released), and settled calls of more than one request.
    held: int
    unknown: int
    multi: int
    pending: bool

    def quiet(self, tolerance: Tolerance) -> bool:
        """Nothing here can stand for a neighbour's call: judged, nothing in flight, and
        both sides agree (no unexplained request, or with no request counts, no tokens)."""
        if self.pending or self.held or self.in_doubt:
            return False
        if self.unexplained.requests is not None:
            return self.unexplained.requests == 0
        return _tokens_agree(self.reported, self.ledger, tolerance)


def tally(
    start: datetime,
    model: str,
    reported: Tokens,
    calls: list[Sent],
    pending: bool,
) -> Tally:
    counted = reported.requests is not None
    ledger = Tokens(requests=0 if counted else None)
    unknown = multi = 0
    for call in calls:
        if call.state not in (HoldState.SETTLED, HoldState.EXPIRED):
            continue
        explained = _explained(call)
        if explained is None:
            unknown += 1
            explained = Tokens(requests=1)
        if (explained.requests or 0) > 1:
            multi += 1
        ledger += explained if counted else explained.uncounted()
    in_doubt = tuple(c for c in calls if c.state is HoldState.IN_DOUBT)
    held = sum(1 for c in calls if c.state is HoldState.HELD)
    return Tally(start, model, reported, ledger, reported - ledger, in_doubt, held, unknown,
                 multi, pending)  # fmt: skip


def _tokens_agree(reported: Tokens, ledger: Tokens, tolerance: Tolerance) -> bool:
    share = tolerance.tokens_share
    return _agree(reported.input, ledger.input, share) and _agree(
        reported.output, ledger.output, share
    )


def _classify(t: Tally, tolerance: Tolerance) -> Class:
    reported, ledger, unexplained = t.reported, t.ledger, t.unexplained
    if reported.empty() and ledger.empty():
        return Class.MATCHED
    if ledger.empty():
        return Class.PROVIDER_ONLY
    if reported.empty():
        return Class.LOCAL_ONLY
    if unexplained.requests is not None and unexplained.requests != 0:
        return Class.PROVIDER_ONLY if unexplained.requests > 0 else Class.LOCAL_ONLY
    if t.unknown or _tokens_agree(reported, ledger, tolerance):
        return Class.MATCHED
    if unexplained.requests is None and unexplained.input > 0 and unexplained.output > 0:
        return Class.PROVIDER_ONLY
    return Class.MISMATCH


def _doubt_blocker(t: Tally, neighbours_quiet: bool, scope: str) -> str:
    """Why the bucket's evidence cannot judge its in-doubt calls; "" when it can."""
    if t.unknown:
        return "calls settled without their usage share the minute"
    if t.multi:
        return "calls of several requests share the minute"
    if scope and any(c.key_label != scope for c in t.in_doubt):
        return f"in-doubt calls not labelled with the key {scope}"
    if not neighbours_quiet:
        return "the minutes around it, or its other models, do not balance"
    return ""


def judge(
    t: Tally,
    where: str,
    scope: str,
    neighbours_quiet: bool,
    tolerance: Tolerance,
    through: datetime | None = None,
) -> Bucket:
    """A bucket's class, and the in-doubt calls its evidence proves: none of them ran (no
    unexplained request and the tokens agree), or all of them did (as many unexplained
    requests as calls; without request counts, one call alone with the surplus). Either
    needs the minute's other calls known, its key, and quiet neighbours: a call sent near a
    minute's edge may be billed in the next."""
    if t.pending or t.held:
        note = "calls still in flight" if t.held else "younger than the billing delay"
        return Bucket(t.start, t.model, Class.PENDING, t.reported, t.ledger, t.unexplained,
                      t.in_doubt, note=note)  # fmt: skip
    if not t.in_doubt:
        return Bucket(t.start, t.model, _classify(t, tolerance), t.reported, t.ledger,
                      t.unexplained)  # fmt: skip
    n, u = len(t.in_doubt), t.unexplained
    label = f"{where} bucket {t.start:%Y-%m-%dT%H:%MZ} model {t.model}"
    if through is not None and through > t.start:
        label = f"{where} buckets {t.start:%Y-%m-%dT%H:%MZ} to {through:%H:%MZ} model {t.model}"
    if u.requests is not None:
        none_ran = u.requests == 0 and _tokens_agree(t.reported, t.ledger, tolerance)
        all_ran = u.requests == n
    else:
        none_ran = _tokens_agree(t.reported, t.ledger, tolerance)
        all_ran = n == 1
    all_ran = all_ran and u.input > 0 and min(u.cached, u.output, u.written, u.written_long) >= 0
    blocker = _doubt_blocker(t, neighbours_quiet, scope)
    if not blocker and none_ran:
        evidence = _bounded(f"{label}: no unexplained requests for {n} in-doubt calls: not billed")
        resolutions = tuple(
            Resolution(c.reservation_id, c.model, c.service_tier, None, evidence, False)
            for c in t.in_doubt
        )
        return Bucket(t.start, t.model, Class.MATCHED, t.reported, t.ledger, u, t.in_doubt,
                      resolutions)  # fmt: skip
    if not blocker and all_ran:
        return Bucket(t.start, t.model, Class.MATCHED, t.reported, t.ledger, u, t.in_doubt,
                      _apportioned(t.in_doubt, u, label))  # fmt: skip
    counts = (
        f"{u.requests} unexplained requests" if u.requests is not None
        else f"{u.input} unexplained input tokens"
    )  # fmt: skip
    note = f"{counts} for {n} in-doubt calls" + (f": {blocker}" if blocker else "")
    return Bucket(t.start, t.model, Class.UNRESOLVED, t.reported, t.ledger, u, t.in_doubt,
                  note=note)  # fmt: skip


def _apportioned(in_doubt: tuple[Sent, ...], u: Tokens, label: str) -> tuple[Resolution, ...]:
    """The surplus split by what each call held: each count exact in sum, then each share
    kept consistent (cached and written within input, the hour's writes within written)."""
    n = len(in_doubt)
    weights = [c.amount for c in in_doubt]
    parts = [
        _apportion(total, weights)
        for total in (u.input, u.cached, u.output, u.written, u.written_long)
    ]
    apportioned = n > 1 and len({c.budget_id for c in in_doubt}) > 1
    how = "" if n == 1 else "; apportioned by held amount" if apportioned else "; shared"
    evidence = _bounded(f"{label}: {n} unexplained requests for {n} in-doubt calls: billed{how}")
    resolutions = []
    for k, call in enumerate(in_doubt):
        i, cached, output, written, long = (part[k] for part in parts)
        cached = min(cached, i)
        written = min(written, i - cached)
        tokens = Tokens(i, cached, output, 1, written, min(long, written))
        resolutions.append(
            Resolution(
                call.reservation_id, call.model, call.service_tier, tokens, evidence, apportioned
            )
        )
    return tuple(resolutions)


def reconcile(
    reported: list[Reported],
    calls: list[Sent],
    billed: list[Billed],
    *,
    since: datetime,
    until: datetime,
    now: datetime,
    where: str,
    counts_requests: bool = True,
    scope: str = "",
    tolerance: Tolerance = DEFAULT_TOLERANCE,
    uncosted_tiers: frozenset[str] = frozenset(),
) -> Reconciliation:
    """Every bucket of [since, until) that either side has, oldest first; the days wholly
    inside it that the cost report has, against the ledger's priced calls.
    counts_requests: the provider's report counts requests (OpenAI's does, Anthropic's
    not). scope: the key or project reconciled; only in-doubt calls labelled with it are
    resolved (an unlabelled call may have been sent with another key). uncosted_tiers: the
    service tiers the cost report leaves out: a day and model with calls of one is
    unverifiable, not drift."""
    filling_from = now - tolerance.billing_delay
    zero = Tokens(requests=0 if counts_requests else None)
    by_bucket: dict[tuple[datetime, str], Tokens] = {}
    for row in reported:
        key = (_minute(row.start), model_family(row.model))
        tokens = row.tokens if counts_requests else row.tokens.uncounted()
        by_bucket[key] = by_bucket.get(key, zero) + tokens
    sent: dict[tuple[datetime, str], list[Sent]] = defaultdict(list)
    for call in calls:
        sent[(_minute(call.sent_at), model_family(call.model))].append(call)
    tallies = [
        tally(
            start,
            model,
            by_bucket.get((start, model), zero),
            sent.get((start, model), []),
            start + BUCKET > filling_from,
        )
        for start, model in sorted(by_bucket.keys() | sent.keys())
    ]
    by_minute: dict[datetime, list[Tally]] = defaultdict(list)
    for t in tallies:
        by_minute[t.start].append(t)
    first, last = _minute(since), _minute(until - timedelta(microseconds=1))

    def quiet_around(t: Tally) -> bool:
        """The minute before and after are inside the range and quiet, and so are the
        minute's other models (a call of another name may be this model's)."""
        for minute in (t.start - BUCKET, t.start + BUCKET):
            if minute < first or minute > last or minute + BUCKET > filling_from:
                return False
            if not all(other.quiet(tolerance) for other in by_minute.get(minute, [])):
                return False
        return all(o.quiet(tolerance) for o in by_minute[t.start] if o is not t)

    windows = _windows(calls)
    judged: dict[tuple[datetime, str], Bucket] = {}
    by_key = {(t.start, t.model): t for t in tallies}
    for model, s, e, doubted in windows:
        minutes = [s + k * BUCKET for k in range((e - s) // BUCKET + 1)]
        inside = [by_key[(m, model)] for m in minutes if (m, model) in by_key]
        whole_from = e + 2 * BUCKET + tolerance.billing_delay
        if s - BUCKET < first or e + BUCKET > last or e + 2 * BUCKET > filling_from:
            # The window, with the minute each side of it, is not all in the range and
            # older than the billing delay: a call booked at its end may not show yet.
            note = (
                f"window {s:%Y-%m-%dT%H:%MZ} to {e:%H:%MZ} not yet whole: can be decided "
                f"from {whole_from:%Y-%m-%dT%H:%MZ} by a run whose range holds "
                f"{s - BUCKET:%Y-%m-%dT%H:%MZ} to {e + BUCKET:%Y-%m-%dT%H:%MZ}"
            )
            for t in inside:
                judged[(t.start, t.model)] = Bucket(
                    t.start, t.model, Class.PENDING, t.reported, t.ledger, t.unexplained,
                    t.in_doubt, note=note,
                )  # fmt: skip
            continue
        whole = _summed(s, model, inside, doubted, counts_requests)
        quiet = all(
            o.quiet(tolerance)
            for m in (s - BUCKET, e + BUCKET)
            for o in by_minute.get(m, [])
        ) and all(o.quiet(tolerance) for m in minutes for o in by_minute.get(m, [])
                  if o.model != model)  # fmt: skip
        verdict = judge(whole, where, scope, quiet, tolerance, through=e)
        for t in inside:
            if t.start == min(c.sent_at for c in doubted).replace(second=0, microsecond=0):
                judged[(t.start, t.model)] = Bucket(
                    t.start, t.model, verdict.cls, t.reported, t.ledger, t.unexplained,
                    verdict.in_doubt, verdict.resolutions, verdict.note,
                )  # fmt: skip
            elif verdict.resolutions or t.in_doubt:
                cls = Class.MATCHED if verdict.resolutions else verdict.cls
                judged[(t.start, t.model)] = Bucket(
                    t.start, t.model, cls, t.reported, t.ledger, t.unexplained, (), (),
                    f"in the window of in-doubt calls sent {s:%H:%MZ}",
                )  # fmt: skip
    buckets = tuple(
        judged.get((t.start, t.model)) or judge(t, where, scope, quiet_around(t), tolerance)
        for t in tallies
    )
    drift = _drift(billed, calls, since, until, filling_from, tolerance, uncosted_tiers)
    resolutions = tuple(r for b in buckets for r in b.resolutions)
    return Reconciliation(buckets, drift, resolutions)


def _windows(calls: list[Sent]) -> list[tuple[str, datetime, datetime, tuple[Sent, ...]]]:
    """The in-doubt calls by model, in windows of minutes: each call's from the minute it
    was sent to the minute it can have ended by (its hold's lease), windows that touch
    merged (a call may be booked in any minute of its window: at its completion)."""
    spans: dict[str, list[tuple[datetime, datetime, Sent]]] = defaultdict(list)
    for call in calls:
        if call.state is HoldState.IN_DOUBT:
            end = max(call.ends_by or call.sent_at, call.sent_at)
            spans[model_family(call.model)].append((_minute(call.sent_at), _minute(end), call))
    found = []
    for model, spanned in sorted(spans.items()):
        spanned.sort(key=lambda w: (w[0], w[2].reservation_id))
        s, e, members = spanned[0][0], spanned[0][1], [spanned[0][2]]
        for start, end, call in spanned[1:]:
            if start <= e + BUCKET:
                e, members = max(e, end), [*members, call]
                continue
            found.append((model, s, e, tuple(members)))
            s, e, members = start, end, [call]
        found.append((model, s, e, tuple(members)))
    return found


def _summed(
    start: datetime, model: str, inside: list[Tally], doubted: tuple[Sent, ...], counted: bool
) -> Tally:
    """A window's tallies as one: its counts summed, its in-doubt calls all of its own."""
    zero = Tokens(requests=0 if counted else None)
    reported, ledger = zero, zero
    for t in inside:
        reported, ledger = reported + t.reported, ledger + t.ledger
    return Tally(
        start, model, reported, ledger, reported - ledger, doubted,
        sum(t.held for t in inside), sum(t.unknown for t in inside),
        sum(t.multi for t in inside), any(t.pending for t in inside),
    )  # fmt: skip


def _drift(
    billed: list[Billed],
    calls: list[Sent],
    since: datetime,
    until: datetime,
    filling_from: datetime,
    tolerance: Tolerance,
    uncosted_tiers: frozenset[str] = frozenset(),
) -> tuple[Drift, ...]:
    """Each whole day of [since, until) that has ended a billing delay ago: the cost
    report's dollars per model against what the ledger priced its calls' tokens at (what
    each settled at, or has charged while open, less its tool fees), for calls on budgets
    in micro-dollars; the day's tool lines, as one row, against those tool fees, by the
    same rule; and each storage or unrecognised line, listed and never drift."""
    provider: dict[tuple[date, str], int] = defaultdict(int)
    tools: dict[date, int] = defaultdict(int)
    tool_lines: dict[date, set[str]] = defaultdict(set)
    listed: dict[tuple[date, Kind, str], int] = defaultdict(int)
    for row in billed:
        if row.kind is Kind.TOOLS:
            tools[row.day] += row.usd_micros
            tool_lines[row.day].add(row.line)
        elif row.kind is Kind.MODEL and row.model:
            provider[(row.day, model_family(row.model))] += row.usd_micros
        else:
            kind = Kind.STORAGE if row.kind is Kind.STORAGE else Kind.OTHER
            listed[(row.day, kind, row.line)] += row.usd_micros
    ledger: dict[tuple[date, str], int] = defaultdict(int)
    fees: dict[date, int] = defaultdict(int)
    uncosted: dict[tuple[date, str], str] = {}
    for call in calls:
        if call.service_tier in uncosted_tiers:
            uncosted[(call.sent_at.date(), model_family(call.model))] = call.service_tier
        if call.unit != USD_MICROS:
            # A budget in tokens or credits prices nothing in dollars.
            continue
        spent = call.settled_used if call.settled_used is not None else call.charged
        fee = min(max(call.tool_fees, 0), max(spent, 0))
        ledger[(call.sent_at.date(), model_family(call.model))] += spent - fee
        fees[call.sent_at.date()] += fee

    def whole(day: date) -> bool:
        start = datetime(day.year, day.month, day.day, tzinfo=since.tzinfo)
        return not (start < since or start + DAY > until or start + DAY > filling_from)

    def beyond(theirs: int, ours: int) -> bool:
        return not _agree(theirs, ours, tolerance.drift_share) if ours else theirs > 0

    days = []
    for day, model in sorted(provider.keys() | ledger.keys()):
        if not whole(day):
            continue
        theirs, ours = provider.get((day, model), 0), ledger.get((day, model), 0)
        tier = uncosted.get((day, model))
        if tier:
            why = f"the cost report leaves out {tier}-tier calls, which the ledger has"
            days.append(Drift(day, model, theirs, ours, False, why))
            continue
        days.append(Drift(day, model, theirs, ours, beyond(theirs, ours)))
    for day in sorted(tools.keys() | {d for d, fee in fees.items() if fee}):
        if not whole(day):
            continue
        theirs, ours = tools.get(day, 0), fees.get(day, 0)
        lines = tuple(sorted(tool_lines.get(day, ())))
        days.append(
            Drift(day, "", theirs, ours, beyond(theirs, ours), kind=Kind.TOOLS, lines=lines)
        )
    for (day, kind, line), theirs in sorted(listed.items()):
        if not whole(day):
            continue
        why = NOT_METERED if kind is Kind.STORAGE else UNRECOGNISED
        days.append(Drift(day, "", theirs, 0, False, why, kind, (line,)))
    return tuple(days)
