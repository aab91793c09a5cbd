"""A budget's rate windows (issue 34): at most admissions_per_minute admissions, and at most
units_per_minute of held amount, a minute.

The window slides: it is the counter of the minute under way plus the part of the previous
minute's counter that the last 60 seconds still cover, as if the previous minute's
admissions were spread evenly over it (Cloudflare's sliding window counter). Two counters
on the budget's row, in the same transaction as the hold, and never a scan of recent holds:
a scan would make every admission conflict with every other. Within the first minute of a
burst the previous minute is empty and the window counts exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from earmark import limits
from earmark.core.model import Budget, RateCounts

WINDOW = timedelta(minutes=1)
_WINDOW_US = 60_000_000


def _us(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def advance(rate: RateCounts, now: datetime) -> None:
    """Moves the counters to the minute containing now: minutes are whole minutes from the
    first admission the counters saw; one minute on, the current becomes the previous."""
    if rate.start is None or now < rate.start:
        # A clock behind the row's (another sidecar's) counts in the minute under way.
        if rate.start is None:
            rate.start = now
        return
    minutes = _us(now - rate.start) // _WINDOW_US
    if minutes == 0:
        return
    if minutes == 1:
        rate.prev_admissions, rate.prev_units = rate.admissions, rate.units
    else:
        rate.prev_admissions = rate.prev_units = 0
    rate.admissions = rate.units = 0
    rate.start += minutes * WINDOW


@dataclass(frozen=True, slots=True)
class Refusal:
    """Which window has no room ("admissions" or "units"), its limit, and when it has room
    again for the same request (None: never, the request alone is past the limit)."""

    window: str
    per_minute: int
    retry_after: timedelta | None


def _fits(prev: int, current: int, add: int, per_minute: int, elapsed_us: int) -> bool:
    # prev * (W - e) / W + current + add <= per_minute, in integers.
    left = prev * (_WINDOW_US - elapsed_us) + (current + add) * _WINDOW_US
    return left <= per_minute * _WINDOW_US


def _wait_us(prev: int, current: int, add: int, per_minute: int, elapsed_us: int) -> int | None:
    """How long until a request of add fits, if nothing else is admitted meanwhile."""
    if add > per_minute:
        return None
    rest = _WINDOW_US - elapsed_us
    # Still in this minute: the previous minute's share shrinks as the window slides.
    room = per_minute - current - add
    if room >= 0 and prev > 0:
        # prev * (rest - d) <= room * W  <=>  d >= rest - room * W / prev
        wait = rest - (room * _WINDOW_US) // prev
        if 0 <= wait < rest:
            return wait
    # In the next minute this minute's count is the previous one's: cur * (W - d) <= (L-add) W.
    if current == 0:
        return rest
    wait = _WINDOW_US - ((per_minute - add) * _WINDOW_US) // current
    return rest + max(0, wait)


def check(budget: Budget, amount: int, now: datetime) -> Refusal | None:
    """Whether a hold of amount fits the budget's rate windows at now (the counters already
    advanced to now); a refusal says which window and when to try again."""
    rate = budget.rate
    elapsed = 0 if rate.start is None else max(0, min(_WINDOW_US - 1, _us(now - rate.start)))
    windows = (
        ("admissions", budget.admissions_per_minute, rate.prev_admissions, rate.admissions, 1),
        ("units", budget.units_per_minute, rate.prev_units, rate.units, amount),
    )
    for name, per_minute, prev, current, add in windows:
        if per_minute is None or _fits(prev, current, add, per_minute, elapsed):
            continue
        wait = _wait_us(prev, current, add, per_minute, elapsed)
        # Rounded up to the millisecond, so that a caller who waits that long fits.
        retry = None if wait is None else timedelta(milliseconds=-(-max(1, wait) // 1000))
        return Refusal(name, per_minute, retry)
    return None


def count(budget: Budget, amount: int) -> None:
    """Counts an admitted hold of amount in the budget's windows that are set; a counter
    stops at 2^63-1 (an observing budget admits past its window, without bound)."""
    if budget.admissions_per_minute is not None:
        budget.rate.admissions = min(limits.int64_max, budget.rate.admissions + 1)
    if budget.units_per_minute is not None:
        budget.rate.units = min(limits.int64_max, budget.rate.units + amount)


def limited(budget: Budget) -> bool:
    return budget.admissions_per_minute is not None or budget.units_per_minute is not None
