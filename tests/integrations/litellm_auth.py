"""The LiteLLM proxy's custom auth for the gate's tests: LiteLLM's virtual keys live in its
database, which the tests run without, so each test key stands for a virtual key with the
metadata its key, team and organization would carry (general_settings.custom_auth), and
the master key stands for itself as LiteLLM's own auth names it (the alias, proxy admin)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from litellm.constants import LITELLM_PROXY_MASTER_KEY_ALIAS
from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth

from tests.integrations.litellm_proxy import MASTER

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
}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    if api_key == MASTER:
        return UserAPIKeyAuth(
            api_key=LITELLM_PROXY_MASTER_KEY_ALIAS, user_role=LitellmUserRoles.PROXY_ADMIN
        )
    key, team, organization = KEYS[api_key]
    return UserAPIKeyAuth(
        api_key=api_key,
        metadata=key,
        team_metadata=team,
        organization_metadata=organization,
    )
