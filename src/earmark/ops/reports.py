"""The providers' organization usage and cost reports, read with an admin key as their
published APIs give them (checked facts: ../shared/notes/provider-usage-reports.md):
OpenAI's /organization/usage/completions and /embeddings in one-minute buckets and
/organization/costs by day; Anthropic's /v1/organizations/usage_report/messages and
/cost_report. Both SDKs send list parameters as `name[]=value`, and so does this. And one
OpenAI Response by its id (GET /responses/{id}), read with a project's API key: a
background response whose hold was left in doubt.

Errors are mapped once, here, to an OpsError that names the provider, the status and the
provider's own message, and never the key."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from earmark import limits
from earmark.core.reconcile import Billed, Reported, Tokens
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

    def __init__(self, provider: str, base: str, admin_key: str) -> None:
        self.provider = provider
        self.base = checked_base(base)
        self._key = admin_key
        if provider == "openai":
            self.headers = {"authorization": f"Bearer {admin_key}"}
        else:
            self.headers = {"x-api-key": admin_key, "anthropic-version": ANTHROPIC_VERSION}

    def get(self, path: str, params: Params) -> dict[str, Any]:
        url = f"{self.base}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        request = urllib.request.Request(
            url, headers={**self.headers, "accept": "application/json"}
        )
        try:
            with _OPENER.open(request, timeout=limits.reconcile_http_timeout_seconds) as r:
                body = r.read(limits.reconcile_report_bytes_max + 1)
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
        try:
            found = json.loads(body)
        except ValueError:
            raise OpsError(f"{self.provider}'s answer to GET {path} is not JSON") from None
        if not isinstance(found, dict):
            raise OpsError(f"{self.provider}'s answer to GET {path} is not a JSON object")
        return found

    def buckets(self, path: str, params: Params) -> Iterator[dict[str, Any]]:
        """Every bucket of a report, following next_page while has_more."""
        page = ""
        for _ in range(limits.reconcile_pages_max):
            answer = self.get(path, [*params, *([("page", page)] if page else [])])
            yield from answer.get("data") or []
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
    except (KeyError, TypeError, ValueError, AttributeError, InvalidOperation) as error:
        raise OpsError(
            f"{provider}'s {what} is not in its published shape ({type(error).__name__}: "
            f"{str(error)[:200]})"
        ) from None


def _unix(at: datetime) -> str:
    return str(int(at.timestamp()))


def _rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _when(value: Any) -> datetime:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, UTC)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC)


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
            for bucket in reader.buckets(path, params):
                start = _when(bucket["start_time"])
                for r in bucket.get("results") or []:
                    tokens = Tokens(
                        input=int(r.get("input_tokens") or 0),
                        cached=int(r.get("input_cached_tokens") or 0),
                        output=int(r.get("output_tokens") or 0),
                        requests=int(r.get("num_model_requests") or 0),
                        written=int(r.get("input_cache_write_tokens") or 0),
                    )
                    found.append(Reported(start, str(r.get("model") or ""), tokens))
    return found


def openai_costs(
    reader: ReportReader, scope: Scope, since: datetime, until: datetime
) -> list[Billed]:
    """Dollars per day and model: a line item is "MODEL, KIND" ("gpt-4o-2024-08-06,
    input"), summed over its kinds."""
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
        for bucket in reader.buckets("/organization/costs", params):
            day = _when(bucket["start_time"]).date()
            for r in bucket.get("results") or []:
                amount = (r.get("amount") or {}).get("value") or 0
                model = str(r.get("line_item") or "").split(",")[0].strip()
                micros = int((Decimal(str(amount)) * MICROS_PER_DOLLAR).to_integral_value())
                found.append(Billed(day, model, micros))
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
    with _published("anthropic", "messages usage report"):
        for bucket in reader.buckets("/v1/organizations/usage_report/messages", params):
            start = _when(bucket["starting_at"])
            for r in bucket.get("results") or []:
                creation = r.get("cache_creation") or {}
                read = int(r.get("cache_read_input_tokens") or 0)
                long = int(creation.get("ephemeral_1h_input_tokens") or 0)
                written = int(creation.get("ephemeral_5m_input_tokens") or 0) + long
                tokens = Tokens(
                    input=int(r.get("uncached_input_tokens") or 0) + read + written,
                    cached=read,
                    output=int(r.get("output_tokens") or 0),
                    requests=None,
                    written=written,
                    written_long=long,
                )
                found.append(Reported(start, str(r.get("model") or ""), tokens))
    return found


def anthropic_costs(
    reader: ReportReader, scope: Scope, since: datetime, until: datetime
) -> list[Billed]:
    """Dollars per day and model (amounts are decimal strings in cents). The report cannot
    be narrowed to an API key: with --api-key-id there is no drift to report."""
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
        for bucket in reader.buckets("/v1/organizations/cost_report", params):
            day = _when(bucket["starting_at"]).date()
            for r in bucket.get("results") or []:
                model = str(r.get("model") or "")
                amount = Decimal(str(r.get("amount") or "0"))
                found.append(
                    Billed(day, model, int((amount * MICROS_PER_CENT).to_integral_value()))
                )
    return found


READERS = {
    "openai": (openai_usage, openai_costs),
    "anthropic": (anthropic_usage, anthropic_costs),
}
# Whether the provider's usage report counts requests (Anthropic's counts tokens only).
COUNTS_REQUESTS = {"openai": True, "anthropic": False}
