"""A batch's writes: one statement whose parameters are arrays of composite rows."""

from __future__ import annotations

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


def test_the_statement_takes_one_parameter_per_kind_of_row() -> None:
    """The batch's statement binds one array per kind of row, and two of ids to delete."""
    kinds = {
        "new_holds", "scopes", "doubted", "changed_holds", "charges", "ledger", "opened",
        "extended", "windows", "meter_moves", "samples", "budgets",
    }  # fmt: skip
    assert kinds | {"undoubted_ids", "closed_ids"} == set(writes.WRITE_BATCH.names)
