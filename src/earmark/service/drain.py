"""The RPC layer's life: calls refused while the sidecar waits for its database at start;
graceful shutdown: count calls in flight, refuse new ones while draining, and let the
workers of holds still open finish them."""

from __future__ import annotations

import asyncio
import time

from earmark import limits
from earmark.errors import Reason, Unavailable


class Drain:
    """After SIGTERM, calls already running finish; calls that arrive are told UNAVAILABLE
    (retry elsewhere) instead of being cut off when the server stops, except the Charges,
    Renews and Settles of holds this sidecar admitted that are still open: their workers
    may be finishing the very call the hold pays for (a pod whose containers all got
    SIGTERM at once), and a lost Settle loses the usage."""

    def __init__(self, *, starting: bool = False) -> None:
        # True until the database is connected: every call is told UNAVAILABLE, retry.
        self.starting = starting
        self.draining = False
        self.active = 0
        self._last_call = time.monotonic()
        # Holds admitted here and not yet settled here, oldest first, at most
        # limits.drain_tracked_holds_max: a hold whose worker died and never settled is
        # forgotten when the bound is reached, not kept forever.
        self.holds: dict[str, None] = {}

    def track(self, reservation_id: str) -> None:
        if len(self.holds) >= limits.drain_tracked_holds_max:
            del self.holds[next(iter(self.holds))]
        self.holds[reservation_id] = None

    def untrack(self, reservation_id: str) -> None:
        self.holds.pop(reservation_id, None)

    def keep_only(self, reservation_ids: list[str]) -> None:
        """Forgets every tracked hold but these (those still held when the drain starts:
        one in doubt or closed has no worker about to settle it)."""
        self.holds = dict.fromkeys(r for r in reservation_ids if r in self.holds)

    def enter(self, reservation_id: str = "") -> None:
        if self.starting:
            raise Unavailable(
                "the sidecar is still waiting for its database; retry", Reason.DATABASE_STARTING
            )
        self._last_call = time.monotonic()
        if self.draining and not (reservation_id and reservation_id in self.holds):
            raise Unavailable("the sidecar is shutting down; retry", Reason.SHUTTING_DOWN)
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        assert self.active >= 0

    async def drain(
        self,
        timeout_seconds: float,
        holds_seconds: float = 0.0,
        quiet_seconds: float = limits.drain_quiet_seconds,
    ) -> bool:
        """Refuses new calls, then waits until none runs, none has arrived for a quiet
        period, and (for at most holds_seconds) no hold admitted here is open, so that
        calls still queued inside gRPC are answered rather than cancelled and finishing
        workers can settle. Returns False if the timeout came first."""
        self.draining = True
        started = time.monotonic()
        deadline = started + timeout_seconds
        holds_deadline = started + min(holds_seconds, timeout_seconds)
        while time.monotonic() < deadline:
            now = time.monotonic()
            quiet = now - self._last_call >= quiet_seconds
            settled = not self.holds or now >= holds_deadline
            if self.active == 0 and quiet and settled:
                return True
            await asyncio.sleep(limits.drain_poll_seconds)
        return False
