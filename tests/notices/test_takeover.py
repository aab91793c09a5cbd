"""Notices exactly once at the receiver, through a crash: real `earmark serve` processes on
one database, the first killed while its attempt is in flight."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from earmark.notices.signing import secret_bytes
from earmark.spawn import SpawnedSidecar, log_events, spawn_sidecar
from tests.helpers import eventually, scrape
from tests.notices.receiver import Inbox, receiving
from tests.notices.recorded import SECRET, deliveries, insert_event, threshold_payload

# Short, so that the second sidecar takes over soon after the first died: the first's
# attempt may last half of it (2 s), which the test's kill comes well within.
LEASE_SECONDS = 4


@pytest.fixture
def folders() -> Iterator[list[Path]]:
    """Two short data dirs (a Unix socket's path is bounded), removed at the end."""
    made = [Path(tempfile.mkdtemp(prefix="em-")) for _ in range(2)]
    try:
        yield made
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def now() -> datetime:
    return datetime.now(UTC)


async def spawn(folder: Path, *args: str) -> SpawnedSidecar:
    return await asyncio.to_thread(spawn_sidecar, folder, *args)


async def end(sidecar: SpawnedSidecar | None, *, kill: bool = False) -> None:
    """SIGKILL or SIGTERM (then waits); nothing when it never started or already ended."""
    if sidecar is None:
        return
    if kill and sidecar.process.poll() is None:
        sidecar.process.kill()
    await asyncio.to_thread(sidecar.stop)


async def test_a_sidecar_killed_mid_delivery_is_taken_over_with_the_same_id(
    dsn: str, folders: list[Path]
) -> None:
    """`earmark serve --notify-url` posts a notice to a receiver that takes it and never
    answers, and is SIGKILLed meanwhile, having recorded nothing. A second sidecar on the
    same database, once the first's lease has run out, posts it again with the same
    webhook-id and body; the receiver drops the repeat (answers 200, takes it once), and
    the second records it delivered and counts it, and gives the lease up when it stops.
    No log names the secret."""
    secret_file = folders[0] / "notify.secret"
    secret_file.write_text(SECRET + "\n")
    event_id = await insert_event(dsn, threshold_payload("acme/usd"))
    first = second = None
    with receiving(secret_bytes(SECRET), now, script=["drop"]) as (url, inbox):
        args = ("--database-url", dsn, "--notify-url", url, "--notify-secret-file",
                str(secret_file), "--notify-lease-seconds", str(LEASE_SECONDS))  # fmt: skip
        try:
            first = await spawn(folders[0], *args)
            await eventually(lambda: seen(inbox, 1), within_seconds=30, what="the first attempt")
            await end(first, kill=True)
            assert ({}, -9) == (await deliveries(dsn), first.process.returncode)
            second = await spawn(folders[1], *args)

            async def delivered() -> bool:
                return event_id in await deliveries(dsn)

            await eventually(delivered, within_seconds=30, what="the notice delivered again")
            counted = scrape(second.metrics_port)
        finally:
            await end(first, kill=True)
            await end(second)
    requests, taken, duplicates = inbox.snapshot()
    assert ([event_id] * 2, [None] * 2) == (
        [request.webhook_id for request in requests],
        [request.refused for request in requests],
    )
    assert ({event_id: requests[0].body}, 1) == (taken, duplicates)
    assert requests[0].body == requests[1].body
    assert 1.0 == counted[("earmark_notices_total", (("outcome", "delivered"),))]
    assert 1 == (await deliveries(dsn))[event_id]["attempts"]
    assert [] == await leases(dsn)
    said = [event.get("event") for event in log_events(second.log)]
    assert {"notify_lease_taken", "notice_delivered"} <= set(said)
    for sidecar in (first, second):
        assert SECRET.removeprefix("whsec_") not in sidecar.log.read_text()


async def seen(inbox: Inbox, count: int) -> bool:
    return count <= len(inbox.snapshot()[0])


async def leases(dsn: str) -> list[str]:
    """Who holds the deliverer's lease (nobody: empty)."""
    conn = await asyncpg.connect(dsn)
    try:
        return [row["holder"] for row in await conn.fetch("SELECT holder FROM notify_lease")]
    finally:
        await conn.close()
