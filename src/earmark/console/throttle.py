"""The login's throttle: wrong tokens are counted per client address and over all
addresses together, and past either limit a login is refused (429, with the seconds to
wait) before its token is looked at, so that a guess made while throttled learns nothing,
the right token included. Each burst is logged once when it starts and once when it ends.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog

from earmark import limits

log = structlog.get_logger("earmark.console")

# The scopes a throttle's log lines name: one client address, or every address together.
ADDRESS = "address"
OVERALL = "overall"


class Throttled(Exception):
    """A login refused without its token being looked at: too many wrong tokens lately."""

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(f"too many wrong login tokens; try again in {retry_after_seconds} s")
        self.retry_after_seconds = retry_after_seconds


@dataclass(slots=True)
class Burst:
    """The wrong tokens of one address (or of all) since started. Its window ends
    window_seconds after started; once failures reach the limit, logins are refused until
    `until`, a whole window after the failure that reached it."""

    started: datetime
    failures: int = 0
    refused: int = 0
    until: datetime | None = None

    def left(self, now: datetime) -> timedelta:
        """How much longer the burst refuses logins (nothing while it is not throttled)."""
        return self.until - now if self.until is not None else timedelta(0)

    def over(self, now: datetime, window: timedelta) -> bool:
        """Whether the burst has ended at now. A clock set back (now before started) ends
        it too, rather than keeping it for as long as the clock went back."""
        ends = self.until if self.until is not None else self.started + window
        return now >= ends or now < self.started


class LoginThrottle:
    """The bounded table of recent wrong tokens (a row per client address, at most
    addresses_max, the oldest dropped first) and the overall count, on an injected clock.

    The limits default to limits.console_login_*; tests give others to reach a bound
    without making thousands of requests."""

    def __init__(
        self,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        failures_per_address_max: int = limits.console_login_failures_per_address_max,
        failures_max: int = limits.console_login_failures_max,
        window_seconds: float = limits.console_login_window_seconds,
        addresses_max: int = limits.console_login_addresses_max,
    ) -> None:
        self._clock = clock
        self._per_address_max = failures_per_address_max
        self._failures_max = failures_max
        self._window = timedelta(seconds=window_seconds)
        self._addresses_max = addresses_max
        # Rows in the order they were made: the first is the oldest, dropped first when the
        # table is full, and the likeliest to have ended.
        self._addresses: OrderedDict[str, Burst] = OrderedDict()
        self._overall: Burst | None = None

    def __len__(self) -> int:
        """How many addresses the table holds."""
        return len(self._addresses)

    def attempt(self, address: str, right: Callable[[], bool]) -> bool:
        """Whether a login from address typed the right token (right() says), counting it
        when it did not. While address, or every address together, is throttled, raises
        Throttled without calling right, so a refused guess reveals nothing."""
        now = self._clock()
        self._forget_ended(address, now)
        burst = self._addresses.get(address)
        throttled = [b for b in (self._overall, burst) if b is not None and b.until is not None]
        if throttled:
            for refusing in throttled:
                refusing.refused += 1
            wait = max(refusing.left(now) for refusing in throttled)
            raise Throttled(max(1, math.ceil(wait.total_seconds())))
        if right():
            # A right token resets nothing: behind a proxy the operator and an attacker
            # share an address, and the overall count is every attacker's together.
            return True
        self._overall = self._failed(self._overall, now, self._failures_max, OVERALL, None)
        self._addresses[address] = self._failed(burst, now, self._per_address_max, ADDRESS, address)
        while len(self._addresses) > self._addresses_max:
            oldest, dropped = self._addresses.popitem(last=False)
            self._ended(dropped, ADDRESS, oldest, dropped=True)
        return False

    def _failed(
        self, burst: Burst | None, now: datetime, most: int, scope: str, address: str | None
    ) -> Burst:
        """burst with one more wrong token (a new burst when there was none), throttled
        and logged once when the token is the one that reaches most."""
        burst = burst if burst is not None else Burst(now)
        burst.failures += 1
        if burst.until is None and burst.failures >= most:
            burst.until = now + self._window
            log.warning(
                "login_throttled",
                scope=scope,
                address=address,
                failures=burst.failures,
                since=burst.started.isoformat(),
                retry_after_seconds=math.ceil(self._window.total_seconds()),
            )
        return burst

    def _forget_ended(self, address: str, now: datetime) -> None:
        """Drops the bursts that have ended: the overall one, address's, and the oldest rows
        of the table while they have (a row no address asks about again still goes)."""
        if self._overall is not None and self._overall.over(now, self._window):
            self._ended(self._overall, OVERALL, None)
            self._overall = None
        burst = self._addresses.get(address)
        if burst is not None and burst.over(now, self._window):
            del self._addresses[address]
            self._ended(burst, ADDRESS, address)
        while self._addresses:
            oldest, first = next(iter(self._addresses.items()))
            if not first.over(now, self._window):
                break
            del self._addresses[oldest]
            self._ended(first, ADDRESS, oldest)

    @staticmethod
    def _ended(burst: Burst, scope: str, address: str | None, dropped: bool = False) -> None:
        """Logs the end of a burst that was throttled (one that never was logged nothing
        when it started, so it logs nothing when it ends)."""
        if burst.until is not None:
            log.info(
                "login_throttle_ended",
                scope=scope,
                address=address,
                refused=burst.refused,
                dropped_from_full_table=dropped,
            )
