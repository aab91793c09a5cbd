"""The deliverer: posts each budget notice the batches recorded to --notify-url, signed as
Standard Webhooks specifies, at least once, and says what came of it.

Every sidecar with --notify-url runs one, and one at a time delivers: the holder of the
database's notify_lease row (store/events.py), taken at each pass and renewed before each
attempt, so that two sidecars never post at once and a sidecar that died is taken over
once its lease runs out. An attempt lasts at most half the lease: it ends while the lease
it was made under still runs, as long as the sidecars' clocks agree within the other half.

A notice is posted with its event_id as `webhook-id`, the same on every attempt and after a
takeover, and its payload serialized one way (compact, keys sorted), so that the body is
byte for byte the same each time: a receiver drops a repeat by its id. A 2xx answer
delivers it; any other answer, a timeout, a connection that fails or a request that cannot
be built or sent at all is tried again after a full-jitter backoff, and the
notify_attempts_max-th failed attempt gives it up. A sidecar killed mid-attempt leaves the
event open: whoever holds the lease next posts it again.

Neither the secret nor the URL's userinfo, path or query reaches a log line or an error:
errors name the answer's status or the exception's type, and logs the target's `shown`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

import httpx
import structlog

import earmark
from earmark import limits
from earmark.metrics import Metrics
from earmark.notices import signing
from earmark.notices.target import Target
from earmark.store.events import DueEvent, EventLog

log = structlog.get_logger("earmark.notices")


def body_of(payload: str) -> bytes:
    """The bytes posted for a payload as the database keeps it (jsonb's text): compact,
    keys sorted, ASCII; the same bytes for the same payload on every attempt."""
    decoded = json.loads(payload)
    return json.dumps(decoded, separators=(",", ":"), sort_keys=True).encode("ascii")


def holder_name() -> str:
    """Who holds the lease, as notify_lease shows it: the host, the process, and a random
    part so that a restarted process with the same pid is someone else."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Deliverer:
    def __init__(
        self,
        events: EventLog,
        target: Target,
        metrics: Metrics,
        clock: Callable[[], datetime],
        *,
        lease_seconds: float = limits.notify_lease_seconds_default,
        holder: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        assert limits.notify_lease_seconds_min <= lease_seconds <= limits.notify_lease_seconds_max
        self._events = events
        self._target = target
        self._metrics = metrics
        self._clock = clock
        self._lease_seconds = lease_seconds
        self._timeout_seconds = min(limits.notify_timeout_seconds, lease_seconds / 2)
        self.holder = holder or holder_name()
        self._rng = rng or random.Random()
        # Redirects are not followed: a receiver that moved answers 3xx, which is retried
        # (and counted), rather than the signed body going to an address nobody configured.
        self._http = httpx.AsyncClient(timeout=self._timeout_seconds, follow_redirects=False)
        self._holding = False

    async def close(self) -> None:
        """Gives the lease up (another sidecar takes over at once rather than when it runs
        out) and closes the HTTP client and the database pool; a database that cannot be
        reached only makes the takeover wait for the lease."""
        try:
            if self._holding:
                await self._events.release(self.holder)
                self._holding = False
        except Exception as error:
            log.warning("notify_lease_not_released", error=type(error).__name__)
        finally:
            await self._http.aclose()
            await self._events.close()

    def backoff(self, attempts: int) -> timedelta:
        """The wait after the attempts-th failed attempt: uniform in [0, ceiling], the
        ceiling doubling from notify_backoff_seconds_base up to notify_backoff_seconds_max."""
        ceiling = min(
            limits.notify_backoff_seconds_max,
            limits.notify_backoff_seconds_base * 2 ** min(attempts - 1, 32),
        )
        return timedelta(seconds=self._rng.uniform(0.0, ceiling))

    async def deliver_once(
        self,
        beat: Callable[[], None] = lambda: None,
        stopping: Callable[[], bool] = lambda: False,
    ) -> int:
        """One pass: holding the lease, posts the due events one at a time in seq order, at
        most limits.notify_batch_max, calling beat after each; stops early once stopping()
        or once the lease is lost. Refreshes the undelivered gauge; returns how many were
        delivered."""
        due = await self._events.take_due(
            self.holder, self._clock(), self._lease_seconds, limits.notify_batch_max
        )
        self._say_holding(due is not None)
        delivered = 0
        for event in due or []:
            if stopping():
                break
            # Renewed before each attempt: the attempt then ends while the lease runs.
            if not await self._events.renew(self.holder, self._clock(), self._lease_seconds):
                self._say_holding(False)
                break
            delivered += await self._deliver(event)
            beat()
        self._metrics.notices_undelivered.set(await self._events.undelivered())
        return delivered

    def _say_holding(self, holding: bool) -> None:
        """Logs when this sidecar becomes the deliverer, and when it stops being it."""
        if holding != self._holding:
            event = "notify_lease_taken" if holding else "notify_lease_lost"
            log.info(event, holder=self.holder, url=self._target.shown)
            self._holding = holding

    async def _deliver(self, event: DueEvent) -> int:
        """Posts one event and records what came of it; 1 when it was delivered."""
        at = self._clock()
        about = {"seq": event.seq, "event_id": event.event_id, "kind": event.kind,
                 "budget_id": event.budget_id, "attempt": event.attempts + 1}  # fmt: skip
        try:
            body = body_of(event.payload)
            headers = signing.headers(list(self._target.keys), event.event_id, at, body)
        except ValueError as error:
            # An id the spec does not allow, or a payload that is not JSON: no attempt
            # could ever deliver it, so it is given up at once.
            why = f"cannot be signed: {type(error).__name__}"
            await self._events.failed(event.seq, at, why)
            self._metrics.notices.labels("failed").inc()
            log.error("notice_failed", **about, error=why)
            return 0
        except Exception as error:
            # Anything else that keeps the request from being built is an attempt that
            # failed, retried like any other, never a pass that dies.
            failure: str | None = f"cannot be sent: {type(error).__name__}"
        else:
            failure = await self._post(body, headers)
        if failure is None:
            await self._events.delivered(event.seq, self._clock())
            self._metrics.notices.labels("delivered").inc()
            log.info("notice_delivered", **about)
            return 1
        if event.attempts + 1 >= limits.notify_attempts_max:
            await self._events.failed(event.seq, self._clock(), failure)
            self._metrics.notices.labels("failed").inc()
            log.error("notice_failed", **about, error=failure)
            return 0
        next_attempt_at = self._clock() + self.backoff(event.attempts + 1)
        await self._events.retry(event.seq, next_attempt_at, failure)
        self._metrics.notices.labels("retried").inc()
        log.warning(
            "notice_retry", **about, error=failure, next_attempt_at=next_attempt_at.isoformat()
        )
        return 0

    async def _post(self, body: bytes, signed: dict[str, str]) -> str | None:
        """One attempt: None when the receiver answered 2xx, else what went wrong, in
        words that never carry the URL (an exception's text may)."""
        headers = {
            "content-type": "application/json",
            "user-agent": f"earmark/{earmark.__version__}",
            **signed,
        }
        try:
            # httpx's timeout is per step (connect, each read): a receiver that trickles
            # its answer never trips it. The whole attempt has this one. The answer's body
            # is never read: only its status counts.
            async with (
                asyncio.timeout(self._timeout_seconds),
                self._http.stream(
                    "POST", self._target.url, content=body, headers=headers
                ) as answer,
            ):
                status = answer.status_code
        except (httpx.TimeoutException, TimeoutError):
            return f"timed out after {self._timeout_seconds:g}s"
        except httpx.HTTPError as error:
            return type(error).__name__
        except Exception as error:
            # A request that cannot even be built or sent (httpx.InvalidURL is no
            # HTTPError) is a failed attempt like any other: counted, retried after the
            # backoff, given up at the last one, never a pass that dies with the notice
            # left pending.
            return f"cannot be sent: {type(error).__name__}"
        return None if 200 <= status < 300 else f"answered HTTP {status}"
