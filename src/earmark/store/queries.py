"""The SQL of group admission and the sweeper: loads for one batch, and its writes."""

from __future__ import annotations

import json
from collections.abc import Sequence

from earmark import limits
from earmark.core.batch import BatchDecision, BatchState, sample_keys
from earmark.core.estimates import SampleKey
from earmark.core.model import Budget, Hold, HoldState
from earmark.core.ops import ChargeOp, Op, ReserveOp
from earmark.core.prices import PriceBook
from earmark.core.ratelimit import AdmissionWindow
from earmark.errors import FailedPrecondition
from earmark.store import cycles
from earmark.store.named import NamedQuery
from earmark.store.rows import (
    BUDGET_COLUMN_TYPES,
    BUDGET_COLUMNS,
    CHARGE_COLUMNS,
    HOLD_COLUMN_NAMES,
    HOLD_COLUMN_TYPES,
    HOLD_COLUMNS,
    PRICE_COLUMNS,
    UPDATABLE_HOLD_COLUMNS,
    budget_from_row,
    charge_from_row,
    hold_columns,
    hold_from_row,
    price_from_row,
)
from earmark.store.tx import Conn

# Locks are taken in one order everywhere, reservations before budgets and each set
# by key, so that lanes, sweepers and other sidecars wait on each other but never
# deadlock.
# The keyed lookups resolve to ids first, one index probe per key, so that the whole
# statement is index lookups: an OR of the two conditions plans as a scan of every
# reservation, and under SERIALIZABLE a scan also conflicts with every other writer.
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
SELECT unit, job, model, samples FROM job_samples
WHERE (unit, job, model) IN (
    SELECT * FROM unnest($units::text[], $jobs::text[], $models::text[]))
""")

CLAIM_DUE = f"""
SELECT {", ".join(f"r.{name}" for name in HOLD_COLUMN_NAMES)}
FROM open_holds o JOIN reservations r USING (reservation_id)
WHERE o.expires_at <= $1 AND r.state = 1
ORDER BY o.expires_at
LIMIT $2
FOR UPDATE OF r SKIP LOCKED
"""

# Every write of a batch in one statement, one round trip: each CTE takes its rows from
# arrays (empty arrays write nothing). The CTEs touch disjoint rows, so that they cannot
# see each other's changes does not matter, and foreign keys are checked at the end of
# the statement, after every CTE has run.
_NEW_HOLD_ARRAYS = ", ".join(
    f"$new_{name}::{HOLD_COLUMN_TYPES[name]}[]" for name in HOLD_COLUMN_NAMES
)
_CHANGED_HOLD_ARRAYS = ", ".join(
    f"$changed_{name}::{HOLD_COLUMN_TYPES[name]}[]" for name in UPDATABLE_HOLD_COLUMNS
)
_CHANGED_HOLD_SET = ", ".join(f"{name} = u.{name}" for name in UPDATABLE_HOLD_COLUMNS)

WRITE_BATCH = NamedQuery(f"""
WITH new_holds AS (
    INSERT INTO reservations ({HOLD_COLUMNS})
    SELECT * FROM unnest({_NEW_HOLD_ARRAYS})
), changed_holds AS (
    UPDATE reservations AS r SET
        {_CHANGED_HOLD_SET}
    FROM unnest($changed_reservation_id::uuid[], {_CHANGED_HOLD_ARRAYS})
        AS u(reservation_id, {", ".join(UPDATABLE_HOLD_COLUMNS)})
    WHERE r.reservation_id = u.reservation_id
        AND r.reservation_id = ANY($changed_reservation_id::uuid[])
), new_charges AS (
    INSERT INTO charges (reservation_id, idempotency_key, amount, charged, capped,
                         total_charged, hold_remaining, price_version)
    SELECT * FROM unnest($charge_reservation_ids::uuid[], $charge_keys::text[],
                         $charge_amounts::bigint[], $charge_charged::bigint[],
                         $charge_capped::boolean[], $charge_totals::bigint[],
                         $charge_hold_remaining::bigint[], $charge_price_versions::bigint[])
), new_ledger AS (
    INSERT INTO ledger (budget_id, reservation_id, kind, held_delta, used_delta, at)
    SELECT * FROM unnest($ledger_budget_ids::text[], $ledger_reservation_ids::uuid[],
                         $ledger_kinds::text[], $ledger_held_deltas::bigint[],
                         $ledger_used_deltas::bigint[], $ledger_at::timestamptz[])
), opened AS (
    INSERT INTO open_holds (reservation_id, expires_at)
    SELECT * FROM unnest($opened_ids::uuid[], $opened_expires_at::timestamptz[])
), extended AS (
    UPDATE open_holds AS o SET expires_at = u.expires_at
    FROM unnest($extended_ids::uuid[], $extended_expires_at::timestamptz[])
        AS u(reservation_id, expires_at)
    WHERE o.reservation_id = u.reservation_id AND o.reservation_id = ANY($extended_ids::uuid[])
), closed AS (
    DELETE FROM open_holds WHERE reservation_id = ANY($closed_ids::uuid[])
), windows AS (
    INSERT INTO accounts (account, window_start, admissions)
    SELECT * FROM unnest($window_accounts::text[], $window_starts::timestamptz[],
                         $window_admissions::integer[])
    ON CONFLICT (account) DO UPDATE
    SET window_start = EXCLUDED.window_start, admissions = EXCLUDED.admissions
), outbox AS (
    INSERT INTO meter_outbox (account, feature, cycle_start, total, at, version)
    SELECT u.account, u.feature, u.cycle_start, u.total, u.at, 1
    FROM unnest($outbox_accounts::text[], $outbox_features::text[],
                $outbox_cycles::timestamptz[], $outbox_totals::bigint[],
                $outbox_at::timestamptz[])
        AS u(account, feature, cycle_start, total, at)
    ON CONFLICT (account, feature, cycle_start) DO UPDATE
    SET total = EXCLUDED.total, at = EXCLUDED.at, version = meter_outbox.version + 1
), samples AS (
    INSERT INTO job_samples (unit, job, model, samples)
    SELECT * FROM unnest($sample_units::text[], $sample_jobs::text[], $sample_models::text[],
                         $sample_lists::jsonb[])
    ON CONFLICT (unit, job, model)
    DO UPDATE SET samples = EXCLUDED.samples, updated_at = now()
)
UPDATE budgets AS b SET used = u.used, held = u.held,
    open_reservations = u.open_reservations, updated_at = now()
FROM unnest($budget_ids::text[], $budget_used::bigint[], $budget_held::bigint[],
            $budget_open::bigint[])
    AS u(budget_id, used, held, open_reservations)
WHERE b.budget_id = u.budget_id AND b.budget_id = ANY($budget_ids::text[])
""")


# Every Earmark process takes this transaction-scoped advisory lock before it adds a unit,
# so that two new units cannot both pass the count.
_UNITS_LOCK_KEY = 0x45554E54  # "EUNT"


async def lock_budget_for_update(conn: Conn, budget_id: str) -> Budget | None:
    row = await conn.fetchrow(
        f"SELECT {BUDGET_COLUMNS} FROM budgets WHERE budget_id = $1 FOR UPDATE", budget_id
    )
    return None if row is None else budget_from_row(row)


INSERT_BUDGET = NamedQuery(f"""
INSERT INTO budgets (budget_id, limit_units, unit, default_estimate, estimate_policy)
VALUES ($budget_id, $limit, $unit, $default_estimate, $estimate_policy)
ON CONFLICT (budget_id) DO NOTHING
RETURNING {BUDGET_COLUMNS}
""")

UPDATE_BUDGET = NamedQuery(f"""
UPDATE budgets SET limit_units = $limit, unit = $unit, default_estimate = $default_estimate,
    estimate_policy = $estimate_policy, updated_at = now()
WHERE budget_id = $budget_id
RETURNING {BUDGET_COLUMNS}
""")


def _budget_args(query: NamedQuery, spec: Budget) -> list[object]:
    return query.args(
        budget_id=spec.budget_id,
        limit=spec.limit,
        unit=spec.unit,
        default_estimate=spec.default_estimate,
        estimate_policy=int(spec.estimate_policy),
    )


async def insert_budget(conn: Conn, spec: Budget) -> Budget | None:
    """The new budget, or None if another transaction created it first."""
    row = await conn.fetchrow(INSERT_BUDGET.sql, *_budget_args(INSERT_BUDGET, spec))
    return None if row is None else budget_from_row(row)


async def update_budget(conn: Conn, spec: Budget) -> Budget:
    """Sets what an operator sets (limit, unit, estimates); the counters stay."""
    row = await conn.fetchrow(UPDATE_BUDGET.sql, *_budget_args(UPDATE_BUDGET, spec))
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
            "distinct units (use one already in use)"
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
    conn: Conn, entries: Sequence[tuple[str, Op]], prices: PriceBook
) -> tuple[dict[str, BatchState], PriceBook]:
    """Locks the holds the operations name, then the budgets in id order (one round trip),
    reads earlier charge answers, then the job samples the batch needs; returns one state
    per budget named, each with the price book (reloaded if a price was added) and the
    shared samples, and the price book."""
    ids = [op.reservation_id for _, op in entries if not isinstance(op, ReserveOp)]
    keyed = [op for _, op in entries if isinstance(op, ReserveOp)]
    states = {budget_id: BatchState(budget_id=budget_id, budget=None) for budget_id, _ in entries}
    args = LOCK_BATCH.args(
        ids=ids,
        key_budget_ids=[op.budget_id for op in keyed],
        key_owners=[op.owner for op in keyed],
        keys=[op.idempotency_key for op in keyed],
        budget_ids=sorted(states),
    )
    price_seq: int | None = None
    for row in await conn.fetch(LOCK_BATCH.sql, *args):
        if row["is_budget"]:
            states[row["budget_id"]].budget = budget_from_row(row)
            price_seq = row["price_seq"]
            continue
        hold = hold_from_row(row)
        state = states.get(hold.budget_id)
        if state is None:
            continue  # a reservation id routed to the wrong budget: NotFound in the rules
        state.holds_by_id[hold.reservation_id] = hold
        state.holds_by_key[(hold.owner, hold.idempotency_key)] = hold
    charged_budget = {op.reservation_id: b for b, op in entries if isinstance(op, ChargeOp)}
    if charged_budget:
        charges = [op for _, op in entries if isinstance(op, ChargeOp)]
        rows = await conn.fetch(
            LOAD_CHARGES,
            [op.reservation_id for op in charges],
            [op.idempotency_key for op in charges],
        )
        for row in rows:
            record = charge_from_row(row)
            state = states[charged_budget[record.reservation_id]]
            state.charges[(record.reservation_id, record.idempotency_key)] = record
    if price_seq is not None:
        prices = await load_price_book(conn, prices, price_seq)
    samples = await _load_samples(conn, states, entries)
    windows = await cycles.lock_windows(conn, entries)
    for state in states.values():
        state.prices = prices
        state.samples = samples
        state.windows = windows
    return states, prices


async def _load_samples(
    conn: Conn, states: dict[str, BatchState], entries: Sequence[tuple[str, Op]]
) -> dict[SampleKey, list[int]]:
    ops_by_budget: dict[str, list[Op]] = {}
    for budget_id, op in entries:
        ops_by_budget.setdefault(budget_id, []).append(op)
    keys: set[SampleKey] = set()
    for budget_id, ops in ops_by_budget.items():
        keys |= sample_keys(states[budget_id], ops)
    if not keys:
        return {}
    ordered = sorted(keys)
    args = LOAD_SAMPLES.args(
        units=[k[0] for k in ordered], jobs=[k[1] for k in ordered], models=[k[2] for k in ordered]
    )
    samples: dict[SampleKey, list[int]] = {key: [] for key in ordered}
    for row in await conn.fetch(LOAD_SAMPLES.sql, *args):
        samples[(row["unit"], row["job"], row["model"])] = list(json.loads(row["samples"]))
    return samples


async def claim_due(conn: Conn, now: object, limit: int) -> list[Hold]:
    """Locks live holds whose lease passed, skipping those another transaction holds."""
    return [hold_from_row(row) for row in await conn.fetch(CLAIM_DUE, now, limit)]


async def write_decisions(conn: Conn, decided: Sequence[tuple[BatchState, BatchDecision]]) -> None:
    """Writes what the decisions changed in one statement, whatever the batch size."""
    new_holds = [h for _, d in decided for h in d.new_holds]
    new_ids = {h.reservation_id for h in new_holds}
    changed = [
        h for _, d in decided for h in d.changed_holds.values() if h.reservation_id not in new_ids
    ]
    charges = [c for _, d in decided for c in d.new_charges]
    ledger = [e for _, d in decided for e in d.ledger]
    budgets = [s.budget for s, d in decided if s.budget is not None and d.writes_anything()]
    sampled: dict[SampleKey, list[int]] = {}
    windows: dict[str, AdmissionWindow] = {}
    for state, decision in decided:
        for key in decision.samples:
            sampled[key] = state.samples[key]
        for account in decision.windows:
            windows[account] = state.windows[account]
    meters = cycles.meter_totals(decided)
    if not (new_holds or changed or charges or ledger or budgets or sampled or windows):
        return
    opened = [h for h in new_holds if h.state is HoldState.HELD]
    extended = [h for h in changed if h.state is HoldState.HELD]
    closed = [h.reservation_id for h in changed if h.state is not HoldState.HELD]
    new_columns = hold_columns(new_holds)
    changed_columns = hold_columns(changed)
    args = WRITE_BATCH.args(
        **{f"new_{name}": array for name, array in new_columns.items()},
        changed_reservation_id=changed_columns["reservation_id"],
        **{f"changed_{name}": changed_columns[name] for name in UPDATABLE_HOLD_COLUMNS},
        charge_reservation_ids=[c.reservation_id for c in charges],
        charge_keys=[c.idempotency_key for c in charges],
        charge_amounts=[c.amount for c in charges],
        charge_charged=[c.charged for c in charges],
        charge_capped=[c.capped for c in charges],
        charge_totals=[c.total_charged for c in charges],
        charge_hold_remaining=[c.hold_remaining for c in charges],
        charge_price_versions=[c.price_version for c in charges],
        ledger_budget_ids=[e.budget_id for e in ledger],
        ledger_reservation_ids=[e.reservation_id for e in ledger],
        ledger_kinds=[str(e.kind) for e in ledger],
        ledger_held_deltas=[e.held_delta for e in ledger],
        ledger_used_deltas=[e.used_delta for e in ledger],
        ledger_at=[e.at for e in ledger],
        budget_ids=[b.budget_id for b in budgets],
        budget_used=[b.used for b in budgets],
        budget_held=[b.held for b in budgets],
        budget_open=[b.open_reservations for b in budgets],
        opened_ids=[h.reservation_id for h in opened],
        opened_expires_at=[h.expires_at for h in opened],
        extended_ids=[h.reservation_id for h in extended],
        extended_expires_at=[h.expires_at for h in extended],
        closed_ids=closed,
        window_accounts=list(windows),
        window_starts=[w.window_start for w in windows.values()],
        window_admissions=[w.admissions for w in windows.values()],
        outbox_accounts=[b.account for b, _ in meters],
        outbox_features=[b.feature for b, _ in meters],
        outbox_cycles=[b.cycle_start for b, _ in meters],
        outbox_totals=[b.used for b, _ in meters],
        outbox_at=[at for _, at in meters],
        sample_units=[key[0] for key in sampled],
        sample_jobs=[key[1] for key in sampled],
        sample_models=[key[2] for key in sampled],
        sample_lists=[json.dumps(values) for values in sampled.values()],
    )
    await conn.execute(WRITE_BATCH.sql, *args)
