"""The LiteLLM gate's rules without LiteLLM: which budgets a request holds on, which call
types bill, how a failed call's hold ends, and what a refusal or an error tells the caller."""

from __future__ import annotations

from datetime import timedelta

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
from earmark.client.wire_openai import Chat, Embeddings
from earmark.core.model import Outcome, RefusalReason
from earmark.integrations.litellm_rules import (
    GRACE_ENV,
    IN_DOUBT,
    LEASE_ENV,
    RELEASED,
    Budgets,
    Ending,
    GateError,
    budgets_of,
    failed,
    refusal_error,
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
        {"earmark_budget_id": "team"},
        {"earmark_budget_id": "org", "earmark_also_budget_ids": "region, task"},
        {"x-earmark-budget": "ignored"},
    )
    assert Budgets("key", ("team", "org", "task", "region")) == actual


def test_the_header_names_the_budget_only_when_no_metadata_does() -> None:
    """With no metadata naming a budget, x-earmark-budget (any case) does; with neither,
    the request is refused 403, naming both ways."""
    assert Budgets("b") == budgets_of({}, None, None, {"X-Earmark-Budget": " b "})
    with pytest.raises(GateError) as caught:
        budgets_of(None, {}, {}, {})
    assert 403 == caught.value.status
    assert "earmark_budget_id" in caught.value.message
    assert "x-earmark-budget" in caught.value.message


def test_too_many_nested_budgets_are_a_bad_request() -> None:
    """More than limits.also_budget_ids_max nested budgets is a 400 naming the field."""
    many = [f"b{i}" for i in range(limits.also_budget_ids_max + 1)]
    with pytest.raises(GateError) as caught:
        budgets_of({"earmark_budget_id": "a", "earmark_also_budget_ids": many}, {}, {}, {})
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


def test_a_refusal_is_a_429_with_the_reason_the_budget_and_what_is_left() -> None:
    """The message and headers carry the reason, the refusing budget, what it has left
    and, for a full rate window, Retry-After in whole seconds rounded up."""
    refusal = Refusal(
        "key", 10_200, RefusalReason.RATE_LIMITED, 5_100, "window full",
        refused_budget_id="team", retry_after=timedelta(seconds=1.2),
    )  # fmt: skip
    error = refusal_error(refusal)
    assert 429 == error.status
    assert {
        "x-earmark-refusal": "RATE_LIMITED",
        "x-earmark-budget": "team",
        "x-earmark-remaining": "5100",
        "retry-after": "2",
    } == error.headers
    assert "RATE_LIMITED on budget 'team' (asked 10200, remaining 5100)" in error.message


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
