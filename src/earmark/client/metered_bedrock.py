"""metered() of a boto3 bedrock-runtime client (issue 45): refused until its
wrapper lands, as every SDK client metered() cannot meter is."""

from __future__ import annotations

from typing import Any, NoReturn


def metered(sdk_client: object, earmark: object, budget_id: str, **meter: Any) -> NoReturn:
    raise TypeError(f"metered() cannot meter {type(sdk_client).__name__} yet")
