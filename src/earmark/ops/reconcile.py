"""`earmark reconcile`: a provider's usage and cost reports held against the ledger's calls
(core/reconcile.py decides; docs/reconcile.md says what it can and cannot prove).

It reads the reports with an admin key (ops/reports.py), the ledger's calls of the same
range with Admin's ListCalls, classes each (minute, model) bucket, and with --apply
resolves the in-doubt holds a bucket's evidence proves, through ResolveHold with the
evidence kept beside the resolve's ledger entry. It exits 3 when anything is provider-only,
mismatched, unresolved or drifted. Its metrics (earmark_reconcile_*) go to a textfile
collector's file (--metrics-file) or a Pushgateway (--pushgateway), since a run is a job
that ends: deploy/kubernetes/reconcile-cronjob.yaml runs it on a schedule, and the
EarmarkLedgerDrift alert reads them.

In-doubt holds of OpenAI background responses (their id recorded on the hold) are not the
reports' to prove: with --project-key-file each response is retrieved by its id, checked
against its hold (one hold's response only, of its model, no older than it, within the
output it could pay for) and, once ended, resolved at its own usage
(ops/reconcile_responses.py), before the reports' pass.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from earmark import limits, options
from earmark.core.model import HoldState
from earmark.core.reconcile import (
    FAILING,
    Bucket,
    Class,
    Drift,
    Kind,
    Reconciliation,
    Resolution,
    Sent,
    Tokens,
    Tolerance,
    reconcile,
)
from earmark.ops import reconcile_responses, reconcile_tools, render
from earmark.ops.connect import (
    Admin,
    Answer,
    OpsError,
    access_from,
    add_admin_arguments,
    read_token,
)
from earmark.ops.reconcile_metrics import publish
from earmark.ops.reconcile_responses import Background
from earmark.ops.reports import (
    COUNTS_REQUESTS,
    DEFAULT_BASES,
    READERS,
    UNCOSTED_TIERS,
    RefusedReport,
    ReportReader,
    Scope,
)
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

FAILING_STATUS = 3


@dataclass(frozen=True)
class Applied:
    resolution: Resolution
    # "" when resolved; else why not (the hold was settled meanwhile...).
    refused: str = ""


def _time(flag: str, text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise OpsError(f"{flag} {text!r} is not an RFC 3339 time (2026-12-01T00:00:00Z)") from None
    if at.tzinfo is None:
        raise OpsError(f"{flag} {text!r} names no time zone (end it with Z or +00:00)")
    return at.astimezone(UTC)


def _range(args: argparse.Namespace, now: datetime) -> tuple[datetime, datetime]:
    until = _time("--until", args.until) if args.until else now
    since = _time("--since", args.since) if args.since else until - timedelta(days=1)
    if until <= since:
        raise OpsError(f"--until {until.isoformat()} is not after --since {since.isoformat()}")
    if until - since > timedelta(days=limits.reconcile_range_days_max):
        raise OpsError(f"--since to --until spans more than {limits.reconcile_range_days_max} days")
    return since, until


def _tokens(usage: pb.TokenUsage) -> Tokens:
    return Tokens(usage.input_tokens, usage.cached_input_tokens, usage.output_tokens,
                  usage.requests or 1, usage.cache_write_input_tokens)  # fmt: skip


def ledger_calls(
    admin: Admin,
    provider: str,
    scope: Scope,
    since: datetime,
    until: datetime,
    call_max: timedelta = timedelta(seconds=limits.reconcile_call_seconds),
) -> list[Sent]:
    """The ledger's calls to provider sent in [since, until), with scope's key or none; an
    in-doubt call with the latest it can have ended by (call_max after it was sent, or its
    hold's expires_at when later). An in-doubt call sent before since that can have ended
    after it is among them too: it may be billed inside the range (its window is not whole
    there, and leaves in doubt the calls whose windows it touches)."""
    request = pb.ListCallsRequest(provider=provider, key_label=scope.label,
                                  page_size=limits.page_size_max)  # fmt: skip
    request.since.FromDatetime(since - call_max)
    request.until.FromDatetime(until)
    calls = []
    while True:
        page = admin.call("ListCalls", request, pb.ListCallsResponse)
        for c in page.calls:
            calls.append(Sent(
                reservation_id=c.reservation_id, budget_id=c.budget_id, model=c.model,
                service_tier=c.service_tier, sent_at=c.sent_at.ToDatetime(tzinfo=UTC),
                state=HoldState(c.state), amount=c.amount, charged=c.charged,
                usage=_tokens(c.usage) if c.HasField("usage") else None,
                settled_used=c.settled_used if c.HasField("settled_used") else None,
                key_label=c.key_label, unit=c.unit,
            ))  # fmt: skip
        if not page.next_page_token:
            return [
                c for c in _with_ends(admin, calls, call_max)
                if c.sent_at >= since or (c.ends_by is not None and c.ends_by >= since)
            ]  # fmt: skip
        request.page_token = page.next_page_token


def _with_ends(admin: Admin, calls: list[Sent], call_max: timedelta) -> list[Sent]:
    """The in-doubt calls with the latest they can have ended by: call_max after they were
    sent, or their hold's expires_at (ListHolds': its lease, or when it went in doubt) when
    later. The provider runs a request on after its client gave up, so the lease alone does
    not bound it."""
    if not any(c.state is HoldState.IN_DOUBT for c in calls):
        return calls
    ends: dict[str, datetime] = {}
    request = pb.ListHoldsRequest(
        state=pb.RESERVATION_STATE_IN_DOUBT, page_size=limits.page_size_max
    )
    for _ in range(limits.reconcile_pages_max):
        page = admin.call("ListHolds", request, pb.ListHoldsResponse)
        for hold in page.holds:
            if hold.HasField("expires_at"):
                ends[hold.reservation_id] = hold.expires_at.ToDatetime(tzinfo=UTC)
        if not page.next_page_token:
            return [
                replace(c, ends_by=max(c.sent_at + call_max, ends.get(c.reservation_id, c.sent_at)))
                if c.state is HoldState.IN_DOUBT else c
                for c in calls
            ]  # fmt: skip
        request.page_token = page.next_page_token
    raise OpsError(f"the in-doubt holds span more than {limits.reconcile_pages_max} pages")


def apply(admin: Admin, provider: str, resolutions: tuple[Resolution, ...]) -> list[Applied]:
    """ResolveHold for each: one refused (settled meanwhile by a late Settle) is said and
    the others go on."""
    applied = []
    for r in resolutions:
        request = pb.ResolveHoldRequest(reservation_id=r.reservation_id, evidence=r.evidence)
        if r.tokens is None:
            request.used = 0
        else:
            request.usage.CopyFrom(pb.TokenUsage(
                input_tokens=r.tokens.input, cached_input_tokens=r.tokens.cached,
                output_tokens=r.tokens.output, requests=1, provider=provider, model=r.model,
                service_tier=r.service_tier, cache_write_input_tokens=r.tokens.written,
                cache_write_long_input_tokens=r.tokens.written_long,
            ))  # fmt: skip
        try:
            admin.call("ResolveHold", request, pb.SettleResponse)
        except OpsError as refused:
            applied.append(Applied(r, str(refused)))
            continue
        applied.append(Applied(r))
    return applied


def run_reconcile(args: argparse.Namespace) -> Answer:
    """A run; a report that fails its checks is one line, nothing resolved, exit 3."""
    try:
        return _run(args)
    except RefusedReport as refused:
        if args.output == "json":
            return Answer(json.dumps({"refused": str(refused), "failing": True}), FAILING_STATUS)
        return Answer(str(refused), FAILING_STATUS)


def _run(args: argparse.Namespace) -> Answer:
    provider = args.provider
    if args.api_key_id and args.project_id:
        raise OpsError("--api-key-id and --project-id name one scope each; give one of them")
    scope = Scope(args.api_key_id or "", args.project_id or "")
    now = datetime.now(UTC)
    since, until = _range(args, now)
    tolerance = _tolerance(args)
    key = read_token(args.admin_key_file, "--admin-key-file")
    base = args.api_base or DEFAULT_BASES[provider]
    deadline = _bounded(
        "--http-deadline-seconds", args.http_deadline_seconds,
        limits.reconcile_http_request_seconds_min, limits.reconcile_http_request_seconds_max,
    )  # fmt: skip
    reader = ReportReader(provider, base, key, deadline)
    responses = _responses_reader(args, provider, base, deadline)
    read_usage, read_costs = READERS[provider]
    reported = read_usage(reader, scope, since, until)
    billed = read_costs(reader, scope, since, until)
    where = f"{provider} {scope.label or 'organization'}"
    call_max = timedelta(seconds=_bounded(
        "--call-seconds-max", args.call_seconds_max,
        limits.reconcile_call_seconds_min, limits.reconcile_call_seconds_max,
    ))  # fmt: skip
    with Admin(access_from(args)) as admin:
        calls = ledger_calls(admin, provider, scope, since, until, call_max)
        backgrounds = reconcile_responses.background_holds(admin, calls)
        if responses is not None and backgrounds:
            backgrounds = reconcile_responses.retrieve(admin, provider, responses, backgrounds)
            if args.apply:
                backgrounds = reconcile_responses.apply(admin, provider, backgrounds)
                # The holds resolved are settled calls now, with the responses' usage.
                calls = ledger_calls(admin, provider, scope, since, until, call_max)
        calls = reconcile_responses.in_flight(calls, backgrounds)
        calls = reconcile_tools.with_tool_fees(admin, provider, calls)
        result = reconcile(reported, calls, billed, since=since, until=until, now=now,
                           where=where, counts_requests=COUNTS_REQUESTS[provider],
                           scope=scope.label, tolerance=tolerance,
                           uncosted_tiers=UNCOSTED_TIERS[provider])  # fmt: skip
        applied = apply(admin, provider, result.resolutions) if args.apply else []
    refused = [a for a in applied if a.refused]
    failing = (
        result.failing()
        or bool(refused)
        or (bool(result.resolutions) and not args.apply)
        or reconcile_responses.failing(backgrounds, args.apply)
    )
    status = FAILING_STATUS if failing else 0
    # What was found and resolved is said even when the metrics cannot be published.
    unpublished = ""
    counted = applied + [
        Applied(r, why) for r, why in reconcile_responses.as_resolutions(backgrounds)
    ]
    try:
        publish(args, provider, scope.label, result, counted, failing, now)
    except OpsError as error:
        unpublished, status = str(error), status or 1
    if args.output == "json":
        found = _as_json(result, applied, args.apply, since, until)
        found |= {
            "responses": [reconcile_responses.as_json(b) for b in backgrounds],
            "failing": failing,
            "metrics_error": unpublished,
        }
        return Answer(json.dumps(found, indent=2), status)
    text = _as_text(result, applied, args.apply, backgrounds)
    return Answer(f"{text}\n{unpublished}" if unpublished else text, status)


def _responses_reader(
    args: argparse.Namespace, provider: str, base: str, deadline: float
) -> ReportReader | None:
    """The reader of background responses, with the project key (None without one)."""
    if args.project_key_file is None:
        return None
    if provider != "openai":
        raise OpsError(
            "--project-key-file retrieves OpenAI's background responses: --provider openai"
        )
    project_key = read_token(args.project_key_file, "--project-key-file")
    return ReportReader(provider, base, project_key, deadline)


def _bounded(flag: str, value: float, low: float, high: float) -> float:
    if not low <= value <= high:  # NaN fails both comparisons
        raise OpsError(f"{flag} is {value}; it must lie between {low:g} and {high:g}")
    return value


def _tolerance(args: argparse.Namespace) -> Tolerance:
    return Tolerance(
        tokens_share=_bounded("--tolerance", args.tolerance, 0.0, 1.0),
        drift_share=_bounded("--drift-tolerance", args.drift_tolerance, 0.0, 1.0),
        billing_delay=timedelta(seconds=_bounded(
            "--billing-delay-seconds", args.billing_delay_seconds,
            limits.reconcile_billing_delay_seconds_min, limits.reconcile_billing_delay_seconds_max,
        )),
    )  # fmt: skip


def _tokens_json(t: Tokens) -> dict[str, Any]:
    return {"input": t.input, "cached": t.cached, "output": t.output, "requests": t.requests}


def _bucket_json(b: Bucket) -> dict[str, Any]:
    return {
        "start": b.start.isoformat(), "model": b.model, "class": str(b.cls),
        "provider": _tokens_json(b.provider), "ledger": _tokens_json(b.ledger),
        "unexplained": _tokens_json(b.unexplained), "note": b.note,
        "in_doubt": [{"reservation_id": c.reservation_id, "budget_id": c.budget_id,
                      "amount": c.amount, "charged": c.charged,
                      "ends_by": c.ends_by.isoformat() if c.ends_by else None}
                     for c in b.in_doubt],
        "resolutions": [{"reservation_id": r.reservation_id, "evidence": r.evidence,
                         "apportioned": r.apportioned,
                         "usage": None if r.tokens is None else _tokens_json(r.tokens)}
                        for r in b.resolutions],
    }  # fmt: skip


def _as_json(
    result: Reconciliation,
    applied: list[Applied],
    applying: bool,
    since: datetime,
    until: datetime,
) -> dict[str, Any]:
    counts = {str(c): sum(1 for b in result.buckets if b.cls is c) for c in Class}
    return {
        "since": since.isoformat(), "until": until.isoformat(), "classes": counts,
        "buckets": [_bucket_json(b) for b in result.buckets],
        "drift": [{"day": d.day.isoformat(), "kind": str(d.kind), "model": d.model,
                   "lines": list(d.lines), "provider_usd_micros": d.provider_usd_micros,
                   "ledger_usd_micros": d.ledger_usd_micros, "ratio": d.ratio,
                   "beyond_tolerance": d.beyond, "unverifiable": d.unverifiable}
                  for d in result.drift],
        "applied": applying,
        "resolved": [a.resolution.reservation_id for a in applied if not a.refused],
        "refused": [{"reservation_id": a.resolution.reservation_id, "why": a.refused}
                    for a in applied if a.refused],
    }  # fmt: skip


def _as_text(
    result: Reconciliation, applied: list[Applied], applying: bool, backgrounds: list[Background]
) -> str:
    shown = [b for b in result.buckets if b.cls is not Class.MATCHED or b.resolutions]
    rows = [[
        f"{b.start:%Y-%m-%dT%H:%MZ}", b.model, str(b.cls),
        f"{b.provider.requests if b.provider.requests is not None else render.NONE}/"
        f"{b.ledger.requests if b.ledger.requests is not None else render.NONE}",
        f"{b.unexplained.input}/{b.unexplained.output}", str(len(b.in_doubt)),
        b.note or (b.resolutions[0].evidence.split(": ", 1)[-1] if b.resolutions else ""),
    ] for b in shown]  # fmt: skip
    parts = []
    if rows:
        headers = ("BUCKET", "MODEL", "CLASS", "REQUESTS P/L", "UNEXPLAINED IN/OUT",
                   "IN DOUBT", "NOTE")  # fmt: skip
        parts.append(render.table(headers, rows))
    drift = [[d.day.isoformat(), str(d.kind), _drift_name(d), f"{d.provider_usd_micros / 1e6:.6f}",
              render.NONE if d.kind in UNLEDGERED else f"{d.ledger_usd_micros / 1e6:.6f}",
              render.NONE if d.ratio is None else f"{d.ratio:.3f}", _drift_verdict(d)]
             for d in result.drift]  # fmt: skip
    if drift:
        headers = ("DAY", "KIND", "MODEL OR LINE", "BILLED $", "LEDGER $", "RATIO", "")
        parts.append(render.table(headers, drift))
    counts = ", ".join(f"{sum(1 for b in result.buckets if b.cls is c)} {c}" for c in Class)
    parts.append(f"buckets: {counts}")
    n = len(result.resolutions)
    if applying:
        done = sum(1 for a in applied if not a.refused)
        parts.append(f"resolved {done} of {n} in-doubt holds the evidence proves")
        parts.extend(f"  not resolved {a.resolution.reservation_id}: {a.refused}"
                     for a in applied if a.refused)  # fmt: skip
    elif n:
        parts.append(f"{n} in-doubt holds can be resolved by the evidence: run with --apply")
    if backgrounds:
        columns = ("RESERVATION", "RESPONSE", "FOUND", "NOTE")
        parts.append(render.table(columns, reconcile_responses.as_rows(backgrounds)))
        ended = [b for b in backgrounds if b.found is reconcile_responses.Found.ENDED]
        if applying:
            done = sum(1 for b in backgrounds if b.resolved)
            parts.append(f"resolved {done} of {len(ended)} in-doubt background responses ended")
        elif ended:
            parts.append(
                f"{len(ended)} in-doubt background responses ended: run with --apply to "
                "resolve them at their usage"
            )
        duplicates = sum(1 for b in backgrounds if b.found is reconcile_responses.Found.DUPLICATE)
        if duplicates:
            parts.append(
                f"{duplicates} in-doubt holds name a response another hold names too: "
                "resolved at none (exit 3)"
            )
        if any(b.found is reconcile_responses.Found.UNREAD for b in backgrounds):
            parts.append("in-doubt background responses: give --project-key-file to read them")
    if any(b.cls in FAILING for b in result.buckets) or any(d.beyond for d in result.drift):
        parts.append("the ledger and the provider's bill disagree (exit 3); see docs/reconcile.md")
    return "\n".join(parts)


# Kinds of cost line the ledger has no side of: listed, never compared.
UNLEDGERED = frozenset({Kind.STORAGE, Kind.OTHER})


def _drift_name(d: Drift) -> str:
    """A drift row's model, or the provider's lines it holds ("; " between them)."""
    return d.model or "; ".join(d.lines) or render.NONE


def _drift_verdict(d: Drift) -> str:
    if d.beyond:
        return "DRIFT"
    if d.kind is Kind.STORAGE:
        return "not metered"
    if d.kind is Kind.OTHER:
        return "other: unverifiable"
    return "unverifiable" if d.unverifiable else "ok"


OPTIONS = (
    Option("provider", required=True, choices=sorted(READERS)),
    Option("api_base", "the provider's API base URL", shown="the provider's"),
    Option(
        "admin_key_file", "a file holding the provider's admin key", convert=Path, required=True
    ),
    Option(
        "project_key_file",
        "a file holding an OpenAI project API key: retrieves the background responses of "
        "in-doubt holds by their id",
        convert=Path,
    ),
    Option("api_key_id", "the key the metered workers use (key_..., apikey_...)"),
    Option("project_id", "the project (Anthropic: workspace) they use"),
    Option("since", "RFC 3339", shown="a day before --until"),
    Option("until", "RFC 3339", shown="now"),
    Option(
        "apply",
        "resolve the in-doubt holds the evidence proves",
        default=False,
        action="store_true",
    ),
    Option(
        "billing_delay_seconds",
        "buckets younger than this are still filling",
        default=limits.reconcile_billing_delay_seconds,
        shown=str(limits.reconcile_billing_delay_seconds),
        convert=float,
    ),
    Option(
        "call_seconds_max",
        "an in-doubt call may be billed until this long after it was sent",
        default=limits.reconcile_call_seconds,
        shown=str(limits.reconcile_call_seconds),
        convert=float,
    ),
    Option(
        "http_deadline_seconds",
        "each GET of a report ends within this, however slowly its answer comes",
        default=limits.reconcile_http_request_seconds,
        shown=str(limits.reconcile_http_request_seconds),
        convert=float,
    ),
    Option(
        "tolerance",
        "a bucket's tokens agree within this share",
        default=limits.reconcile_tokens_tolerance_share,
        shown=str(limits.reconcile_tokens_tolerance_share),
        convert=float,
    ),
    Option(
        "drift_tolerance",
        "a day's dollars agree within this share",
        default=limits.reconcile_drift_tolerance_share,
        shown=str(limits.reconcile_drift_tolerance_share),
        convert=float,
    ),
    Option("metrics_file", "write earmark_reconcile_* for a textfile collector", convert=Path),
    Option("pushgateway", "push earmark_reconcile_* to this Pushgateway"),
)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark reconcile`."""
    command = commands.add_parser(
        "reconcile",
        help="hold a provider's usage and cost reports against the ledger; --apply "
        f"resolves the in-doubt holds they prove (exit {FAILING_STATUS} on disagreement)",
    )
    options.add_options(command, OPTIONS)
    add_admin_arguments(command, key_flag="--admin-tls-key-file")
    command.set_defaults(run=run_reconcile)
