"""A batch's writes: everything its decisions changed, in one statement."""

from __future__ import annotations

import json
from collections.abc import Sequence

from earmark.core.batch import BatchDecision, BatchState
from earmark.core.estimates import SampleKey
from earmark.core.model import HoldState
from earmark.core.ratelimit import AdmissionWindow
from earmark.store import cycles
from earmark.store.named import NamedQuery
from earmark.store.rows import (
    HOLD_COLUMN_NAMES,
    HOLD_COLUMN_TYPES,
    HOLD_COLUMNS,
    UPDATABLE_HOLD_COLUMNS,
    hold_columns,
)
from earmark.store.tx import Conn

# Every write of a batch in one statement, one round trip: each CTE takes its rows from
# arrays (empty arrays write nothing). The CTEs touch disjoint rows, so that they cannot
# see each other's changes does not matter, and foreign keys are checked at the end of
# the statement, after every CTE has run.
#
# A reservation's also_budget_ids (text[]) travels as JSON text: an array of arrays in
# PostgreSQL is one rectangular array, and unnest() would flatten it.
_JSON_ARRAY_COLUMNS = {"also_budget_ids"}
_NEW_HOLD_ARRAYS = ", ".join(
    f"$new_{name}::text[]" if name in _JSON_ARRAY_COLUMNS
    else f"$new_{name}::{HOLD_COLUMN_TYPES[name]}[]"
    for name in HOLD_COLUMN_NAMES
)  # fmt: skip
_NEW_HOLD_VALUES = ", ".join(
    f"ARRAY(SELECT jsonb_array_elements_text(u.{name}::jsonb))" if name in _JSON_ARRAY_COLUMNS
    else f"u.{name}"
    for name in HOLD_COLUMN_NAMES
)  # fmt: skip
assert not _JSON_ARRAY_COLUMNS & set(UPDATABLE_HOLD_COLUMNS)
_CHANGED_HOLD_ARRAYS = ", ".join(
    f"$changed_{name}::{HOLD_COLUMN_TYPES[name]}[]" for name in UPDATABLE_HOLD_COLUMNS
)
_CHANGED_HOLD_SET = ", ".join(f"{name} = u.{name}" for name in UPDATABLE_HOLD_COLUMNS)

WRITE_BATCH = NamedQuery(f"""
WITH new_holds AS (
    INSERT INTO reservations ({HOLD_COLUMNS})
    SELECT {_NEW_HOLD_VALUES} FROM unnest({_NEW_HOLD_ARRAYS}) AS u({HOLD_COLUMNS})
), scopes AS (
    INSERT INTO hold_scopes (budget_id, owner, idempotency_key, reservation_id)
    SELECT * FROM unnest($scope_budget_ids::text[], $scope_owners::text[], $scope_keys::text[],
                         $scope_reservation_ids::uuid[])
), doubted AS (
    INSERT INTO in_doubt_holds (reservation_id, since)
    SELECT * FROM unnest($doubted_ids::uuid[], $doubted_since::timestamptz[])
), undoubted AS (
    DELETE FROM in_doubt_holds WHERE reservation_id = ANY($undoubted_ids::uuid[])
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
    -- Each move is booked to the period of its account and feature that was open when it
    -- was charged: the newest cycle budget begun by then, or, when that is the move's own
    -- budget and its period has ended, the period after it (its end), which the gate opens
    -- when the provider says so. A total only grows by moves, so a late settle adds to the
    -- open period and never rewrites a closed one.
    INSERT INTO meter_outbox (account, feature, cycle_start, total, at, version)
    SELECT m.account, m.feature, m.period_start, sum(m.used_delta), max(m.at), 1
    FROM (
        SELECT u.account, u.feature, u.used_delta, u.at,
            CASE WHEN latest.cycle_start IS NULL OR latest.cycle_start <= u.cycle_start
                 THEN CASE WHEN u.at < u.cycle_end THEN u.cycle_start ELSE u.cycle_end END
                 ELSE latest.cycle_start
            END AS period_start
        FROM unnest($outbox_accounts::text[], $outbox_features::text[],
                    $outbox_cycles::timestamptz[], $outbox_cycle_ends::timestamptz[],
                    $outbox_deltas::bigint[], $outbox_at::timestamptz[])
            AS u(account, feature, cycle_start, cycle_end, used_delta, at)
        LEFT JOIN LATERAL (
            SELECT max(b.cycle_start) AS cycle_start FROM budgets b
            WHERE b.account = u.account AND b.feature = u.feature AND b.cycle_start <= u.at
        ) AS latest ON true
    ) AS m
    GROUP BY m.account, m.feature, m.period_start
    ON CONFLICT (account, feature, cycle_start) DO UPDATE
    SET total = meter_outbox.total + EXCLUDED.total,
        at = greatest(meter_outbox.at, EXCLUDED.at), version = meter_outbox.version + 1
), samples AS (
    INSERT INTO job_samples (unit, job, model, samples)
    SELECT * FROM unnest($sample_units::text[], $sample_jobs::text[], $sample_models::text[],
                         $sample_lists::jsonb[])
    ON CONFLICT (unit, job, model)
    DO UPDATE SET samples = EXCLUDED.samples, updated_at = now()
)
UPDATE budgets AS b SET used = u.used, held = u.held,
    open_reservations = u.open_reservations, overage_since = u.overage_since,
    updated_at = now()
FROM unnest($budget_ids::text[], $budget_used::bigint[], $budget_held::bigint[],
            $budget_open::bigint[], $budget_overage_since::timestamptz[])
    AS u(budget_id, used, held, open_reservations, overage_since)
WHERE b.budget_id = u.budget_id AND b.budget_id = ANY($budget_ids::text[])
""")


async def write_decisions(conn: Conn, decided: Sequence[tuple[BatchState, BatchDecision]]) -> None:
    """Writes what the decisions changed in one statement, whatever the batch size."""
    new_holds = [h for _, d in decided for h in d.new_holds]
    new_ids = {h.reservation_id for h in new_holds}
    changed = [
        h for _, d in decided for h in d.changed_holds.values() if h.reservation_id not in new_ids
    ]
    charges = [c for _, d in decided for c in d.new_charges]
    ledger = [e for _, d in decided for e in d.ledger]
    touched = {b.budget_id: b for _, d in decided for b in d.touched.values()}
    budgets = [touched[budget_id] for budget_id in sorted(touched)]
    # A hold may go into doubt and come out of it in one batch (a late Settle that found its
    # lease passed): then it never was in the table.
    doubted = [h for _, d in decided for h in d.doubted if h.state is HoldState.IN_DOUBT]
    doubted_now = {h.reservation_id for _, d in decided for h in d.doubted}
    undoubted = [i for _, d in decided for i in d.undoubted if i not in doubted_now]
    scopes = [(b, h) for h in new_holds for b in h.also_budget_ids]
    sampled: dict[SampleKey, list[int]] = {}
    windows: dict[str, AdmissionWindow] = {}
    for state, decision in decided:
        for key in decision.samples:
            sampled[key] = state.samples[key]
        for account in decision.windows:
            windows[account] = state.windows[account]
    meters = cycles.meter_moves(decided)
    if not (new_holds or changed or charges or ledger or budgets or sampled or windows):
        return
    opened = [h for h in new_holds if h.state is HoldState.HELD]
    extended = [h for h in changed if h.state is HoldState.HELD]
    closed = [h.reservation_id for h in changed if h.state is not HoldState.HELD]
    new_columns = hold_columns(new_holds)
    changed_columns = hold_columns(changed)
    args = WRITE_BATCH.args(
        **{
            # An empty list travels as NULL, which the statement turns into '{}'.
            f"new_{name}": [json.dumps(v) if v else None for v in array]
            if name in _JSON_ARRAY_COLUMNS
            else array
            for name, array in new_columns.items()
        },
        scope_budget_ids=[b for b, _ in scopes],
        scope_owners=[h.owner for _, h in scopes],
        scope_keys=[h.idempotency_key for _, h in scopes],
        scope_reservation_ids=[h.reservation_id for _, h in scopes],
        doubted_ids=[h.reservation_id for h in doubted],
        doubted_since=[h.expires_at for h in doubted],
        undoubted_ids=undoubted,
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
        budget_overage_since=[b.overage_since for b in budgets],
        opened_ids=[h.reservation_id for h in opened],
        opened_expires_at=[h.expires_at for h in opened],
        extended_ids=[h.reservation_id for h in extended],
        extended_expires_at=[h.expires_at for h in extended],
        closed_ids=closed,
        window_accounts=list(windows),
        window_starts=[w.window_start for w in windows.values()],
        window_admissions=[w.admissions for w in windows.values()],
        outbox_accounts=[m.account for m in meters],
        outbox_features=[m.feature for m in meters],
        outbox_cycles=[m.cycle_start for m in meters],
        outbox_cycle_ends=[m.cycle_end for m in meters],
        outbox_deltas=[m.used_delta for m in meters],
        outbox_at=[m.at for m in meters],
        sample_units=[key[0] for key in sampled],
        sample_jobs=[key[1] for key in sampled],
        sample_models=[key[2] for key in sampled],
        sample_lists=[json.dumps(values) for values in sampled.values()],
    )
    await conn.execute(WRITE_BATCH.sql, *args)
