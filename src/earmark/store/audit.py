"""The invariants, checked from the tables: what tests, benchmarks and operators run."""

from __future__ import annotations

from earmark.core.bounds import limit_problem
from earmark.core.model import OPEN_STATES, HoldState
from earmark.store.tx import Conn, read_snapshot

# The states as the reservations table stores them: HoldState's numbers, never typed here.
_OPEN = ", ".join(str(int(state)) for state in sorted(OPEN_STATES))
_HELD, _SETTLED, _IN_DOUBT = int(HoldState.HELD), int(HoldState.SETTLED), int(HoldState.IN_DOUBT)

# A budget's holds are those it is the budget_id of and those naming it in also_budget_ids
# (migration 0007), each in the period of that budget it was reserved in (migration 0019:
# reservations.periods, aligned with budget_id then also_budget_ids; NULL: period 0): every
# sum below is per budget and period, the budget's current period on its row and each
# closed one in budget_periods. Open holds are OPEN_STATES (held and in doubt). ceiling_max
# is the highest ceiling the period ever had (its limit, and under SOFT the overage limit
# past it; NULL once unbounded, or observed), kept by a trigger: a limit lowered below what
# was admitted under the old one is no violation.
AUDIT = f"""
WITH members AS (
    SELECT m.budget_id, coalesce(r.periods[m.ord::integer], 0) AS period_no, r.state, r.amount,
           r.charged, r.settled_used
    FROM reservations r,
         unnest(ARRAY[r.budget_id] || r.also_budget_ids) WITH ORDINALITY AS m(budget_id, ord)
), holds AS (
    SELECT budget_id, period_no,
           sum(amount - charged) FILTER (WHERE state IN ({_OPEN})) AS open_held,
           count(*) FILTER (WHERE state IN ({_OPEN})) AS open_count,
           sum(greatest(0, settled_used - amount)) FILTER (WHERE state = {_SETTLED}) AS overshoot
    FROM members
    GROUP BY budget_id, period_no
), shares AS (
    -- At a budget's home (migration 0029): each region's outstanding escrow is held.
    SELECT budget_id, 0 AS period_no,
           sum(greatest(0, granted - greatest(returned, reclaimed_to) - used)) AS outstanding
    FROM region_shares
    GROUP BY budget_id
), counters AS (
    SELECT budget_id, period_no, limit_units, used, held, open_reservations, ceiling_max
    FROM budgets
    UNION ALL
    SELECT budget_id, period_no, limit_units, used, held, open_reservations, ceiling_max
    FROM budget_periods
)
SELECT b.budget_id, b.period_no, b.limit_units, b.used, b.held, b.open_reservations,
       b.ceiling_max AS ceiling,
       coalesce(h.open_held, 0) + coalesce(s.outstanding, 0) AS open_held,
       coalesce(h.open_count, 0) AS open_count,
       coalesce(h.overshoot, 0) AS overshoot,
       coalesce(l.used, 0) AS ledger_used,
       coalesce(l.held, 0) AS ledger_held,
       coalesce(l.late, 0) AS late
FROM counters b
LEFT JOIN holds h USING (budget_id, period_no)
LEFT JOIN shares s USING (budget_id, period_no)
LEFT JOIN (
    SELECT budget_id, period_no, sum(used_delta) AS used, sum(held_delta) AS held,
           sum(used_delta) FILTER (WHERE kind = 'late_settle') AS late
    FROM ledger GROUP BY budget_id, period_no
) l USING (budget_id, period_no)
ORDER BY b.budget_id, b.period_no
"""

# Every period a ledger row or a hold counts in has counters: its budget's current period,
# or a closed one.
ORPHAN_PERIODS = """
SELECT count(*) FROM (
    SELECT DISTINCT budget_id, period_no FROM ledger
    UNION
    SELECT DISTINCT m.budget_id, coalesce(r.periods[m.ord::integer], 0)
    FROM reservations r,
         unnest(ARRAY[r.budget_id] || r.also_budget_ids) WITH ORDINALITY AS m(budget_id, ord)
) k
WHERE NOT EXISTS (SELECT 1 FROM budgets b
                  WHERE b.budget_id = k.budget_id AND b.period_no = k.period_no)
  AND NOT EXISTS (SELECT 1 FROM budget_periods p
                  WHERE p.budget_id = k.budget_id AND p.period_no = k.period_no)
"""


# open_holds' rows with a deadline must be exactly the held reservations, with their
# deadlines; a row without one is a closed hold's that the sweeper has yet to delete
# (migration 0020).
OPEN_HOLDS_DRIFT = f"""
SELECT count(*) FROM reservations r
FULL JOIN open_holds o USING (reservation_id)
WHERE (r.state = {_HELD}) IS DISTINCT FROM (o.expires_at IS NOT NULL)
   OR (r.state = {_HELD} AND r.expires_at <> o.expires_at)
"""

# in_doubt_holds must list exactly the reservations in doubt.
IN_DOUBT_DRIFT = f"""
SELECT count(*) FROM reservations r
FULL JOIN in_doubt_holds d USING (reservation_id)
WHERE (r.state = {_IN_DOUBT}) IS DISTINCT FROM (d.reservation_id IS NOT NULL)
"""

# hold_scopes must hold exactly one row per entry of a reservation's also_budget_ids.
SCOPES_DRIFT = """
SELECT count(*) FROM (
    SELECT unnest(also_budget_ids) AS budget_id, owner, idempotency_key, reservation_id
    FROM reservations WHERE cardinality(also_budget_ids) > 0
) a
FULL JOIN hold_scopes s USING (budget_id, owner, idempotency_key, reservation_id)
WHERE a.reservation_id IS NULL OR s.reservation_id IS NULL
"""


# Budgets whose count of holds open from closed periods (open_earlier, max_open_holds'
# count) is not the sum of their closed periods' open_reservations.
OPEN_EARLIER_DRIFT = """
SELECT count(*) FROM budgets b
LEFT JOIN (SELECT budget_id, sum(open_reservations) AS open FROM budget_periods
           GROUP BY budget_id) p USING (budget_id)
WHERE b.open_earlier <> coalesce(p.open, 0)
"""


# In a region (migration 0029): a share's budget row is the share (limit granted - returned,
# share_until its lease).
SHARES_DRIFT = """
SELECT count(*) FROM region_share_state s JOIN budgets b USING (budget_id)
WHERE b.limit_units IS DISTINCT FROM s.granted - s.returned
   OR b.share_until IS DISTINCT FROM s.lease_until
"""


async def audit(conn: Conn) -> list[str]:
    """Every broken invariant, one sentence each; an empty list means all hold, for each
    budget over its own holds and those nested under it: held = sum of open holds (and of
    the regions' outstanding shares, at a budget's home) = sum of
    ledger held deltas, used = sum of ledger charges, open_reservations = count of open
    holds (and open_earlier the sum of its closed periods'), and nothing beyond the ceiling
    (the limit, and a SOFT budget's overage limit) but what settles reported past their
    holds, and no limit past limits.limit_units_max; and the side tables (open_holds,
    in_doubt_holds, hold_scopes) agree with the reservations."""
    problems = []
    for row in await conn.fetch(AUDIT):
        name = row["budget_id"]
        if row["period_no"]:
            name = f"{name} (period {row['period_no']})"
        if row["open_held"] != row["held"]:
            problems.append(f"{name}: held {row['held']} != open holds {row['open_held']}")
        if row["ledger_held"] != row["held"]:
            problems.append(f"{name}: held {row['held']} != ledger {row['ledger_held']}")
        if row["ledger_used"] != row["used"]:
            problems.append(f"{name}: used {row['used']} != ledger {row['ledger_used']}")
        if row["open_count"] != row["open_reservations"]:
            problems.append(f"{name}: open_reservations drifted")
        # PutBudget and the plan gate both refuse a limit past the bound; a row that has
        # one was written around them (by hand, or by an older sidecar).
        limit = row["limit_units"]
        problem = None if limit is None else limit_problem(limit)
        if problem is not None:
            problems.append(f"{name}: limit {problem}")
        ceiling = row["ceiling"]
        spent = row["used"] + row["held"] - row["overshoot"] - row["late"]
        if ceiling is not None and spent > ceiling:
            problems.append(f"{name}: {spent} admitted on a ceiling of {ceiling}")
    earlier = await conn.fetchval(OPEN_EARLIER_DRIFT)
    if earlier:
        problems.append(f"{earlier} budgets count holds open from closed periods otherwise")
    orphans = await conn.fetchval(ORPHAN_PERIODS)
    if orphans:
        problems.append(f"{orphans} periods have ledger rows or holds but no counters")
    for query, table, what in (
        (OPEN_HOLDS_DRIFT, "open_holds", "held reservations"),
        (IN_DOUBT_DRIFT, "in_doubt_holds", "reservations in doubt"),
        (SCOPES_DRIFT, "hold_scopes", "reservations' also_budget_ids"),
        (SHARES_DRIFT, "region_share_state", "budget rows of the region's shares"),
    ):
        drift = await conn.fetchval(query)
        if drift:
            problems.append(f"{table} differs from the {what} in {drift} rows")
    return problems


async def audit_database(url: str) -> tuple[list[str], int]:
    """`earmark audit`: the audit of the database at url, and how many budgets it covered,
    read in one snapshot (read_snapshot)."""

    async def work(conn: Conn) -> tuple[list[str], int]:
        problems = await audit(conn)
        return problems, int(await conn.fetchval("SELECT count(*) FROM budgets"))

    return await read_snapshot(url, work)
