"""Supervision of the embedded PostgreSQL: started again when its postmaster is gone.

A database that does not answer but whose postmaster still runs (stalled, overloaded,
restarting by itself) is left alone: health reports it, and restarting would only lose
work. One whose postmaster exited is started again, at most
limits.embedded_restart_attempts_max times in a row with jittered backoff; after that the
sidecar reports itself not live, so that the orchestrator restarts the pod.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import structlog

from earmark import limits
from earmark.metrics import Metrics
from earmark.store.embedded import EmbeddedPostgres

log = structlog.get_logger("earmark.supervise")

OnLiveness = Callable[[bool], Awaitable[None]]


class Supervisor:
    def __init__(
        self, embedded: EmbeddedPostgres, metrics: Metrics, on_liveness: OnLiveness
    ) -> None:
        self._embedded = embedded
        self._metrics = metrics
        self._on_liveness = on_liveness
        self._rng = random.Random()
        self.attempts = 0
        self._next_attempt_at = 0.0
        self.gave_up = False

    async def database_down(self, now: float) -> None:
        """Called while the database does not answer: restarts it if it died."""
        if self.gave_up or now < self._next_attempt_at:
            return
        if await asyncio.to_thread(self._embedded.postmaster_alive):
            return
        self.attempts += 1
        self._metrics.database_restarts.inc()
        log.warning("embedded_database_restart", attempt=self.attempts)
        try:
            await asyncio.to_thread(self._embedded.restart)
            log.info("embedded_database_restarted", attempt=self.attempts)
        except Exception as exc:
            log.error("embedded_database_restart_failed", attempt=self.attempts, error=repr(exc))
            if self.attempts >= limits.embedded_restart_attempts_max:
                self.gave_up = True
                log.error("embedded_database_gave_up", attempts=self.attempts)
                await self._on_liveness(False)
                return
        ceiling = min(
            limits.embedded_restart_backoff_seconds_max,
            limits.embedded_restart_backoff_seconds_base * 2 ** (self.attempts - 1),
        )
        self._next_attempt_at = now + self._rng.uniform(0.0, ceiling)

    def database_up(self) -> None:
        """The database answers again: the next death starts a fresh count."""
        self.attempts = 0
        self._next_attempt_at = 0.0
