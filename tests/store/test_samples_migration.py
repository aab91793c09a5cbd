"""Migration 0015 on a database that has job samples keyed by job alone (a database of
its own on the session's server, migrated here step by step)."""

from __future__ import annotations

import asyncpg

from earmark.store.embedded import EmbeddedPostgres, ensure_database
from earmark.store.migrate import migrations

DATABASE = "earmark_samples_migration"


async def test_samples_kept_by_job_alone_move_aside_under_the_empty_root(
    embedded_pg: EmbeddedPostgres,
) -> None:
    """A sample row written before 0015 is kept under root '' (no budget's or account's
    root), and a tenant's row of the same unit, job and model is a row of its own."""
    await ensure_database(embedded_pg.uri(), DATABASE)
    conn = await asyncpg.connect(embedded_pg.uri(DATABASE))
    try:
        for migration in migrations():
            if migration.version == 15:
                await conn.execute(
                    "INSERT INTO job_samples (unit, job, model, samples) "
                    "VALUES ('tokens', 'digest', '', '[5, 7]')"
                )
            await conn.execute(migration.sql)
        await conn.execute(
            "INSERT INTO tenant_samples (unit, root, job, model, samples) "
            "VALUES ('tokens', 'ta', 'digest', '', '[9]')"
        )
        rows = await conn.fetch("SELECT unit, root, job, model, samples FROM tenant_samples")
    finally:
        await conn.close()
    assert [
        ("tokens", "", "digest", "", "[5, 7]"),
        ("tokens", "ta", "digest", "", "[9]"),
    ] == sorted(tuple(r) for r in rows)
