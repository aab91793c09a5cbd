"""What a serializable transaction of the store does first, before its snapshot: plan
settings, and a batch's budget stripes (see migration 0006)."""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from earmark import limits

SCHEMA = "earmark_stripes"

# Under SERIALIZABLE, a sequential scan locks a whole table against every writer: on the
# small tables (budgets, open_holds, charges) the planner prefers one, and then any two
# transactions conflict, whatever budgets they touch. Every statement of the store's
# transactions names its rows by an index condition, so that with sequential scans off
# each plan reads index pages and rows only. SET LOCAL ends with the transaction, which
# keeps it safe behind PgBouncer's transaction pooling.
SETTINGS = "SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan"


def stripe_of(budget_id: str) -> int:
    """The budget's stripe: the same in every process (Python's hash() is not)."""
    return zlib.crc32(budget_id.encode()) % limits.budget_stripes


def first_statement(budget_ids: Iterable[str] = ()) -> str:
    """SETTINGS, then LOCK TABLE of the budgets' stripes (if any), in stripe order, so that
    two batches wait on each other but never deadlock; one round trip, and no snapshot.
    Table names come from numbers, never from the ids."""
    stripes = sorted({stripe_of(budget_id) for budget_id in budget_ids})
    if not stripes:
        return SETTINGS
    tables = ", ".join(f"{SCHEMA}.s{stripe:02d}" for stripe in stripes)
    return f"{SETTINGS}; LOCK TABLE {tables} IN EXCLUSIVE MODE"
