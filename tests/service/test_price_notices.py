"""price.changed end to end (issue 44): PutPrice through Admin, the repricer's pass on two
sidecars sharing a database, and the notice posted signed to a receiver that verifies it,
once per version; an import that finds the book as it was puts no version and no notice."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from google.protobuf.timestamp_pb2 import Timestamp

from earmark import cli
from earmark.notices.signing import secret_bytes
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, eventually
from tests.notices.receiver import receiving
from tests.notices.recorded import SECRET

CLOCK_START = datetime(2026, 12, 1, 9, tzinfo=UTC)
DAY = timedelta(days=1)


def stamp(at: datetime) -> Timestamp:
    found = Timestamp()
    found.FromDatetime(at)
    return found


async def put(s: Running, effective_from: datetime, input_rate: int) -> pb.Price:
    """PutPrice of openai's gpt-4o default tier at input_rate, from effective_from."""
    price = pb.Price(
        provider="openai",
        model="gpt-4o",
        effective_from=stamp(effective_from),
        input_usd_micros_per_mtok=input_rate,
        output_usd_micros_per_mtok=10_000_000,
        source="https://openai.com/api/pricing",
    )
    reply: pb.Price = await s.admin.PutPrice(pb.PutPriceRequest(price=price))
    return reply


async def price_events(dsn: str) -> list[tuple[str, dict[str, Any]]]:
    """(dedupe_key, payload) of every price.changed, in order."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT dedupe_key, payload::text AS payload FROM events "
            "WHERE kind = 'price.changed' ORDER BY seq"
        )
    finally:
        await conn.close()
    return [(row["dedupe_key"], json.loads(row["payload"])) for row in rows]


async def test_a_dated_price_change_is_posted_signed_once_across_two_sidecars(
    dsn: str, socket_dir: Path, clock: FakeClock, tmp_path: Path
) -> None:
    """A price put in effect is posted at once; a change dated tomorrow is not posted until
    the clock passes it, then exactly once although two sidecars' repricers pass, signed,
    naming the version and rates it replaces."""
    secret_file = tmp_path / "notify.secret"
    secret_file.write_text(SECRET + "\n")
    second_dir = socket_dir / "second"
    second_dir.mkdir()
    with receiving(secret_bytes(SECRET), clock) as (url, inbox):
        notify = {"notify_url": url, "notify_secret_file": secret_file}
        async with (
            running(Sidecar(sidecar_settings(dsn, socket_dir, **notify), clock=clock), dsn) as a,
            running(Sidecar(sidecar_settings(dsn, second_dir, **notify), clock=clock), dsn) as b,
        ):
            await put(a, CLOCK_START - DAY, 2_500_000)

            async def taken(count: int) -> bool:
                return count == len(inbox.snapshot()[1])

            await eventually(lambda: taken(1), within_seconds=20, what="the first notice")
            dated = await put(b, CLOCK_START + DAY, 2_000_000)
            # Passes of both repricers before the change takes effect post nothing.
            await asyncio.sleep(2.5)
            early = len(inbox.snapshot()[1])
            clock.advance(DAY + timedelta(seconds=1))
            await eventually(lambda: taken(2), within_seconds=20, what="the dated notice")
            await asyncio.sleep(2.5)
            requests, bodies, duplicates = inbox.snapshot()
    recorded = await price_events(dsn)
    data = json.loads(list(bodies.values())[1])["data"]
    assert (1, 2, [None, None], 0) == (
        early,
        len(recorded),
        [request.refused for request in requests],
        duplicates,
    )
    assert ["price/openai gpt-4o/1/changed", "price/openai gpt-4o/2/changed"] == [
        key for key, _ in recorded
    ]
    assert (2, "2026-12-02T09:00:00Z", 2_000_000, 1, 2_500_000) == (
        dated.version,
        data["effective_from"],
        data["input_per_mtok"],
        data["replaces"]["version"],
        data["replaces"]["input_per_mtok"],
    )


async def run(s: Running, *argv: str) -> object:
    """What `earmark ARGV --admin-target ADMIN` answers."""
    args = cli.parser().parse_args([*argv, "--admin-target", s.admin_target])
    return await asyncio.to_thread(args.run, args)


async def test_an_import_that_changes_no_rate_notices_nothing(sidecar: Running) -> None:
    """`earmark prices import` notices each version it puts (in effect at once); run again
    with the same rates it puts no version, so no notice."""
    argv = ("prices", "import", "--provider", "openai", "--model", "gpt-4o")
    found = []
    for _ in range(2):
        await run(sidecar, *argv)
        listed = await sidecar.admin.ListPrices(pb.ListPricesRequest(provider="openai"))
        found.append((len(listed.prices), await price_events(sidecar.dsn)))
    (versions, noticed), again = found
    assert (True, versions) == (versions >= 1, len(noticed))
    assert (versions, noticed) == again
