"""`earmark usage ACCOUNT`: per feature and billing period, the account's used total the
meter outbox holds, what was last reported to the provider's meter, and the cycle budget's
limit, used and held. With the stand-in provider (--limits-provider file) nothing leaves
the sidecar, and this is where to see what would have been reported.

No Admin RPC answers the outbox, so this reads the database as `earmark audit` does:
--database-url, or the embedded PostgreSQL running on the data dir."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, time
from typing import TYPE_CHECKING

from earmark import options
from earmark.errors import EarmarkError, InvalidArgument
from earmark.ops import render
from earmark.ops.audit import add_database_arguments, audit_url
from earmark.ops.connect import OUTPUT, OpsError

if TYPE_CHECKING:
    from earmark.store.usage import PeriodUsage

HEADERS = ("FEATURE", "PERIOD", "UNIT", "LIMIT", "USED", "HELD", "METERED", "REPORTED",
           "REPORTED AT", "STATE")  # fmt: skip
AMOUNTS = ("LIMIT", "USED", "HELD", "METERED", "REPORTED")


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark usage`."""
    usage = commands.add_parser(
        "usage",
        help="an account's used totals per feature and billing period, and what was "
        "reported to the provider's meter (reads the database)",
    )
    usage.add_argument("account", help="the account, as a Reserve by account names it")
    add_database_arguments(usage)
    options.add_options(usage, (replace(OUTPUT, help="a table, or one JSON document"),))
    usage.set_defaults(run=show_usage)


def show_usage(args: argparse.Namespace) -> str:
    # The server's packages (asyncpg), imported only when the command runs: cli.py checks
    # they are installed first.
    from earmark import validate
    from earmark.store.usage import usage_in_database

    try:
        account = validate.account(args.account)
    except InvalidArgument as error:
        raise OpsError(error.message) from None
    url = audit_url(args.database_url, args.data_dir)
    try:
        periods = asyncio.run(usage_in_database(url, account))
    except EarmarkError as error:
        raise OpsError(error.message) from None
    if args.output == "json":
        return json.dumps({"account": account, "periods": [as_dict(p) for p in periods]}, indent=2)
    if not periods:
        return f"account {account!r} has no billing-cycle budget yet"
    return render.table(HEADERS, [row(p) for p in periods], right=AMOUNTS)


def _instant(at: datetime | None) -> str | None:
    return None if at is None else at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _day_or_instant(at: datetime) -> str:
    """A period's bound: its day when it starts at midnight UTC (the usual case)."""
    at = at.astimezone(UTC)
    return at.strftime("%Y-%m-%d") if at.time() == time(0) else at.strftime("%Y-%m-%dT%H:%M:%SZ")


def state(period: PeriodUsage) -> str:
    """reported (the meter has the newest total), pending (a newer one waits), retrying
    after failed reports, or a dash when nothing was settled in the period yet."""
    if period.metered is None:
        return render.NONE
    if not period.pending:
        return "reported"
    return f"retrying ({period.attempts} failed)" if period.attempts else "pending"


def row(period: PeriodUsage) -> list[str]:
    unit = period.unit

    def optional(value: int | None) -> str:
        return render.NONE if value is None else render.amount(value, unit)

    return [
        period.feature,
        f"{_day_or_instant(period.period_start)}..{_day_or_instant(period.period_end)}",
        unit,
        "unlimited" if period.limit is None else render.amount(period.limit, unit),
        render.amount(period.used, unit),
        render.amount(period.held, unit),
        optional(period.metered),
        optional(period.reported),
        _instant(period.reported_at) or render.NONE,
        state(period),
    ]


def as_dict(period: PeriodUsage) -> dict[str, object]:
    return {
        "feature": period.feature,
        "budget_id": period.budget_id,
        "period_start": _instant(period.period_start),
        "period_end": _instant(period.period_end),
        "unit": period.unit,
        "limit": period.limit,
        "used": period.used,
        "held": period.held,
        "metered": period.metered,
        "metered_at": _instant(period.metered_at),
        "reported": period.reported,
        "reported_at": _instant(period.reported_at),
        "state": state(period),
    }
