"""`earmark prices import` and `earmark prices check`: a price book that starts filled and
can be checked, against genai-prices (`pip install 'earmark[prices]'`).

Why genai-prices: it is a maintained, open database of LLM API prices (Pydantic's, on
PyPI) that ships its data inside the package, so a price is read from a pinned, reviewable
version rather than from a web page at run time (its auto-update is never started here),
and it carries what Earmark prices: input, output, cache reads, cache writes (5-minute and
1-hour), web search fees, service tiers as variants, and dated price changes.

What is imported for each model of the provider: the price in effect now (of dated prices,
the last one whose start has passed) as a version in effect from now, its service-tier
variants (OpenAI's priority and flex) as rows of their own tier, and a web search fee.
Skipped, and said so: prices by tiers of input length (Earmark has one rate a kind),
prices by audio, image or characters, and batch processing (not sent through Earmark).
A model whose book price in effect already equals what the database says is not put
again, so an import run twice changes nothing.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from earmark import options
from earmark.core.prices import tier
from earmark.ops import render
from earmark.ops.connect import Admin, Answer, OpsError, access_from, add_admin_arguments
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

PRICES_EXTRA = "pip install 'earmark[prices]'"
MICROS_PER_DOLLAR = Decimal(1_000_000)
# genai-prices' fields, by the Price field each is read into ($ per million tokens, or per
# thousand searches for the fee).
RATES = {
    "input_mtok": "input_usd_micros_per_mtok",
    "output_mtok": "output_usd_micros_per_mtok",
    "cache_read_mtok": "cached_input_usd_micros_per_mtok",
    "cache_write_mtok": "cache_write_usd_micros_per_mtok",
    "cache_write_1h_mtok": "cache_write_long_usd_micros_per_mtok",
}
SEARCH_FEE = "web_searches_kcount"
# What a book's price and the database's are compared on.
COMPARED = (*RATES.values(), "tool_usd_micros")
# The exit status of `earmark prices check` when the book and the database disagree.
DISAGREE_STATUS = 3


@dataclass
class Found:
    """What the database says of one (model, tier), as the Price to put, and why any of
    its prices were left out."""

    model: str
    tier: str
    price: pb.Price
    skipped: list[str] = field(default_factory=list)


def _database() -> Any:
    try:
        from genai_prices import data_snapshot
    except ImportError:
        raise OpsError(f"genai-prices is not installed: {PRICES_EXTRA}") from None
    return data_snapshot.get_snapshot()


def _version() -> str:
    from importlib.metadata import version

    return version("genai-prices")


def _micros(value: Decimal, per: Decimal = Decimal(1)) -> int:
    return int((value * MICROS_PER_DOLLAR / per).to_integral_value())


def _in_effect(prices: Any, at: datetime) -> Any:
    """A model's price in effect at `at`: its only one, or of dated ones the last started."""
    if not isinstance(prices, list):
        return prices
    live = [p for p in prices if p.constraint is None or p.constraint.active(at)]
    return live[-1].prices if live else None


def _rows(
    model_price: Any, provider: str, model: str, service_tier: str, at: datetime, source: str
) -> Found:
    price = pb.Price(provider=provider, model=model, service_tier=service_tier, source=source)
    price.effective_from.FromDatetime(at)
    price.captured_at.FromDatetime(at)
    found = Found(model, service_tier, price)
    for name, value in vars(model_price).items():
        if value is None or name.startswith("_"):
            continue
        if not isinstance(value, Decimal):
            found.skipped.append(f"{name} varies with the input's length")
        elif name in RATES:
            setattr(price, RATES[name], _micros(value))
        elif name == SEARCH_FEE:
            price.tool_usd_micros["web_search"] = _micros(value, Decimal(1000))
        else:
            found.skipped.append(f"{name} has no rate in Earmark's price")
    return found


def found_prices(provider: str, models: list[str], at: datetime) -> list[Found]:
    """Every (model, tier) price of provider (of models, when given) in effect at `at`."""
    snapshot = _database()
    known = {p.id: p for p in snapshot.providers}
    if provider not in known:
        raise OpsError(f"--provider: genai-prices has no provider {provider!r}")
    entry = known[provider]
    source = f"genai-prices {_version()}: " + ", ".join((entry.pricing_urls or [])[:1])
    out: list[Found] = []
    for model in entry.models:
        if models and model.id not in models:
            continue
        base = _in_effect(model.prices, at)
        if base is None:
            continue
        out.append(_rows(base, provider, model.id, "", at, source))
        for variant in model.price_variants or []:
            wanted = variant.when.get("service_tier")
            if not wanted or set(variant.when) != {"service_tier"} or tier(wanted) == "":
                continue  # batch processing, or the default tier again
            if variant.constraint is not None and not variant.constraint.active(at):
                continue
            merged = {**vars(base), **{k: v for k, v in vars(variant.prices).items() if v}}
            out.append(_rows(_Plain(merged), provider, model.id, wanted, at, source))
    missing = sorted(set(models) - {f.model for f in out})
    if missing:
        raise OpsError(f"--model: genai-prices has no price for {provider} {missing[0]!r}")
    return out


class _Plain:
    """A merged price as the attributes genai-prices' ModelPrice has."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def _book(admin: Admin, provider: str) -> dict[tuple[str, str], pb.Price]:
    """The book's price in effect now for each (model, tier) of provider: the latest started
    version with no end passed (daily windows aside: an imported price has none)."""
    now = datetime.now(UTC)
    listed = admin.call(
        "ListPrices", pb.ListPricesRequest(provider=provider), pb.ListPricesResponse
    )
    book: dict[tuple[str, str], pb.Price] = {}
    for price in listed.prices:
        started = price.effective_from.ToDatetime(tzinfo=UTC) <= now
        ended = price.HasField("effective_to") and price.effective_to.ToDatetime(tzinfo=UTC) <= now
        if started and not ended:
            book[(price.model, tier(price.service_tier))] = price  # oldest first: last wins
    return book


def _values(price: pb.Price) -> dict[str, object]:
    values: dict[str, object] = {name: getattr(price, name) for name in RATES.values()}
    values["tool_usd_micros"] = dict(price.tool_usd_micros)
    return values


def differences(book: pb.Price | None, found: Found) -> list[str]:
    """Where the book's price differs from the database's, field by field."""
    if book is None:
        return ["not in the book"]
    ours, theirs = _values(book), _values(found.price)
    return [f"{name}: book {ours[name]} vs {theirs[name]}" for name in COMPARED
            if ours[name] != theirs[name]]  # fmt: skip


def import_prices(args: argparse.Namespace) -> str:
    at = datetime.now(UTC).replace(microsecond=0)
    found = found_prices(args.provider, args.model, at)
    put, kept = [], 0
    with Admin(access_from(args)) as admin:
        book = _book(admin, args.provider)
        for each in found:
            if not differences(book.get((each.model, tier(each.tier))), each):
                kept += 1
                continue
            if not args.dry_run:
                admin.call("PutPrice", pb.PutPriceRequest(price=each.price), pb.Price)
            put.append(each)
    if args.output == "json":
        return json.dumps({
            "put": [{"model": f.model, "service_tier": f.tier, "skipped": f.skipped} for f in put],
            "unchanged": kept, "dry_run": args.dry_run,
        }, indent=2)  # fmt: skip
    verb = "would put" if args.dry_run else "put"
    rows = [[f.model, f.tier or "default", "; ".join(f.skipped) or render.NONE] for f in put]
    table = render.table(("MODEL", "TIER", "LEFT OUT"), rows) if rows else ""
    return f"{table}{verb} {len(put)} prices; {kept} already in the book as genai-prices has them"


def check_prices(args: argparse.Namespace) -> Answer:
    at = datetime.now(UTC)
    found = found_prices(args.provider, args.model, at)
    with Admin(access_from(args)) as admin:
        book = _book(admin, args.provider)
    rows = []
    for each in found:
        for difference in differences(book.get((each.model, tier(each.tier))), each):
            rows.append([each.model, each.tier or "default", difference])
    known = {(f.model, tier(f.tier)) for f in found}
    wanted = set(args.model)
    for model, service_tier in sorted(book):
        if (model, service_tier) not in known and (not wanted or model in wanted):
            rows.append([model, service_tier or "default", "not in genai-prices"])
    if args.output == "json":
        disagreements = [{"model": m, "service_tier": t, "difference": d} for m, t, d in rows]
        return Answer(json.dumps({"disagreements": disagreements}, indent=2),
                      DISAGREE_STATUS if rows else 0)  # fmt: skip
    if not rows:
        return Answer(f"the book agrees with genai-prices {_version()} on {len(found)} prices")
    return Answer(render.table(("MODEL", "TIER", "DIFFERENCE"), rows), DISAGREE_STATUS)


# Which prices `prices import` and `prices check` look up.
CHOSEN = (
    Option("provider", "as genai-prices names it: openai", required=True),
    Option("model", "only these (repeatable)", default=(), action="append"),
)


def add_commands(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark prices import` and `earmark prices check`."""
    importing = verbs.add_parser(
        "import", help="put the prices genai-prices has for a provider's models (new only)"
    )
    options.add_options(
        importing, (Option("dry_run", "say what would be put", default=False, action="store_true"),)
    )
    importing.set_defaults(run=import_prices)
    checking = verbs.add_parser(
        "check", help=f"list where the book and genai-prices disagree (exit {DISAGREE_STATUS})"
    )
    checking.set_defaults(run=check_prices)
    for verb in (importing, checking):
        options.add_options(verb, CHOSEN)
        add_admin_arguments(verb)
