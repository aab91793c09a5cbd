"""`earmark prices import` and `earmark prices check`: a price book that starts filled and
can be checked, against genai-prices (`pip install 'earmark[prices]'`).

Why genai-prices: it is a maintained, open database of LLM API prices (Pydantic's, on
PyPI) that ships its data inside the package, so a price is read from a pinned, reviewable
version rather than from a web page at run time (its auto-update is never started here).
It has no output ceilings: those come from LiteLLM's model map (price_sources.py).

The import writes every rate the database has, as the rows price_sources.py reads it into
(every version, window, tier of input length and service tier), each with the database's
version and pricing page as its source and the import's time as captured_at. A (model,
tier) whose book already prices every call from now on as the database does is not put
again, so an import run twice puts nothing; one whose book was put by hand (a source that is
not genai-prices') is kept unless --replace. A model the book's rows cannot represent is
refused: no row of it is written, it is listed with the reason, and the import exits 3.

The check compares what the book charges with what the database says, not row by row but
as a call is priced: for every tier of input length, window and dated version from now on
(so at any hour of the day the answer is the same), the row the book would select against
the row the database implies, field by field; a $0 rate where the database's is not, an
all-day row where the database has windows, and a row without an output ceiling are named.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from earmark import limits, options
from earmark.core import periods
from earmark.core.prices import in_daily_window, tier
from earmark.ops import price_sources, render
from earmark.ops.connect import Admin, Answer, OpsError, access_from, add_admin_arguments
from earmark.ops.price_sources import SOURCE_PREFIX, Catalogued
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

# The exit status of `earmark prices check` when the book and the database disagree, and of
# `earmark prices import` when it refused a model (neither is a failure to run: each has
# printed what it found).
DISAGREE_STATUS = 3
REFUSED_STATUS = 3
# The rates compared, by how a call is charged them: Earmark's 0 for a cache rate means
# "as input" (a 1-hour write: "as a cache write"), so a book that spells the fallback out
# agrees with a database that leaves it implied.
RATES = (
    "input_usd_micros_per_mtok",
    "output_usd_micros_per_mtok",
    "cached_input_usd_micros_per_mtok",
    "cache_write_usd_micros_per_mtok",
    "cache_write_long_usd_micros_per_mtok",
    "request_usd_micros",
)
CEILING = "max_output_tokens"
# A row without an output ceiling: check names it either way; an import puts no new version
# for it where the ceilings source has none either (it would change nothing).
NO_CEILING = f"{CEILING}: none in the book (no output ceiling)"
NO_CEILING_ANYWHERE = f"{NO_CEILING}, nor in the ceilings source"
# A dated version is probed over a day from its start: every window of every zone starts
# once within it.
PROBED_SPAN = timedelta(days=1)
# A restarted version starts after the book's latest row where that is not yet past (a tie
# of starts would be settled by the version numbers).
AFTER_LATEST = timedelta(seconds=1)


@dataclass(frozen=True)
class _Row:
    """A row as a call selects it."""

    price: pb.Price
    start: datetime
    end: datetime | None
    tier: str

    @staticmethod
    def of(price: pb.Price) -> _Row:
        end = price.effective_to.ToDatetime(tzinfo=UTC) if price.HasField("effective_to") else None
        return _Row(
            price, price.effective_from.ToDatetime(tzinfo=UTC), end, tier(price.service_tier)
        )

    def applies(self, at: datetime, input_tokens: int) -> bool:
        p = self.price
        return (
            self.start <= at
            and (self.end is None or at < self.end)
            and in_daily_window(p.daily_from_minute, p.daily_to_minute, at, p.window_timezone)
            and (p.input_tokens_above == 0 or p.input_tokens_above < input_tokens)
        )


def selected(rows: Iterable[_Row], at: datetime, input_tokens: int) -> _Row | None:
    """The row Earmark prices a call by (core.prices.PriceBook.at): of the rows in effect at
    `at` whose tier of input length the call is in, the latest effective_from, then the
    highest input_tokens_above, then the highest version."""
    live = [r for r in rows if r.applies(at, input_tokens)]
    return max(
        live,
        key=lambda r: (r.start, r.price.input_tokens_above, r.price.version),
        default=None,
    )


def probes(rows: Sequence[_Row], now: datetime) -> list[tuple[datetime, int]]:
    """The calls a book is compared at: from now and from each later start or end of a row,
    a day's every window start (in each row's zone), at no input tokens and just above each
    tier of input length. Taken from now, not from the hour: the same at any hour."""
    bounds = sorted({r.start for r in rows} | {r.end for r in rows if r.end is not None})
    starts = [now, *(b for b in bounds if b > now)]
    edges = {
        (r.price.window_timezone, minute)
        for r in rows
        if r.price.daily_from_minute or r.price.daily_to_minute
        for minute in (r.price.daily_from_minute, r.price.daily_to_minute)
    }
    instants: set[datetime] = set()
    for i, start in enumerate(starts):
        end = min([start + PROBED_SPAN, *starts[i + 1 : i + 2]])
        instants.add(start)
        for zone_name, minute in edges:
            zone = periods.zone_named(zone_name) if zone_name else UTC
            first = start.astimezone(zone).date() - timedelta(days=1)
            for day in (first + timedelta(days=n) for n in range(3)):
                at = _local(day, minute, zone)
                if start <= at < end:
                    instants.add(at)
    lengths = sorted(
        {0}
        | {
            r.price.input_tokens_above + 1
            for r in rows
            if r.price.input_tokens_above < limits.tokens_per_request_max
        }
    )
    return [(at, n) for at in sorted(instants) for n in lengths]


def _local(day: date, minute: int, zone: object) -> datetime:
    at = datetime.combine(day, time(minute // 60, minute % 60), zone)  # type: ignore[arg-type]
    return at.astimezone(UTC)


def _charged(price: pb.Price) -> dict[str, int]:
    """A row's rates as a call is charged them (cache fallbacks resolved)."""
    cached = price.cached_input_usd_micros_per_mtok or price.input_usd_micros_per_mtok
    write = price.cache_write_usd_micros_per_mtok or price.input_usd_micros_per_mtok
    return {
        "input_usd_micros_per_mtok": price.input_usd_micros_per_mtok,
        "output_usd_micros_per_mtok": price.output_usd_micros_per_mtok,
        "cached_input_usd_micros_per_mtok": cached,
        "cache_write_usd_micros_per_mtok": write,
        "cache_write_long_usd_micros_per_mtok": price.cache_write_long_usd_micros_per_mtok or write,
        "request_usd_micros": price.request_usd_micros,
    }


def _windowed(price: pb.Price) -> bool:
    return bool(price.daily_from_minute or price.daily_to_minute)


def window_text(price: pb.Price) -> str:
    """A row's daily window with its zone, or all day."""
    if not _windowed(price):
        return "all day"
    start, end = divmod(price.daily_from_minute, 60), divmod(price.daily_to_minute, 60)
    zone = price.window_timezone or "UTC"
    return f"{start[0]:02d}:{start[1]:02d}-{end[0]:02d}:{end[1]:02d} {zone}"


def _where(price: pb.Price, now: datetime) -> str:
    """Which calls a finding is about: the database's row's selector."""
    parts = []
    if price.input_tokens_above:
        parts.append(f"above {price.input_tokens_above} input tokens")
    if _windowed(price):
        parts.append(window_text(price))
    start = price.effective_from.ToDatetime(tzinfo=UTC)
    if start > now:
        parts.append(f"from {start.isoformat().replace('+00:00', 'Z')}")
    return ", ".join(parts) or "every call"


def _compared(book: pb.Price, theirs: pb.Price) -> list[str]:
    """Where a call priced by the book's row is charged otherwise than by the database's."""
    found = []
    ours, wanted = _charged(book), _charged(theirs)
    for name in RATES:
        if ours[name] == 0 and wanted[name]:
            found.append(f"{name}: $0 in the book where genai-prices has {wanted[name]}")
        elif ours[name] != wanted[name]:
            found.append(f"{name}: book {ours[name]} vs {wanted[name]}")
    if dict(book.tool_usd_micros) != dict(theirs.tool_usd_micros):
        found.append(
            f"tool_usd_micros: book {dict(sorted(book.tool_usd_micros.items()))} "
            f"vs {dict(sorted(theirs.tool_usd_micros.items()))}"
        )
    if not book.max_output_tokens:
        found.append(NO_CEILING if theirs.max_output_tokens else NO_CEILING_ANYWHERE)
    elif theirs.max_output_tokens and book.max_output_tokens != theirs.max_output_tokens:
        found.append(f"{CEILING}: book {book.max_output_tokens} vs {theirs.max_output_tokens}")
    if _windowed(theirs) and not _windowed(book):
        found.append("an all-day price where genai-prices has daily windows (flattened)")
    return found


@dataclass(frozen=True)
class Finding:
    model: str
    tier: str
    where: str
    difference: str


def disagreements(
    model: str, book: Sequence[_Row], theirs: Sequence[_Row], now: datetime
) -> list[Finding]:
    """Every way the book prices the model's calls from now on otherwise than the database,
    once each, in the order first met."""
    out: dict[Finding, None] = {}
    tiers = sorted({r.tier for r in book} | {r.tier for r in theirs})
    for name in tiers:
        ours = [r for r in book if r.tier == name]
        wanted = [r for r in theirs if r.tier == name]
        for at, input_tokens in probes([*ours, *wanted], now):
            mine, right = selected(ours, at, input_tokens), selected(wanted, at, input_tokens)
            if mine is None and right is None:
                continue
            if right is None:
                assert mine is not None
                found = ["not in genai-prices"]
                where = _where(mine.price, now)
            else:
                where = _where(right.price, now)
                found = ["not in the book"] if mine is None else _compared(mine.price, right.price)
            for difference in found:
                out[Finding(model, name, where, difference)] = None
    return list(out)


def _book(admin: Admin, provider: str) -> dict[str, list[_Row]]:
    """Every row of the provider's book, by model, oldest version first."""
    listed = admin.call(
        "ListPrices", pb.ListPricesRequest(provider=provider), pb.ListPricesResponse
    )
    book: dict[str, list[_Row]] = {}
    for price in listed.prices:
        book.setdefault(price.model, []).append(_Row.of(price))
    return book


def _by_tier(rows: Iterable[pb.Price]) -> dict[str, list[_Row]]:
    out: dict[str, list[_Row]] = {}
    for price in rows:
        row = _Row.of(price)
        out.setdefault(row.tier, []).append(row)
    return out


def _restarted(theirs: list[_Row], ours: list[_Row], now: datetime) -> list[pb.Price]:
    """The database's rows to put over a book that disagrees: the version in effect at the
    restart (now, or just after the book's latest start if that is later) from then, and
    every later version as it is. The book's rows before then stay its history."""
    latest = max(r.start for r in ours)
    start = now if latest < now else latest + AFTER_LATEST
    current = max((r.start for r in theirs if r.start <= start), default=None)
    out = []
    for row in theirs:
        if row.start == current:
            copy = pb.Price()
            copy.CopyFrom(row.price)
            copy.effective_from.FromDatetime(start)
            out.append(copy)
        elif row.start > start:
            out.append(row.price)
    return out


@dataclass
class Plan:
    """What an import puts, keeps and refuses."""

    put: list[pb.Price] = field(default_factory=list)
    kept: list[pb.Price] = field(default_factory=list)
    unchanged: list[tuple[str, str]] = field(default_factory=list)
    found: list[Catalogued] = field(default_factory=list)


def plan(
    found: list[Catalogued], book: dict[str, list[_Row]], now: datetime, replace: bool
) -> Plan:
    """Per (model, tier): every row where the book has none; nothing where the book already
    prices as the database does, or where it disagrees but has rows put by hand (unless
    replace); else the database's rows from now."""
    out = Plan(found=found)
    for model in found:
        booked = _by_tier(r.price for r in book.get(model.model, ()))
        for name, theirs in _by_tier(model.rows).items():
            ours = booked.get(name, [])
            by_hand = [r.price for r in ours if not r.price.source.startswith(SOURCE_PREFIX)]
            if not ours:
                out.put.extend(r.price for r in theirs)
            elif not [
                f
                for f in disagreements(model.model, ours, theirs, now)
                if f.difference != NO_CEILING_ANYWHERE
            ]:
                out.unchanged.append((model.model, name))
            elif by_hand and not replace:
                out.kept.append(by_hand[-1])
            else:
                out.put.extend(_restarted(theirs, ours, now))
    if len(out.put) > limits.price_import_rows_max:
        raise OpsError(
            f"the import would put {len(out.put)} rows, more than "
            f"{limits.price_import_rows_max}: name fewer models (--model)"
        )
    # Each version's rows from the highest tier of input length down: a put cut short leaves
    # the calls of the rows not yet put at the version before, whole.
    out.put.sort(
        key=lambda p: (
            p.model,
            p.service_tier,
            p.effective_from.ToDatetime(tzinfo=UTC),
            -p.input_tokens_above,
            p.daily_from_minute,
        )
    )
    return out


def import_prices(args: argparse.Namespace, now: datetime | None = None) -> Answer:
    at = (now or datetime.now(UTC)).replace(microsecond=0)
    ceilings = price_sources.read_ceilings(args.ceilings)
    found = price_sources.catalogue(args.provider, args.model, ceilings, at)
    with Admin(access_from(args)) as admin:
        planned = plan(found, _book(admin, args.provider), at, args.replace)
        if not args.dry_run:
            for row in planned.put:
                admin.call("PutPrice", pb.PutPriceRequest(price=row), pb.Price)
    status = REFUSED_STATUS if any(f.refused for f in found) else 0
    if args.output == "json":
        return Answer(_import_json(planned, ceilings, args.dry_run), status)
    return Answer(_import_text(planned, ceilings, args.dry_run), status)


def _row_json(price: pb.Price) -> dict[str, object]:
    return {
        "model": price.model,
        "service_tier": price.service_tier or "default",
        "effective_from": render.timestamp(price.effective_from),
        "input_tokens_above": price.input_tokens_above,
        "window": window_text(price),
        **{name: getattr(price, name) for name in RATES},
        "tool_usd_micros": dict(price.tool_usd_micros),
        CEILING: price.max_output_tokens,
    }


def _sourced(planned: Plan) -> list[Catalogued]:
    """The models under the source's own names (an alias's notes are its model's)."""
    return [f for f in planned.found if not f.alias_of]


def _import_json(planned: Plan, ceilings: price_sources.Ceilings, dry_run: bool) -> str:
    return json.dumps(
        {
            "put": [_row_json(p) for p in planned.put],
            "kept": [
                _row_json(p) | {"source": p.source, "version": p.version} for p in planned.kept
            ],
            "unchanged": [
                {"model": m, "service_tier": t or "default"} for m, t in planned.unchanged
            ],
            "refused": {f.model: f.refused for f in _sourced(planned) if f.refused},
            "left_out": {f.model: f.left_out for f in _sourced(planned) if f.left_out},
            "without_ceiling": [
                f.model for f in _sourced(planned) if not f.refused and not f.ceiling
            ],
            "aliases": {f.model: f.alias_of for f in planned.found if f.alias_of},
            "ceilings": ceilings.source,
            "dry_run": dry_run,
        },
        indent=2,
    )


ROW_HEADERS = (
    "MODEL",
    "TIER",
    "FROM",
    "ABOVE",
    "WINDOW",
    "INPUT/MTOK",
    "OUTPUT/MTOK",
    "CACHED/MTOK",
    "CACHE WRITE/MTOK",
    "1H WRITE/MTOK",
    "TOOLS",
    "MAX OUTPUT",
)
ROW_AMOUNTS = (
    "ABOVE",
    "INPUT/MTOK",
    "OUTPUT/MTOK",
    "CACHED/MTOK",
    "CACHE WRITE/MTOK",
    "1H WRITE/MTOK",
    "MAX OUTPUT",
)


def _fallback(micros: int) -> str:
    return render.dollars(micros) if micros else "as input"


def _row_cells(price: pb.Price) -> list[str]:
    return [
        price.model,
        price.service_tier or "default",
        render.timestamp(price.effective_from),
        str(price.input_tokens_above),
        window_text(price),
        render.dollars(price.input_usd_micros_per_mtok),
        render.dollars(price.output_usd_micros_per_mtok),
        _fallback(price.cached_input_usd_micros_per_mtok),
        _fallback(price.cache_write_usd_micros_per_mtok),
        _fallback(price.cache_write_long_usd_micros_per_mtok),
        ",".join(f"{k}={render.dollars(v)}" for k, v in sorted(price.tool_usd_micros.items()))
        or render.NONE,
        str(price.max_output_tokens) if price.max_output_tokens else render.NONE,
    ]


def _import_text(planned: Plan, ceilings: price_sources.Ceilings, dry_run: bool) -> str:
    parts = []
    if planned.put:
        parts.append(
            render.table(ROW_HEADERS, [_row_cells(p) for p in planned.put], right=ROW_AMOUNTS)
        )
    if planned.kept:
        parts.append(
            "kept, put by hand (--replace puts genai-prices' rates over them):\n"
            + "".join(
                f"  {p.model} {p.service_tier or 'default'}: version "
                f"{p.version}, {p.source or 'no source'}\n"
                for p in planned.kept
            )
        )
    refused = [f for f in _sourced(planned) if f.refused]
    if refused:
        parts.append(
            "refused, no row written (Earmark's price cannot hold it):\n"
            + "".join(f"  {f.model}: {'; '.join(f.refused)}\n" for f in refused)
        )
    left = [f for f in _sourced(planned) if f.left_out and not f.refused]
    if left:
        parts.append(
            "left out:\n" + "".join(f"  {f.model}: {'; '.join(f.left_out)}\n" for f in left)
        )
    bare = [f.model for f in _sourced(planned) if not f.refused and not f.ceiling]
    if bare:
        where = ceilings.source or "no ceilings file (--ceilings, or litellm installed)"
        parts.append(f"without an output ceiling in {where}: {', '.join(bare)}\n")
    aliased = [f"{f.model} (as {f.alias_of})" for f in planned.found if f.alias_of]
    if aliased:
        parts.append(f"also under the other name their calls come by: {', '.join(aliased)}\n")
    verb = "would put" if dry_run else "put"
    parts.append(
        f"{verb} {len(planned.put)} rows; {len(planned.unchanged)} tiers already as "
        f"genai-prices {price_sources.database_version()} has them; {len(planned.kept)} kept; "
        f"{len(refused)} models refused"
    )
    return "".join(parts)


def check_prices(args: argparse.Namespace, now: datetime | None = None) -> Answer:
    at = (now or datetime.now(UTC)).replace(microsecond=0)
    ceilings = price_sources.read_ceilings(args.ceilings)
    found = price_sources.catalogue(args.provider, args.model, ceilings, at)
    with Admin(access_from(args)) as admin:
        book = _book(admin, args.provider)
    findings: list[Finding] = []
    for model in found:
        ours = book.get(model.model, [])
        if model.refused:
            if ours:
                findings.append(
                    Finding(
                        model.model,
                        "",
                        "every call",
                        "cannot be checked: " + "; ".join(model.refused),
                    )
                )
            continue
        theirs = [_Row.of(p) for p in model.rows]
        findings.extend(disagreements(model.model, ours, theirs, at))
    known = {f.model for f in found}
    wanted = set(args.model)
    for name in sorted(book):
        if name not in known and (not wanted or name in wanted):
            findings.append(Finding(name, "", "every call", "not in genai-prices"))
    status = DISAGREE_STATUS if findings else 0
    if args.output == "json":
        listed = [
            {
                "model": f.model,
                "service_tier": f.tier or "default",
                "where": f.where,
                "difference": f.difference,
            }
            for f in findings
        ]
        return Answer(json.dumps({"disagreements": listed}, indent=2), status)
    if not findings:
        checked = sum(1 for f in found if not f.refused)
        return Answer(
            f"the book agrees with genai-prices {price_sources.database_version()} on "
            f"{checked} models, every tier, window and version from now"
        )
    rows = [[f.model, f.tier or "default", f.where, f.difference] for f in findings]
    return Answer(render.table(("MODEL", "TIER", "CALLS", "DIFFERENCE"), rows), status)


# Which prices `prices import` and `prices check` look up.
CHOSEN = (
    Option("provider", "as genai-prices names it: openai", required=True),
    Option("model", "only these (repeatable)", default=(), action="append"),
    Option(
        "ceilings",
        "LiteLLM's model_prices_and_context_window.json, for output ceilings",
        default="",
        shown="the installed litellm's copy",
        metavar="FILE",
    ),
)


def add_commands(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark prices import` and `earmark prices check`."""
    importing = verbs.add_parser(
        "import",
        help=f"put every rate genai-prices has for a provider's models (exit {REFUSED_STATUS} "
        "if a model is refused)",
    )
    options.add_options(
        importing,
        (
            Option("dry_run", "list the rows it would put", default=False, action="store_true"),
            Option(
                "replace",
                "put over prices put by hand",
                default=False,
                action="store_true",
            ),
        ),
    )
    importing.set_defaults(run=import_prices)
    checking = verbs.add_parser(
        "check", help=f"list where the book and genai-prices disagree (exit {DISAGREE_STATUS})"
    )
    checking.set_defaults(run=check_prices)
    for verb in (importing, checking):
        options.add_options(verb, CHOSEN)
        add_admin_arguments(verb)
