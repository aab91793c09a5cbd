"""The fake providers' organization usage and cost reports follow the providers' published
shapes and add up the fakes' own bills: calls made through the real SDKs with two API
keys, in minutes and days chosen by moving a shared fake clock, read back through the
openai SDK's admin methods and, for Anthropic (whose SDK has no method for these
reports), with GETs as its API reference writes them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from openai.types.admin.organization.usage_completions_response import (
    DataResultOrganizationUsageCompletionsResult as CompletionsResult,
)
from openai.types.admin.organization.usage_completions_response import (
    UsageCompletionsResponse,
)
from openai.types.admin.organization.usage_costs_response import (
    DataResultOrganizationCostsResult as CostsResult,
)
from openai.types.admin.organization.usage_costs_response import UsageCostsResponse
from openai.types.admin.organization.usage_embeddings_response import (
    DataResultOrganizationUsageEmbeddingsResult as EmbeddingsResult,
)

from tests.fake_anthropic import Bill, FakeAnthropic, Rates, fake_anthropic
from tests.fake_openai import Billed, FakeOpenAI, fake_openai
from tests.fake_openai_state import RESPONSES
from tests.fake_shared_reports import Publication, publish

# 2026-01-01T00:00:00Z: the start of a UTC day.
T0 = 1_767_225_600
MINUTE, DAY = 60, 86_400
KEY_A, KEY_B = "sk-proj-a", "sk-proj-b"
OPENAI_ADMIN, ANTHROPIC_ADMIN = "sk-admin-test", "sk-ant-admin01-test"
CLAUDE = "claude-test"
RATES = Rates(input=3_000_000, output=15_000_000, cache_read=300_000, cache_write=3_750_000)
ADMIN_HEADERS = {"x-api-key": ANTHROPIC_ADMIN, "anthropic-version": "2023-06-01"}
USAGE_REPORT = "/v1/organizations/usage_report/messages"
COST_REPORT = "/v1/organizations/cost_report"
COST_FIELDS = ("cost_type", "model", "token_type", "description", "amount", "workspace_id")


class Clock:
    """A fake clock, Unix seconds, that a test moves between calls."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at

    def move(self, seconds: float) -> None:
        self.at += seconds


def present(token: str | None) -> str:
    """A next_page token, which a page with more after it must have."""
    if token is None:
        raise AssertionError("no next_page")
    return token


def chat(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


@contextmanager
def openai_org() -> Iterator[tuple[FakeOpenAI, Clock, openai.OpenAI]]:
    """A fake OpenAI on a fake clock a few seconds into T0's first minute, KEY_A in the
    default project and KEY_B in proj_b, and a client with its admin key."""
    clock = Clock(T0 + 5)
    with (
        fake_openai() as fake,
        openai.OpenAI(admin_api_key=OPENAI_ADMIN, base_url=fake.url, max_retries=0) as admin,
    ):
        fake.state.clock = clock
        fake.state.api_key_ids = {KEY_A: "key_a", KEY_B: "key_b"}
        fake.state.project_ids = {KEY_B: "proj_b"}
        fake.state.completion_tokens = 20
        yield fake, clock, admin


def caller(fake: FakeOpenAI, key: str) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=fake.url, max_retries=0)


def completions_rows(page: UsageCompletionsResponse) -> list[Any]:
    """Each bucket's span and its results' group fields and counts."""
    rows = []
    for bucket in page.data:
        results = []
        for result in bucket.results:
            assert isinstance(result, CompletionsResult)
            group = (result.model, result.api_key_id, result.project_id, result.service_tier)
            counts = (result.input_tokens, result.input_cached_tokens, result.output_tokens)
            results.append((*group, *counts, result.num_model_requests))
        rows.append((bucket.start_time, bucket.end_time, results))
    return rows


def costs_rows(page: UsageCostsResponse) -> list[Any]:
    """Each bucket's start and its results' line item, key, dollars and tokens."""
    rows = []
    for bucket in page.data:
        for result in bucket.results:
            assert isinstance(result, CostsResult)
            value = result.amount.value if result.amount else None
            item = (result.line_item, result.api_key_id, value, result.quantity)
            rows.append((bucket.start_time, *item))
    return rows


def test_completions_usage_buckets_chat_and_responses_calls_by_minute_model_and_key() -> None:
    """Chat and Responses calls by two keys in three minutes come back one bucket a minute,
    an empty minute included, grouped by model and key; embeddings are not in it."""
    with openai_org() as (fake, clock, admin):
        fake.state.cached_tokens = 50
        with caller(fake, KEY_A) as a, caller(fake, KEY_B) as b:
            a.chat.completions.create(model="gpt-4o", messages=chat("y" * 400))
            fake.state.cached_tokens = 0
            b.embeddings.create(model="text-embedding-3-small", input="hello")
            clock.move(2 * MINUTE)
            b.responses.create(model="o4-mini", input="hello", service_tier="flex")
            a.chat.completions.create(model="gpt-4o", messages=chat("hi"))
        page = admin.admin.organization.usage.completions(
            start_time=T0,
            end_time=T0 + 4 * MINUTE,
            bucket_width="1m",
            group_by=["model", "api_key_id"],
        )
    assert [
        (T0, T0 + MINUTE, [("gpt-4o", "key_a", None, None, 101, 50, 20, 1)]),
        (T0 + MINUTE, T0 + 2 * MINUTE, []),
        (
            T0 + 2 * MINUTE,
            T0 + 3 * MINUTE,
            [
                ("gpt-4o", "key_a", None, None, 1, 0, 20, 1),
                ("o4-mini", "key_b", None, None, 2, 0, 20, 1),
            ],
        ),
        (T0 + 3 * MINUTE, T0 + 4 * MINUTE, []),
    ] == completions_rows(page)
    assert (False, None) == (page.has_more, page.next_page)


def test_a_bill_booked_at_completion_is_published_after_its_delay() -> None:
    """With a Publication a call is reported in the minute it completed, and only once the
    publication delay has passed since: before then its minute is empty."""
    with openai_org() as (fake, clock, admin), caller(fake, KEY_A) as a:
        publish(fake.state, Publication(booked_after_seconds=3 * MINUTE,
                                        published_after_seconds=2 * MINUTE))  # fmt: skip
        a.chat.completions.create(model="gpt-4o", messages=chat("hi"))

        def minutes() -> list[Any]:
            page = admin.admin.organization.usage.completions(
                start_time=T0, end_time=T0 + 4 * MINUTE, bucket_width="1m",
                group_by=["model", "api_key_id"],
            )  # fmt: skip
            return [(start, [r[0] for r in results]) for start, _, results in
                    completions_rows(page)]  # fmt: skip

        early = minutes()
        clock.move(5 * MINUTE)
        late = minutes()
    empty: list[Any] = [(T0 + k * MINUTE, []) for k in range(4)]
    assert (empty, [*empty[:3], (T0 + 3 * MINUTE, ["gpt-4o"])]) == (early, late)


def test_completions_usage_filters_by_key_and_model_and_groups_by_project_and_tier() -> None:
    """Filters by API key id and model leave the other calls out, and grouping by project
    and tier reports the key's project and the tier that served the call."""
    with openai_org() as (fake, _, admin):
        with caller(fake, KEY_A) as a, caller(fake, KEY_B) as b:
            a.chat.completions.create(model="gpt-4o", messages=chat("hi"))
            b.chat.completions.create(model="gpt-4o", messages=chat("hi"), service_tier="fast")
            b.responses.create(model="o4-mini", input="hi")
        usage = admin.admin.organization.usage
        by_key = usage.completions(
            start_time=T0, end_time=T0 + DAY, api_key_ids=["key_b"], models=["gpt-4o"]
        )
        by_project = usage.completions(
            start_time=T0, end_time=T0 + DAY, group_by=["project_id", "service_tier"]
        )
    assert [(T0, T0 + DAY, [(None, None, None, None, 1, 0, 20, 1)])] == completions_rows(by_key)
    assert [
        (
            T0,
            T0 + DAY,
            [
                (None, None, "proj_b", "default", 1, 0, 20, 1),
                (None, None, "proj_b", "priority", 1, 0, 20, 1),
                (None, None, "proj_default", "default", 1, 0, 20, 1),
            ],
        )
    ] == completions_rows(by_project)


def test_embeddings_usage_counts_embeddings_alone_by_key() -> None:
    """The embeddings report counts embeddings requests and their input tokens by key, and
    no chat completion."""
    with openai_org() as (fake, _, admin):
        with caller(fake, KEY_A) as a, caller(fake, KEY_B) as b:
            a.embeddings.create(model="text-embedding-3-small", input=["hello", "x" * 40])
            b.embeddings.create(model="text-embedding-3-small", input="hello")
            b.chat.completions.create(model="gpt-4o", messages=chat("hi"))
        page = admin.admin.organization.usage.embeddings(
            start_time=T0, end_time=T0 + DAY, group_by=["api_key_id", "model"]
        )
    rows = []
    for bucket in page.data:
        for result in bucket.results:
            assert isinstance(result, EmbeddingsResult)
            group = (result.api_key_id, result.model, result.project_id)
            rows.append((*group, result.input_tokens, result.num_model_requests))
    model = "text-embedding-3-small"
    assert [("key_a", model, None, 13, 1), ("key_b", model, None, 2, 1)] == rows


def test_usage_pages_follow_next_page_to_the_same_buckets_as_one_page() -> None:
    """With two buckets a page, five minutes come in three pages, each next_page leading
    to the next, and together they are the one-page answer."""
    with openai_org() as (fake, clock, admin):
        with caller(fake, KEY_A) as a:
            for _ in range(5):
                a.chat.completions.create(model="gpt-4o", messages=chat("hi"))
                clock.move(MINUTE)
        usage = admin.admin.organization.usage
        asked: dict[str, Any] = {
            "start_time": T0,
            "end_time": T0 + 5 * MINUTE,
            "bucket_width": "1m",
        }
        whole = usage.completions(**asked)
        fake.state.report_page_buckets_max = 2
        pages = [usage.completions(**asked)]
        while pages[-1].has_more:
            pages.append(usage.completions(**asked, page=present(pages[-1].next_page)))
    assert [2, 2, 1] == [len(page.data) for page in pages]
    assert completions_rows(whole) == [row for page in pages for row in completions_rows(page)]


def test_costs_price_each_day_by_line_item_and_key_at_the_providers_rates() -> None:
    """Costs come one bucket a UTC day, in dollars at the fake's rates (here 1.83 times
    the list price for gpt-4o), by "<model>, input" / "cached input" / "output" line items
    and key; a cost page holds a day with a page size of one."""
    with openai_org() as (fake, clock, admin):
        fake.state.rates["gpt-4o"] = fake.state.rates["gpt-4o"].times(1.83)
        fake.state.completion_tokens = 100
        with caller(fake, KEY_A) as a, caller(fake, KEY_B) as b:
            fake.state.cached_tokens = 400
            a.chat.completions.create(model="gpt-4o", messages=chat("y" * 3_996))
            fake.state.cached_tokens = 0
            b.embeddings.create(model="text-embedding-3-small", input="x" * 3_996)
            clock.move(DAY)
            b.chat.completions.create(model="gpt-4o", messages=chat("y" * 3_996))
        costs = admin.admin.organization.usage.costs
        asked: dict[str, Any] = {
            "start_time": T0 + 5,
            "end_time": T0 + 2 * DAY,
            "group_by": ["line_item", "api_key_id"],
        }
        whole = costs(**asked)
        fake.state.report_page_buckets_max = 1
        first = costs(**asked)
        second = costs(**asked, page=present(first.next_page))
    assert [
        (T0, "gpt-4o, cached input", "key_a", 0.000915, 400),
        (T0, "gpt-4o, input", "key_a", 0.002745, 600),
        (T0, "gpt-4o, output", "key_a", 0.00183, 100),
        (T0, "text-embedding-3-small, input", "key_b", 0.00002, 1_000),
        (T0 + DAY, "gpt-4o, input", "key_b", 0.004575, 1_000),
        (T0 + DAY, "gpt-4o, output", "key_b", 0.00183, 100),
    ] == costs_rows(whole)
    assert (True, False, costs_rows(whole)) == (
        first.has_more,
        second.has_more,
        costs_rows(first) + costs_rows(second),
    )


def test_reports_refuse_a_wrong_key_and_an_ordinary_api_key() -> None:
    """A report asked with no key or an unknown one answers 401 in OpenAI's error shape,
    and with an ordinary API key 403 (missing the api.usage.read scope)."""
    with openai_org() as (fake, _, _):
        wrong_key = openai.OpenAI(admin_api_key="sk-admin-wrong", base_url=fake.url, max_retries=0)
        with wrong_key, pytest.raises(openai.AuthenticationError) as wrong:
            wrong_key.admin.organization.usage.costs(start_time=T0)
        api_key = openai.OpenAI(admin_api_key=KEY_A, base_url=fake.url, max_retries=0)
        with api_key, pytest.raises(openai.PermissionDeniedError) as ordinary:
            api_key.admin.organization.usage.completions(start_time=T0)
        bare = httpx2.get(fake.url + "/organization/usage/completions", params={"start_time": T0})
    assert (401, "invalid_api_key") == (wrong.value.status_code, wrong.value.code)
    assert 403 == ordinary.value.status_code
    assert "api.usage.read" in ordinary.value.message
    assert (401, "invalid_request_error") == (bare.status_code, bare.json()["error"]["type"])


def test_an_unstarted_call_bills_nothing_while_a_late_one_bills() -> None:
    """An "unstarted" call's connection closes unanswered and bills nothing, so the usage
    report counts only the "late" call, which is answered and billed."""
    with openai_org() as (fake, _, admin):
        fake.state.late_seconds = 0
        with caller(fake, KEY_A) as a:
            with pytest.raises(openai.APIConnectionError):
                a.chat.completions.create(model="gpt-4o", messages=chat("unstarted"))
            a.responses.create(model="gpt-4o", input="late")
        page = admin.admin.organization.usage.completions(start_time=T0, end_time=T0 + DAY)
    assert ([Billed(2, 20, 0, RESPONSES)], 1) == (fake.state.billed, fake.state.unstarted)
    assert [(T0, T0 + DAY, [(None, None, None, None, 2, 0, 20, 1)])] == completions_rows(page)


@contextmanager
def anthropic_org() -> Iterator[tuple[FakeAnthropic, Clock]]:
    """A fake Anthropic on a fake clock a few seconds into T0's first minute, KEY_A in the
    Default Workspace and KEY_B in wrkspc_b."""
    clock = Clock(T0 + 5)
    with fake_anthropic(RATES) as fake:
        fake.state.clock = clock
        fake.state.api_key_ids = {KEY_A: "apikey_a", KEY_B: "apikey_b"}
        fake.state.workspace_ids = {KEY_B: "wrkspc_b"}
        fake.state.output_tokens = 20
        yield fake, clock


def claude(fake: FakeAnthropic, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=fake.url, max_retries=0)


def ask(text: str, search: bool = False, hour: bool = False) -> dict[str, Any]:
    """A message request: its text cached for an hour when hour, with a web search tool
    when search."""
    block: dict[str, Any] = {"type": "text", "text": text}
    if hour:
        block["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    request = {
        "model": CLAUDE,
        "max_tokens": 50,
        "messages": [{"role": "user", "content": [block]}],
    }
    if search:
        request["tools"] = [{"type": "web_search_20250305", "name": "web_search"}]
    return request


def get(fake: FakeAnthropic, path: str, headers: dict[str, str], **params: Any) -> httpx2.Response:
    """A report asked as Anthropic's API reference writes it (lists as `name[]`)."""
    return httpx2.get(fake.url + path, params=params, headers=headers)


def report(fake: FakeAnthropic, path: str, **params: Any) -> Any:
    """A report's JSON, asked with the Admin API key."""
    reply = get(fake, path, ADMIN_HEADERS, **params)
    assert 200 == reply.status_code, reply.text
    return reply.json()


def test_messages_usage_report_buckets_by_minute_key_and_workspace() -> None:
    """Messages by two keys, with cache reads, one-hour cache writes and a web search, come
    back one bucket a minute, an empty minute included, grouped by key, workspace and model
    in the reference's shape, the Default Workspace as null."""
    with anthropic_org() as (fake, clock):
        fake.state.cache_read_tokens, fake.state.cache_write_tokens = 30, 20
        with claude(fake, KEY_A) as a, claude(fake, KEY_B) as b:
            a.messages.create(**ask("y" * 400, hour=True))
            fake.state.cache_read_tokens, fake.state.cache_write_tokens = 0, 0
            clock.move(2 * MINUTE)
            b.messages.create(**ask("hi", search=True))
        got = report(
            fake,
            USAGE_REPORT,
            starting_at="2026-01-01T00:00:00Z",
            ending_at="2026-01-01T00:03:00Z",
            bucket_width="1m",
            **{"group_by[]": ["api_key_id", "workspace_id", "model"]},
        )
    assert [Bill(51, 20, 30, 20, 20), Bill(501, 25, 0, 0, 0, 1)] == fake.state.billed

    def result(key: str, workspace: str | None, counts: tuple[int, ...]) -> dict[str, Any]:
        uncached, read, hour, output, searches = counts
        return {
            "uncached_input_tokens": uncached,
            "cache_creation": {"ephemeral_1h_input_tokens": hour, "ephemeral_5m_input_tokens": 0},
            "cache_read_input_tokens": read,
            "output_tokens": output,
            "server_tool_use": {"web_search_requests": searches},
            "api_key_id": key,
            "workspace_id": workspace,
            "model": CLAUDE,
            "service_tier": None,
            "context_window": None,
            "inference_geo": None,
        }

    def bucket(minute: int, results: list[Any]) -> dict[str, Any]:
        span = {"starting_at": f"2026-01-01T00:0{minute}:00Z"}
        return {**span, "ending_at": f"2026-01-01T00:0{minute + 1}:00Z", "results": results}

    assert {
        "data": [
            bucket(0, [result("apikey_a", None, (51, 30, 20, 20, 0))]),
            bucket(1, []),
            bucket(2, [result("apikey_b", "wrkspc_b", (501, 0, 0, 25, 1))]),
        ],
        "has_more": False,
        "next_page": None,
    } == got


def test_messages_usage_report_filters_by_workspace_and_pages() -> None:
    """A filter by workspace leaves the other key's messages out, and with two buckets a
    page five minutes come in three pages, each next_page ("page_" and the next bucket's
    start in base64) leading to the next."""
    with anthropic_org() as (fake, clock):
        with claude(fake, KEY_A) as a, claude(fake, KEY_B) as b:
            for _ in range(5):
                a.messages.create(**ask("hi"))
                b.messages.create(**ask("hi"))
                clock.move(MINUTE)
        asked = {
            "starting_at": "2026-01-01T00:00:00Z",
            "ending_at": "2026-01-01T00:05:00Z",
            "bucket_width": "1m",
            "workspace_ids[]": ["wrkspc_b"],
            "group_by[]": ["api_key_id"],
        }
        fake.state.report_page_buckets_max = 2
        pages = [report(fake, USAGE_REPORT, **asked)]
        while pages[-1]["has_more"]:
            pages.append(report(fake, USAGE_REPORT, **asked, page=pages[-1]["next_page"]))
    starts = [[bucket["starting_at"][11:16] for bucket in page["data"]] for page in pages]
    keys = [
        [(result["api_key_id"], result["output_tokens"]) for result in bucket["results"]]
        for page in pages
        for bucket in page["data"]
    ]
    assert [["00:00", "00:01"], ["00:02", "00:03"], ["00:04"]] == starts
    assert [[("apikey_b", 20)]] * 5 == keys
    assert ["page_MjAyNi0wMS0wMVQwMDowMjowMFo=", None] == [
        pages[0]["next_page"],
        pages[2]["next_page"],
    ]


def test_cost_report_prices_each_day_in_cents_by_description_and_workspace() -> None:
    """The cost report gives each UTC day's cost in cents as decimal strings, one line a
    model and token type and one for web searches, at the fake's rates for the model
    (here 1.83 times Earmark's), by workspace; ungrouped, one total a day."""
    with anthropic_org() as (fake, clock):
        fake.state.model_rates[CLAUDE] = replace(RATES, web_search=10_000).times(1.83)
        fake.state.cache_read_tokens = 30
        with claude(fake, KEY_A) as a, claude(fake, KEY_B) as b:
            a.messages.create(**ask("y" * 400))
            fake.state.cache_read_tokens = 0
            clock.move(DAY)
            b.messages.create(**ask("hi", search=True))
        asked = {"starting_at": "2026-01-01T00:00:00Z", "ending_at": "2026-01-03T00:00:00Z"}
        by_line = report(
            fake, COST_REPORT, **asked, **{"group_by[]": ["workspace_id", "description"]}
        )
        total = report(fake, COST_REPORT, **asked)
    rows = [
        (bucket["starting_at"], *(result[name] for name in COST_FIELDS))
        for bucket in by_line["data"]
        for result in bucket["results"]
    ]
    day1, day2 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    tokens, model = ("tokens", CLAUDE), f"{CLAUDE} Usage - "
    assert [
        (day1, *tokens, "uncached_input_tokens", model + "Input Tokens", "0.038979", None),
        (
            day1,
            *tokens,
            "cache_read_input_tokens",
            model + "Input Tokens, Cache Hit",
            "0.001647",
            None,
        ),
        (day1, *tokens, "output_tokens", model + "Output Tokens", "0.0549", None),
        (day2, *tokens, "uncached_input_tokens", model + "Input Tokens", "0.275049", "wrkspc_b"),
        (day2, *tokens, "output_tokens", model + "Output Tokens", "0.068625", "wrkspc_b"),
        (day2, "web_search", None, None, "Web Search Usage", "1.83", "wrkspc_b"),
    ] == rows
    assert [
        (day1, [("0.095526", "USD", None, None)]),
        (day2, [("2.173674", "USD", None, None)]),
    ] == [
        (
            bucket["starting_at"],
            [
                (r["amount"], r["currency"], r["cost_type"], r["workspace_id"])
                for r in bucket["results"]
            ],
        )
        for bucket in total["data"]
    ]


def test_reports_refuse_all_but_the_admin_key_with_a_version() -> None:
    """Anthropic's reports answer 401 authentication_error with no key, a wrong key or an
    ordinary API key, and 400 without anthropic-version."""
    with anthropic_org() as (fake, _):
        asked = {"starting_at": "2026-01-01T00:00:00Z"}
        version = {"anthropic-version": "2023-06-01"}
        replies = [
            get(fake, USAGE_REPORT, version, **asked),
            get(fake, USAGE_REPORT, {**version, "x-api-key": "sk-ant-admin01-wrong"}, **asked),
            get(fake, COST_REPORT, {**version, "x-api-key": KEY_A}, **asked),
            get(fake, COST_REPORT, {"x-api-key": ANTHROPIC_ADMIN}, **asked),
        ]
    assert [
        (401, "authentication_error"),
        (401, "authentication_error"),
        (401, "authentication_error"),
        (400, "invalid_request_error"),
    ] == [(reply.status_code, reply.json()["error"]["type"]) for reply in replies]
    assert ["error"] * 4 == [reply.json()["type"] for reply in replies]


def test_an_unstarted_message_bills_nothing_while_a_late_one_bills() -> None:
    """An "unstarted" message's connection closes unanswered and bills nothing, so the
    usage report counts only the "late" message, which is answered and billed."""
    with anthropic_org() as (fake, _):
        fake.state.late_seconds = 0
        with claude(fake, KEY_A) as a:
            with pytest.raises(anthropic.APIConnectionError):
                a.messages.create(**ask("unstarted"))
            a.messages.create(**ask("late"))
        got = report(fake, USAGE_REPORT, starting_at="2026-01-01T00:00:00Z")
    counts = [
        (result["uncached_input_tokens"], result["output_tokens"])
        for bucket in got["data"]
        for result in bucket["results"]
    ]
    assert ([Bill(2, 20)], 1, [(2, 20)]) == (fake.state.billed, fake.state.unstarted, counts)
