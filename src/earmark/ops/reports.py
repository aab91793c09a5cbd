"""The providers' organization usage and cost reports, read with an admin key as their
published APIs give them (checked facts: ../shared/notes/provider-usage-reports.md):
OpenAI's /organization/usage/completions and /embeddings in one-minute buckets and
/organization/costs by day; Anthropic's /v1/organizations/usage_report/messages and
/cost_report. Both SDKs send list parameters as `name[]=value`, and so does this. And one
OpenAI Response by its id (GET /responses/{id}), read with a project's API key: a
background response whose hold was left in doubt. A cost line is classed by its kind
(core/reconcile_model.py Kind): a model's, built-in tools' (compared with the ledger's tool
fees), storage's (not metered by Earmark), or other (listed, never compared as a model).

Errors are mapped once, here, to an OpsError that names the provider, the status and the
provider's own message, and never the key.

A report is checked before it is believed (RefusedReport, exit 3): every count a
non-negative integer (no bool, float or string) within limits.reconcile_report_count_max,
every amount a finite number within limits.reconcile_report_usd_max, every bucket's start
a time near the range asked for, and no bucket, nor a bucket's (model, key or project),
seen twice (as an overlapping page would give it). Each GET ends within its deadline
(--http-deadline-seconds) in all, not only within a timeout of each read."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from earmark import limits
from earmark.core.reconcile import Billed, Kind, Reported, Tokens
from earmark.ops.connect import OpsError
from earmark.settings import is_loopback

DEFAULT_BASES = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com"}
ANTHROPIC_VERSION = "2023-06-01"
MICROS_PER_DOLLAR = Decimal(1_000_000)
MICROS_PER_CENT = Decimal(10_000)
Params = list[tuple[str, str]]
# A response id as it may go into a URL's path: a hold's label is the worker's to write, so
# one that is not an id's characters is never sent (no "/", "." or "%" to reach another path).
RESPONSE_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")
# Anthropic's cost types of its server tools (the cost report's cost_type), billed apart
# from tokens: ../shared/notes/provider-usage-reports.md.
ANTHROPIC_TOOL_COSTS = frozenset({"web_search", "code_execution"})


class RefusedReport(OpsError):
    """A report that fails its checks: nothing it says is believed and nothing is resolved;
    the run says why in one line and exits 3."""


class _Refused(ValueError):
    """A value of a report out of its range (the field named): RefusedReport once the report
    is named."""


@dataclass(frozen=True)
class Scope:
    """Whose usage: one API key's or one project's (an Anthropic workspace), or, with
    neither, the whole organization's."""

    api_key_id: str = ""
    project_id: str = ""

    @property
    def label(self) -> str:
        return self.api_key_id or self.project_id


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: following one would send the admin key to another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def checked_base(base: str) -> str:
    """An https URL (plain http only to this machine, as a test's fake is): the admin key
    never crosses a network in the clear."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname or "")):
        return base.rstrip("/")
    raise OpsError(f"--api-base {base!r} must be an https URL (http only to 127.0.0.1)")


class ReportReader:
    """GETs of one provider's admin API, a page at a time."""

    def __init__(
        self,
        provider: str,
        base: str,
        admin_key: str,
        deadline_seconds: float = limits.reconcile_http_request_seconds,
    ) -> None:
        self.provider = provider
        self.deadline_seconds = deadline_seconds
        self.base = checked_base(base)
        self._key = admin_key
        if provider == "openai":
            self.headers = {"authorization": f"Bearer {admin_key}"}
        else:
            self.headers = {"x-api-key": admin_key, "anthropic-version": ANTHROPIC_VERSION}

    def get(self, path: str, params: Params) -> dict[str, Any]:
        """The JSON object a GET of path answers, within the request's deadline in all: a
        server that trickles its answer a byte at a time is given up at the deadline (the
        read is left to a daemon thread, which the run's end stops)."""
        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        done: list[bytes | BaseException] = []

        def fetch() -> None:
            try:
                done.append(self._body(url, path))
            except BaseException as error:  # handed to the caller's thread
                done.append(error)

        worker = threading.Thread(target=fetch, name=f"GET {path}", daemon=True)
        worker.start()
        worker.join(self.deadline_seconds)
        if not done:
            raise OpsError(
                f"{self.provider}'s answer to GET {path} did not end within "
                f"{self.deadline_seconds:g} seconds (--http-deadline-seconds)"
            )
        if isinstance(done[0], BaseException):
            raise done[0]
        body = done[0]
        try:
            found = json.loads(body)
        except ValueError:
            raise OpsError(f"{self.provider}'s answer to GET {path} is not JSON") from None
        if not isinstance(found, dict):
            raise OpsError(f"{self.provider}'s answer to GET {path} is not a JSON object")
        return found

    def _body(self, url: str, path: str) -> bytes:
        request = urllib.request.Request(
            url, headers={**self.headers, "accept": "application/json"}
        )
        timeout = min(limits.reconcile_http_timeout_seconds, self.deadline_seconds)
        try:
            with _OPENER.open(request, timeout=timeout) as r:
                body: bytes = r.read(limits.reconcile_report_bytes_max + 1)
        except urllib.error.HTTPError as error:
            # A provider that echoes the key in its message does not put it in ours.
            said = _message(error.read(4096))
            said = said.replace(self._key, "[the key]") if self._key else said
            raise OpsError(f"{self.provider} answered {error.code} to GET {path}: "
                           f"{said}") from None  # fmt: skip
        except http.client.HTTPException as error:
            raise OpsError(f"{self.provider}'s answer to GET {path} was cut short: "
                           f"{type(error).__name__}") from None  # fmt: skip
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise OpsError(f"cannot reach {self.provider} at {self.base}: {reason}") from None
        if len(body) > limits.reconcile_report_bytes_max:
            raise OpsError(f"{self.provider}'s answer to GET {path} is larger than "
                           f"{limits.reconcile_report_bytes_max} bytes")  # fmt: skip
        return body

    def buckets(self, path: str, params: Params, start: str) -> Iterator[dict[str, Any]]:
        """Every bucket of a report, following next_page while has_more; a bucket whose
        start (its field start) comes twice is refused."""
        page = ""
        seen: set[str] = set()
        for _ in range(limits.reconcile_pages_max):
            answer = self.get(path, [*params, *([("page", page)] if page else [])])
            for bucket in answer.get("data") or []:
                at = str(bucket.get(start))
                if at in seen:
                    raise _Refused(f"the bucket of {start} {at[:40]} comes twice")
                seen.add(at)
                yield bucket
            page = answer.get("next_page") or ""
            if not answer.get("has_more") or not page:
                return
        raise OpsError(f"{self.provider}'s {path} had more than {limits.reconcile_pages_max} pages")


def openai_response(reader: ReportReader, response_id: str) -> dict[str, Any]:
    """OpenAI's Response response_id (GET /responses/{id}), unchecked: the caller checks it
    is that response, in its published shape (openai_background.ending)."""
    if not RESPONSE_ID.fullmatch(response_id):
        raise OpsError(f"{response_id[:80]!r} is not a response id; not retrieved")
    return reader.get(f"/responses/{response_id}", [])


def _message(body: bytes) -> str:
    """The provider's error message (both put it at error.message), bounded."""
    try:
        found = json.loads(body)
        text = str(found["error"]["message"])
    except (ValueError, KeyError, TypeError):
        text = body.decode(errors="replace")
    return text[:300] or "no message"


@contextlib.contextmanager
def _published(provider: str, what: str) -> Iterator[None]:
    """A report that is not in its published shape is one line naming it, not a trace."""
    try:
        yield
    except _Refused as refused:
        raise RefusedReport(
            f"{provider}'s {what} is refused, and nothing is resolved: {refused}"
        ) from None
    except (KeyError, TypeError, ValueError, AttributeError, InvalidOperation) as error:
        raise OpsError(
            f"{provider}'s {what} is not in its published shape ({type(error).__name__}: "
            f"{str(error)[:200]})"
        ) from None


def _unix(at: datetime) -> str:
    return str(int(at.timestamp()))


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _shown(value: Any) -> str:
    return repr(value)[:40]


def _when(value: Any, name: str, since: datetime, until: datetime) -> datetime:
    """A bucket's start (Unix seconds, or RFC 3339), within a day of [since, until]."""
    skew = timedelta(seconds=limits.reconcile_report_skew_seconds)
    low, high = since - skew, until + skew
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not low.timestamp() <= value <= high.timestamp():  # NaN fails both comparisons
            raise _Refused(f"{name} {_shown(value)} lies outside the range asked for")
        return datetime.fromtimestamp(value, UTC)
    if not isinstance(value, str):
        raise _Refused(f"{name} is {_shown(value)}, not a time")
    at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if at.tzinfo is None:
        raise _Refused(f"{name} {_shown(value)} names no time zone")
    if not low <= at <= high:
        raise _Refused(f"{name} {_shown(value)} lies outside the range asked for")
    return at.astimezone(UTC)


def _count(row: dict[str, Any], name: str, within: str = "") -> int:
    """A count of row (absent or null: 0): an integer from 0 to the limit, or refused."""
    value = row.get(name)
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= limits.reconcile_report_count_max:
        raise _Refused(
            f"{within}{name} is {_shown(value)}, not an integer from 0 to "
            f"{limits.reconcile_report_count_max}"
        )
    return value


def _micros(value: Any, name: str, per: Decimal) -> int:
    """An amount (a number, or a decimal string) in micro-dollars, per micro-dollars a unit
    of it; finite and within the limit, or refused."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _Refused(f"{name} is {_shown(value)}, not an amount")
    amount = Decimal(str(value))
    bound = limits.reconcile_report_usd_max * MICROS_PER_DOLLAR
    if not amount.is_finite() or abs(amount * per) > bound:
        raise _Refused(
            f"{name} is {_shown(value)}, beyond {limits.reconcile_report_usd_max} dollars"
        )
    return int((amount * per).to_integral_value())


def _usd(currency: Any, name: str) -> None:
    """A cost in US dollars (absent: as both providers' reports are): any other currency
    is refused, not compared with the ledger's micro-dollars."""
    if currency is not None and str(currency).lower() != "usd":
        raise _Refused(f"{name} is {_shown(currency)}, not USD: its dollars are not comparable")


def _once(seen: set[tuple[Any, ...]], key: tuple[Any, ...], label: str) -> None:
    """A bucket's (model, key or project) comes once; twice is refused, named."""
    if key in seen:
        raise _Refused(f"{label} comes twice")
    seen.add(key)


def _bucket_label(start: datetime, model: str, r: dict[str, Any], *groups: str) -> str:
    owner = " ".join(f"{g} {r.get(g)}" for g in groups if r.get(g) is not None)
    return f"bucket {start:%Y-%m-%dT%H:%MZ} model {model}" + (f" {owner}" if owner else "")


def openai_usage(
    reader: ReportReader, scope: Scope, since: datetime, until: datetime
) -> list[Reported]:
    """Completions (chat and responses) and embeddings, per minute and model."""
    params: Params = [
        ("start_time", _unix(since)), ("end_time", _unix(until)), ("bucket_width", "1m"),
        ("limit", str(limits.reconcile_buckets_per_page_max)), ("group_by[]", "model"),
    ]  # fmt: skip
    if scope.api_key_id:
        params += [("group_by[]", "api_key_id"), ("api_key_ids[]", scope.api_key_id)]
    if scope.project_id:
        params += [("group_by[]", "project_id"), ("project_ids[]", scope.project_id)]
    found = []
    for path in ("/organization/usage/completions", "/organization/usage/embeddings"):
        with _published("openai", f"usage report {path}"):
            seen: set[tuple[Any, ...]] = set()
            for bucket in reader.buckets(path, params, "start_time"):
                start = _when(bucket["start_time"], "start_time", since, until)
                for r in bucket.get("results") or []:
                    model = str(r.get("model") or "")
                    label = _bucket_label(start, model, r, "api_key_id", "project_id")
                    _once(seen, (start, model, r.get("api_key_id"), r.get("project_id")), label)
                    tokens = Tokens(
                        input=_count(r, "input_tokens", f"{label}: "),
                        cached=_count(r, "input_cached_tokens", f"{label}: "),
                        output=_count(r, "output_tokens", f"{label}: "),
                        requests=_count(r, "num_model_requests", f"{label}: "),
                        written=_count(r, "input_cache_write_tokens", f"{label}: "),
                    )
                    found.append(Reported(start, model, tokens))
    return found


# OpenAI's cost report grouped by line_item names each line in free text: the SDK types it
# `line_item: Optional[str]` with no list of values (openai-python
# src/openai/types/admin/organization/usage_costs_response.py, CostsResult), and OpenAI
# publishes none. Published examples: "ft-gpt-4o-2024-08-06, input" and "..., output" (a
# model's line, "MODEL, KIND": the openai-cookbook's recorded run of
# examples/completions_usage_api.ipynb) and "Image models" (a line naming no model: the
# CostsResult example of openai-python api_reference/openapi.transformed.yml). The
# built-in tools and storage are billed apart from tokens (OpenAI's pricing page, as
# third-party summaries give it: web search and file search tool calls per 1,000, file
# search storage per GB a day, code interpreter by container) and reported apart
# (openai-python resources/admin/organization/usage.py: /organization/usage/
# web_search_calls, file_search_calls, code_interpreter_sessions, vector_stores). Their
# lines' exact text is not published; seen in the wild (unverified): "web search tool
# calls", "file search tool calls", "vector store storage", "file search storage",
# "Vector storage", "code interpreter sessions", "Code interpreter", "containers". So a
# line is classed by the words of those published names, in any case, whatever the rest
# of its text (the sources: docs/reconcile.md, "Cost lines that name no model"):
# storage first (a file search's storage is storage, not a call), then tools; a line of
# the published "MODEL, KIND" shape is its model's; anything else is other. A model's
# name is never read for those words (a fine-tuned model may be "ft:gpt-4.1:acme:
# storage-bot:x1"): in the "MODEL, KIND" shape only the KIND is.
_STORAGE_WORDS = ("storage", "vector store")
_TOOL_WORDS = ("web search", "file search", "code interpreter", "container")


def openai_line(line_item: str) -> tuple[Kind, str]:
    """A cost line item's kind, and its model for a model's line ("" otherwise)."""
    model, comma, kind = line_item.partition(",")
    model = model.strip()
    shaped = bool(comma and model and not any(c.isspace() for c in model))
    words = " ".join((kind if shaped else line_item).lower().replace("_", " ").split())
    if any(word in words for word in _STORAGE_WORDS):
        return Kind.STORAGE, ""
    if any(word in words for word in _TOOL_WORDS):
        return Kind.TOOLS, ""
    return (Kind.MODEL, model) if shaped else (Kind.OTHER, "")


def _line_shown(line_item: str) -> str:
    """A line item as shown: printable, and cut to its bound."""
    printable = "".join(c if c.isprintable() else " " for c in line_item)
    return printable[: limits.reconcile_line_item_shown_chars_max]


def openai_costs(
    reader: ReportReader, scope: Scope, since: datetime, until: datetime
) -> list[Billed]:
    """Dollars per day and model: a model's line item is "MODEL, KIND" ("gpt-4o-2024-08-06,
    input"), summed over its kinds; a line that names no model is classed by its kind
    (openai_line: tools, storage or other), never compared as a model."""
    params: Params = [
        ("start_time", _unix(since)), ("end_time", _unix(until)), ("bucket_width", "1d"),
        ("limit", str(limits.reconcile_range_days_max)), ("group_by[]", "line_item"),
    ]  # fmt: skip
    if scope.api_key_id:
        params.append(("api_key_ids[]", scope.api_key_id))
    if scope.project_id:
        params.append(("project_ids[]", scope.project_id))
    found = []
    with _published("openai", "cost report"):
        for bucket in reader.buckets("/organization/costs", params, "start_time"):
            day = _when(bucket["start_time"], "start_time", since, until).date()
            for r in bucket.get("results") or []:
                amount = (r.get("amount") or {}).get("value")
                line = _line_shown(str(r.get("line_item") or ""))
                kind, model = openai_line(line)
                named = model or repr(line)
                _usd((r.get("amount") or {}).get("currency"), f"day {day} {named} amount.currency")
                micros = _micros(amount, f"day {day} {named} amount.value", MICROS_PER_DOLLAR)
                found.append(Billed(day, model, micros, kind, line))
    return found


def anthropic_usage(
    reader: ReportReader, scope: Scope, since: datetime, until: datetime
) -> list[Reported]:
    """Messages per minute and model. The report counts tokens, not requests: its input is
    the uncached input, the cache reads and both kinds of cache writes."""
    params: Params = [
        ("starting_at", _rfc3339(since)), ("ending_at", _rfc3339(until)),
        ("bucket_width", "1m"), ("limit", str(limits.reconcile_buckets_per_page_max)),
        ("group_by[]", "model"),
    ]  # fmt: skip
    if scope.api_key_id:
        params += [("group_by[]", "api_key_id"), ("api_key_ids[]", scope.api_key_id)]
    if scope.project_id:
        params += [("group_by[]", "workspace_id"), ("workspace_ids[]", scope.project_id)]
    found = []
    seen: set[tuple[Any, ...]] = set()
    path = "/v1/organizations/usage_report/messages"
    with _published("anthropic", "messages usage report"):
        for bucket in reader.buckets(path, params, "starting_at"):
            start = _when(bucket["starting_at"], "starting_at", since, until)
            for r in bucket.get("results") or []:
                model = str(r.get("model") or "")
                label = _bucket_label(start, model, r, "api_key_id", "workspace_id")
                _once(seen, (start, model, r.get("api_key_id"), r.get("workspace_id")), label)
                at = f"{label}: "
                creation = r.get("cache_creation") or {}
                read = _count(r, "cache_read_input_tokens", at)
                long = _count(creation, "ephemeral_1h_input_tokens", f"{at}cache_creation.")
                short = _count(creation, "ephemeral_5m_input_tokens", f"{at}cache_creation.")
                written = short + long
                tokens = Tokens(
                    input=_count(r, "uncached_input_tokens", at) + read + written,
                    cached=read,
                    output=_count(r, "output_tokens", at),
                    requests=None,
                    written=written,
                    written_long=long,
                )
                found.append(Reported(start, model, tokens))
    return found


def anthropic_costs(
    reader: ReportReader, scope: Scope, since: datetime, until: datetime
) -> list[Billed]:
    """Dollars per day and model (amounts are decimal strings in cents). Its cost_type
    (tokens, web_search, code_execution) classes a line: a tool's is compared with the
    ledger's tool fees, a line of no model and no tool is other. The report cannot be
    narrowed to an API key: with --api-key-id there is no drift to report."""
    if scope.api_key_id:
        return []
    params: Params = [
        ("starting_at", _rfc3339(since)), ("ending_at", _rfc3339(until)),
        ("limit", str(limits.reconcile_range_days_max)), ("group_by[]", "description"),
    ]  # fmt: skip
    if scope.project_id:
        params += [("group_by[]", "workspace_id"), ("workspace_ids[]", scope.project_id)]
    found = []
    with _published("anthropic", "cost report"):
        for bucket in reader.buckets("/v1/organizations/cost_report", params, "starting_at"):
            day = _when(bucket["starting_at"], "starting_at", since, until).date()
            for r in bucket.get("results") or []:
                model = str(r.get("model") or "")
                line = _line_shown(str(r.get("description") or r.get("cost_type") or ""))
                kind = Kind.MODEL if model else Kind.OTHER
                if str(r.get("cost_type") or "") in ANTHROPIC_TOOL_COSTS:
                    kind, model = Kind.TOOLS, ""
                named = model or repr(line)
                _usd(r.get("currency"), f"day {day} {named} currency")
                micros = _micros(r.get("amount"), f"day {day} {named} amount", MICROS_PER_CENT)
                found.append(Billed(day, model, micros, kind, line))
    return found


READERS = {
    "openai": (openai_usage, openai_costs),
    "anthropic": (anthropic_usage, anthropic_costs),
}
# The service tiers whose costs the provider's cost report leaves out: Anthropic's
# priority tier is billed apart and not in its cost endpoint.
UNCOSTED_TIERS = {"openai": frozenset[str](), "anthropic": frozenset({"priority"})}
# Whether the provider's usage report counts requests (Anthropic's counts tokens only).
COUNTS_REQUESTS = {"openai": True, "anthropic": False}
