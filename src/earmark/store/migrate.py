"""Numbered migrations, applied at start, once, even when several sidecars start together."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from earmark.store.tx import Conn

# Any fixed number: every Earmark process takes this advisory lock to migrate.
_MIGRATION_LOCK_KEY = 0x4541524D  # "EARM"
_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """The migrations shipped in earmark/store/migrations, in version order."""
    found = []
    for entry in resources.files("earmark.store").joinpath("migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    # Numbers are handed out to work in progress on other branches (0011 may land before
    # 0009 and 0010), and migrate() applies every version a database lacks, whatever its
    # order; what must never happen is two migrations with one number.
    assert len(set(versions)) == len(versions), f"migration numbers repeat: {versions}"
    return found


async def migrate(conn: Conn) -> list[int]:
    """Applies the migrations this database lacks; returns the versions it applied."""
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK_KEY)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY,
                   name text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        for migration in migrations():
            if migration.version in done:
                continue
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
            applied.append(migration.version)
    return applied
