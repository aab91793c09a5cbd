"""`earmark events list`: the budget notices the batches recorded (a threshold crossed, a
SOFT budget past its limit, a hold in doubt), newest first, and what the deliverer did
with each: delivered when, tried how often and when next, given up, the last error.

No Admin RPC answers the events, so this reads the database as `earmark audit` does:
--database-url, or the embedded PostgreSQL running on the data dir."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from earmark import limits, options
from earmark.errors import EarmarkError
from earmark.ops import connect, render
from earmark.ops.audit import add_database_arguments, audit_url
from earmark.ops.connect import OpsError
from earmark.options import Option

if TYPE_CHECKING:
    from earmark.store.events import ListedEvent

HEADERS = ("SEQ", "ID", "KIND", "BUDGET", "CREATED", "STATE", "ATTEMPTS", "LAST ERROR")
KINDS = (
    "budget.threshold_crossed",
    "budget.exceeded",
    "budget.refusing",
    "hold.in_doubt",
    "price.changed",
    "budget.limit_changed",
)
# The notices about no one budget (budget_id ''): a price concerns every budget pricing it.
UNBUDGETED_KINDS = ("price.changed",)
# store/events.py's states, named here too so that the parser is built without the
# server's packages (asyncpg), which cli.py checks for only when the command runs.
STATES = ("pending", "retrying", "delivered", "failed")


def _positive_count(text: str) -> int:
    count = int(text)
    if not 1 <= count <= limits.events_listed_max:
        raise argparse.ArgumentTypeError(f"not in [1, {limits.events_listed_max}]")
    return count


LIST_OPTIONS = (
    Option("budget", "only this budget's notices"),
    Option("kind", "only notices of this kind", shown="all", choices=KINDS),
    Option(
        "state",
        "only notices in this state: pending (not tried yet), retrying, delivered, failed "
        "(given up)",
        shown="all",
        choices=STATES,
    ),
    Option(
        "limit",
        "at most this many, newest first",
        default=limits.events_listed_default,
        shown=f"{limits.events_listed_default}, at most {limits.events_listed_max}",
        convert=_positive_count,
    ),
)
OUTPUT = replace(connect.OUTPUT, help="a table, or one JSON document with each notice's payload")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark events list`."""
    events = commands.add_parser(
        "events",
        help="budget notices and their delivery to --notify-url (reads the database)",
    )
    verbs = events.add_subparsers(dest="verb", required=True)
    listing = verbs.add_parser(
        "list",
        help="the newest notices and their delivery; reads the database directly, as "
        "`earmark audit` does (no Admin call answers them)",
    )
    options.add_options(listing, LIST_OPTIONS)
    add_database_arguments(listing)
    options.add_options(listing, (OUTPUT,))
    listing.set_defaults(run=list_events)


def list_events(args: argparse.Namespace) -> str:
    # The server's packages (asyncpg), imported only when the command runs: cli.py checks
    # they are installed first.
    from earmark.store.events import events_in_database

    url = audit_url(args.database_url, args.data_dir)
    try:
        found = asyncio.run(
            events_in_database(
                url, budget_id=args.budget, kind=args.kind, state=args.state, limit=args.limit
            )
        )
    except EarmarkError as error:
        raise OpsError(error.message) from None
    if args.output == "json":
        return json.dumps({"events": [as_dict(event) for event in found]}, indent=2)
    if not found:
        return "no notices" + ("" if args.state is None else f" {args.state}")
    return render.table(HEADERS, [row(event) for event in found], right=("SEQ", "ATTEMPTS"))


def _instant(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def state(event: ListedEvent) -> str:
    """The state with its time: when it was delivered, when it was given up, when it is
    tried next, or pending (posted at the deliverer's next pass)."""
    at = {
        "delivered": event.delivered_at,
        "failed": event.failed_at,
        "retrying": event.next_attempt_at,
    }.get(event.state)
    when = _instant(at)
    if when is None:
        return event.state
    return f"retrying, next {when}" if event.state == "retrying" else f"{event.state} {when}"


def row(event: ListedEvent) -> list[str]:
    return [
        str(event.seq),
        event.event_id,
        event.kind,
        event.budget_id or render.NONE,
        _instant(event.created_at) or render.NONE,
        state(event),
        str(event.attempts),
        event.last_error or render.NONE,
    ]


def as_dict(event: ListedEvent) -> dict[str, object]:
    return {
        "seq": event.seq,
        "event_id": event.event_id,
        "kind": event.kind,
        "budget_id": event.budget_id,
        "created_at": _instant(event.created_at),
        "state": event.state,
        "attempts": event.attempts,
        "next_attempt_at": _instant(event.next_attempt_at),
        "delivered_at": _instant(event.delivered_at),
        "failed_at": _instant(event.failed_at),
        "last_error": event.last_error,
        "payload": json.loads(event.payload),
    }
