"""`earmark budgets put|update|get|list|delete`: a budget's settings and state, through Admin.

`budgets list` lists every budget, or those whose id starts with `--prefix` (ListBudgets);
`budgets list --account A` lists an account's billing-cycle budgets (ListCycles). `put`
sets every field, its policies too (issue 34: period, thresholds, mode, rate windows): a
flag not given takes its default, as PutBudget does with a field not sent. On a budget
that exists, a put that would so drop its period, thresholds (or their basis), mode or
rate windows refuses, naming them, unless given --replace (issue 43). `update` changes
only the settings its flags name (UpdateBudget with their mask); `--unlimited`,
`--no-thresholds` and `--clear FIELD` name a setting to clear. Both set a budget's run
limits (issue 47: `--max-open-holds`, `--max-admissions`, `--closes-at`); get and list show
its open holds and its admissions this period (of their most) and when it closes. `update
--limit N --until ISO8601 --reason TEXT` sets a temporary limit (issue 47), which LIMIT
shows with its end, the limit after it and why."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime

from google.protobuf.message import Message

from earmark import limits, options
from earmark.core import refusing
from earmark.errors import Reason
from earmark.ops import policies, render
from earmark.ops.connect import Admin, OpsError, access_from, add_admin_arguments
from earmark.ops.holds import follow_pages
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

OVERAGE_POLICIES = {"hard": pb.OVERAGE_POLICY_HARD, "soft": pb.OVERAGE_POLICY_SOFT}
ESTIMATE_POLICIES = {"median": pb.ESTIMATE_POLICY_MEDIAN, "p75": pb.ESTIMATE_POLICY_P75}
HEADERS = (
    "BUDGET", "UNIT", "LIMIT", "USED", "HELD", "REMAINING", "HOLDS", "POLICY", "ESCROW", "STATUS",
    "MODE", "PERIOD", "PERIOD START", "RESETS AT", "THRESHOLDS", "THRESHOLD BASIS", "RATE",
    "REFUSALS", "ADMISSIONS", "CLOSES AT",
)  # fmt: skip
AMOUNTS = ("LIMIT", "USED", "HELD", "REMAINING", "HOLDS", "ADMISSIONS")
# What `budgets update --clear FIELD` may clear, to its default: the PutBudgetRequest
# fields an update may name, but the unit (which "" keeps).
CLEARABLE = (
    "limit", "default_estimate", "estimate_policy", "escrow_bps", "overage_policy",
    "overage_limit", "period", "timezone", "period_anchor", "threshold_bps", "mode",
    "admissions_per_minute", "units_per_minute", "threshold_basis", "max_open_holds",
    "max_admissions", "closes_at",
)  # fmt: skip


def _threshold(text: str) -> int:
    """--threshold's percent, in basis points (argparse names the flag on an error)."""
    try:
        return policies.bps_of_percent(text)
    except policies.BadPercent as bad:
        raise argparse.ArgumentTypeError(str(bad)) from None


def _moment(text: str) -> datetime:
    """--closes-at's ISO 8601 time (UTC when it names no zone; argparse names the flag on
    an error)."""
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 time") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


PUT_OPTIONS = (
    Option("unit", "tokens, usd_micros ($1 = 1,000,000), ...", required=True),
    Option("limit", "in the unit; not given: unlimited", convert=int),
    Option(
        "default_estimate",
        "what a Reserve with neither amount nor shape holds while its job has no history",
        convert=int,
    ),
    Option("estimate_policy", shown="median", choices=sorted(ESTIMATE_POLICIES)),
    Option(
        "escrow_bps",
        "basis points of the limit kept for PHASE_FINAL Reserves (1500 = 15%%)",
        default=0,
        convert=int,
    ),
    Option(
        "overage_policy",
        "hard refuses past the limit; soft admits past it, flagged",
        shown="hard",
        choices=sorted(OVERAGE_POLICIES),
    ),
    Option("overage_limit", "with soft: how far past the limit; not given: no bound", convert=int),
)
# A budget's policies: its period, notices, mode and rate windows (docs/concepts.md).
POLICY_OPTIONS = (
    Option(
        "period",
        "start again at zero used and held at the local midnight of each period's first "
        "day; a change takes effect at the next boundary",
        shown="never",
        choices=list(policies.PERIODS),
    ),
    Option(
        "timezone",
        "the IANA timezone whose midnights the periods start at (Europe/Berlin)",
        default="",
        shown="UTC",
        metavar="IANA",
    ),
    Option(
        "period_anchor",
        "the day a period starts: week, the ISO weekday (1 Monday to 7 Sunday); month, "
        "quarter and year, the day of the month (1 to 31; a shorter month starts on its "
        "last day)",
        default=0,
        shown="0: the first",
        convert=int,
        metavar="N",
    ),
    Option(
        "threshold",
        "a notice once a period when used and held reach this percent of the limit, to 2 "
        "decimals (80, 95.5, 100%%); repeat for more, at most "
        f"{limits.thresholds_max}; needs --limit",
        default=(),
        convert=_threshold,
        action="append",
        metavar="PERCENT",
    ),
    Option(
        "threshold_basis",
        "what --threshold measures: committed, used + held (money spent and money held for "
        "calls still running); used, settled spend only",
        shown="committed",
        choices=list(policies.BASES),
    ),
    Option(
        "mode",
        "enforce refuses what does not fit; observe admits it and answers would_refuse",
        shown="enforce",
        choices=list(policies.MODES),
    ),
    Option(
        "admissions_per_minute",
        "at most this many Reserves admitted a minute (sliding); not given: no bound",
        convert=int,
        metavar="N",
    ),
    Option(
        "units_per_minute",
        "at most this much held a minute, in the unit (sliding); not given: no bound",
        convert=int,
        metavar="N",
    ),
)
# Its run limits (issue 47): refused TOO_MANY_OPEN, ADMISSIONS_SPENT and CLOSED.
RUN_OPTIONS = (
    Option(
        "max_open_holds",
        "at most this many holds open at once (past it a Reserve is refused TOO_MANY_OPEN "
        "until one closes); not given: no bound",
        convert=int,
        metavar="N",
    ),
    Option(
        "max_admissions",
        "at most this many Reserves admitted a period (then ADMISSIONS_SPENT); not given: no bound",
        convert=int,
        metavar="N",
    ),
    Option(
        "closes_at",
        "from this time on every Reserve is refused CLOSED (ISO 8601, as "
        "2026-12-31T18:00:00Z; UTC when it names no zone); not given: never closes",
        convert=_moment,
        metavar="ISO8601",
    ),
)
REPLACE = Option(
    "replace",
    "on a budget that exists, set every field even where that drops its period, "
    "thresholds, mode or rate windows (without it, such a put refuses and names them)",
    default=False,
    action="store_true",
)
# update's flags: put's, none with a default (a flag not given, None or for a repeatable
# one empty, is not changed), and those that clear a setting.
UPDATE_OPTIONS = (
    *(Option(o.name, o.help, default=() if o.action == "append" else None, convert=o.convert,
             choices=o.choices, action=o.action, metavar=o.metavar)
      for o in (*PUT_OPTIONS, *POLICY_OPTIONS, *RUN_OPTIONS)),
    Option("until", "with --limit: the limit is temporary, in force until this time (ISO "
           "8601; UTC when it names no zone), then the limit before it again",
           convert=_moment, metavar="ISO8601"),
    Option("reason", "with --limit: why the limit changes (the ledger and notice say it)",
           metavar="TEXT"),
    Option("unlimited", "clear the limit: the budget becomes unlimited", default=False,
           action="store_true"),
    Option("no_thresholds", "clear every threshold", default=False, action="store_true"),
    Option(
        "clear",
        "clear this setting to its default (as put without its flag); repeat for more",
        default=(),
        choices=CLEARABLE,
        action="append",
        metavar="FIELD",
    ),
)  # fmt: skip
# One or the other.
LIST_OPTIONS = (
    Option("prefix", "only budgets whose id starts with this", default=""),
    Option("account", "an account's billing-cycle budgets, newest first (ListCycles)"),
)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark budgets` and its verbs."""
    budgets = commands.add_parser("budgets", help="put, get, list and delete budgets (Admin)")
    verbs = budgets.add_subparsers(dest="verb", required=True)
    put = verbs.add_parser(
        "put",
        help="create a budget or replace its settings; a setting not given takes its "
        "default (no --limit: unlimited; no --period: never resets; no --mode: enforce); "
        "on an existing budget it refuses to drop a period, thresholds, mode or rate "
        "windows without --replace (to change one setting: budgets update)",
    )
    put.add_argument("budget_id")
    options.add_options(put, (*PUT_OPTIONS, *POLICY_OPTIONS, *RUN_OPTIONS, REPLACE))
    put.set_defaults(run=put_budget)
    update = verbs.add_parser(
        "update",
        help="change only the settings named (UpdateBudget); every other setting stays",
    )
    update.add_argument("budget_id")
    options.add_options(update, UPDATE_OPTIONS)
    update.set_defaults(run=update_budget)
    get = verbs.add_parser("get", help="a budget's settings and state")
    get.add_argument("budget_id")
    get.set_defaults(run=get_budget)
    listing = verbs.add_parser(
        "list", help="every budget in id order, those under a prefix, or an account's cycles"
    )
    options.add_options(listing.add_mutually_exclusive_group(), LIST_OPTIONS)
    listing.set_defaults(run=list_budgets)
    delete = verbs.add_parser(
        "delete", help="archive a budget with no open holds; its holds and ledger stay"
    )
    delete.add_argument("budget_id")
    delete.set_defaults(run=delete_budget)
    for verb in (put, update, get, listing, delete):
        add_admin_arguments(verb)


def put_request(args: argparse.Namespace) -> pb.PutBudgetRequest:
    """The PutBudgetRequest the put (or update) command's flags describe: a flag not given
    (None) leaves its field unset."""
    request = pb.PutBudgetRequest(budget_id=args.budget_id, unit=args.unit or "")
    if args.limit is not None:
        request.limit = args.limit
    if args.default_estimate is not None:
        request.default_estimate = args.default_estimate
    if args.estimate_policy:
        request.estimate_policy = ESTIMATE_POLICIES[args.estimate_policy]
    if args.escrow_bps is not None:
        request.escrow_bps = args.escrow_bps
    if args.overage_policy:
        request.overage_policy = OVERAGE_POLICIES[args.overage_policy]
    if args.overage_limit is not None:
        request.overage_limit = args.overage_limit
    if args.period:
        request.period = policies.PERIODS[args.period]  # type: ignore[assignment]
    if args.timezone is not None:
        request.timezone = args.timezone
    if args.period_anchor is not None:
        request.period_anchor = args.period_anchor
    request.threshold_bps.extend(args.threshold or ())
    if args.threshold_basis:
        request.threshold_basis = policies.BASES[args.threshold_basis]  # type: ignore[assignment]
    if args.mode:
        request.mode = policies.MODES[args.mode]  # type: ignore[assignment]
    if args.admissions_per_minute is not None:
        request.admissions_per_minute = args.admissions_per_minute
    if args.units_per_minute is not None:
        request.units_per_minute = args.units_per_minute
    if args.max_open_holds is not None:
        request.max_open_holds = args.max_open_holds
    if args.max_admissions is not None:
        request.max_admissions = args.max_admissions
    if args.closes_at is not None:
        request.closes_at.FromDatetime(args.closes_at)
    return request


def dropped(current: pb.BudgetState, put: pb.PutBudgetRequest) -> list[str]:
    """What of current's period, thresholds (and their basis), mode, rate windows, run limits
    and temporary limit put would reset to its default or end, each as the operator reads
    it; none when put names them all (or names others in their place)."""
    found = []
    calendar = (current.period, current.timezone, current.period_anchor)
    if any(now and not then for now, then in zip(
        calendar, (put.period, put.timezone, put.period_anchor), strict=True
    )):  # fmt: skip
        found.append(f"period {policies.period_text(*calendar)}")
    if current.threshold_bps and not put.threshold_bps:
        found.append(f"thresholds {','.join(policies.percents(current.threshold_bps))}")
    if current.threshold_basis == pb.THRESHOLD_BASIS_USED and not put.threshold_basis:
        found.append("threshold basis used")
    if current.mode == pb.BUDGET_MODE_OBSERVE and not put.mode:
        found.append("mode observe")
    windows = [
        f"{name} {getattr(current, name):,}"
        for name in ("admissions_per_minute", "units_per_minute")
        if current.HasField(name) and not put.HasField(name)
    ]
    if windows:
        found.append("windows " + ", ".join(windows))
    runs = [
        f"{name} {getattr(current, name):,}"
        for name in ("max_open_holds", "max_admissions")
        if current.HasField(name) and not put.HasField(name)
    ]
    if current.HasField("closes_at") and not put.HasField("closes_at"):
        runs.append(f"closes_at {current.closes_at.ToDatetime(tzinfo=UTC).isoformat()}")
    if runs:
        found.append("run limits " + ", ".join(runs))
    if current.HasField("limit_until"):
        # A put of another limit ends a temporary one (core.puts): say so before it does.
        until = current.limit_until.ToDatetime(tzinfo=UTC).isoformat()
        if not put.HasField("limit") or put.limit != current.limit:
            found.append(f"the temporary limit until {until}")
    return found


def put_budget(args: argparse.Namespace) -> str:
    request = put_request(args)
    with Admin(access_from(args)) as admin:
        if not args.replace:
            current = existing(admin, args.budget_id)
            drops = dropped(current, request) if current is not None else []
            if drops:
                raise OpsError(
                    f"budget {args.budget_id!r}: this put would drop {', '.join(drops)}; "
                    "name them, use `budgets update`, or give --replace"
                )
        state = admin.call("PutBudget", request, pb.BudgetState)
    return show([state], args.output, state, detail=True)


def existing(admin: Admin, budget_id: str) -> pb.BudgetState | None:
    """The budget as GetBudget answers it; None when there is none."""
    try:
        return admin.call("GetBudget", pb.GetBudgetRequest(budget_id=budget_id), pb.BudgetState)
    except OpsError as error:
        if str(error).startswith(f"NOT_FOUND {Reason.BUDGET_NOT_FOUND.value}:"):
            return None
        raise


def update_request(args: argparse.Namespace) -> pb.UpdateBudgetRequest:
    """The UpdateBudgetRequest of the update command's flags: the fields they set, and
    those they clear, named in its mask; OpsError when they name none, or one twice."""
    given = put_request(args)
    flags = {
        "limit": args.limit is not None,
        "unit": args.unit is not None,
        "default_estimate": args.default_estimate is not None,
        "estimate_policy": args.estimate_policy is not None,
        "escrow_bps": args.escrow_bps is not None,
        "overage_policy": args.overage_policy is not None,
        "overage_limit": args.overage_limit is not None,
        "period": args.period is not None,
        "timezone": args.timezone is not None,
        "period_anchor": args.period_anchor is not None,
        "threshold_bps": bool(args.threshold),
        "mode": args.mode is not None,
        "admissions_per_minute": args.admissions_per_minute is not None,
        "units_per_minute": args.units_per_minute is not None,
        "threshold_basis": args.threshold_basis is not None,
        "max_open_holds": args.max_open_holds is not None,
        "max_admissions": args.max_admissions is not None,
        "closes_at": args.closes_at is not None,
    }
    named = [name for name, on in flags.items() if on]
    cleared = list(args.clear or ())
    cleared += ["limit"] if args.unlimited else []
    cleared += ["threshold_bps"] if args.no_thresholds else []
    both = sorted(set(named) & set(cleared))
    if both:
        raise OpsError(f"{both[0]}: both set and cleared; give one or the other")
    paths = sorted(set(named) | set(cleared))
    if not paths:
        raise OpsError("name a setting to change (a put flag, --unlimited, --clear FIELD)")
    request = pb.UpdateBudgetRequest(budget=given, reason=args.reason or "")
    request.update_mask.paths.extend(paths)
    if args.until is not None:
        request.limit_until.FromDatetime(args.until)
    return request


def update_budget(args: argparse.Namespace) -> str:
    request = update_request(args)
    with Admin(access_from(args)) as admin:
        state = admin.call("UpdateBudget", request, pb.BudgetState)
    return show([state], args.output, state, detail=True)


def get_budget(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        state = admin.call(
            "GetBudget", pb.GetBudgetRequest(budget_id=args.budget_id), pb.BudgetState
        )
    return show([state], args.output, state, detail=True)


def list_budgets(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        if args.account:
            cycles = admin.call(
                "ListCycles", pb.ListCyclesRequest(account=args.account), pb.ListCyclesResponse
            )
            return show(list(cycles.cycles), args.output, cycles)

        def fetch(token: str) -> tuple[list[pb.BudgetState], str]:
            request = pb.ListBudgetsRequest(
                prefix=args.prefix, page_size=limits.page_size_max, page_token=token
            )
            page = admin.call("ListBudgets", request, pb.ListBudgetsResponse)
            return list(page.budgets), page.next_page_token

        budgets, rest = follow_pages(fetch, "budgets")
    answer = pb.ListBudgetsResponse(budgets=budgets, next_page_token=rest)
    return show(budgets, args.output, answer)


def delete_budget(args: argparse.Namespace) -> str:
    request = pb.DeleteBudgetRequest(budget_id=args.budget_id)
    with Admin(access_from(args)) as admin:
        state = admin.call("DeleteBudget", request, pb.BudgetState)
    return show([state], args.output, state)


def show(
    states: Sequence[pb.BudgetState], output: str, answer: Message, *, detail: bool = False
) -> str:
    """The answer as one JSON document, or its budgets as a table (detail: one budget's,
    its latest refusal's time beside its count)."""
    if output == "json":
        return render.as_json(answer)
    now = datetime.now(UTC)
    return render.table(HEADERS, [row(state, now, detail) for state in states], right=AMOUNTS)


def row(state: pb.BudgetState, now: datetime, detail: bool = False) -> list[str]:
    """A budget's line of the table at now."""
    unit = state.unit

    def optional(field: str, absent: str) -> str:
        return render.amount(getattr(state, field), unit) if state.HasField(field) else absent

    return [
        state.budget_id,
        unit,
        limit(state),
        render.amount(state.used, unit),
        render.amount(state.held, unit),
        optional("remaining", render.NONE),
        open_holds(state),
        policy(state),
        f"{state.escrow_bps / 100:g}%" if state.escrow_bps else render.NONE,
        status(state, now),
        policies.mode_name(state.mode),
        policies.period_text(state.period, state.timezone, state.period_anchor),
        render.timestamp(state.period_start),
        render.timestamp(state.resets_at),
        ",".join(policies.percents(state.threshold_bps)) or render.NONE,
        policies.basis_name(state.threshold_basis),
        rate(state),
        refusals(state, detail),
        admissions(state),
        render.timestamp(state.closes_at),
    ]


def limit(state: pb.BudgetState) -> str:
    """The limit, and a temporary one's end, the limit after it and why: `500 until
    2026-12-05T00:00:00Z, then 100: quarter end`."""
    unit = state.unit

    def amount(field: str) -> str:
        return render.amount(getattr(state, field), unit) if state.HasField(field) else "unlimited"

    text = amount("limit")
    if not state.HasField("limit_until"):
        return text
    text += f" until {render.timestamp(state.limit_until)}, then {amount('limit_after')}"
    return f"{text}: {state.limit_reason}" if state.limit_reason else text


def refusals(state: pb.BudgetState, detail: bool) -> str:
    """Reserves refused for want of room this period; with detail, and the latest's time."""
    count = f"{state.refusals:,}"
    if not detail or not state.refusals:
        return count
    return f"{count}, last {render.timestamp(state.last_refused_at)}"


def open_holds(state: pb.BudgetState) -> str:
    """The holds open now, of its max_open_holds when it has one."""
    count = f"{state.open_reservations:,}"
    return f"{count}/{state.max_open_holds:,}" if state.HasField("max_open_holds") else count


def admissions(state: pb.BudgetState) -> str:
    """The Reserves admitted this period, of its max_admissions when it has one."""
    count = f"{state.admissions:,}"
    return f"{count}/{state.max_admissions:,}" if state.HasField("max_admissions") else count


def rate(state: pb.BudgetState) -> str:
    """The budget's rate windows: what it admits at most a minute, or a dash."""
    admissions = state.admissions_per_minute if state.HasField("admissions_per_minute") else None
    units = state.units_per_minute if state.HasField("units_per_minute") else None
    return ", ".join(policies.rate_parts(admissions, units, state.unit)) or render.NONE


def policy(state: pb.BudgetState) -> str:
    """hard, or soft with how far past the limit it may go."""
    if state.overage_policy != pb.OVERAGE_POLICY_SOFT:
        return "hard"
    if state.HasField("overage_limit"):
        return f"soft +{render.amount(state.overage_limit, state.unit)}"
    return "soft"


def status(state: pb.BudgetState, now: datetime) -> str:
    """What an operator should notice at now: archived, a limit of 0 (zero-limit: it
    refuses every Reserve that would hold anything), exceeded, in overage, refusing
    (core.refusing: refused for want of room this period, lately or with nothing left);
    else ok."""
    flags = [
        name
        for name, on in (
            ("archived", state.HasField("archived_at")),
            ("zero-limit", state.HasField("limit") and state.limit == 0),
            ("exceeded", state.exceeded),
            ("overage", state.HasField("overage_since")),
            ("refusing", is_refusing(state, now)),
        )
        if on
    ]
    return ",".join(flags) or "ok"


def is_refusing(state: pb.BudgetState, now: datetime) -> bool:
    """core.refusing's rule on a BudgetState."""
    last = (
        state.last_refused_at.ToDatetime(tzinfo=UTC) if state.HasField("last_refused_at") else None
    )
    remaining = state.remaining if state.HasField("remaining") else None
    soft = state.overage_policy == pb.OVERAGE_POLICY_SOFT
    return refusing.refusing(state.refusals, remaining, last, now, soft=soft)
