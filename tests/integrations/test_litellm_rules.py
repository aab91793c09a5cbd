"""The LiteLLM gate's rules without LiteLLM: which budgets a request holds on, which call
types bill, how a failed call's hold ends, and what a refusal or an error tells the caller."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import httpx
import pytest

from earmark import limits
from earmark.client.errors import (
    BudgetNotFoundError,
    PriceNotFoundError,
    UnavailableError,
)
from earmark.client.types import Refusal
from earmark.client.wire_anthropic import Messages
from earmark.client.wire_openai import Chat, Embeddings, Responses
from earmark.core.model import Outcome, RefusalReason
from earmark.integrations.litellm_rules import (
    GRACE_ENV,
    IN_DOUBT,
    LEASE_ENV,
    RELEASED,
    Budgets,
    Ending,
    GateError,
    PassThrough,
    budgets_of,
    failed,
    pass_through_of,
    plain_path,
    refusal_error,
    refuse_unmetered,
    reserve_error,
    route_of,
    seconds_of,
)


class Status(Exception):
    """An error with an HTTP status and the provider that answered it, as LiteLLM's
    exceptions for a provider's answer carry them."""

    def __init__(self, status_code: int, llm_provider: str | None = "openai") -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code
        self.llm_provider = llm_provider


def test_the_most_specific_budget_holds_and_the_others_nest_it() -> None:
    """The key's budget is the hold's; the team's and organization's, and every
    earmark_also_budget_ids (a list or a comma-separated string), are held with it."""
    actual = budgets_of(
        {"earmark_budget_id": "key", "earmark_also_budget_ids": ["task", "key"]},
        {"earmark_budget_id": "team", "earmark_allowed_budget_ids": ["key"]},
        {"earmark_budget_id": "org", "earmark_also_budget_ids": "region, task"},
        {},
    )
    assert Budgets("key", ("team", "org", "task", "region")) == actual


def test_the_header_chooses_only_a_budget_the_metadata_allows() -> None:
    """x-earmark-budget (any case) chooses among the budgets the metadata names or lists in
    earmark_allowed_budget_ids at any level, the named ones still nesting it; any other
    budget, or a header on a key with no metadata, is refused 403 naming the field."""
    team = {"earmark_budget_id": "team", "earmark_allowed_budget_ids": ["proj-a", "proj-b"]}
    assert Budgets("proj-b", ("team",)) == budgets_of(
        {}, team, None, {"X-Earmark-Budget": "proj-b"}
    )
    assert Budgets("team") == budgets_of({}, team, None, {"x-earmark-budget": " team "})
    for metadata in (team, {}):
        with pytest.raises(GateError) as caught:
            budgets_of({}, metadata, None, {"x-earmark-budget": "team-b"})
        assert (403, True) == (
            caught.value.status,
            "earmark_allowed_budget_ids" in str(caught.value),
        )
        assert "team-b" not in caught.value.message


def test_a_key_names_in_its_own_metadata_only_what_its_team_allows() -> None:
    """A key's metadata, which its owner may write, names, nests or allows only budgets its
    team or organization names, nests or allows; a key with neither names none, unless keys
    are trusted (only admins make them)."""
    team: dict[str, Any] = {"earmark_budget_id": "team", "earmark_allowed_budget_ids": ["proj"]}
    assert Budgets("proj", ("team",)) == budgets_of({"earmark_budget_id": "proj"}, team, {}, {})
    refused: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"earmark_budget_id": "other-team"}, team),
        ({"earmark_also_budget_ids": ["other-team"]}, team),
        ({"earmark_allowed_budget_ids": ["other-team"]}, team),
        ({"earmark_budget_id": "mine"}, {}),
    ]
    for key, above in refused:
        with pytest.raises(GateError) as caught:
            budgets_of(key, above, None, {})
        assert (403, True) == (
            caught.value.status,
            "earmark_allowed_budget_ids" in str(caught.value),
        )
    assert Budgets("mine") == budgets_of({"earmark_budget_id": "mine"}, {}, {}, {}, trust_keys=True)


def test_the_master_key_may_name_any_budget() -> None:
    """The proxy's master key chooses any budget by header."""
    assert Budgets("any") == budgets_of({}, {}, {}, {"x-earmark-budget": "any"}, master=True)


def test_a_request_that_names_no_budget_is_refused() -> None:
    """With neither metadata nor an allowed header, the request is refused 403, naming
    both ways."""
    with pytest.raises(GateError) as caught:
        budgets_of(None, {}, {}, {})
    assert 403 == caught.value.status
    assert "earmark_budget_id" in caught.value.message
    assert "x-earmark-budget" in caught.value.message


def test_too_many_nested_budgets_are_a_bad_request() -> None:
    """More than limits.also_budget_ids_max nested budgets is a 400 naming the field."""
    many = [f"b{i}" for i in range(limits.also_budget_ids_max + 1)]
    with pytest.raises(GateError) as caught:
        budgets_of({}, {"earmark_budget_id": "a", "earmark_also_budget_ids": many}, {}, {})
    assert (400, True) == (caught.value.status, "earmark_also_budget_ids" in caught.value.message)


def test_call_types_that_bill_are_read_and_others_are_refused() -> None:
    """Chat and embeddings are read as the metered clients read them; moderations pass;
    an image generation, which Earmark cannot price, is refused 403 unsent."""
    assert (Chat, Embeddings, None) == (
        type(route_of("acompletion")),
        type(route_of("aembedding")),
        route_of("amoderation"),
    )
    with pytest.raises(GateError) as caught:
        route_of("aimage_generation")
    assert (403, True) == (caught.value.status, "aimage_generation" in caught.value.message)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (Status(400), Ending(Outcome.FAILED, 0)),
        (Status(429), Ending(Outcome.FAILED, 0)),
        (Status(408), IN_DOUBT),
        (Status(500), IN_DOUBT),
        (Status(503), IN_DOUBT),
        (Status(500, llm_provider=""), IN_DOUBT),
        (None, IN_DOUBT),
    ],
)
def test_a_failed_call_ends_at_nothing_only_when_the_provider_billed_nothing(
    error: BaseException | None, expected: Ending
) -> None:
    """A provider's 4xx bills nothing; a timeout, a 5xx or an unknown error may have run."""
    assert expected == failed(error, dispatched=True)


@pytest.mark.parametrize("status", [400, 499, 503])
def test_the_proxys_own_error_releases_unsent_and_doubts_sent(status: int) -> None:
    """A hook's or a disconnect's error (no provider named) says nothing of the provider:
    a hold never sent is released, one sent stays in doubt, whatever the status."""
    proxy = Status(status, llm_provider=None)
    assert (RELEASED, IN_DOUBT) == (failed(proxy, False), failed(proxy, True))


def test_a_request_that_never_left_ends_at_nothing() -> None:
    """A refused connection, even wrapped in a 500 by LiteLLM, was never sent."""
    wrapped = Status(500)
    wrapped.__cause__ = httpx.ConnectError("refused")
    assert Ending(Outcome.FAILED, 0) == failed(wrapped, dispatched=True)


NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def test_a_full_rate_window_is_a_429_with_retry_after() -> None:
    """The message and headers carry the reason, the refusing budget, what it has left
    and, for a full rate window, Retry-After in whole seconds rounded up."""
    refusal = Refusal(
        "key", 10_200, RefusalReason.RATE_LIMITED, 5_100, "window full",
        refused_budget_id="team", retry_after=timedelta(seconds=1.2),
    )  # fmt: skip
    error = refusal_error(refusal, NOW)
    assert 429 == error.status
    assert {
        "x-earmark-refusal": "RATE_LIMITED",
        "x-earmark-budget": "team",
        "x-earmark-remaining": "5100",
        "retry-after": "2",
    } == error.headers
    assert "RATE_LIMITED on budget 'team' (asked 10200, remaining 5100)" in error.message


def test_a_spent_budget_is_final_unless_it_resets_within_the_hour() -> None:
    """Out of budget until next month is LiteLLM's own budget error (its status, the type
    budget_exceeded, no Retry-After); a period that ends within the hour is a 429 whose
    Retry-After is the wait; a limit that cannot be read now is a 503."""
    month = Refusal(
        "key", 900, RefusalReason.INSUFFICIENT_BUDGET, 100, "",
        resets_at=NOW + timedelta(days=28),
    )  # fmt: skip
    soon = Refusal(
        "key", 900, RefusalReason.INSUFFICIENT_BUDGET, 100, "",
        resets_at=NOW + timedelta(minutes=20, seconds=0.5),
    )  # fmt: skip
    unread = Refusal("key", 900, RefusalReason.LIMIT_UNAVAILABLE, None, "")
    final = refusal_error(month, NOW, budget_status=422)
    waits = refusal_error(soon, NOW)
    assert (422, "budget_exceeded", None) == (
        final.status, final.kind, final.headers.get("retry-after"),
    )  # fmt: skip
    assert (429, "", "1201") == (waits.status, waits.kind, waits.headers["retry-after"])
    assert "INSUFFICIENT_BUDGET on budget 'key' (asked 900, remaining 100)" in final.message
    assert 503 == refusal_error(unread, NOW).status


@pytest.mark.parametrize(
    ("route", "body", "expected"),
    [
        ("/openai/v1/chat/completions", {"model": "gpt-4o"}, PassThrough("openai", Chat())),
        ("/openai_passthrough/v1/embeddings", {"model": "e"}, PassThrough("openai", Embeddings())),
        ("/anthropic/v1/messages", {"model": "c"}, PassThrough("anthropic", Messages())),
        ("/openai/v1/files", {}, None),
        ("/openai/v1/moderations", {"model": "m"}, None),
    ],
)
def test_a_pass_through_is_held_by_its_provider_s_route(
    route: str, body: dict[str, object], expected: PassThrough | None
) -> None:
    """OpenAI's and Anthropic's metered paths under their pass-through prefixes are held as
    the metered clients hold them; their free paths pass."""
    found = pass_through_of(route, body)
    assert (expected is None, type(expected.route) if expected else None) == (
        found is None, type(found.route) if found else None,
    )  # fmt: skip
    assert (expected.provider if expected else None) == (found.provider if found else None)


@pytest.mark.parametrize(
    ("route", "body", "status"),
    [
        ("/openai/v1/images/generations", {"model": "dall-e"}, 403),
        ("/openai/v1/fine_tuning/jobs", {"model": "gpt-4o"}, 403),
        ("/openai/v1/models", {}, 403),
        ("/openai/v1/chat/completions", {}, 403),
        ("/openai/v1/chat/completions", {"model": "gpt-4o", "stream": True}, 400),
        ("/gemini/v1beta/models/gemini-2.5-pro:generateContent", {}, 403),
        ("/bedrock/model/x/converse", {}, 403),
        ("/azure/openai/deployments/d/chat/completions", {"model": "d"}, 403),
        ("/vertex_ai/v1/projects/p", {}, 403),
        ("/openaiX/v1/chat/completions", {"model": "gpt-4o"}, 403),
        (None, {"model": "gpt-4o"}, 403),
    ],
)
def test_every_other_pass_through_is_refused(
    route: str | None, body: dict[str, object], status: int
) -> None:
    """Other providers' prefixes, paths that bill and that Earmark cannot price, reads it
    cannot tell from writes, and streams are refused, naming the route."""
    with pytest.raises(GateError) as caught:
        pass_through_of(route, body)
    assert status == caught.value.status
    assert (route or "") in caught.value.message


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (BudgetNotFoundError(grpc.StatusCode.NOT_FOUND, "no budget b"), 404),
        (PriceNotFoundError(grpc.StatusCode.FAILED_PRECONDITION, "no price", "P"), 400),
        (UnavailableError(grpc.StatusCode.UNAVAILABLE, "no sidecar at 10.0.0.1:50051"), 503),
    ],
)
def test_a_reserve_error_is_answered_and_the_request_not_sent(
    error: BudgetNotFoundError, status: int
) -> None:
    """The caller's own mistakes are 4xx, the sidecar out of reach a 503; each says so."""
    answered = reserve_error(error)
    assert (status, True) == (answered.status, answered.message.endswith("; not sent"))
    assert "10.0.0.1" not in answered.message


def test_durations_are_bounded_and_named() -> None:
    """The grace and the lease take seconds within their bounds, and an error names the
    variable; unset gives the default."""
    assert (10.0, 1.0, 2.5) == (
        seconds_of(GRACE_ENV, None, 10.0),
        seconds_of(LEASE_ENV, "1", 120.0),
        seconds_of(GRACE_ENV, "2.5", 10.0),
    )
    for bad in ("0", "-1", "soon", str(limits.litellm_outcome_grace_seconds_max + 1)):
        with pytest.raises(ValueError, match=GRACE_ENV):
            seconds_of(GRACE_ENV, bad, 10.0)
    with pytest.raises(ValueError, match=LEASE_ENV):
        seconds_of(LEASE_ENV, "0.5", 120.0)


@pytest.mark.parametrize(
    "path",
    [
        "/openai/v1/chat/completions/.?",
        "/openai/v1/responses/.?/cancel",
        "/openai/v1/batches/.#/cancel",
        "/anthropic/v1/messages/batches/..?/cancel",
        "/openai/v1/files/%3F",
        "/openai//v1/chat/completions",
        "/openai/v1/chat/completions/",
        "/openai/v1/files/.hidden",
        "/openai/v1\\chat/completions",
    ],
)
def test_a_pass_through_path_lite_llm_would_send_elsewhere_is_refused(path: str) -> None:
    """A path with a query or fragment mark, an escape, a backslash, or an empty or dot
    segment is refused: LiteLLM would cut or resolve it into another path than the one the
    gate classified."""
    with pytest.raises(GateError) as caught:
        pass_through_of(path, {"model": "gpt-4o"})
    assert (403, False) == (caught.value.status, plain_path(path))


def test_a_background_response_is_refused() -> None:
    """A background Responses call, which bills after its answer, is refused 400 naming the
    field; a foreground one passes."""
    with pytest.raises(GateError) as caught:
        refuse_unmetered(Responses(), {"model": "m", "background": True})
    refuse_unmetered(Responses(), {"model": "m", "background": False})
    refuse_unmetered(Chat(), {"model": "m", "background": True})
    assert (400, True) == (caught.value.status, caught.value.message.startswith("background"))
