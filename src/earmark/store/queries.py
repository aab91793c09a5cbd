"""The SQL of group admission and the sweeper: what a batch locks and loads (its writes
are in writes.py), and PutBudget's rows."""

from __future__ import annotations

import json
from collections.abc import Sequence

from earmark import limits
from earmark.core.batch import BatchState, sample_keys
from earmark.core.calls import RESERVE_CHARGE_KEY
from earmark.core.estimates import SampleKey
from earmark.core.model import Budget, Hold, PeriodTotals
from earmark.core.ops import ChargeOp, Op, ReserveOp
from earmark.core.prices import PriceBook
from earmark.errors import FailedPrecondition, Reason
from earmark.store import cycles
from earmark.store.lanes import Route
from earmark.store.named import NamedQuery
from earmark.store.rows import (
    BUDGET_COLUMN_TYPES,
    BUDGET_COLUMNS,
    CHARGE_COLUMNS,
    HOLD_COLUMN_NAMES,
    HOLD_COLUMN_TYPES,
    HOLD_COLUMNS,
    PRICE_COLUMNS,
    budget_from_row,
    charge_from_row,
    hold_from_row,
    period_from_row,
    price_from_row,
)
from earmark.store.tx import Conn

# Locks are taken in one order everywhere, reservations before budgets and each set
# by key, so that lanes, sweepers and other sidecars wait on each other but never
# deadlock.
# The keyed lookups resolve to ids first, one index probe per key, so that the whole
# statement is index lookups: an OR of the two conditions plans as a scan of every
# reservation, and under SERIALIZABLE a scan also conflicts with every other writer.
# A batch sends keys only when it must (store/batches.py): a probe of
# reservations_idempotency locks the leaf page where the key would be, which budgets with
# neighbouring ids share, and every new hold inserts there.
_LOCK_HOLDS = f"""
SELECT {HOLD_COLUMNS} FROM reservations
WHERE reservation_id = ANY($ids::uuid[] || ARRAY(
    SELECT r.reservation_id
    FROM unnest($key_budget_ids::text[], $key_owners::text[], $keys::text[])
        AS k(budget_id, owner, idempotency_key)
    JOIN reservations r USING (budget_id, owner, idempotency_key)))
ORDER BY reservation_id
FOR UPDATE
"""

# price_seq, the newest price's id (one probe of the primary key's last page), tells a
# batch whether its cached price book is still every version there is, for no round trip.
_LOCK_BUDGETS = f"""
SELECT {BUDGET_COLUMNS}, (SELECT coalesce(max(price_id), 0) FROM prices) AS price_seq
FROM budgets
WHERE budget_id = ANY($budget_ids::text[])
ORDER BY budget_id
FOR NO KEY UPDATE
"""
LOCK_BUDGETS = NamedQuery(_LOCK_BUDGETS).sql

# A batch's holds and then its budgets, locked in that order, in one round trip: the rows
# of the two differ, so each arm fills the other's columns with typed NULLs, and is_budget
# says which a row is. Every round trip inside a batch's transaction is time its stripes
# stay locked.
_BUDGET_ONLY = [name for name in BUDGET_COLUMN_TYPES if name not in HOLD_COLUMN_TYPES]
LOCK_BATCH = NamedQuery(f"""
WITH holds AS ({_LOCK_HOLDS}), locked AS ({_LOCK_BUDGETS})
SELECT false AS is_budget, {", ".join(f"h.{name}" for name in HOLD_COLUMN_NAMES)},
    {", ".join(f"NULL::{BUDGET_COLUMN_TYPES[name]} AS {name}" for name in _BUDGET_ONLY)},
    NULL::bigint AS price_seq
FROM holds h
UNION ALL
SELECT true, {
    ", ".join(
        f"b.{name}" if name == "budget_id" else f"NULL::{HOLD_COLUMN_TYPES[name]}"
        for name in HOLD_COLUMN_NAMES
    )
},
    {", ".join(f"b.{name}" for name in _BUDGET_ONLY)}, b.price_seq
FROM locked b
""")

LOAD_CHARGES = f"""
SELECT {CHARGE_COLUMNS} FROM charges
WHERE reservation_id = ANY($1::uuid[]) AND (reservation_id, idempotency_key) IN (
    SELECT * FROM unnest($1::uuid[], $2::text[]))
"""

LOAD_PRICES = f"SELECT {PRICE_COLUMNS} FROM prices ORDER BY price_id"

LOAD_SAMPLES = NamedQuery("""
SELECT unit, root, job, model, samples FROM tenant_samples
WHERE (unit, root, job, model) IN (
    SELECT * FROM unnest($units::text[], $roots::text[], $jobs::text[], $models::text[]))
""")

CLAIM_DUE = f"""
SELECT {", ".join(f"r.{name}" for name in HOLD_COLUMN_NAMES)}
FROM open_holds o JOIN reservations r USING (reservation_id)
WHERE o.expires_at <= $1 AND r.state = 1
ORDER BY o.expires_at, o.reservation_id
LIMIT $2
FOR UPDATE OF r SKIP LOCKED
"""

# Every Earmark process takes this transaction-scoped advisory lock before it adds a unit,
# so that two new units cannot both pass the count.
_UNITS_LOCK_KEY = 0x45554E54  # "EUNT"


async def get_budget(conn: Conn, budget_id: str) -> Budget | None:
    row = await conn.fetchrow(
        f"SELECT {BUDGET_COLUMNS} FROM budgets WHERE budget_id = $1", budget_id
    )
    return None if row is None else budget_from_row(row)


async def lock_budget_for_update(conn: Conn, budget_id: str) -> Budget | None:
    row = await conn.fetchrow(
        f"SELECT {BUDGET_COLUMNS} FROM budgets WHERE budget_id = $1 FOR UPDATE", budget_id
    )
    return None if row is None else budget_from_row(row)


INSERT_BUDGET = NamedQuery(f"""
INSERT INTO budgets (budget_id, limit_units, unit, default_estimate, estimate_policy,
                     escrow_bps, overage_policy, overage_limit, period, timezone,
                     period_anchor, period_start, period_end, threshold_bps, mode,
                     admissions_per_minute, units_per_minute, threshold_basis,
                     max_open_holds, max_admissions, closes_at, template_id,
                     template_version)
VALUES ($budget_id, $limit, $unit, $default_estimate, $estimate_policy, $escrow_bps,
        $overage_policy, $overage_limit, $period, $timezone, $period_anchor, $period_start,
        $period_end, $threshold_bps, $mode, $admissions_per_minute, $units_per_minute,
        $threshold_basis, $max_open_holds, $max_admissions, $closes_at, $template_id,
        $template_version)
ON CONFLICT (budget_id) DO NOTHING
RETURNING {BUDGET_COLUMNS}
""")

# The current period's window is PutBudget's to set only where the budget had no boundary
# (budgets.put): a changed calendar takes effect at the next one.
UPDATE_BUDGET = NamedQuery(f"""
UPDATE budgets SET limit_units = $limit, unit = $unit, default_estimate = $default_estimate,
    estimate_policy = $estimate_policy, escrow_bps = $escrow_bps,
    overage_policy = $overage_policy, overage_limit = $overage_limit,
    overage_since = $overage_since, noticed_bps = $noticed_bps,
    refusing_noticed = $refusing_noticed,
    period = $period, timezone = $timezone, period_anchor = $period_anchor,
    period_start = $period_start, period_end = $period_end, threshold_bps = $threshold_bps,
    mode = $mode, admissions_per_minute = $admissions_per_minute,
    units_per_minute = $units_per_minute, threshold_basis = $threshold_basis,
    max_open_holds = $max_open_holds, max_admissions = $max_admissions,
    closes_at = $closes_at, limit_until = $limit_until, limit_after = $limit_after,
    limit_reason = $limit_reason, template_version = $template_version,
    changed_by_hand = $changed_by_hand,
    updated_at = now()
WHERE budget_id = $budget_id
RETURNING {BUDGET_COLUMNS}
""")


def _budget_args(query: NamedQuery, spec: Budget, **more: object) -> list[object]:
    return query.args(
        **more,
        budget_id=spec.budget_id,
        limit=spec.limit,
        unit=spec.unit,
        default_estimate=spec.default_estimate,
        estimate_policy=int(spec.estimate_policy),
        escrow_bps=spec.escrow_bps,
        overage_policy=int(spec.overage_policy),
        overage_limit=spec.overage_limit,
        period=int(spec.period),
        timezone=spec.timezone,
        period_anchor=spec.period_anchor,
        period_start=spec.period_start,
        period_end=spec.period_end,
        threshold_bps=list(spec.threshold_bps),
        mode=int(spec.mode),
        admissions_per_minute=spec.admissions_per_minute,
        units_per_minute=spec.units_per_minute,
        threshold_basis=int(spec.threshold_basis),
        max_open_holds=spec.max_open_holds,
        max_admissions=spec.max_admissions,
        closes_at=spec.closes_at,
    )


async def insert_budget(conn: Conn, spec: Budget) -> Budget | None:
    """The new budget, or None if another transaction created it first."""
    row = await conn.fetchrow(
        INSERT_BUDGET.sql,
        *_budget_args(
            INSERT_BUDGET,
            spec,
            template_id=spec.template_id,
            template_version=spec.template_version,
        ),
    )
    return None if row is None else budget_from_row(row)


async def update_budget(conn: Conn, spec: Budget) -> Budget:
    """Sets what an operator sets (limit, unit, estimates, escrow and policy), and the
    overage flag and notices as spec has them (core.notices.kept_by_put, core.updates.kept);
    the counters stay."""
    kept = {
        "overage_since": spec.overage_since,
        "noticed_bps": list(spec.noticed_bps),
        "refusing_noticed": spec.refusing_noticed,
        "limit_until": spec.limit_until,
        "limit_after": spec.limit_after,
        "limit_reason": spec.limit_reason,
        "template_version": spec.template_version,
        "changed_by_hand": spec.changed_by_hand,
    }
    row = await conn.fetchrow(UPDATE_BUDGET.sql, *_budget_args(UPDATE_BUDGET, spec, **kept))
    assert row is not None
    return budget_from_row(row)


async def admit_unit(conn: Conn, unit: str) -> None:
    """Records unit as in use, unless that would make more than limits.units_max."""
    known = "SELECT 1 FROM units WHERE unit = $1"
    if await conn.fetchval(known, unit):
        return
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _UNITS_LOCK_KEY)
    # READ COMMITTED: this statement sees a unit another transaction added while we waited.
    if await conn.fetchval(known, unit):
        return
    count = await conn.fetchval("SELECT count(*) FROM units")
    if count >= limits.units_max:
        raise FailedPrecondition(
            f"unit: {unit!r} would be unit number {count + 1}; at most {limits.units_max} "
            "distinct units (use one already in use)",
            Reason.UNITS_FULL,
            field="unit",
        )
    await conn.execute("INSERT INTO units (unit) VALUES ($1)", unit)


async def lock_budgets(conn: Conn, budget_ids: Sequence[str]) -> tuple[dict[str, Budget], int]:
    """The budgets, locked in id order, and the newest price's id (0 without budgets)."""
    rows = await conn.fetch(LOCK_BUDGETS, list(budget_ids))
    seq = rows[0]["price_seq"] if rows else 0
    return {row["budget_id"]: budget_from_row(row) for row in rows}, seq


async def load_price_book(conn: Conn, cached: PriceBook, seq: int) -> PriceBook:
    """cached if no price was added since it was loaded, else every version anew."""
    if seq == cached.seq:
        return cached
    rows = await conn.fetch(LOAD_PRICES)
    return PriceBook([price_from_row(row) for row in rows], seq=seq)


async def load_batches(
    conn: Conn, entries: Sequence[tuple[Route, Op]], prices: PriceBook, *, by_key: bool = True
) -> tuple[dict[str, BatchState], PriceBook]:
    """Locks the holds the operations name (by id, and with by_key the holds of the
    Reserves' idempotency keys), then every budget their routes name in id order (one round
    trip), reads earlier charge answers, then the job samples the batch needs; returns one
    state per budget the operations are routed by, sharing the locked budgets, the price
    book (reloaded if a price was added) and the samples, and the price book."""
    ids = [op.reservation_id for _, op in entries if not isinstance(op, ReserveOp)]
    keyed = [op for _, op in entries if isinstance(op, ReserveOp)] if by_key else []
    states = {route[0]: BatchState(budget_id=route[0], budget=None) for route, _ in entries}
    args = LOCK_BATCH.args(
        ids=ids,
        key_budget_ids=[op.budget_id for op in keyed],
        key_owners=[op.owner for op in keyed],
        keys=[op.idempotency_key for op in keyed],
        budget_ids=sorted({budget_id for route, _ in entries for budget_id in route}),
    )
    price_seq: int | None = None
    budgets: dict[str, Budget] = {}
    holds: list[Hold] = []
    for row in await conn.fetch(LOCK_BATCH.sql, *args):
        if row["is_budget"]:
            budgets[row["budget_id"]] = budget_from_row(row)
            price_seq = row["price_seq"]
        else:
            holds.append(hold_from_row(row))
    for budget_id, state in states.items():
        state.budget = budgets.get(budget_id)
        state.budgets = budgets
    for hold in holds:
        owner = states.get(hold.budget_id)
        if owner is None:
            continue  # a reservation id routed to the wrong budget: NotFound in the rules
        owner.holds_by_id[hold.reservation_id] = hold
        owner.holds_by_key[(hold.owner, hold.idempotency_key)] = hold
    # The charges retried Charges may repeat, and those of retried Reserves that charged:
    # a repeated Reserve answers what its charge charged the first time.
    charge_keys = [
        (op.reservation_id, op.idempotency_key, r[0])
        for r, op in entries
        if isinstance(op, ChargeOp)
    ]
    for r, op in entries:
        if isinstance(op, ReserveOp) and op.charge is not None and r[0] in states:
            again = states[r[0]].holds_by_key.get((op.owner, op.idempotency_key))
            if again is not None:
                charge_keys.append((again.reservation_id, RESERVE_CHARGE_KEY, r[0]))
    charged_budget = {rid: budget_id for rid, _, budget_id in charge_keys}
    if charged_budget:
        rows = await conn.fetch(
            LOAD_CHARGES,
            [rid for rid, _, _ in charge_keys],
            [key for _, key, _ in charge_keys],
        )
        for row in rows:
            record = charge_from_row(row)
            state = states[charged_budget[record.reservation_id]]
            state.charges[(record.reservation_id, record.idempotency_key)] = record
    if price_seq is not None:
        prices = await load_price_book(conn, prices, price_seq)
    samples = await _load_samples(conn, states, entries)
    windows = await cycles.lock_windows(conn, entries)
    closed = await load_periods(conn, budgets, holds)
    for state in states.values():
        state.prices = prices
        state.samples = samples
        state.windows = windows
        state.closed = closed
    return states, prices


# Whether any of these idempotency keys already names a reservation.
KEYS_TAKEN = """
SELECT EXISTS (
    SELECT 1
    FROM unnest($1::text[], $2::text[], $3::text[]) AS k(budget_id, owner, idempotency_key)
    JOIN reservations r USING (budget_id, owner, idempotency_key))
"""


async def keys_taken(conn: Conn, reserves: Sequence[ReserveOp]) -> bool:
    """Whether a reservation exists for any of these Reserves' keys (no round trip for
    none)."""
    if not reserves:
        return False
    taken = await conn.fetchval(
        KEYS_TAKEN,
        [op.budget_id for op in reserves],
        [op.owner for op in reserves],
        [op.idempotency_key for op in reserves],
    )
    return bool(taken)


async def _load_samples(
    conn: Conn, states: dict[str, BatchState], entries: Sequence[tuple[Route, Op]]
) -> dict[SampleKey, list[int]]:
    ops_by_budget: dict[str, list[Op]] = {}
    for route, op in entries:
        ops_by_budget.setdefault(route[0], []).append(op)
    keys: set[SampleKey] = set()
    for budget_id, ops in ops_by_budget.items():
        keys |= sample_keys(states[budget_id], ops)
    if not keys:
        return {}
    ordered = sorted(keys)
    args = LOAD_SAMPLES.args(
        units=[k[0] for k in ordered],
        roots=[k[1] for k in ordered],
        jobs=[k[2] for k in ordered],
        models=[k[3] for k in ordered],
    )
    samples: dict[SampleKey, list[int]] = {key: [] for key in ordered}
    for row in await conn.fetch(LOAD_SAMPLES.sql, *args):
        key = (row["unit"], row["root"], row["job"], row["model"])
        samples[key] = list(json.loads(row["samples"]))
    return samples


# Holds still open in a budget's closed periods, and whether any closed period moved at
# all: what PutBudget's unit and DeleteBudget must count beside the row's own counters.
CLOSED_USE = """
SELECT coalesce(sum(open_reservations), 0) AS open, bool_or(used <> 0 OR held <> 0) AS used
FROM budget_periods WHERE budget_id = $1
"""


async def closed_use(conn: Conn, budget_id: str) -> tuple[int, bool]:
    """(holds open in the budget's closed periods, whether any closed period was used)."""
    row = await conn.fetchrow(CLOSED_USE, budget_id)
    assert row is not None
    return int(row["open"]), bool(row["used"])


LOAD_PERIODS = """
SELECT budget_id, period_no, period_start, period_end, limit_units, used, held,
    open_reservations
FROM budget_periods
WHERE (budget_id, period_no) IN (SELECT * FROM unnest($1::text[], $2::integer[]))
ORDER BY budget_id, period_no
FOR UPDATE
"""


async def load_periods(
    conn: Conn, budgets: dict[str, Budget], holds: Sequence[Hold]
) -> dict[tuple[str, int], PeriodTotals]:
    """The closed periods the holds belong to on any of their budgets (a hold reserved
    before a boundary its budget has passed): no round trip when there are none, which is
    every batch but those of holds open across a boundary."""
    keys = sorted(
        {
            (budget_id, hold.period_on(index))
            for hold in holds
            for index, budget_id in enumerate(hold.budget_ids())
            if budget_id in budgets and hold.period_on(index) != budgets[budget_id].period_no
        }
    )
    if not keys:
        return {}
    rows = await conn.fetch(LOAD_PERIODS, [k[0] for k in keys], [k[1] for k in keys])
    return {(row["budget_id"], row["period_no"]): period_from_row(row) for row in rows}


async def claim_due(conn: Conn, now: object, limit: int) -> list[Hold]:
    """Locks live holds whose lease passed, skipping those another transaction holds."""
    return [hold_from_row(row) for row in await conn.fetch(CLAIM_DUE, now, limit)]
