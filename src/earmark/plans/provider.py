"""What Earmark needs from a billing provider: a way to read an account's limits, and a
way to report its usage. Both fail with ProviderUnavailable, whose message names the
call and what went wrong, never a credential."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

# feature code -> the plan's maximum for it; None: the plan sets no maximum.
Limits = Mapping[str, int | None]


class ProviderUnavailable(Exception):
    """The provider could not be read or written just now; worth trying again later."""


class LimitsProvider(Protocol):
    name: str

    async def read_limits(self, account: str) -> Limits:
        """Every feature's maximum on the account's current plan."""
        ...

    async def report_usage(self, account: str, feature: str, total: int, at: datetime) -> None:
        """Sets the meter of the account's feature to total for the cycle that contains
        `at` (the time of the usage): an absolute value, so a repeated report changes
        nothing."""
        ...

    async def close(self) -> None: ...
