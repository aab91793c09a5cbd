"""`earmark holds list|resolve|release` and `earmark ledger BUDGET`: the operator's view of
holds and of a budget's ledger, through Admin, every page of a listing followed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TypeVar

from earmark import limits, options
from earmark.ops import render
from earmark.ops.connect import Admin, OpsError, access_from, add_admin_arguments
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

STATES = {
    "held": pb.RESERVATION_STATE_HELD,
    "settled": pb.RESERVATION_STATE_SETTLED,
    "expired": pb.RESERVATION_STATE_EXPIRED,
    "in-doubt": pb.RESERVATION_STATE_IN_DOUBT,
}
# The states `earmark holds list` with no budget lists across every budget.
ACROSS_STATES = ("held", "in-doubt")
R = TypeVar("R")
USAGE_FIELDS = (
    "input_tokens", "output_tokens", "cached_input_tokens", "cache_write_input_tokens", "requests",
)  # fmt: skip


STATE = Option(
    "state", "only this state", shown="all; required with no budget", choices=list(STATES)
)
RESOLVE_OPTIONS = (
    Option("used", "what was spent, in the budget's unit", convert=int),
    *(Option(field, default=0, convert=int) for field in USAGE_FIELDS),
    Option("provider", "with the usage flags", default=""),
    Option("model", "with the usage flags", default=""),
)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark holds` and its verbs, and `earmark ledger`."""
    holds = commands.add_parser("holds", help="list, resolve and release holds (Admin)")
    verbs = holds.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser(
        "list",
        help="a budget's holds, its own and those nested under it; with no budget, every "
        "budget's holds in --state (held or in-doubt), oldest first",
    )
    listing.add_argument("budget_id", nargs="?", default="")
    options.add_options(listing, (STATE,))
    listing.set_defaults(run=list_holds)
    resolve = verbs.add_parser(
        "resolve", help="settle an in-doubt hold at what the provider billed"
    )
    resolve.add_argument("reservation_id")
    options.add_options(resolve, RESOLVE_OPTIONS)
    resolve.set_defaults(run=resolve_hold)
    release = verbs.add_parser(
        "release", help="close a hold nobody will settle: it keeps what was charged"
    )
    release.add_argument("reservation_id")
    release.set_defaults(run=release_hold)
    ledger = commands.add_parser("ledger", help="a budget's ledger, oldest entry first (Admin)")
    ledger.add_argument("budget_id")
    ledger.set_defaults(run=list_ledger)
    for command in (listing, resolve, release, ledger):
        add_admin_arguments(command)


def follow_pages(fetch: Callable[[str], tuple[list[R], str]], what: str) -> tuple[list[R], str]:
    """Every row of a listing, page token after page token, for at most cli_pages_max
    pages; returns the rows and the token where it stopped (empty: the end), and says on
    stderr when more remain."""
    rows: list[R] = []
    token = ""
    for _ in range(limits.cli_pages_max):
        page, token = fetch(token)
        rows.extend(page)
        if not token:
            return rows, ""
    print(
        f"earmark: stopped after {limits.cli_pages_max} pages ({len(rows):,} {what}); more remain",
        file=sys.stderr,
    )
    return rows, token


def budget_unit(admin: Admin, budget_id: str) -> str:
    """The unit a budget's amounts are in (and NOT_FOUND for a budget that is not there)."""
    return admin.call("GetBudget", pb.GetBudgetRequest(budget_id=budget_id), pb.BudgetState).unit


def list_holds(args: argparse.Namespace) -> str:
    state = STATES[args.state] if args.state else pb.RESERVATION_STATE_UNSPECIFIED
    if not args.budget_id and args.state not in ACROSS_STATES:
        raise OpsError(
            "give a budget, or --state held or --state in-doubt to list every budget's holds"
        )
    with Admin(access_from(args)) as admin:
        units: dict[str, str] = {}

        def unit(budget_id: str) -> str:
            """The budget's unit, asked once per budget."""
            if budget_id not in units:
                units[budget_id] = budget_unit(admin, budget_id)
            return units[budget_id]

        if args.budget_id:
            unit(args.budget_id)

        def fetch(token: str) -> tuple[list[pb.Hold], str]:
            request = pb.ListHoldsRequest(
                budget_id=args.budget_id, state=state, page_size=limits.page_size_max,
                page_token=token,
            )  # fmt: skip
            page = admin.call("ListHolds", request, pb.ListHoldsResponse)
            return list(page.holds), page.next_page_token

        holds, rest = follow_pages(fetch, "holds")
        if args.output == "json":
            return render.as_json(pb.ListHoldsResponse(holds=holds, next_page_token=rest))
        # A budget's listing is in its unit (nested holds share it); across budgets, each
        # hold's amounts are in its own budget's.
        unit_of = {h.reservation_id: unit(args.budget_id or h.budget_id) for h in holds}
    headers = ("RESERVATION", "BUDGET", "STATE", "AMOUNT", "CHARGED", "PHASE", "OWNER", "JOB",
               "KEY", "EXPIRES")  # fmt: skip
    rows = [
        [
            hold.reservation_id,
            hold.budget_id + (f" +{len(hold.also_budget_ids)}" if hold.also_budget_ids else ""),
            # An operator's release closes a hold as EXPIRED; Hold.released tells them apart.
            (
                "released"
                if hold.released
                else render.enum_name(pb.ReservationState.Name(hold.state), "RESERVATION_STATE_")
            )
            + (" (dispatched)" if hold.dispatched else ""),
            render.amount(hold.amount, unit_of[hold.reservation_id]),
            render.amount(hold.charged, unit_of[hold.reservation_id]),
            render.enum_name(pb.Phase.Name(hold.phase), "PHASE_"),
            hold.owner or render.NONE,
            hold.job or render.NONE,
            hold.idempotency_key,
            render.timestamp(hold.expires_at),
        ]
        for hold in holds
    ]
    return render.table(headers, rows, right=("AMOUNT", "CHARGED"))


def list_ledger(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        unit = budget_unit(admin, args.budget_id)

        def fetch(token: str) -> tuple[list[pb.LedgerEntry], str]:
            request = pb.ListLedgerRequest(
                budget_id=args.budget_id, page_size=limits.page_size_max, page_token=token
            )
            page = admin.call("ListLedger", request, pb.ListLedgerResponse)
            return list(page.entries), page.next_page_token

        entries, rest = follow_pages(fetch, "entries")
    if args.output == "json":
        return render.as_json(pb.ListLedgerResponse(entries=entries, next_page_token=rest))
    rows = [
        [
            str(entry.entry_id),
            render.timestamp(entry.at),
            entry.kind,
            entry.reservation_id or render.NONE,
            render.delta(entry.held_delta, unit),
            render.delta(entry.used_delta, unit),
        ]
        for entry in entries
    ]
    headers = ("ENTRY", "AT", "KIND", "RESERVATION", "HELD", "USED")
    return render.table(headers, rows, right=("ENTRY", "HELD", "USED"))


def resolve_request(args: argparse.Namespace) -> pb.ResolveHoldRequest:
    """--used, or the usage the provider reported: one of them, so that a forgotten flag
    never resolves a hold at 0."""
    usage = {field: getattr(args, field) for field in USAGE_FIELDS}
    by_usage = any(usage.values()) or bool(args.provider or args.model)
    if (args.used is None) == (not by_usage):
        raise OpsError("give --used, or the usage flags (--input-tokens, ...), not both")
    request = pb.ResolveHoldRequest(reservation_id=args.reservation_id)
    if args.used is not None:
        request.used = args.used
    else:
        request.usage.CopyFrom(pb.TokenUsage(**usage, provider=args.provider, model=args.model))
    return request


def resolve_hold(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        answer = admin.call("ResolveHold", resolve_request(args), pb.SettleResponse)
    return settled(args.reservation_id, answer, args.output)


def release_hold(args: argparse.Namespace) -> str:
    request = pb.ReleaseHoldRequest(reservation_id=args.reservation_id)
    with Admin(access_from(args)) as admin:
        answer = admin.call("ReleaseHold", request, pb.SettleResponse)
    return settled(args.reservation_id, answer, args.output)


def settled(reservation_id: str, answer: pb.SettleResponse, output: str) -> str:
    """A closed hold: what it charged and returned, in the budget's unit."""
    if output == "json":
        return render.as_json(answer)
    headers = ("RESERVATION", "STATE", "CHARGED", "RELEASED", "OVERSHOOT")
    row = [
        reservation_id,
        render.enum_name(pb.ReservationState.Name(answer.state), "RESERVATION_STATE_"),
        f"{answer.charged:,}",
        f"{answer.released:,}",
        f"{answer.overshoot:,}",
    ]
    return render.table(headers, [row], right=("CHARGED", "RELEASED", "OVERSHOOT"))
