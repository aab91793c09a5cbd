"""The fake OpenAI's organization reports, computed from its own bill: GET
/v1/organization/usage/completions (chat completions and Responses API calls),
/v1/organization/usage/embeddings and /v1/organization/costs, for an admin key only.

A bill is reported in the bucket holding its `at` (the fake clock as the request arrived),
under its API key's id and project (tests/fake_openai_state.py). Costs price each bill at
`rates[model]` (USD per million tokens; a model without rates costs nothing), whatever its
service tier: "<model>, input" (the uncached prompt tokens, the cache-written ones at
cache_write), "<model>, cached input" and "<model>, output" (reasoning included); an
embedding has the input line alone. Lines of no tokens are left out. Pages hold `limit`
buckets, and at most `report_page_buckets_max`. No user, batch or Agents API traffic: a
`user_ids` filter or batch=true matches nothing, and grouped by them a result says user_id
null, batch false, api_source "unlabeled". Results in a bucket are in the order of their
group values.

Wire facts followed, as checked in the installed SDK (openai 3.57.0, which has these as
`OpenAI(admin_api_key=...).admin.organization.usage.completions/.embeddings/.costs`):
- Paths, parameters and the admin key as `Authorization: Bearer` (the SDK's
  `security={"admin_api_key_auth": True}`): openai/resources/admin/organization/usage.py,
  openai/_client.py (`_admin_api_key_auth`). start_time is required and end_time exclusive
  (Unix seconds); bucket_width 1m/1h/1d, default 1d; `limit` buckets a page, default
  60/24/7 and at most 1440/168/31 for 1m/1h/1d; `page` is the previous answer's
  `next_page` (usage_completions_params.py, usage_embeddings_params.py). Costs:
  bucket_width 1d only, limit 1 to 180 (default 7), group_by project_id, user_id,
  line_item, api_key_id, api_source, filters project_ids, api_key_ids, line_items (the
  whole line item) (usage_costs_params.py).
- Lists in the query string: the SDK sends `group_by[]=model&group_by[]=api_key_id`
  (openai/_client.py: `Querystring(array_format="brackets")`); OpenAI's usage cookbook
  (openai/openai-cookbook examples/completions_usage_api.ipynb) sends requests'
  `group_by=model`. Both are read.
- Answers: {object "page", data [{object "bucket", start_time, end_time, results}],
  has_more, next_page} (types/admin/organization/usage_completions_response.py,
  usage_embeddings_response.py, usage_costs_response.py). A completions result: object
  "organization.usage.completions.result", input_tokens (cached and cache-write
  included), input_cached_tokens, input_cache_write_tokens, input_uncached_tokens (neither),
  the text/audio/image splits, output_tokens, num_model_requests, and the group_by fields
  project_id, user_id, api_key_id, model, batch, service_tier, api_source, null when not
  grouped by. An embeddings result: object "organization.usage.embeddings.result",
  input_tokens, num_model_requests, project_id, user_id, api_key_id, model. A costs
  result: object "organization.costs.result", amount {value (a float, dollars), currency
  "usd"}, line_item, project_id, api_key_id, user_id, api_source (null when not grouped
  by), and quantity with quantity_unit "tokens" when grouped by line_item
  (cost_quantity_unit.py).
- Buckets, as the cookbook's recorded run shows them: a range's empty buckets are sent
  with `results: []`; the first usage bucket starts at start_time itself and ends at the
  next boundary of its width (later ones are whole, UTC-aligned); cost buckets are whole
  UTC days, the first the day holding start_time.
- Line items look like "ft-gpt-4o-2024-08-06, input", "ft-gpt-4o-2024-08-06, output"
  (the cookbook's recorded costs grouped by line_item). The fake's answers carry the
  requested model name, so its line items do too. ", cached input" and an embedding's
  ", input" are not in a published example: third-party parsers show them (unverified).
- Errors: {"error": {"message", "type", "param", "code"}}; no key, 401; a key OpenAI does
  not know, 401 code "invalid_api_key"; an ordinary API key (one in `api_key_ids`), 403
  "Missing scopes: api.usage.read", as users report it (the docs say only that an admin
  key is needed; the exact text is unverified).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tests.fake_openai_state import CHAT, EMBEDDINGS, RESPONSES, Billed, ModelRates, OpenAIState
from tests.fake_shared_reports import (
    PAGE_BUCKETS,
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

COMPLETIONS_USAGE = "/v1/organization/usage/completions"
EMBEDDINGS_USAGE = "/v1/organization/usage/embeddings"
COSTS = "/v1/organization/costs"
COMPLETION_GROUPS = (
    "project_id",
    "user_id",
    "api_key_id",
    "model",
    "batch",
    "service_tier",
    "api_source",
)
EMBEDDING_GROUPS = ("project_id", "user_id", "api_key_id", "model")
COST_GROUPS = ("project_id", "user_id", "line_item", "api_key_id", "api_source")
DAY = 86_400
# Costs: `limit` 1 to 180, default 7 (usage_costs_params.py).
COST_PAGE_BUCKETS = (7, 180)
NO_KEY = (
    "You didn't provide an API key. You need to provide your API key in an Authorization "
    "header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)
NO_SCOPE = "You have insufficient permissions for this operation. Missing scopes: api.usage.read."


@dataclass(frozen=True)
class _Line:
    """One priced line of a bill: its line item, tokens and dollars."""

    billed: Billed
    line_item: str
    quantity: int
    amount: Decimal


def report(state: OpenAIState, target: str, authorization: str | None) -> tuple[int, Any] | None:
    """The answer (status and body) to a GET of target, or None when it is no report."""
    query = Query.of(target)
    routes: dict[str, Callable[[OpenAIState, Query], dict[str, Any]]] = {
        COMPLETIONS_USAGE: _completions,
        EMBEDDINGS_USAGE: _embeddings,
        COSTS: _costs,
    }
    route = routes.get(query.path)
    if route is None:
        return None
    try:
        _authorize(state, authorization)
        return 200, route(state, query)
    except ReportError as refused:
        error = {"message": refused.message, "type": "invalid_request_error"}
        return refused.status, {"error": {**error, "param": refused.param, "code": refused.code}}


def _authorize(state: OpenAIState, authorization: str | None) -> None:
    key = (authorization or "").removeprefix("Bearer ").strip()
    if not key:
        raise ReportError(401, NO_KEY)
    if key in state.admin_keys:
        return
    if key in state.api_key_ids:
        raise ReportError(403, NO_SCOPE)
    shown = f"{key[:3]}*****{key[-4:]}" if len(key) > 8 else key
    message = f"Incorrect API key provided: {shown}. You can find your API key at "
    message += "https://platform.openai.com/account/api-keys."
    raise ReportError(401, message, code="invalid_api_key")


def _values(billed: Billed) -> dict[str, Any]:
    """A bill's value of each field a report groups by."""
    return {
        "project_id": billed.project_id,
        "user_id": None,
        "api_key_id": billed.api_key_id,
        "model": billed.model,
        "batch": False,
        "service_tier": billed.service_tier,
        "api_source": "unlabeled",
    }


def _selected(state: OpenAIState, query: Query, endpoints: Collection[str]) -> list[Billed]:
    """The bills of endpoints that the query's filters let through."""
    with state.lock:
        bills = [billed for billed in state.billed if billed.endpoint in endpoints]
    bills = published(state, bills, state.clock())
    for name, field in (("api_key_ids", "api_key_id"), ("project_ids", "project_id")):
        wanted = query.many(name)
        if wanted:
            bills = [billed for billed in bills if getattr(billed, field) in wanted]
    models = query.many("models")
    if models:
        bills = [billed for billed in bills if billed.model in models]
    if query.many("user_ids") or query.one("batch") == "true":
        return []
    return bills


def _spans(
    state: OpenAIState, query: Query, width: int, snap: bool
) -> tuple[list[tuple[int, int]], float]:
    """The buckets of the query's range, and where the range ends."""
    start = query.number("start_time")
    if start is None:
        raise ReportError(400, "Missing required parameter: 'start_time'.", "start_time")
    given_end = query.number("end_time")
    end = state.clock() if given_end is None else given_end
    return buckets(floor_to(start, width) if snap else start, end, width), end


def _page_start(query: Query) -> int | None:
    token = query.one("page")
    if token is None:
        return None
    try:
        (start,) = struct.unpack(">q", base64.b64decode(token, validate=True))
    except (ValueError, struct.error):
        raise ReportError(400, "Invalid value for 'page'.", "page") from None
    return int(start)


def _token(start: int | None) -> str | None:
    return None if start is None else base64.b64encode(struct.pack(">q", start)).decode()


def _page(
    state: OpenAIState,
    query: Query,
    records: list[Any],
    at: Callable[[Any], float],
    bucket: Callable[[list[Any]], list[dict[str, Any]]],
    costs: bool = False,
) -> dict[str, Any]:
    """A page of the query's buckets, each with the results bucket makes of its records."""
    if costs:
        width_of(query, ("1d",))
        width, (default, most) = DAY, COST_PAGE_BUCKETS
    else:
        name, width = width_of(query)
        default, most = PAGE_BUCKETS[name]
    size = page_size(query, default, most, state.report_page_buckets_max)
    spans, end = _spans(state, query, width, snap=costs)
    page, following = paged(spans, _page_start(query), size)
    data = []
    for start, stop in page:
        inside = [record for record in records if start <= at(record) < min(stop, end)]
        results = bucket(inside)
        data.append({"object": "bucket", "start_time": start, "end_time": stop, "results": results})
    next_page = _token(following)
    return {
        "object": "page",
        "data": data,
        "has_more": next_page is not None,
        "next_page": next_page,
    }


def _groups(
    query: Query, fields: tuple[str, ...], values: Callable[[Any], dict[str, Any]]
) -> Callable[[Any], tuple[Hashable, ...]]:
    """A record's group: its value of each field grouped by, None for the others."""
    group_by = query.choices("group_by", fields)
    return lambda record: tuple(
        values(record)[name] if name in group_by else None for name in fields
    )


def _completions(state: OpenAIState, query: Query) -> dict[str, Any]:
    key = _groups(query, COMPLETION_GROUPS, _values)

    def results(bills: list[Billed]) -> list[dict[str, Any]]:
        made = []
        for group, members in grouped(bills, key):
            prompt = sum(billed.prompt_tokens for billed in members)
            cached = sum(billed.cached_tokens for billed in members)
            written = sum(billed.cache_write_tokens for billed in members)
            output = sum(billed.completion_tokens for billed in members)
            uncached = prompt - cached - written
            counts = {
                "input_tokens": prompt,
                "input_cached_tokens": cached,
                "input_cache_write_tokens": written,
                "input_uncached_tokens": uncached,
                "input_text_tokens": uncached,
                "input_cached_text_tokens": cached,
                "input_audio_tokens": 0,
                "input_cached_audio_tokens": 0,
                "input_image_tokens": 0,
                "input_cached_image_tokens": 0,
                "output_tokens": output,
                "output_text_tokens": output,
                "output_audio_tokens": 0,
                "output_image_tokens": 0,
                "num_model_requests": len(members),
            }
            named = dict(zip(COMPLETION_GROUPS, group, strict=True))
            made.append({"object": "organization.usage.completions.result", **counts, **named})
        return made

    bills = _selected(state, query, (CHAT, RESPONSES))
    return _page(state, query, bills, lambda billed: billed.at, results)


def _embeddings(state: OpenAIState, query: Query) -> dict[str, Any]:
    key = _groups(query, EMBEDDING_GROUPS, _values)

    def results(bills: list[Billed]) -> list[dict[str, Any]]:
        return [
            {
                "object": "organization.usage.embeddings.result",
                "input_tokens": sum(billed.prompt_tokens for billed in members),
                "num_model_requests": len(members),
                **dict(zip(EMBEDDING_GROUPS, group, strict=True)),
            }
            for group, members in grouped(bills, key)
        ]

    bills = _selected(state, query, (EMBEDDINGS,))
    return _page(state, query, bills, lambda billed: billed.at, results)


def _price(tokens: int, rate: float) -> Decimal:
    return Decimal(repr(rate)) * tokens / 1_000_000


def lines(state: OpenAIState, billed: Billed) -> list[_Line]:
    """A bill's priced lines, as the cost report itemizes them; lines of no tokens are left
    out."""
    rates = state.rates.get(billed.model, ModelRates(0.0))
    write_rate = rates.input if rates.cache_write is None else rates.cache_write
    uncached = billed.prompt_tokens - billed.cached_tokens
    written, cached = billed.cache_write_tokens, billed.cached_tokens
    paid = _price(uncached - written, rates.input) + _price(written, write_rate)
    made = [
        _Line(billed, f"{billed.model}, input", uncached, paid),
        _Line(billed, f"{billed.model}, cached input", cached, _price(cached, rates.cached_input)),
        _Line(
            billed,
            f"{billed.model}, output",
            billed.completion_tokens,
            _price(billed.completion_tokens, rates.output),
        ),
    ]
    return [line for line in made if line.quantity]


def _costs(state: OpenAIState, query: Query) -> dict[str, Any]:
    def values(line: _Line) -> dict[str, Any]:
        return {**_values(line.billed), "line_item": line.line_item}

    key = _groups(query, COST_GROUPS, values)
    itemized = "line_item" in query.many("group_by")

    def results(items: list[_Line]) -> list[dict[str, Any]]:
        made = []
        for group, members in grouped(items, key):
            amount = sum((line.amount for line in members), Decimal(0))
            quantity = sum(line.quantity for line in members)
            made.append(
                {
                    "object": "organization.costs.result",
                    "amount": {"value": float(amount), "currency": "usd"},
                    **dict(zip(COST_GROUPS, group, strict=True)),
                    "quantity": float(quantity) if itemized else None,
                    "quantity_unit": "tokens" if itemized else None,
                }
            )
        return made

    bills = _selected(state, query, (CHAT, RESPONSES, EMBEDDINGS))
    items = [line for billed in bills for line in lines(state, billed)]
    wanted = query.many("line_items")
    if wanted:
        items = [line for line in items if line.line_item in wanted]
    return _page(state, query, items, lambda line: line.billed.at, results, costs=True)
