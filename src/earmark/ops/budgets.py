"""`earmark budgets put|get|list|delete`: a budget's settings and state, through Admin.

`budgets list` lists every budget, or those whose id starts with `--prefix` (ListBudgets);
`budgets list --account A` lists an account's billing-cycle budgets (ListCycles). `put`
sets every field, its policies too (issue 34: period, thresholds, mode, rate windows): a
flag not given takes its default, as PutBudget does with a field not sent."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from google.protobuf.message import Message

from earmark import limits, options
from earmark.ops import policies, render
from earmark.ops.connect import Admin, access_from, add_admin_arguments
from earmark.ops.holds import follow_pages
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

OVERAGE_POLICIES = {"hard": pb.OVERAGE_POLICY_HARD, "soft": pb.OVERAGE_POLICY_SOFT}
ESTIMATE_POLICIES = {"median": pb.ESTIMATE_POLICY_MEDIAN, "p75": pb.ESTIMATE_POLICY_P75}
HEADERS = (
    "BUDGET", "UNIT", "LIMIT", "USED", "HELD", "REMAINING", "HOLDS", "POLICY", "ESCROW", "STATUS",
    "MODE", "PERIOD", "PERIOD START", "RESETS AT", "THRESHOLDS", "RATE",
)  # fmt: skip
AMOUNTS = ("LIMIT", "USED", "HELD", "REMAINING", "HOLDS")


def _threshold(text: str) -> int:
    """--threshold's percent, in basis points (argparse names the flag on an error)."""
    try:
        return policies.bps_of_percent(text)
    except policies.BadPercent as bad:
        raise argparse.ArgumentTypeError(str(bad)) from None


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
        "default (no --limit: unlimited; no --period: never resets; no --mode: enforce)",
    )
    put.add_argument("budget_id")
    options.add_options(put, (*PUT_OPTIONS, *POLICY_OPTIONS))
    put.set_defaults(run=put_budget)
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
    for verb in (put, get, listing, delete):
        add_admin_arguments(verb)


def put_request(args: argparse.Namespace) -> pb.PutBudgetRequest:
    """The PutBudgetRequest the put command's flags describe."""
    request = pb.PutBudgetRequest(budget_id=args.budget_id, unit=args.unit)
    if args.limit is not None:
        request.limit = args.limit
    if args.default_estimate is not None:
        request.default_estimate = args.default_estimate
    if args.estimate_policy:
        request.estimate_policy = ESTIMATE_POLICIES[args.estimate_policy]
    request.escrow_bps = args.escrow_bps
    if args.overage_policy:
        request.overage_policy = OVERAGE_POLICIES[args.overage_policy]
    if args.overage_limit is not None:
        request.overage_limit = args.overage_limit
    if args.period:
        request.period = policies.PERIODS[args.period]  # type: ignore[assignment]
    request.timezone = args.timezone
    request.period_anchor = args.period_anchor
    request.threshold_bps.extend(args.threshold)
    if args.mode:
        request.mode = policies.MODES[args.mode]  # type: ignore[assignment]
    if args.admissions_per_minute is not None:
        request.admissions_per_minute = args.admissions_per_minute
    if args.units_per_minute is not None:
        request.units_per_minute = args.units_per_minute
    return request


def put_budget(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        state = admin.call("PutBudget", put_request(args), pb.BudgetState)
    return show([state], args.output, state)


def get_budget(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        state = admin.call(
            "GetBudget", pb.GetBudgetRequest(budget_id=args.budget_id), pb.BudgetState
        )
    return show([state], args.output, state)


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


def show(states: Sequence[pb.BudgetState], output: str, answer: Message) -> str:
    """The answer as one JSON document, or its budgets as a table."""
    if output == "json":
        return render.as_json(answer)
    return render.table(HEADERS, [row(state) for state in states], right=AMOUNTS)


def row(state: pb.BudgetState) -> list[str]:
    """A budget's line of the table."""
    unit = state.unit

    def optional(field: str, absent: str) -> str:
        return render.amount(getattr(state, field), unit) if state.HasField(field) else absent

    return [
        state.budget_id,
        unit,
        optional("limit", "unlimited"),
        render.amount(state.used, unit),
        render.amount(state.held, unit),
        optional("remaining", render.NONE),
        f"{state.open_reservations:,}",
        policy(state),
        f"{state.escrow_bps / 100:g}%" if state.escrow_bps else render.NONE,
        status(state),
        policies.mode_name(state.mode),
        policies.period_text(state.period, state.timezone, state.period_anchor),
        render.timestamp(state.period_start),
        render.timestamp(state.resets_at),
        ",".join(policies.percents(state.threshold_bps)) or render.NONE,
        rate(state),
    ]


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


def status(state: pb.BudgetState) -> str:
    """What an operator should notice: archived, exceeded, in overage; else ok."""
    flags = [
        name
        for name, on in (
            ("archived", state.HasField("archived_at")),
            ("exceeded", state.exceeded),
            ("overage", state.HasField("overage_since")),
        )
        if on
    ]
    return ",".join(flags) or "ok"
