"""The LiteLLM gate's budget per end user, without LiteLLM: a team's or organization's
earmark_end_user_budget names a budget for each end user, which the caller chooses."""

from __future__ import annotations

from typing import Any

import pytest

from earmark import limits
from earmark.integrations.litellm_rules import (
    END_USER_FIELD,
    TRUST_KEYS_ENV,
    Budgets,
    GateError,
    budgets_of,
    end_user_budget,
)

PATTERN = "acme/end-user/{end_user}"
TEAM = {END_USER_FIELD: PATTERN, "earmark_budget_id": "team", "earmark_allowed_budget_ids": ["p"]}
ORG = {"earmark_budget_id": "org", "earmark_also_budget_ids": ["region"]}


def refused(*args: Any, **kwargs: Any) -> GateError:
    with pytest.raises(GateError) as caught:
        budgets_of(*args, **kwargs)
    return caught.value


def test_the_end_users_budget_holds_and_the_named_budgets_nest_it() -> None:
    """With an end user: the end user's budget first, then the header's choice, then the
    budgets named from the key's to the organization's, then every also budget."""
    key = {"earmark_budget_id": "key"}
    team = {**TEAM, "earmark_allowed_budget_ids": ["key", "p"]}
    assert Budgets("acme/end-user/u1", ("key", "team", "org", "region")) == budgets_of(
        key, team, ORG, {}, end_user="u1"
    )
    assert Budgets("acme/end-user/u1", ("p", "key", "team", "org", "region")) == budgets_of(
        key, team, ORG, {"x-earmark-budget": "p"}, end_user="u1"
    )
    # The organization's field serves a team that sets none; the team's comes first.
    assert Budgets("org/eu/u2/daily", ("org",)) == budgets_of(
        {}, {}, {END_USER_FIELD: "org/eu/{end_user}/daily", "earmark_budget_id": "org"}, {},
        end_user="u2",
    )  # fmt: skip
    assert Budgets("acme/end-user/u3", ("team",)) == budgets_of(
        {}, {END_USER_FIELD: PATTERN, "earmark_budget_id": "team"},
        {END_USER_FIELD: "org/{end_user}"}, {}, end_user="u3",
    )  # fmt: skip


def test_an_end_users_budget_nested_by_none_is_refused() -> None:
    """The caller names its end user and a template makes each new one a budget: an end
    user's budget that no other budget nests would let a key spend without bound, so it is
    refused 403 naming the fields that bound it."""
    for team in ({END_USER_FIELD: PATTERN}, {END_USER_FIELD: PATTERN, "earmark_budget_id": ""}):
        error = refused({}, team, None, {}, end_user="u4")
        assert (403, True) == (error.status, "earmark_budget_id" in error.message)
    assert Budgets("acme/end-user/u4", ("region",)) == budgets_of(
        {}, {END_USER_FIELD: PATTERN, "earmark_also_budget_ids": "region"}, None, {},
        end_user="u4",
    )  # fmt: skip


def test_without_an_end_user_the_named_budgets_hold_as_before() -> None:
    """No end user: the field is not read and today's rules apply; with nothing else named,
    403 saying the request names no end user."""
    assert Budgets("team", ("org", "region")) == budgets_of({}, TEAM, ORG, {})
    assert Budgets("p", ("team", "org", "region")) == budgets_of(
        {}, TEAM, ORG, {"x-earmark-budget": "p"}, end_user=""
    )
    # No field: an end user changes nothing.
    assert Budgets("org", ("region",)) == budgets_of({}, {}, ORG, {}, end_user="u1")
    error = refused({}, {END_USER_FIELD: PATTERN}, None, {})
    assert (403, True) == (error.status, "names no end user" in error.message)


def test_a_keys_own_metadata_may_not_set_the_field_unless_keys_are_trusted() -> None:
    """An internal user writes their own key's metadata: the field there is refused 403,
    with or without an end user, even where the team sets the same; with trust_keys the
    key's field comes first."""
    key = {END_USER_FIELD: "other/{end_user}"}
    for end_user in ("u1", ""):
        for team in (TEAM, {}, {END_USER_FIELD: "other/{end_user}"}):
            error = refused(key, team, ORG, {}, end_user=end_user)
            assert (403, True, True) == (
                error.status,
                END_USER_FIELD in error.message,
                TRUST_KEYS_ENV in error.message,
            )
    assert Budgets("other/u1", ("team", "org", "region")) == budgets_of(
        key, TEAM, ORG, {}, trust_keys=True, end_user="u1"
    )


def test_the_header_still_chooses_only_what_the_metadata_allows() -> None:
    """An end user does not widen the header's choice."""
    error = refused({}, TEAM, ORG, {"x-earmark-budget": "acme/end-user/u2"}, end_user="u1")
    assert 403 == error.status


@pytest.mark.parametrize(
    "end_user",
    [
        "a/b",
        "../team",
        "u{end_user}",
        "u}",
        "{",
        "*",
        "a b",
        "tab\there",
        "new\nline",
        "é",
        "\x7f",
        "x" * (limits.litellm_end_user_chars_max + 1),
    ],
)
def test_an_end_user_id_that_is_not_one_segment_is_a_bad_request(end_user: str) -> None:
    """The caller chooses its end user id: one that would leave its segment (a '/'), add a
    placeholder or a template's wildcard, or hold a space, a control or a non-ASCII
    character, or pass the bound, is refused 400 and nothing is held; the message shows at
    most the bound's characters of it."""
    error = refused({}, TEAM, ORG, {}, end_user=end_user)
    assert (400, True) == (error.status, "end user id" in error.message)
    assert "x" * (limits.litellm_end_user_chars_max + 1) not in error.message


def test_an_end_user_id_at_the_bound_is_held() -> None:
    most = "u" * limits.litellm_end_user_chars_max
    assert f"acme/end-user/{most}" == end_user_budget(PATTERN, most)
    assert "acme/end-user/a-b_c.d@e.f|g~1!" == end_user_budget(PATTERN, "a-b_c.d@e.f|g~1!")


def test_a_resulting_budget_id_past_the_bound_is_a_bad_request() -> None:
    # Past the sidecar's bound on a budget id, which is shorter than a label's.
    long = "p" * (limits.budget_id_length_max - 2) + "/{end_user}"
    with pytest.raises(GateError) as caught:
        end_user_budget(long, "u1")
    assert 400 == caught.value.status


@pytest.mark.parametrize(
    "pattern",
    [
        "{end_user}",
        "acme/{end_user}/{end_user}",
        "acme/u-{end_user}",
        "acme//{end_user}",
        "acme/*/{end_user}",
        "acme/{team}/{end_user}",
        "acme team/{end_user}",
        "acme/end-user",
        ["acme", "{end_user}"],
    ],
)
def test_a_field_that_does_not_make_one_segment_of_the_end_user_is_refused(
    pattern: Any,
) -> None:
    """The field must hold the placeholder once, as a whole segment, beside at least one
    literal segment: else the end user's id could name any one-segment budget, or a part
    of one. Refused 403 naming the level and the field, with an end user; not read
    without one."""
    error = refused({}, {END_USER_FIELD: pattern}, ORG, {}, end_user="u1")
    assert (403, True, True) == (
        error.status,
        "the team's" in error.message,
        END_USER_FIELD in error.message,
    )
    assert Budgets("org", ("region",)) == budgets_of({}, {END_USER_FIELD: pattern}, ORG, {})
