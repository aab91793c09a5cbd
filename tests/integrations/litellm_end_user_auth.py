"""The LiteLLM proxy's custom auth for the end-user budget tests
(tests/integrations/test_litellm_end_users.py): as tests/integrations/litellm_auth.py, each
test key stands for a virtual key with its key's, team's and organization's metadata; and,
as LiteLLM's own auth does for a virtual key (user_api_key_auth.py), the request's end user
is resolved from its body's `user` or a customer header into end_user_id. A custom auth
answers for itself: LiteLLM resolves no end user after it."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from litellm.proxy._types import UserAPIKeyAuth
from litellm.proxy.auth.auth_utils import get_end_user_id_from_request_body
from litellm.proxy.common_utils.http_parsing_utils import _read_request_body

END_USER_BUDGET = "acme/end-user/{end_user}"

# key: (key metadata, team metadata, organization metadata)
KEYS: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
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
    key, team, organization = KEYS[api_key]
    body = await _read_request_body(request)
    return UserAPIKeyAuth(
        api_key=api_key,
        metadata=key,
        team_metadata=team,
        organization_metadata=organization,
        end_user_id=get_end_user_id_from_request_body(body, dict(request.headers)),
    )
