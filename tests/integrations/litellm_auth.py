"""The LiteLLM proxy's custom auth for the gate's tests: LiteLLM's virtual keys live in its
database, which the tests run without, so each test key stands for a virtual key with the
metadata its key, team and organization would carry (general_settings.custom_auth)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from litellm.proxy._types import UserAPIKeyAuth

# key: (key metadata, team metadata, organization metadata)
KEYS: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # No metadata: the x-earmark-budget header names the budget.
    "sk-plain": ({}, {}, {}),
    # A key of team "research" in organization "acme": three nested budgets.
    "sk-nested": (
        {"earmark_budget_id": "key-alice"},
        {"earmark_budget_id": "team-research"},
        {"earmark_budget_id": "org-acme"},
    ),
}


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    key, team, organization = KEYS[api_key]
    return UserAPIKeyAuth(
        api_key=api_key,
        metadata=key,
        team_metadata=team,
        organization_metadata=organization,
    )
