"""The fake Anthropic's organization reports, computed from its own bill: GET
/v1/organizations/usage_report/messages and /v1/organizations/cost_report, for an Admin API
key only.

A bill is reported in the bucket holding its `at` (the fake clock as the request arrived),
under its API key's id and workspace (tests/fake_anthropic_state.py); every message is
service tier "standard", context window "0-200k" and inference geo "not_available". The
cost report prices a bill at `rates_of(model)` (`model_rates`, else `rates`), one line a
token type and one for web searches; lines of no tokens are left out. Pages hold `limit`
buckets, and at most `report_page_buckets_max`. Results in a bucket are in the order of
their group values.

Wire facts followed, as checked (the installed anthropic 2.16.0 has no method for these
two endpoints, only the newer beta analytics reports, so the shapes are the API
reference's: https://platform.claude.com/docs/en/api/admin/usage_report/retrieve_messages.md
and https://platform.claude.com/docs/en/api/admin/cost_report/retrieve.md):
- Usage report parameters: starting_at (required) and ending_at, RFC 3339; buckets are
  snapped to the start of their minute/hour/day in UTC and those that end by ending_at
  are returned; bucket_width 1m/1h/1d; `limit` buckets a page, default 60/24/7 and at most
  1440/168/31; `page` the previous answer's next_page; group_by any of api_key_id,
  workspace_id, model, service_tier, context_window, inference_geo (speed, account_id and
  service_account_id are not served here); filters api_key_ids, workspace_ids, models,
  service_tiers, context_window, inference_geos. Lists are sent as `group_by[]=model`,
  as the reference's curl example writes them and as the SDK encodes lists
  (anthropic/_client.py: `Querystring(array_format="brackets")`); `group_by=` is read too.
- Usage answer: {data [{starting_at, ending_at, results}], has_more, next_page}; a result
  has uncached_input_tokens, cache_creation {ephemeral_1h_input_tokens,
  ephemeral_5m_input_tokens}, cache_read_input_tokens, output_tokens, server_tool_use
  {web_search_requests}, and api_key_id, workspace_id, model, service_tier,
  context_window, inference_geo, null when not grouped by. next_page is "page_" and the
  base64 of the next bucket's start ("page_MjAyNS0wNS0xNFQwMDowMDowMFo=" in the reference
  decodes to "2025-05-14T00:00:00Z"). Empty buckets are sent with no results.
- Cost report parameters: starting_at (required), ending_at, bucket_width "1d" only,
  group_by workspace_id and description, limit (default 7, at most 31), page. A result:
  amount (a decimal string in cents: "123.45" is $1.23), currency "USD", cost_type
  ("tokens", "web_search"; null unless grouped by description), and, when grouped by
  description, description, model, token_type ("uncached_input_tokens", "output_tokens",
  "cache_read_input_tokens", "cache_creation.ephemeral_5m_input_tokens",
  "cache_creation.ephemeral_1h_input_tokens": the token types the installed SDK lists,
  anthropic/types/beta/organization/beta_analytics_token_type.py), service_tier and
  context_window (null for web searches); inference_geo null; workspace_id "null if not
  grouping by workspace or for the default workspace" (the fake reports the Default
  Workspace as null in both reports).
- Descriptions: "<model> Usage - Input Tokens" is the reference's example; "... - Input
  Tokens, Cache Write" (5-minute writes) is in recorded answers others have published;
  "... - Output Tokens", "... - Input Tokens, Cache Hit", "... - Input Tokens, Cache
  Write (1h)" and "Web Search Usage" are the fake's own by analogy (unverified). The fake
  has no display names: <model> is the model id. Key on model, token_type and cost_type,
  never on the description.
- Auth: the Admin API key in x-api-key, as the reference's curl sends it, or as
  `Authorization: Bearer`, as the installed SDK sends any api_key (anthropic/_client.py,
  `_api_key_auth`); with an anthropic-version header (the reference sends "2023-06-01",
  the SDK "2026-10-21"; any is taken). No key, 401 authentication_error; any other key,
  ordinary API keys included, 401 "invalid x-api-key" (the reference says only that an
  Admin key is required: unverified). No anthropic-version, 400 invalid_request_error.
  Errors: {"type": "error", "error": {"type", "message"}, "request_id"}.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from tests.fake_anthropic_state import DEFAULT_WORKSPACE_ID, AnthropicState, Bill
from tests.fake_shared_reports import (
    PAGE_BUCKETS,
    WIDTHS,
    Query,
    ReportError,
    buckets,
    floor_to,
    grouped,
    page_size,
    paged,
    published,
    width_of,
)

USAGE_REPORT = "/v1/organizations/usage_report/messages"
COST_REPORT = "/v1/organizations/cost_report"
USAGE_GROUPS = (
    "api_key_id",
    "workspace_id",
    "model",
    "service_tier",
    "context_window",
    "inference_geo",
)
# Filters of the usage report and the field each restricts.
USAGE_FILTERS = {
    "api_key_ids": "api_key_id",
    "workspace_ids": "workspace_id",
    "models": "model",
    "service_tiers": "service_tier",
    "context_window": "context_window",
    "inference_geos": "inference_geo",
}
COST_GROUPS = ("workspace_id", "description")
# What the description says of each token type, after "<model> Usage - ".
TOKEN_TYPES = {
    "uncached_input_tokens": "Input Tokens",
    "output_tokens": "Output Tokens",
    "cache_read_input_tokens": "Input Tokens, Cache Hit",
    "cache_creation.ephemeral_5m_input_tokens": "Input Tokens, Cache Write",
    "cache_creation.ephemeral_1h_input_tokens": "Input Tokens, Cache Write (1h)",
}
WEB_SEARCH = "Web Search Usage"


@dataclass(frozen=True)
class _Line:
    """One priced line of a bill: what it is (token_type None for web searches), how many
    tokens or searches, and its cents."""

    bill: Bill
    token_type: str | None
    quantity: int
    cents: Decimal


def report(
    state: AnthropicState, target: str, api_key: str | None, version: str
) -> tuple[int, Any] | None:
    """The answer (status and body) to a GET of target with api_key and anthropic-version
    version, or None when it is no report."""
    query = Query.of(target)
    routes: dict[str, Callable[[AnthropicState, Query], dict[str, Any]]] = {
        USAGE_REPORT: _usage,
        COST_REPORT: _costs,
    }
    route = routes.get(query.path)
    if route is None:
        return None
    try:
        _authorize(state, api_key, version)
        return 200, route(state, query)
    except ReportError as refused:
        kind = "authentication_error" if refused.status == 401 else "invalid_request_error"
        error = {"type": kind, "message": refused.message}
        return refused.status, {"type": "error", "error": error, "request_id": "req_fake"}


def _authorize(state: AnthropicState, key: str | None, version: str) -> None:
    if not key:
        raise ReportError(401, "x-api-key header is required")
    if key not in state.admin_keys:
        raise ReportError(401, "invalid x-api-key")
    if not version:
        raise ReportError(400, "anthropic-version: header is required")


def _time(query: Query, name: str) -> float | None:
    """An RFC 3339 parameter as Unix seconds (UTC when it names no offset)."""
    given = query.one(name)
    if given is None:
        return None
    try:
        parsed = datetime.fromisoformat(given)
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    except ValueError:
        raise ReportError(400, f"{name}: Input should be a valid datetime", name) from None


def rfc3339(at: int) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _page_start(query: Query) -> int | None:
    token = query.one("page")
    if token is None:
        return None
    try:
        text = base64.b64decode(token.removeprefix("page_"), validate=True).decode()
        return int(datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ReportError(400, "page: Invalid page token", "page") from None


def _page(
    state: AnthropicState,
    query: Query,
    width_name: str,
    records: list[Any],
    at: Callable[[Any], float],
    bucket: Callable[[list[Any]], list[dict[str, Any]]],
) -> dict[str, Any]:
    """A page of the query's buckets, each with the results bucket makes of its records."""
    width = WIDTHS[width_name]
    start = _time(query, "starting_at")
    if start is None:
        raise ReportError(400, "starting_at: Field required", "starting_at")
    ending = _time(query, "ending_at")
    # Buckets that end by ending_at; without it, up to the one holding now.
    end = state.clock() if ending is None else floor_to(ending, width)
    spans = buckets(floor_to(start, width), end, width)
    default, most = PAGE_BUCKETS[width_name]
    size = page_size(query, default, most, state.report_page_buckets_max)
    page, following = paged(spans, _page_start(query), size)
    data = []
    for begin, stop in page:
        inside = [record for record in records if begin <= at(record) < stop]
        data.append(
            {"starting_at": rfc3339(begin), "ending_at": rfc3339(stop), "results": bucket(inside)}
        )
    next_page = None
    if following is not None:
        next_page = "page_" + base64.b64encode(rfc3339(following).encode()).decode()
    return {"data": data, "has_more": next_page is not None, "next_page": next_page}


def _values(bill: Bill) -> dict[str, Any]:
    """A bill's value of each field the usage report groups or filters by."""
    return {
        "api_key_id": bill.api_key_id,
        "workspace_id": bill.workspace_id,
        "model": bill.model,
        "service_tier": "standard",
        "context_window": "0-200k",
        "inference_geo": "not_available",
    }


def _shown(field: str, value: Any) -> Any:
    """A group value as the report shows it: the Default Workspace as null."""
    return None if field == "workspace_id" and value == DEFAULT_WORKSPACE_ID else value


def _bills(state: AnthropicState) -> list[Bill]:
    with state.lock:
        bills = list(state.billed)
    return published(state, bills, state.clock())


def _usage(state: AnthropicState, query: Query) -> dict[str, Any]:
    width_name, _ = width_of(query)
    group_by = query.choices("group_by", USAGE_GROUPS)
    bills = _bills(state)
    for name, field in USAGE_FILTERS.items():
        wanted = query.many(name)
        if wanted:
            bills = [bill for bill in bills if _values(bill)[field] in wanted]

    def key(bill: Bill) -> tuple[Hashable, ...]:
        values = _values(bill)
        return tuple(
            _shown(name, values[name]) if name in group_by else None for name in USAGE_GROUPS
        )

    def results(members_of: list[Bill]) -> list[dict[str, Any]]:
        made: list[dict[str, Any]] = []
        for group, members in grouped(members_of, key):
            long = sum(bill.ephemeral_1h_input_tokens for bill in members)
            written = sum(bill.cache_creation_input_tokens for bill in members)
            made.append(
                {
                    "uncached_input_tokens": sum(bill.input_tokens for bill in members),
                    "cache_creation": {
                        "ephemeral_1h_input_tokens": long,
                        "ephemeral_5m_input_tokens": written - long,
                    },
                    "cache_read_input_tokens": sum(
                        bill.cache_read_input_tokens for bill in members
                    ),
                    "output_tokens": sum(bill.output_tokens for bill in members),
                    "server_tool_use": {
                        "web_search_requests": sum(bill.web_search_requests for bill in members)
                    },
                    **dict(zip(USAGE_GROUPS, group, strict=True)),
                }
            )
        return made

    return _page(state, query, width_name, bills, lambda bill: bill.at, results)


def _cents(micro_dollar_millionths: int) -> Decimal:
    """Cents, from micro-dollars per million tokens times tokens."""
    return Decimal(micro_dollar_millionths) / 10**10


def amount(cents: Decimal) -> str:
    """Cents as the cost report writes them: a decimal string, "123.45"."""
    return format(cents.normalize(), "f") if cents else "0"


def lines(state: AnthropicState, bill: Bill) -> list[_Line]:
    """A bill's priced lines, as the cost report itemizes them; lines of nothing are left
    out."""
    rates = state.rates_of(bill.model)
    long = bill.ephemeral_1h_input_tokens
    short = bill.cache_creation_input_tokens - long
    made = [
        _Line(
            bill,
            "uncached_input_tokens",
            bill.input_tokens,
            _cents(bill.input_tokens * rates.input),
        ),
        _Line(bill, "output_tokens", bill.output_tokens, _cents(bill.output_tokens * rates.output)),
        _Line(
            bill,
            "cache_read_input_tokens",
            bill.cache_read_input_tokens,
            _cents(bill.cache_read_input_tokens * rates.cache_read),
        ),
        _Line(
            bill,
            "cache_creation.ephemeral_5m_input_tokens",
            short,
            _cents(short * rates.cache_write),
        ),
        _Line(
            bill,
            "cache_creation.ephemeral_1h_input_tokens",
            long,
            _cents(long * (rates.cache_write_long or rates.cache_write)),
        ),
        # A search costs web_search micro-dollars: a ten-thousandth of it in cents.
        _Line(
            bill,
            None,
            bill.web_search_requests,
            Decimal(bill.web_search_requests * rates.web_search) / 10_000,
        ),
    ]
    return [line for line in made if line.quantity]


def _described(line: _Line) -> dict[str, Any]:
    """A line's fields when the report is grouped by description."""
    if line.token_type is None:
        return {
            "cost_type": "web_search",
            "description": WEB_SEARCH,
            "model": None,
            "token_type": None,
            "service_tier": None,
            "context_window": None,
        }
    return {
        "cost_type": "tokens",
        "description": f"{line.bill.model} Usage - {TOKEN_TYPES[line.token_type]}",
        "model": line.bill.model,
        "token_type": line.token_type,
        "service_tier": "standard",
        "context_window": "0-200k",
    }


def _costs(state: AnthropicState, query: Query) -> dict[str, Any]:
    width_of(query, ("1d",))
    group_by = query.choices("group_by", COST_GROUPS)
    by_description = "description" in group_by
    items = [line for bill in _bills(state) for line in lines(state, bill)]
    nothing = dict.fromkeys(("cost_type", "description", "model", "token_type"))
    blank = {**nothing, "service_tier": None, "context_window": None}

    def key(line: _Line) -> tuple[Hashable, ...]:
        workspace = _shown("workspace_id", line.bill.workspace_id)
        described = _described(line) if by_description else blank
        return (workspace if "workspace_id" in group_by else None, *described.values())

    def results(members_of: list[_Line]) -> list[dict[str, Any]]:
        made: list[dict[str, Any]] = []
        for group, members in grouped(members_of, key):
            workspace, *described = group
            fields = dict(zip(blank, described, strict=True))
            cents = sum((line.cents for line in members), Decimal(0))
            made.append(
                {
                    "amount": amount(cents),
                    "currency": "USD",
                    **fields,
                    "inference_geo": None,
                    "workspace_id": workspace,
                }
            )
        return made

    return _page(state, query, "1d", items, lambda line: line.bill.at, results)
