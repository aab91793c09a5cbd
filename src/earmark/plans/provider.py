"""What Earmark needs from a billing provider: an account's limits, the billing period an
(account, feature) is in, and a way to report its usage.

Reads fail with ProviderUnavailable (worth trying again later; `retry_at`, when set, is the
earliest the provider will take another call, as a 429's RateLimit-Reset says), a report the
provider refused for good with ProviderRejected (retrying it would be refused again). Every
message names the call and what went wrong, never a credential.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

# feature code -> the plan's maximum for it; None: the plan sets no maximum.
Limits = Mapping[str, int | None]


@dataclass(frozen=True, slots=True)
class Period:
    """The billing period an (account, feature) is in, [start, end) in UTC, as the
    provider's agreement gives it."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        assert self.start < self.end, "a period ends after it starts"


class ProviderUnavailable(Exception):
    """The provider could not be read or written just now; worth trying again later."""

    def __init__(
        self, message: str, *, retry_at: datetime | None = None, outcome_unknown: bool = False
    ) -> None:
        super().__init__(message)
        # When the provider said when it takes calls again (a 429's RateLimit-Reset).
        self.retry_at = retry_at
        # True: the request was sent and no answer came (a timeout), so the provider may
        # still apply it later; a report's sender must then send its newest total again
        # after the request's deadline, so that a late straggler is overwritten.
        self.outcome_unknown = outcome_unknown


class ProviderRejected(Exception):
    """The provider refused a report for good (Kinde's 400): sending it again would be
    refused again, so it is parked, not retried. `code` is the provider's own error code."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class LimitsProvider(Protocol):
    name: str

    async def read_limits(self, account: str) -> Limits:
        """Every feature's maximum on the account's current plan."""
        ...

    async def read_period(self, account: str, feature: str) -> Period | None:
        """The billing period of the account's agreement for feature that contains now;
        None when the provider gives no period (the sidecar's --cycle-anchor-day applies)."""
        ...

    async def report_usage(self, account: str, feature: str, total: int, at: datetime) -> None:
        """Sets the meter of the account's feature for its open billing period to total:
        an absolute value, so a repeated report changes nothing. `at` is the time of the
        newest usage in it."""
        ...

    def forget(self, account: str) -> None:
        """Drops what is cached of account (its agreements), so that the next call reads
        the provider again: a plan changed."""
        ...

    async def close(self) -> None: ...
