"""A batch's writes: one statement whose parameters are arrays of composite rows."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg

import earmark.store
from earmark.store import Store, writes

STORE_DIR = Path(earmark.store.__file__).parent

# A cast's type: `::name`, `::name[]`, `::"name"`, `::public.name`.
_CAST = re.compile(r"::\s*(?:public\.)?\"?([A-Za-z_][A-Za-z0-9_]*)\"?")

# Every relation's row type (tables, views, partitioned tables): not the standalone
# composite types (relkind 'c'), which belong to the writes alone.
RELATION_ROW_TYPES = """
SELECT t.typname FROM pg_type t JOIN pg_class c ON c.oid = t.typrelid
WHERE t.typnamespace = 'public'::regnamespace AND c.relkind <> 'c'
"""

ATTRIBUTES = """
SELECT t.typname, array_agg(a.attname::text ORDER BY a.attnum) AS attributes
FROM pg_type t JOIN pg_attribute a ON a.attrelid = t.typrelid
WHERE t.typname = ANY($1::text[]) AND t.typnamespace = 'public'::regnamespace
    AND a.attnum > 0 AND NOT a.attisdropped
GROUP BY t.typname
"""


async def test_every_row_type_has_the_attributes_the_writes_send(store: Store, dsn: str) -> None:
    """Each row type's attributes in the database are those writes.py builds, in order."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(ATTRIBUTES, list(writes.ROW_TYPES))
    finally:
        await conn.close()
    assert writes.ROW_TYPES == {row["typname"]: tuple(row["attributes"]) for row in rows}


def test_a_statement_has_a_write_only_for_each_kind_of_row_the_batch_has() -> None:
    """A Reserve-only batch's statement binds its four kinds of rows, one array each."""
    statement = writes.write_statement(("new_holds", "ledger", "opened", "budgets"))
    assert ["new_holds", "ledger", "opened", "budgets"] == statement.names
    written = re.findall(r"(?:INSERT INTO|UPDATE|DELETE FROM) (\w+)", statement.sql)
    assert ["reservations", "ledger", "open_holds", "budgets"] == written


def _casts_in_store() -> dict[str, set[str]]:
    """Each type the store's source casts a value to, with the files that do."""
    casts: dict[str, set[str]] = {}
    for path in sorted(STORE_DIR.rglob("*.py")):
        for name in _CAST.findall(path.read_text()):
            casts.setdefault(name.lower(), set()).add(path.name)
    return casts


async def test_no_statement_casts_to_a_tables_row_type(store: Store, dsn: str) -> None:
    """A table's row type changes when a migration adds a column, and a sidecar of the
    previous release still running in a rolling upgrade would then send rows one column
    short: the store writes through composite types of its own (migrations 0012, 0022)."""
    conn = await asyncpg.connect(dsn)
    try:
        relations = {row["typname"] for row in await conn.fetch(RELATION_ROW_TYPES)}
    finally:
        await conn.close()
    assert {"reservations", "open_holds", "budgets"} <= relations
    casts = _casts_in_store()
    assert "write_hold" in casts, "the scan found the writes' casts"
    offending = {name: files for name, files in casts.items() if name in relations}
    assert offending == {}


def test_the_cast_scan_sees_a_cast_to_a_table() -> None:
    """The scan that the test above relies on finds the casts it must refuse."""
    found = _CAST.findall('unnest($rows::reservations[]), $x::"open_holds", $y::public.accounts')
    assert found == ["reservations", "open_holds", "accounts"]
