"""`earmark regions list`: budgets across regions (issue 48, docs/regions.md), through
Admin. At a budget's home, each region's share of it: what was granted, given or taken
back, used, the escrow still held for the region, its holds in doubt, the lease and when
the region last reached the home; in a region, its shares of budgets homed elsewhere,
with the room each may still admit."""

from __future__ import annotations

import argparse

from earmark import options
from earmark.ops import render
from earmark.ops.connect import Admin, access_from, add_admin_arguments
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

HEADERS = (
    "BUDGET", "REGION", "SIDE", "GRANTED", "RELEASED", "USED", "OUTSTANDING", "IN DOUBT",
    "RECLAIMED", "LEASE UNTIL", "HEARD AT",
)  # fmt: skip
AMOUNTS = ("GRANTED", "RELEASED", "USED", "OUTSTANDING", "IN DOUBT", "RECLAIMED")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark regions` and its verb."""
    regions = commands.add_parser(
        "regions",
        help="list the shares of budgets across regions: a home's regions' shares, or a "
        "region's shares of budgets homed elsewhere (Admin)",
    )
    verbs = regions.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser(
        "list",
        help="shares by budget then region (OUTSTANDING: at the home, the escrow held for "
        "the region; in a region, the room its share may still admit)",
    )
    options.add_options(listing, (Option("budget", "only this budget's shares", default=""),))
    listing.set_defaults(run=list_shares)
    add_admin_arguments(listing)


def list_shares(args: argparse.Namespace) -> str:
    """Every page of shares (or one budget's), as one table or one JSON document."""
    shares: list[pb.Share] = []
    after = ""
    with Admin(access_from(args)) as admin:
        while True:
            request = pb.ListSharesRequest(budget_id=args.budget, after_budget_id=after)
            answer = admin.call("ListShares", request, pb.ListSharesResponse)
            shares.extend(answer.shares)
            after = answer.next_budget_id
            if not after:
                break
    if args.output == "json":
        return render.as_json(pb.ListSharesResponse(shares=shares))
    return render.table(HEADERS, [row(s) for s in shares], right=AMOUNTS)


def row(share: pb.Share) -> list[str]:
    return [
        share.budget_id,
        share.region or render.NONE,
        "home" if share.home else "region",
        str(share.granted),
        str(share.released),
        str(share.used),
        str(share.outstanding),
        str(share.doubt),
        str(share.reclaimed),
        render.timestamp(share.lease_until),
        render.timestamp(share.heard_at),
    ]
