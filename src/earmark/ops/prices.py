"""`earmark prices put|list`: the price book, through Admin. Rates are micro-dollars per
million tokens, shown as dollars."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Protocol

from google.protobuf.timestamp_pb2 import Timestamp

from earmark import options
from earmark.ops import price_import, render
from earmark.ops.connect import Admin, OpsError, access_from, add_admin_arguments
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

RATES = (
    ("input_usd_micros_per_mtok", "micro-dollars per million input tokens"),
    ("output_usd_micros_per_mtok", "micro-dollars per million output tokens"),
    ("cached_input_usd_micros_per_mtok", "per million cached input tokens (0: as input)"),
    ("request_usd_micros", "a flat fee per provider call"),
    (
        "cache_write_usd_micros_per_mtok",
        "per million input tokens written to the cache (0: as input)",
    ),
    (
        "cache_write_long_usd_micros_per_mtok",
        "per million input tokens written to the cache for an hour (0: as a cache write)",
    ),
    ("max_output_tokens", "the most output tokens one call may produce (0: unknown)"),
)
HEADERS = ("PROVIDER", "MODEL", "TIER", "VERSION", "FROM", "TO", "INPUT/MTOK", "OUTPUT/MTOK",
           "CACHED/MTOK", "CACHE WRITE/MTOK", "PER CALL", "MAX OUTPUT", "INPUT ABOVE", "WINDOW",
           "SOURCE")  # fmt: skip
AMOUNTS = ("VERSION", "INPUT ABOVE", "INPUT/MTOK", "OUTPUT/MTOK", "CACHED/MTOK",
           "CACHE WRITE/MTOK", "PER CALL", "MAX OUTPUT")  # fmt: skip


PUT_OPTIONS = (
    *(Option(field, meaning, default=0, convert=int) for field, meaning in RATES),
    Option("effective_from", "ISO 8601, as 2026-01-01T00:00:00Z", default="", shown="now"),
    Option("effective_to", "ISO 8601", default="", shown="until superseded"),
    Option("source", "where the rate was read (a URL)", default=""),
    Option(
        "daily_from_minute",
        "a daily window, minutes after midnight in --window-timezone",
        default=0,
        shown="0",
        convert=int,
    ),
    Option(
        "daily_to_minute",
        "(both 0: all day; from > to wraps)",
        default=0,
        shown="0",
        convert=int,
    ),
    Option("window_timezone", "the IANA zone the daily window is in", default="", shown="UTC"),
    Option(
        "input_tokens_above",
        "a prompt-length tier: for calls with more input tokens than this, all their tokens",
        default=0,
        shown="0: the base row",
        convert=int,
    ),
    Option(
        "service_tier",
        "the provider's service tier these rates are for",
        default="",
        shown="''",
    ),
    Option(
        "tool_fee",
        "a fee per server tool call, as web_search=10000 (repeatable)",
        default=(),
        action="append",
        metavar="KIND=MICROS",
    ),
)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark prices` and its verbs."""
    prices = commands.add_parser("prices", help="put and list model prices (Admin)")
    verbs = prices.add_subparsers(dest="verb", required=True)
    put = verbs.add_parser(
        "put", help="append a price version for a provider's model (versions never change)"
    )
    put.add_argument("provider")
    put.add_argument("model")
    options.add_options(put, PUT_OPTIONS)
    put.set_defaults(run=put_price)
    listing = verbs.add_parser("list", help="every version of every price, oldest first")
    options.add_options(listing, (Option("provider", default=""), Option("model", default="")))
    listing.set_defaults(run=list_prices)
    for verb in (put, listing):
        add_admin_arguments(verb)
    price_import.add_commands(verbs)


def timestamp(text: str, flag: str) -> Timestamp:
    """An ISO 8601 time (UTC when it names no zone) as a Timestamp; empty is now."""
    try:
        at = datetime.fromisoformat(text) if text else datetime.now(UTC)
    except ValueError:
        raise OpsError(f"{flag}: {text!r} is not an ISO 8601 time") from None
    stamp = Timestamp()
    stamp.FromDatetime(at if at.tzinfo else at.replace(tzinfo=UTC))
    return stamp


def put_request(args: argparse.Namespace) -> pb.PutPriceRequest:
    """The PutPriceRequest the put command's flags describe."""
    price = pb.Price(
        provider=args.provider,
        model=args.model,
        source=args.source,
        daily_from_minute=args.daily_from_minute,
        daily_to_minute=args.daily_to_minute,
        window_timezone=args.window_timezone,
        input_tokens_above=args.input_tokens_above,
        service_tier=args.service_tier,
        tool_usd_micros=tool_fees(args.tool_fee),
        **{field: getattr(args, field) for field, _ in RATES},
    )
    price.effective_from.CopyFrom(timestamp(args.effective_from, "--effective-from"))
    if args.effective_to:
        price.effective_to.CopyFrom(timestamp(args.effective_to, "--effective-to"))
    return pb.PutPriceRequest(price=price)


def tool_fees(given: list[str]) -> dict[str, int]:
    """--tool-fee KIND=MICROS flags as the price's map."""
    fees: dict[str, int] = {}
    for each in given:
        kind, _, micros = each.partition("=")
        if not kind or not micros.isdigit():
            raise OpsError(f"--tool-fee: {each!r} is not KIND=MICROS, as web_search=10000")
        fees[kind] = int(micros)
    return fees


def put_price(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        price = admin.call("PutPrice", put_request(args), pb.Price)
    return render.as_json(price) if args.output == "json" else table([price])


def list_prices(args: argparse.Namespace) -> str:
    request = pb.ListPricesRequest(provider=args.provider, model=args.model)
    with Admin(access_from(args)) as admin:
        answer = admin.call("ListPrices", request, pb.ListPricesResponse)
    return render.as_json(answer) if args.output == "json" else table(list(answer.prices))


class Windowed(Protocol):
    """A price version's daily window, on the wire or in the core's Price."""

    @property
    def daily_from_minute(self) -> int: ...
    @property
    def daily_to_minute(self) -> int: ...


def window(price: Windowed) -> str:
    """The daily window as HH:MM-HH:MM (minutes of the price's window_timezone), or all day."""
    if not price.daily_from_minute and not price.daily_to_minute:
        return "all day"
    start, end = divmod(price.daily_from_minute, 60), divmod(price.daily_to_minute, 60)
    return f"{start[0]:02d}:{start[1]:02d}-{end[0]:02d}:{end[1]:02d}"


def zoned_window(price: pb.Price) -> str:
    """The daily window with its zone (UTC when it names none), or all day."""
    daily = window(price)
    return daily if daily == "all day" else f"{daily} {price.window_timezone or 'UTC'}"


def table(prices: list[pb.Price]) -> str:
    rows = [
        [
            price.provider,
            price.model,
            price.service_tier or "default",
            str(price.version),
            render.timestamp(price.effective_from),
            render.timestamp(price.effective_to),
            render.dollars(price.input_usd_micros_per_mtok),
            render.dollars(price.output_usd_micros_per_mtok),
            render.dollars(price.cached_input_usd_micros_per_mtok)
            if price.cached_input_usd_micros_per_mtok
            else "as input",
            render.dollars(price.cache_write_usd_micros_per_mtok)
            if price.cache_write_usd_micros_per_mtok
            else "as input",
            render.dollars(price.request_usd_micros),
            str(price.max_output_tokens) if price.max_output_tokens else render.NONE,
            str(price.input_tokens_above),
            zoned_window(price),
            price.source or render.NONE,
        ]
        for price in prices
    ]
    return render.table(HEADERS, rows, right=AMOUNTS)
