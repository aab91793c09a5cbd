"""A batch's writes: one statement whose parameters are arrays of composite rows."""

from __future__ import annotations

import re

import asyncpg

from earmark.store import Store, writes

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
