"""Another LiteLLM proxy callback after the gate, as a guardrail would be: it rejects a
request whose last message is "reject" and holds one whose last message is "stall" until
the proxy stops, so that the tests see the gate release what a later hook stopped."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import HTTPException
from litellm.integrations.custom_logger import CustomLogger


class Guard(CustomLogger):
    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        messages = data.get("messages") or [{}]
        last = messages[-1].get("content")
        if last == "reject":
            raise HTTPException(status_code=400, detail={"error": "rejected by the guard"})
        if last == "stall":
            await asyncio.sleep(3600)
        return data


guard = Guard()
