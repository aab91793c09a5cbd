"""The admission rate limit: at most N new admissions per minute per account, decided by a
counter on the account's row, in the same transaction as the hold.

It is a counter and not a scan of recent holds (the article's first rule for keeping the
budget row small): counting recent reservation rows would make every running job conflict
with every new admission. The window is fixed: it opens with the first admission after the
last window closed and lasts a minute.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

WINDOW = timedelta(minutes=1)


@dataclass(slots=True)
class AdmissionWindow:
    """An account's counter: admissions since window_start (None: no window open)."""

    account: str
    window_start: datetime | None = None
    admissions: int = 0


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    # When a refused caller may try again; None when allowed.
    retry_after: timedelta | None = None


def admit_rate(window: AdmissionWindow, now: datetime, per_minute: int) -> RateDecision:
    """Counts one new admission if the account's window has room; a refusal counts nothing
    and says how long until the window closes."""
    assert per_minute >= 1
    if window.window_start is None or now >= window.window_start + WINDOW:
        window.window_start = now
        window.admissions = 0
    if window.admissions >= per_minute:
        return RateDecision(allowed=False, retry_after=window.window_start + WINDOW - now)
    window.admissions += 1
    return RateDecision(allowed=True)


def give_back(window: AdmissionWindow) -> None:
    """Uncounts an admission the budget then refused: only admitted holds use the rate."""
    assert window.admissions > 0
    window.admissions -= 1
