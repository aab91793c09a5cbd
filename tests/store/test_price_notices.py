"""price.changed against a real PostgreSQL (issue 44): a version noticed once when it takes
effect, at its put or at the pass after its effective_from, however many stores pass at
once, and an upgrade's existing versions never."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from earmark import limits
from earmark.core.prices import Price
from earmark.store import Store
from earmark.store.embedded import EmbeddedPostgres, ensure_database
from earmark.store.migrate import migrations
from tests.helpers import FakeClock

DAY = timedelta(days=1)
# core/notices.py's: an event's id is derived from its dedupe key.
NAMESPACE = uuid.UUID("5d1b0f52-6a59-4c0e-9e44-3f2f8f0d6a34")
GPT = Price(
    "openai",
    "gpt-4o",
    0,
    datetime(2026, 11, 1, tzinfo=UTC),
    None,
    2_500_000,
    10_000_000,
    cached_input_per_mtok=1_250_000,
    source="genai-prices 0.0.40: https://openai.com/api/pricing",
    captured_at=datetime(2026, 11, 1, tzinfo=UTC),
    max_output_tokens=16_384,
    service_tier="priority",
    tool_fees=(("web_search", 10_000),),
)


async def price_events(dsn: str) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(kind, budget_id, dedupe_key, payload) of every price.changed, in order."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT kind, budget_id, dedupe_key, payload::text AS payload FROM events "
            "WHERE kind = 'price.changed' ORDER BY seq"
        )
    finally:
        await conn.close()
    return [(r["kind"], r["budget_id"], r["dedupe_key"], json.loads(r["payload"])) for r in rows]


async def test_a_put_in_effect_writes_its_notice_with_the_version_it_replaces(
    dsn: str, clock: FakeClock
) -> None:
    """A put in effect at once writes one price.changed, keyed by its version, whose data
    is the payload docs/notices.md shows, with the version of its tier it replaces."""
    store = await Store.open(dsn, clock=clock)
    try:
        await store.put_price(GPT)
        await store.put_price(replace(GPT, effective_from=clock() - DAY, input_per_mtok=2_000_000))
    finally:
        await store.close()
    first, second = await price_events(dsn)
    assert ("price.changed", "", "price/openai gpt-4o/2/changed") == second[:3]
    assert {
        "type": "price.changed",
        "timestamp": "2026-12-01T12:00:00Z",
        "data": {
            "provider": "openai",
            "model": "gpt-4o",
            "service_tier": "priority",
            "version": 2,
            "effective_from": "2026-11-30T12:00:00Z",
            "effective_to": None,
            "daily_from_minute": 0,
            "daily_to_minute": 0,
            "window_timezone": "",
            "input_tokens_above": 0,
            "input_per_mtok": 2_000_000,
            "output_per_mtok": 10_000_000,
            "cached_input_per_mtok": 1_250_000,
            "cache_write_per_mtok": 0,
            "cache_write_long_per_mtok": 0,
            "request_fee": 0,
            "tool_fees": {"web_search": 10_000},
            "max_output_tokens": 16_384,
            "source": "genai-prices 0.0.40: https://openai.com/api/pricing",
            "captured_at": "2026-11-01T00:00:00Z",
            "replaces": {
                "version": 1,
                "input_per_mtok": 2_500_000,
                "output_per_mtok": 10_000_000,
                "cached_input_per_mtok": 1_250_000,
                "cache_write_per_mtok": 0,
                "cache_write_long_per_mtok": 0,
                "request_fee": 0,
                "tool_fees": {"web_search": 10_000},
                "max_output_tokens": 16_384,
            },
        },
    } == second[3]
    expected_id = "msg_" + uuid.uuid5(NAMESPACE, second[2]).hex
    assert (None, expected_id) == (first[3]["data"]["replaces"], await event_id_of(dsn, second[2]))


async def event_id_of(dsn: str, key: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        return str(await conn.fetchval("SELECT event_id FROM events WHERE dedupe_key = $1", key))
    finally:
        await conn.close()


async def test_a_dated_version_is_noticed_once_after_it_takes_effect(
    dsn: str, clock: FakeClock
) -> None:
    """A version dated tomorrow writes no notice at its put nor at a pass before then; the
    first pass after writes one, and no pass after writes another."""
    store = await Store.open(dsn, clock=clock)
    try:
        await store.put_price(replace(GPT, effective_from=clock() + DAY))
        early = [await store.notice_prices(), await price_events(dsn)]
        clock.advance(DAY)
        passes = [await store.notice_prices() for _ in range(3)]
    finally:
        await store.close()
    (noticed,) = await price_events(dsn)
    assert ([0, []], [1, 0, 0]) == (early, passes)
    assert ("price/openai gpt-4o/1/changed", "2026-12-02T12:00:00Z") == (
        noticed[2],
        noticed[3]["data"]["effective_from"],
    )


async def test_two_stores_passing_at_once_notice_each_version_once(
    dsn: str, clock: FakeClock
) -> None:
    """Versions of many models dated in the future, passed by two stores on one database at
    once (and again) once they are in effect, are each noticed exactly once."""
    count = limits.price_notices_per_pass_max + 20
    stores = [await Store.open(dsn, clock=clock) for _ in range(2)]
    try:
        for n in range(count):
            await stores[n % 2].put_price(
                replace(GPT, model=f"m/{n}", effective_from=clock() + timedelta(minutes=n + 1))
            )
        clock.advance(DAY)
        rounds = [await asyncio.gather(*(s.notice_prices() for s in stores)) for _ in range(3)]
    finally:
        for store in stores:
            await store.close()
    keys = [key for _, _, key, _ in await price_events(dsn)]
    assert (count, count) == (sum(map(sum, rounds)), len(set(keys)))
    assert sorted(f"price/openai m/{n}/1/changed" for n in range(count)) == sorted(keys)


DATABASE = "earmark_price_notices_migration"
INSERT = (
    "INSERT INTO prices (provider, model, version, effective_from, input_per_mtok, "
    "output_per_mtok, cached_input_per_mtok, request_fee, source, daily_from_minute, "
    "daily_to_minute) VALUES ('openai', 'gpt', $1, $2, 1, 1, 0, 0, '', 0, 0)"
)


async def test_an_upgrade_notices_only_the_versions_not_yet_in_effect(
    embedded_pg: EmbeddedPostgres,
) -> None:
    """Versions in effect when a store migrates to 0026 are never noticed; one dated past
    the upgrade is noticed once when it takes effect; its rates stay append-only."""
    url = embedded_pg.uri(DATABASE)
    await ensure_database(embedded_pg.uri(), DATABASE)
    now = datetime.now(UTC)
    conn = await asyncpg.connect(url)
    try:
        for migration in migrations()[:25]:
            await conn.execute(migration.sql)
        # As migrate() records them: the store applies 0026 itself, at its start.
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        await conn.executemany(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            [(m.version, m.name) for m in migrations()[:25]],
        )
        for version, effective_from in ((1, now - 30 * DAY), (2, now - DAY), (3, now + DAY)):
            await conn.execute(INSERT, version, effective_from)
    finally:
        await conn.close()
    clock = FakeClock(now)
    store = await Store.open(url, clock=clock)
    try:
        before = await store.notice_prices()
        clock.advance(2 * DAY)
        after = [await store.notice_prices(), await store.notice_prices()]
    finally:
        await store.close()
    conn = await asyncpg.connect(url)
    try:
        try:
            await conn.execute("UPDATE prices SET input_per_mtok = 2 WHERE version = 1")
            refused = ""
        except asyncpg.RaiseError as error:
            refused = str(error)
        keys = [r["dedupe_key"] for r in await conn.fetch("SELECT dedupe_key FROM events")]
    finally:
        await conn.close()
    assert (0, [1, 0], ["price/openai gpt/3/changed"]) == (before, after, keys)
    assert "prices are append-only" == refused
