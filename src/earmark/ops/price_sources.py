"""What `earmark prices import` and `check` read: genai-prices' rates as the rows of Earmark's
price book, and output ceilings from LiteLLM's published model map.

genai-prices describes a model's price as a list of prices under constraints (a start date,
a daily UTC window; the last one active wins), request variants (a service tier, batch
processing, a speed) whose non-empty rates override the standard ones, and rates that are
tiered by the call's input tokens ("cliff" tiers: above a tier's start, every token of the
call is at the tier's rate, exactly as Earmark's input_tokens_above). Each is turned into
rows Earmark selects the same way: one version per start date (in effect from that date's
midnight in the provider's zone), in each version one row per daily window (the day split
at every window's edge, so that no two rows of a version overlap) and per tier of input
length, for each service tier. Nothing is flattened: what a row cannot hold refuses the
model, with the reason, and no row of it is written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from earmark import limits
from earmark.core.prices import tier
from earmark.ops.connect import OpsError
from earmark.v1 import budget_pb2 as pb

PRICES_EXTRA = "pip install 'earmark[prices]'"
# Every row the import writes has a source that starts so; a row whose source does not was
# put by hand (or by another tool), and the import keeps it unless told --replace.
SOURCE_PREFIX = "genai-prices "
MICROS_PER_DOLLAR = Decimal(1_000_000)
# genai-prices' rates per million tokens, by the Price field each is read into. A cache
# write with no duration is a 5-minute one (Anthropic's default, OpenAI's only one).
RATES = {
    "input_mtok": "input_usd_micros_per_mtok",
    "output_mtok": "output_usd_micros_per_mtok",
    "cache_read_mtok": "cached_input_usd_micros_per_mtok",
    "cache_write_mtok": "cache_write_usd_micros_per_mtok",
    "cache_write_5m_mtok": "cache_write_usd_micros_per_mtok",
    "cache_write_1h_mtok": "cache_write_long_usd_micros_per_mtok",
}
# Earmark's 0 for these fields means "as input" (or "as a cache write"), not free: a rate of
# 0 in the database cannot be written, and is charged the fallback instead (listed).
FALLBACK_RATES = frozenset(
    {
        "cached_input_usd_micros_per_mtok",
        "cache_write_usd_micros_per_mtok",
        "cache_write_long_usd_micros_per_mtok",
    }
)
# Fees per thousand calls of a server tool, by the kind Earmark's gates count the calls as.
TOOL_FEES = {
    "web_searches_kcount": "web_search",
    "storage_searches_kcount": "file_search",
    "code_executions_kcount": "code_execution",
}
# A fee per thousand requests: Earmark's flat fee per call.
REQUEST_FEE = "requests_kcount"
PER_THOUSAND = Decimal(1000)
# Rates of what a metered text call does not send or receive: audio, image and video tokens,
# and units that are not tokens (hours of audio, pages, characters, pixels, messages). A
# model that has them is imported at its text rates and they are listed as left out; a model
# with no rate for text input at all is refused (its calls would be priced at $0).
MODALITY_WORDS = ("audio", "image", "video", "hours", "pages", "mchars", "gpixels", "messages")
# The only request variant a call to Earmark names: its service tier. Batch processing does
# not pass through Earmark's gates (it is left out); any other (a speed) refuses the model.
SERVICE_TIER = "service_tier"
BATCH = {"processing": "batch"}
# A provider changes its prices at its own midnight; genai-prices gives a start date with no
# zone (and reads it as a UTC date). DeepSeek announces in Beijing time (its off-peak hours
# are 00:30-08:30 there): its 2026-08-17 starts at 16:00 UTC on 2026-08-16. The others
# publish no zone, and are read as genai-prices reads them, in UTC.
START_ZONES = {"deepseek": "Asia/Shanghai"}
# The first version of a model (the price no date starts) is in effect from here: before any
# call a book can hold, so that a later dated version supersedes it and not the reverse.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
# LiteLLM's names for genai-prices' providers, in the order their entries are tried: the
# Gemini API's own ceilings before Vertex AI's.
LITELLM_PROVIDERS = {
    "google": ("gemini", "vertex_ai-language-models"),
    "x-ai": ("xai",),
    # Bedrock: the Converse entries first (the API metered_bedrock meters), then InvokeModel's.
    "aws": ("bedrock_converse", "bedrock"),
    "together": ("together_ai",),
}
# Bedrock's model ids: genai-prices names some with AWS's version suffix and some without
# ("global.anthropic.claude-sonnet-4-6-v1:0", "global.anthropic.claude-opus-5"), and its
# match clause takes both; the modelId a caller sends is one or the other. Each such model is
# imported under both names (ALIASED_PROVIDERS), so that a call priced by its id finds its
# price either way. Only this suffix: another version (-v2:0) is another model.
ALIASED_PROVIDERS = frozenset({"aws"})
FIRST_VERSION = "-v1:0"
_VERSIONED = re.compile(r"(?:-v\d+(?::\d+)?|:\d+)$")
# genai-prices' regional. ids are Earmark's name for an in-region Bedrock call
# (wire_bedrock.price_name); LiteLLM's map names the model bare.
REGIONAL_PREFIX = "regional."
LITELLM_MAP = "model_prices_and_context_window_backup.json"


@dataclass
class Catalogued:
    """What the database says of one model, as the rows to put (every tier, window, tier
    of input length and version), what was left out, and why the model is refused (no row
    of a refused model is written)."""

    model: str
    rows: list[pb.Price] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    ceiling: int = 0
    # The model whose rows these are, under another name its calls come by (aliases()).
    alias_of: str = ""

    def note(self, into: list[str], what: str) -> None:
        if what not in into:
            into.append(what)

    def aliased(self, name: str) -> Catalogued:
        """This model's rows under name."""
        rows = []
        for row in self.rows:
            copied = pb.Price()
            copied.CopyFrom(row)
            copied.model = name
            rows.append(copied)
        return Catalogued(
            name, rows, list(self.left_out), list(self.refused), self.ceiling, self.model
        )


@dataclass
class Ceilings:
    """The most output tokens a call of each model may produce, from LiteLLM's model map."""

    source: str
    entries: Mapping[str, Any]

    def of(self, provider: str, model: str, *aliases: str) -> int | None:
        """The model's ceiling (under its id or an alias), or None where the map has no
        valid one."""
        names = [model, *aliases]
        if provider == "aws":
            names += [n.removeprefix(REGIONAL_PREFIX) for n in names]
        for name in LITELLM_PROVIDERS.get(provider, (provider,)):
            for key in (k for n in names for k in (f"{name}/{n}", n)):
                entry = self.entries.get(key)
                if isinstance(entry, dict) and entry.get("litellm_provider") == name:
                    most = entry.get("max_output_tokens")
                    if isinstance(most, bool) or not isinstance(most, int):
                        continue
                    if 1 <= most <= limits.tokens_per_request_max:
                        return most
        return None


def installed_litellm_map() -> Path | None:
    """LiteLLM's model map as its installed package ships it, found without importing
    litellm (slow, and it starts work of its own)."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / LITELLM_MAP
        if path.is_file():
            return path
    return None


def read_ceilings(given: str) -> Ceilings:
    """The ceilings in the file given (a copy of LiteLLM's published
    model_prices_and_context_window.json), else in the installed litellm's copy of it,
    else none (every model is then listed as without one)."""
    path = Path(given) if given else installed_litellm_map()
    if path is None:
        return Ceilings("", {})
    most = limits.price_ceilings_file_bytes_max
    try:
        # Opened without blocking (a FIFO would wait for a writer), then read only if it is
        # a regular file, and no more than the limit and a byte.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise OpsError(f"--ceilings: {path} is not a regular file")
        with os.fdopen(descriptor, "rb") as file:
            data = file.read(most + 1)
    except OSError as error:
        raise OpsError(f"--ceilings: {path}: {error.strerror}") from None
    if len(data) > most:
        raise OpsError(f"--ceilings: {path} is larger than {most} bytes")
    try:
        entries = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise OpsError(f"--ceilings: {path} is not JSON: {error}") from None
    if not isinstance(entries, dict):
        raise OpsError(f"--ceilings: {path} is not a JSON object of models")
    return Ceilings(f"LiteLLM's model map ({path.name})", entries)


def database() -> Any:
    """genai-prices' data as the installed package ships it (its auto-update never runs)."""
    try:
        from genai_prices import data_snapshot
    except ImportError:
        raise OpsError(f"genai-prices is not installed: {PRICES_EXTRA}") from None
    return data_snapshot.get_snapshot()


def database_version() -> str:
    from importlib.metadata import version

    return version("genai-prices")


def provider_entry(provider: str) -> Any:
    known = {p.id: p for p in database().providers}
    if provider not in known:
        raise OpsError(f"--provider: genai-prices has no provider {provider!r}")
    return known[provider]


def catalogue(
    provider: str, models: Iterable[str], ceilings: Ceilings, captured: datetime
) -> list[Catalogued]:
    """Every model of provider (of models, when given) as Earmark's rows."""
    entry = provider_entry(provider)
    wanted = set(models)
    known = {m.id for m in entry.models}
    missing = sorted(wanted - known)
    if missing:
        raise OpsError(f"--model: genai-prices has no model {missing[0]!r} of {provider}")
    url = (entry.pricing_urls or [""])[0]
    source = f"{SOURCE_PREFIX}{database_version()}: {url}"[: limits.price_source_length_max]
    zone = START_ZONES.get(provider, "UTC")
    out = []
    for model in entry.models:
        if wanted and model.id not in wanted:
            continue
        found = _Reader(provider, model, zone).read()
        named = aliases(provider, model, known)
        found.ceiling = ceilings.of(provider, model.id, *named) or 0
        if found.refused:
            found.rows = []
        for row in found.rows:
            row.source = source
            row.captured_at.FromDatetime(captured)
            row.max_output_tokens = found.ceiling
        out.append(found)
        out.extend(found.aliased(alias) for alias in named)
    return out


def aliases(provider: str, model: Any, known: set[str]) -> list[str]:
    """The other names a model's calls come under that its source prices it by: for
    Bedrock, its id with or without the first version's suffix, where its match clause
    takes that name and no other model of the source has it."""
    if provider not in ALIASED_PROVIDERS:
        return []
    if model.id.endswith(FIRST_VERSION):
        other = model.id.removesuffix(FIRST_VERSION)
    elif _VERSIONED.search(model.id) is None:
        other = model.id + FIRST_VERSION
    else:
        return []
    if other in known or not model.match.is_match(other):
        return []
    return [other]


def _minute(value: time) -> int:
    """A time of day as minutes after midnight UTC, as genai-prices compares it (a time
    with no zone is UTC)."""
    if value.tzinfo is not None:
        value = datetime.combine(date(1970, 1, 1), value).astimezone(UTC).time()
    return value.hour * 60 + value.minute


def _in_window(start: int, end: int, minute: int) -> bool:
    if start <= end:
        return start <= minute < end
    return minute >= start or minute < end


class _Reader:
    """One model's prices in genai-prices, resolved for each version, window and tier."""

    def __init__(self, provider: str, model: Any, zone: str) -> None:
        self.provider = provider
        self.model = model
        self.zone = ZoneInfo(zone)
        self.found = Catalogued(model.id)
        prices = model.prices
        self.entries: list[tuple[Any, Any]] = (
            [(c.constraint, c.prices) for c in prices]
            if isinstance(prices, list)
            else [(None, prices)]
        )
        self.variants: list[tuple[str, Any, Any]] = []  # (tier, constraint, prices)

    def refuse(self, why: str) -> None:
        self.found.note(self.found.refused, why)

    def read(self) -> Catalogued:
        if not self.entries:
            self.refuse("genai-prices has no price for it")
            return self.found
        for when, constraint, prices in (
            (v.when, v.constraint, v.prices) for v in self.model.price_variants or ()
        ):
            if when == BATCH:
                self.found.note(self.found.left_out, "batch processing (not sent through Earmark)")
            elif set(when) == {SERVICE_TIER}:
                name = tier(when[SERVICE_TIER])
                if name:
                    self.variants.append((name, constraint, prices))
                elif any(v is not None for v in vars(prices).values()):
                    # Earmark prices "default" and no tier alike: one row cannot hold both.
                    self.refuse(f"rates of its own for service_tier {when[SERVICE_TIER]!r}")
            else:
                self.refuse(f"rates by {when}, which a call to Earmark does not name")
        constraints = [c for c, _ in self.entries] + [c for _, c, _ in self.variants]
        dates: set[date] = set()
        edges: set[int] = set()
        for constraint in constraints:
            kind = type(constraint).__name__
            if constraint is None:
                continue
            if kind == "StartDateConstraint":
                dates.add(constraint.start_date)
            elif kind == "TimeOfDateConstraint":
                start, end = _minute(constraint.start_time), _minute(constraint.end_time)
                if start == end:
                    self.refuse("a daily window with no minute in it")
                edges.update((start, end))
            else:
                self.refuse(f"a price under a {kind}, which is not a date or a time of day")
        if self.found.refused:
            return self.found
        tiers = ["", *dict.fromkeys(t for t, _, _ in self.variants if t)]
        periods: list[date | None] = [None, *sorted(dates)]
        for name in tiers:
            previous: list[bytes] | None = None
            for period in periods:
                rows = self._version(name, period, sorted(edges))
                shown = [_but_start(r) for r in rows]
                if shown != previous:  # a date that changes nothing of this tier: no version
                    self.found.rows.extend(rows)
                    previous = shown
        return self.found

    def _start(self, period: date | None) -> datetime:
        if period is None:
            return EARLIEST
        return datetime.combine(period, time(), self.zone).astimezone(UTC)

    def _active(self, constraint: Any, period: date | None, minute: int) -> bool:
        if constraint is None:
            return True
        if type(constraint).__name__ == "StartDateConstraint":
            return period is not None and constraint.start_date <= period
        start, end = _minute(constraint.start_time), _minute(constraint.end_time)
        return _in_window(start, end, minute)

    def _resolved(self, name: str, period: date | None, minute: int) -> dict[str, Any]:
        """genai-prices' rates for a call of tier `name` in the version and minute: the last
        standard price active (else the first), and each rate of the tier's first active
        variant that has it."""
        standard = self.entries[0][1]
        for constraint, prices in reversed(self.entries):
            if self._active(constraint, period, minute):
                standard = prices
                break
        merged = {k: v for k, v in vars(standard).items() if v is not None and k[0] != "_"}
        overrides: dict[str, Any] = {}
        for variant_tier, constraint, prices in self.variants:
            if variant_tier == name and self._active(constraint, period, minute):
                for key, value in vars(prices).items():
                    if value is not None and key[0] != "_":
                        overrides.setdefault(key, value)
        return {**merged, **overrides}

    def _version(self, name: str, period: date | None, edges: list[int]) -> list[pb.Price]:
        """The tier's rows in effect from the period's start: one per window and tier of
        input length, adjacent windows with the same rates joined."""
        segments = [(0, 0)] if not edges else list(zip(edges, [*edges[1:], edges[0]], strict=True))
        by_above: dict[int, list[tuple[tuple[int, int], pb.Price]]] = {}
        for segment in segments:
            rates = self._resolved(name, period, segment[0])
            for above, row in self._rows_by_length(rates):
                by_above.setdefault(above, []).append((segment, row))
        rows = []
        for above, pieces in sorted(by_above.items()):
            for (start, end), row in _joined(pieces):
                row.daily_from_minute, row.daily_to_minute = start, end
                row.provider, row.model, row.service_tier = self.provider, self.model.id, name
                row.input_tokens_above = above
                row.effective_from.FromDatetime(self._start(period))
                rows.append(row)
        return rows

    def _rows_by_length(self, rates: dict[str, Any]) -> list[tuple[int, pb.Price]]:
        """The rates as one row per tier of input length: the base row (above 0) and a row
        above each tier's start, every rate at the tier that applies there."""
        starts: set[int] = set()
        for key, value in rates.items():
            if isinstance(value, Decimal):
                continue
            tiers = getattr(value, "tiers", None)
            if tiers is None:
                self.refuse(f"{key} is neither a rate nor tiers of rates")
                continue
            for each in tiers:
                if not isinstance(each.start, int) or each.start <= 0:
                    self.refuse(f"{key} has a tier starting at {each.start!r}")
                elif each.start > limits.tokens_per_request_max:
                    self.refuse(f"{key} has a tier starting past {limits.tokens_per_request_max}")
                else:
                    starts.add(each.start)
        out = []
        for above in [0, *sorted(starts)]:
            flat = {key: _at_length(value, above) for key, value in rates.items()}
            out.append((above, self._row(flat, above)))
        return out

    def _row(self, rates: dict[str, Decimal], above: int) -> pb.Price:
        row = pb.Price()
        where = f" above {above} input tokens" if above else ""
        written = {rates[k] for k in ("cache_write_mtok", "cache_write_5m_mtok") if k in rates}
        if len(written) > 1:
            self.refuse("two different rates for a 5-minute cache write")
        if not rates:
            self.refuse("genai-prices has no rate for it (free, or not priced): put one by hand")
        elif "input_mtok" not in rates:
            self.refuse("no rate for text input tokens (priced by " + ", ".join(rates) + ")")
        for key, value in rates.items():
            if key in RATES:
                name = RATES[key]
                if value == 0 and name in FALLBACK_RATES:
                    self.found.note(self.found.left_out, f"{key} is $0{where}: charged as input")
                    continue
                setattr(row, name, self._micros(key, value, Decimal(1)))
            elif key in TOOL_FEES:
                row.tool_usd_micros[TOOL_FEES[key]] = self._micros(key, value, PER_THOUSAND)
            elif key == REQUEST_FEE:
                row.request_usd_micros = self._micros(key, value, PER_THOUSAND)
            elif any(word in key for word in MODALITY_WORDS):
                self.found.note(self.found.left_out, f"{key} (a text call has none)")
            else:
                self.refuse(f"{key}, which Earmark's price has no field for")
        return row

    def _micros(self, key: str, value: Decimal, per: Decimal) -> int:
        """A rate in micro-dollars (per million tokens, or per call for a fee): rounded up
        where the database's has a fraction of a micro-dollar, and never 0 where it is not."""
        micros = value * MICROS_PER_DOLLAR / per
        whole = int(micros.to_integral_value(rounding=ROUND_CEILING))
        most = (
            limits.rate_usd_micros_per_mtok_max if per == 1 else limits.request_fee_usd_micros_max
        )
        if micros > 0 and micros < 1:
            self.refuse(f"{key} is ${value}: below a micro-dollar, the least a price holds")
        if whole > most:
            self.refuse(f"{key} is ${value}: above the most a price holds")
        return whole


def _at_length(value: Any, above: int) -> Decimal:
    """A rate for calls above `above` input tokens: of tiers, the last starting at or below
    it (a tier applies to calls with more input tokens than its start)."""
    if isinstance(value, Decimal):
        return value
    applied: Decimal = value.base
    for each in sorted(value.tiers, key=lambda t: t.start):
        if each.start <= above:
            applied = each.price
    return applied


def _joined(
    pieces: list[tuple[tuple[int, int], pb.Price]],
) -> list[tuple[tuple[int, int], pb.Price]]:
    """Adjacent windows of a day with the same rates as one window (the last and the first
    too, across midnight)."""
    out: list[tuple[tuple[int, int], pb.Price]] = []
    for (start, end), row in pieces:
        if out and out[-1][1] == row:
            out[-1] = ((out[-1][0][0], end), out[-1][1])
        else:
            out.append(((start, end), row))
    if len(out) > 1 and out[0][1] == out[-1][1]:
        out[0] = ((out[-1][0][0], out[0][0][1]), out[0][1])
        out.pop()
    if len(out) == 1:
        return [((0, 0), out[0][1])]
    return out


def _but_start(row: pb.Price) -> bytes:
    """A row as compared between versions: all but when it starts."""
    copy = pb.Price()
    copy.CopyFrom(row)
    copy.ClearField("effective_from")
    return copy.SerializeToString(deterministic=True)
