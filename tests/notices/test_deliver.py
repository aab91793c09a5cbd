"""The deliverer against a real PostgreSQL and a real receiver on 127.0.0.1 that verifies
every signature: each notice posted once it is recorded, the same id and body on every
attempt, given up at the last one, and one deliverer at a time on a database."""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from earmark import limits
from earmark.metrics import Metrics
from earmark.notices import signing
from earmark.notices.deliver import Deliverer, body_of
from earmark.notices.signing import secret_bytes
from earmark.notices.target import Target, shown_url
from earmark.store.events import EventLog
from tests.helpers import FakeClock, assert_invariants, eventually, free_port, started
from tests.notices.receiver import Inbox, receiving
from tests.notices.recorded import (
    SECRET,
    deliveries,
    exceeded_payload,
    in_doubt_payload,
    insert_event,
    threshold_payload,
)

KEY = secret_bytes(SECRET)


@asynccontextmanager
async def delivering(
    dsn: str, url: str, clock: FakeClock, *, seed: int = 7
) -> AsyncIterator[tuple[Deliverer, Metrics]]:
    """A deliverer to url on the test's clock and database, closed at the end."""
    metrics = Metrics()
    target = Target(url=url, keys=(KEY,), shown=shown_url(url))
    deliverer = Deliverer(EventLog(dsn), target, metrics, clock, rng=random.Random(seed))
    try:
        yield deliverer, metrics
    finally:
        await deliverer.close()


def outcomes(metrics: Metrics) -> tuple[float | None, ...]:
    """earmark_notices_total for delivered, retried and failed, and the undelivered gauge."""
    registry = metrics.registry
    counted = tuple(
        registry.get_sample_value("earmark_notices_total", {"outcome": outcome})
        for outcome in ("delivered", "retried", "failed")
    )
    return (*counted, registry.get_sample_value("earmark_notices_undelivered"))


async def test_every_notice_reaches_a_receiver_that_verifies_its_signature(
    dsn: str, clock: FakeClock
) -> None:
    """One notice of each kind is posted in the order recorded, its webhook-id its event id,
    its body the payload in one serialization, signed at the attempt's time: the receiver
    verifies all three, and each is recorded delivered and counted."""
    payloads = [
        threshold_payload("acme/usd"),
        exceeded_payload("acme/tokens"),
        in_doubt_payload("acme/tokens"),
    ]
    ids = [await insert_event(dsn, payload) for payload in payloads]
    with receiving(KEY, clock) as (url, inbox):
        async with delivering(dsn, url, clock) as (deliverer, metrics):
            delivered = await deliverer.deliver_once()
    requests, taken, duplicates = inbox.snapshot()
    assert (3, ids, [None] * 3) == (
        delivered,
        [request.webhook_id for request in requests],
        [request.refused for request in requests],
    )
    assert payloads == [json.loads(request.body) for request in requests]
    assert [body_of(json.dumps(p)) for p in payloads] == [request.body for request in requests]
    assert {(str(int(clock().timestamp())), "application/json")} == {
        (request.timestamp, request.headers["content-type"]) for request in requests
    }
    assert (3, 0) == (len(taken), duplicates)
    recorded = await deliveries(dsn)
    assert {(1, clock(), None, "")} == {
        (row["attempts"], row["delivered_at"], row["failed_at"], row["last_error"])
        for row in recorded.values()
    }
    assert (3.0, 0.0, 0.0, 0.0) == outcomes(metrics)


async def test_a_failed_attempt_is_posted_again_with_the_same_id_and_body(
    dsn: str, clock: FakeClock
) -> None:
    """A receiver that answers 500 and then 200 gets the notice twice, with the same
    webhook-id and byte for byte the same body, the second after the backoff; one retry and
    one delivery are counted."""
    event_id = await insert_event(dsn, threshold_payload("acme/usd"))
    base = timedelta(seconds=limits.notify_backoff_seconds_base)
    with receiving(KEY, clock, script=[500]) as (url, inbox):
        async with delivering(dsn, url, clock) as (deliverer, metrics):
            assert 0 == await deliverer.deliver_once()
            retrying = (await deliveries(dsn))[event_id]
            assert (1, "answered HTTP 500", None) == (
                retrying["attempts"],
                retrying["last_error"],
                retrying["delivered_at"],
            )
            assert clock() < retrying["next_attempt_at"] <= clock() + base
            assert (0.0, 1.0, 0.0, 1.0) == outcomes(metrics)
            # Not due yet: nothing is posted.
            assert 0 == await deliverer.deliver_once()
            clock.advance(base)
            assert 1 == await deliverer.deliver_once()
            counted = outcomes(metrics)
    requests, taken, duplicates = inbox.snapshot()
    assert ([event_id] * 2, [None] * 2) == (
        [request.webhook_id for request in requests],
        [request.refused for request in requests],
    )
    assert (1, {event_id: requests[0].body}, 0) == (
        len({request.body for request in requests}),
        taken,
        duplicates,
    )
    assert 2 == int(requests[1].timestamp) - int(requests[0].timestamp)
    assert (1.0, 1.0, 0.0, 0.0) == counted
    delivered = (await deliveries(dsn))[event_id]
    assert (2, clock(), None) == (
        delivered["attempts"],
        delivered["delivered_at"],
        delivered["next_attempt_at"],
    )


async def test_a_notice_is_given_up_at_its_last_attempt(dsn: str, clock: FakeClock) -> None:
    """A receiver that answers 503 every time gets notify_attempts_max attempts, all with the
    same id; the last gives the notice up, which is counted as failed, and it is never
    posted again."""
    event_id = await insert_event(dsn, in_doubt_payload("acme/tokens"))
    attempts_max = limits.notify_attempts_max
    with receiving(KEY, clock, then=503) as (url, inbox):
        async with delivering(dsn, url, clock) as (deliverer, metrics):
            for _ in range(attempts_max + 1):
                assert 0 == await deliverer.deliver_once()
                clock.advance(timedelta(seconds=limits.notify_backoff_seconds_max))
    requests, taken, _ = inbox.snapshot()
    assert ([event_id] * attempts_max, {}) == ([r.webhook_id for r in requests], taken)
    failed = (await deliveries(dsn))[event_id]
    assert (attempts_max, "answered HTTP 503", None, None) == (
        failed["attempts"],
        failed["last_error"],
        failed["next_attempt_at"],
        failed["delivered_at"],
    )
    assert failed["failed_at"] is not None
    assert (0.0, float(attempts_max - 1), 1.0, 0.0) == outcomes(metrics)


async def test_a_receiver_out_of_reach_is_retried_and_no_secret_is_said(
    dsn: str, clock: FakeClock
) -> None:
    """A URL whose port takes no connection is an attempt that failed, recorded as the
    error's type alone: neither the error, nor the log lines, nor the target's repr name
    the URL's password, path token or query, or the signing secret."""
    token = uuid.uuid4().hex
    url = f"http://user:pw{token}@127.0.0.1:{free_port()}/hooks/{token}?key=q{token}"
    event_id = await insert_event(dsn, threshold_payload("acme/usd"))
    async with delivering(dsn, url, clock) as (deliverer, metrics):
        with capture_logs() as logs:
            assert 0 == await deliverer.deliver_once()
        shown = repr(deliverer._target)
    row = (await deliveries(dsn))[event_id]
    assert ("ConnectError", 1) == (row["last_error"], row["attempts"])
    said = json.dumps(logs, default=str) + row["last_error"] + shown
    assert "notice_retry" in said
    assert (False, False) == (token in said, SECRET.removeprefix("whsec_") in said)
    assert (0.0, 1.0, 0.0, 1.0) == outcomes(metrics)


async def test_two_deliverers_on_one_database_never_post_at_once(
    dsn: str, clock: FakeClock
) -> None:
    """While one deliverer's attempt is held by the receiver, another on the same database
    posts nothing; it takes over once the first's lease has run out, and at once when the
    deliverer holding the lease stops. Every notice is posted once, in order, one at a
    time."""
    first = [await insert_event(dsn, threshold_payload(f"team-{n}")) for n in range(3)]
    with receiving(KEY, clock, script=["wait"]) as (url, inbox):
        async with (
            delivering(dsn, url, clock) as (one, _),
            delivering(dsn, url, clock, seed=8) as (two, _),
            started(one.deliver_once()) as (passing,),
        ):
            await eventually(
                lambda: held(inbox), within_seconds=10, what="the receiver holding an attempt"
            )
            assert 0 == await two.deliver_once()
            inbox.release.set()
            assert 3 == await passing
            later = await insert_event(dsn, exceeded_payload("team-0"))
            assert 0 == await two.deliver_once()
            clock.advance(timedelta(seconds=limits.notify_lease_seconds_default))
            assert (1, 0) == (await two.deliver_once(), await one.deliver_once())
            await two.close()
            last = await insert_event(dsn, in_doubt_payload("team-1"))
            assert 1 == await one.deliver_once()
    requests, taken, duplicates = inbox.snapshot()
    assert [*first, later, last] == [request.webhook_id for request in requests]
    assert (1, 5, 0) == (inbox.in_flight_max, len(taken), duplicates)


async def held(inbox: Inbox) -> bool:
    with inbox.lock:
        return 1 == inbox.in_flight


async def test_a_deliverer_that_is_told_to_stop_ends_its_pass_between_notices(
    dsn: str, clock: FakeClock
) -> None:
    """A pass asked to stop posts nothing more; what it left is posted by the next pass,
    and the gauge counts it meanwhile."""
    await insert_event(dsn, threshold_payload("acme/usd"))
    with receiving(KEY, clock) as (url, inbox):
        async with delivering(dsn, url, clock) as (deliverer, metrics):
            assert 0 == await deliverer.deliver_once(stopping=lambda: True)
            assert (0.0, 1.0) == (outcomes(metrics)[0], outcomes(metrics)[3])
            beats: list[int] = []
            assert 1 == await deliverer.deliver_once(beat=lambda: beats.append(1))
    assert (1, 1) == (len(inbox.snapshot()[0]), len(beats))


async def test_a_pass_waits_for_no_receiver_it_cannot_reach_past_its_timeout(
    dsn: str, clock: FakeClock
) -> None:
    """A receiver that never answers holds an attempt for half the lease at most (here,
    the shortest lease: one second), then the attempt is a retry that says it timed out."""
    event_id = await insert_event(dsn, threshold_payload("acme/usd"))
    lease = limits.notify_lease_seconds_min
    with receiving(KEY, clock, script=["wait"]) as (url, _):
        target = Target(url=url, keys=(KEY,), shown=shown_url(url))
        deliverer = Deliverer(EventLog(dsn), target, Metrics(), clock, lease_seconds=lease)
        try:
            assert 0 == await asyncio.wait_for(deliverer.deliver_once(), 10)
        finally:
            await deliverer.close()
    row = (await deliveries(dsn))[event_id]
    assert f"timed out after {lease / 2:g}s" == row["last_error"]


async def test_an_attempt_that_cannot_be_sent_is_retried_then_given_up(
    dsn: str, clock: FakeClock
) -> None:
    """A target URL with a tab in it (injected past the settings' check) is an attempt that
    failed, counted and retried after the backoff at each pass, and given up at the
    notify_attempts_max-th; the receiver behind it is never reached."""
    event_id = await insert_event(dsn, threshold_payload("acme/usd"))
    attempts_max = limits.notify_attempts_max
    with receiving(KEY, clock) as (url, inbox):
        async with delivering(dsn, url + "/a\tb", clock) as (deliverer, metrics):
            assert 0 == await deliverer.deliver_once()
            first = (await deliveries(dsn))[event_id]
            assert (1, "cannot be sent: InvalidURL", None) == (
                first["attempts"],
                first["last_error"],
                first["failed_at"],
            )
            assert clock() < first["next_attempt_at"]
            assert (0.0, 1.0, 0.0, 1.0) == outcomes(metrics)
            for _ in range(attempts_max):
                clock.advance(timedelta(seconds=limits.notify_backoff_seconds_max))
                assert 0 == await deliverer.deliver_once()
            counted = outcomes(metrics)
    failed = (await deliveries(dsn))[event_id]
    assert (attempts_max, "cannot be sent: InvalidURL", None, None) == (
        failed["attempts"],
        failed["last_error"],
        failed["next_attempt_at"],
        failed["delivered_at"],
    )
    assert failed["failed_at"] is not None
    assert ([], (0.0, float(attempts_max - 1), 1.0, 0.0)) == (inbox.snapshot()[0], counted)
    await assert_invariants(dsn)


async def test_a_request_that_cannot_be_built_is_a_failed_attempt(
    dsn: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Signing that raises something other than ValueError (a request that cannot be built)
    is an attempt that failed and is retried; the next attempt delivers the notice."""
    event_id = await insert_event(dsn, threshold_payload("acme/usd"))
    headers = signing.headers

    def failing(*args: Any) -> dict[str, str]:
        monkeypatch.setattr(signing, "headers", headers)
        raise RuntimeError("no signature this time")

    monkeypatch.setattr(signing, "headers", failing)
    with receiving(KEY, clock) as (url, inbox):
        async with delivering(dsn, url, clock) as (deliverer, metrics):
            assert 0 == await deliverer.deliver_once()
            retrying = (await deliveries(dsn))[event_id]
            clock.advance(timedelta(seconds=limits.notify_backoff_seconds_max))
            assert 1 == await deliverer.deliver_once()
            counted = outcomes(metrics)
    assert (1, "cannot be sent: RuntimeError") == (retrying["attempts"], retrying["last_error"])
    assert ([event_id], (1.0, 1.0, 0.0, 0.0)) == (
        [request.webhook_id for request in inbox.snapshot()[0]],
        counted,
    )
    await assert_invariants(dsn)
