"""Graceful shutdown of the RPC layer: count calls in flight, refuse new ones while draining."""

from __future__ import annotations

import asyncio
import time

from earmark import limits
from earmark.errors import Unavailable


class Drain:
    """After SIGTERM, calls already running finish; calls that arrive are told UNAVAILABLE
    (retry elsewhere) instead of being cut off when the server stops."""

    def __init__(self) -> None:
        self.draining = False
        self.active = 0
        self._last_call = time.monotonic()

    def enter(self) -> None:
        self._last_call = time.monotonic()
        if self.draining:
            raise Unavailable("the sidecar is shutting down; retry")
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        assert self.active >= 0

    async def drain(self, timeout_seconds: float) -> bool:
        """Refuses new calls, then waits until none runs and none has arrived for a quiet
        period, so that calls still queued inside gRPC are answered rather than cancelled.
        Returns False if the timeout came first."""
        self.draining = True
        deadline = time.monotonic() + timeout_seconds
        while time.monotonic() < deadline:
            quiet = time.monotonic() - self._last_call >= limits.drain_quiet_seconds
            if self.active == 0 and quiet:
                return True
            await asyncio.sleep(limits.drain_poll_seconds)
        return False
