"""The invariants, checked from the tables: what tests, benchmarks and operators run."""

from __future__ import annotations

from earmark.store.tx import Conn

AUDIT = """
SELECT b.budget_id, b.limit_units, b.used, b.held, b.open_reservations,
       coalesce(r.open_held, 0) AS open_held,
       coalesce(r.open_count, 0) AS open_count,
       coalesce(r.overshoot, 0) AS overshoot,
       coalesce(l.used, 0) AS ledger_used,
       coalesce(l.held, 0) AS ledger_held,
       coalesce(l.late, 0) AS late
FROM budgets b
LEFT JOIN (
    SELECT budget_id,
           sum(amount - charged) FILTER (WHERE state = 1) AS open_held,
           count(*) FILTER (WHERE state = 1) AS open_count,
           sum(greatest(0, settled_used - amount)) FILTER (WHERE state = 2) AS overshoot
    FROM reservations GROUP BY budget_id
) r USING (budget_id)
LEFT JOIN (
    SELECT budget_id, sum(used_delta) AS used, sum(held_delta) AS held,
           sum(used_delta) FILTER (WHERE kind = 'late_settle') AS late
    FROM ledger GROUP BY budget_id
) l USING (budget_id)
ORDER BY b.budget_id
"""


# open_holds must list exactly the held reservations, with their deadlines.
OPEN_HOLDS_DRIFT = """
SELECT count(*) FROM reservations r
FULL JOIN open_holds o USING (reservation_id)
WHERE (r.state = 1) IS DISTINCT FROM (o.reservation_id IS NOT NULL)
   OR (r.state = 1 AND r.expires_at <> o.expires_at)
"""


async def audit(conn: Conn) -> list[str]:
    """Every broken invariant, one sentence each; an empty list means all hold:
    held = sum of open holds = sum of ledger held deltas, used = sum of ledger charges,
    open_reservations = count of open holds, and nothing beyond the limit but what
    settles reported past their holds."""
    problems = []
    for row in await conn.fetch(AUDIT):
        name = row["budget_id"]
        if row["open_held"] != row["held"]:
            problems.append(f"{name}: held {row['held']} != open holds {row['open_held']}")
        if row["ledger_held"] != row["held"]:
            problems.append(f"{name}: held {row['held']} != ledger {row['ledger_held']}")
        if row["ledger_used"] != row["used"]:
            problems.append(f"{name}: used {row['used']} != ledger {row['ledger_used']}")
        if row["open_count"] != row["open_reservations"]:
            problems.append(f"{name}: open_reservations drifted")
        limit = row["limit_units"]
        spent = row["used"] + row["held"] - row["overshoot"] - row["late"]
        if limit is not None and spent > limit:
            problems.append(f"{name}: {spent} admitted on a limit of {limit}")
    drift = await conn.fetchval(OPEN_HOLDS_DRIFT)
    if drift:
        problems.append(f"open_holds differs from the held reservations in {drift} rows")
    return problems
