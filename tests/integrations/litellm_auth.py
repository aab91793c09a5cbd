"""The LiteLLM proxy's custom auth for the gate's tests: LiteLLM's virtual keys live in its
database, which the tests run without, so each test key stands for a virtual key with the
metadata its key, team and organization would carry (general_settings.custom_auth), and
the master key stands for itself as LiteLLM's own auth names it (the alias, proxy admin).
As LiteLLM's own auth does for a virtual key (user_api_key_auth.py), a test key's request
has its end user resolved from its body's `user` or a customer header into end_user_id (a
custom auth answers for itself: LiteLLM resolves no end user after it). Only the end-user
keys' teams set earmark_end_user_budget: for every other key an end user changes nothing
(litellm_rules)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from litellm.constants import LITELLM_PROXY_MASTER_KEY_ALIAS
from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth
from litellm.proxy.auth.auth_utils import get_end_user_id_from_request_body
from litellm.proxy.common_utils.http_parsing_utils import _read_request_body

from tests.integrations.litellm_proxy import MASTER

# The end-user key's team's earmark_end_user_budget (tests/integrations/test_litellm_end_users.py).
END_USER_BUDGET = "acme/end-user/{end_user}"

# key: (key metadata, team metadata, organization metadata)
KEYS: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # No metadata: a request names no budget it may use.
    "sk-plain": ({}, {}, {}),
    # A key of team "research" in organization "acme": three nested budgets, the key's
    # allowed by its team.
    "sk-nested": (
        {"earmark_budget_id": "key-alice"},
        {"earmark_budget_id": "team-research", "earmark_allowed_budget_ids": ["key-alice"]},
        {"earmark_budget_id": "org-acme"},
    ),
    # A key whose own metadata (which its owner may write) names another team's budget.
    "sk-self-named": ({"earmark_budget_id": "team-b"}, {"earmark_budget_id": "team-a"}, {}),
    # Two teams' keys, each on its own team's budget.
    "sk-team-a": ({}, {"earmark_budget_id": "team-a"}, {}),
    "sk-team-b": ({}, {"earmark_budget_id": "team-b"}, {}),
    # A key of team "support" in organization "acme": each end user on a budget of its own,
    # nested by the organization's.
    "sk-end-users": (
        {},
        {"earmark_end_user_budget": END_USER_BUDGET},
        {"earmark_budget_id": "org-acme"},
    ),
    # A key whose own metadata (which its owner may write) sets the end users' budgets.
    "sk-self-set": (
        {"earmark_end_user_budget": "team-a/{end_user}"},
        {"earmark_budget_id": "team-a"},
        {},
    ),
}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    if api_key == MASTER:
        return UserAPIKeyAuth(
            api_key=LITELLM_PROXY_MASTER_KEY_ALIAS, user_role=LitellmUserRoles.PROXY_ADMIN
        )
    key, team, organization = KEYS[api_key]
    body = await _read_request_body(request)
    return UserAPIKeyAuth(
        api_key=api_key,
        metadata=key,
        team_metadata=team,
        organization_metadata=organization,
        end_user_id=get_end_user_id_from_request_body(body, dict(request.headers)),
    )
