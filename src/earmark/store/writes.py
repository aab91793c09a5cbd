"""A batch's writes: everything its decisions changed, in one statement."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from earmark import limits
from earmark.core.batch import BatchDecision, BatchState
from earmark.core.estimates import SampleKey
from earmark.core.model import Budget, HoldState, LedgerEntry, LedgerKind, PeriodTotals
from earmark.core.notices import Event
from earmark.core.ratelimit import AdmissionWindow
from earmark.core.records import CallRecord
from earmark.store import cycles
from earmark.store.named import NamedQuery
from earmark.store.rows import HOLD_COLUMN_NAMES, UPDATABLE_HOLD_COLUMNS, hold_row
from earmark.store.tx import Conn

Decided = Sequence[tuple[BatchState, BatchDecision]]

# The attributes of each kind of row a batch writes, in order: composite types of their
# own (migrations 0012 and 0022), never a table's row type, which a migration that adds a
# column to the table would change under the previous release's sidecars during a rolling
# upgrade. The statement takes one array of each (asyncpg encodes a list of tuples as an
# array of a composite type), so it has one parameter per kind of row, whatever the
# batch's size or the tables' widths. tests/store/test_writes.py compares these with the
# database's, and checks that no statement of the store casts to a table's row type.
ROW_TYPES: dict[str, tuple[str, ...]] = {
    "write_hold": HOLD_COLUMN_NAMES,
    "write_hold_scope": ("budget_id", "owner", "idempotency_key", "reservation_id"),
    "write_in_doubt": ("reservation_id", "since"),
    "write_open_hold": ("reservation_id", "expires_at"),
    "write_account": ("account", "window_start", "admissions"),
    "write_charge": (
        "reservation_id", "idempotency_key", "amount", "charged", "capped", "total_charged",
        "hold_remaining", "price_version",
    ),
    "write_ledger": (
        "budget_id", "reservation_id", "kind", "held_delta", "used_delta", "at", "period_no",
    ),
    "write_meter_move": ("account", "feature", "cycle_start", "cycle_end", "used_delta", "at"),
    "write_tenant_samples": ("unit", "root", "job", "model", "samples"),
    "write_budget_totals_3": (
        "budget_id", "used", "held", "open_reservations", "overage_since", "period_no",
        "period_start", "period_end", "noticed_bps", "exceeded_noticed", "rate_window_start",
        "rate_admissions", "rate_units", "rate_prev_admissions", "rate_prev_units", "rolled",
        "refusals", "first_refused_at", "last_refused_at", "refusing_noticed", "admissions",
        "open_earlier",
    ),
    "write_budget_period": (
        "budget_id", "period_no", "period_start", "period_end", "limit_units", "used", "held",
        "open_reservations",
    ),
    "write_event": ("event_id", "kind", "budget_id", "dedupe_key", "payload", "created_at"),
    "write_call": (
        "reservation_id", "budget_id", "provider", "model", "service_tier", "key_label",
        "sent_at", "input_tokens", "cached_input_tokens", "cache_write_input_tokens",
        "output_tokens", "requests", "evidence",
    ),
}  # fmt: skip


def _keys_of(rows: str, key: str = "reservation_id") -> str:
    """The keys of an array of rows, as one array: with `= ANY()` of it beside the join,
    the planner finds each row by its primary key, whatever it guesses of the array's
    length."""
    return f"ARRAY(SELECT x.{key} FROM unnest({rows}) AS x)"


def _insert(table: str, param: str, row_type: str, conflict: str = "") -> str:
    """INSERT of an array's rows into the columns that its row type names, so that a
    column added to the table later takes its default."""
    columns = ", ".join(ROW_TYPES[row_type])
    return (
        f"INSERT INTO {table} ({columns}) SELECT {columns} "
        f"FROM unnest(${param}::{row_type}[]){conflict}"
    )


_CHANGED_HOLD_SET = ", ".join(f"{name} = u.{name}" for name in UPDATABLE_HOLD_COLUMNS)

# What a batch writes, one kind of row at a time: each statement takes its rows from one
# array parameter of the same name. They touch disjoint rows, so that as CTEs of one
# statement they cannot see each other's changes does not matter, and foreign keys are
# checked at the end of the statement, after all of them have run.
WRITES: dict[str, str] = {
    "new_holds": _insert("reservations", "new_holds", "write_hold"),
    "scopes": _insert("hold_scopes", "scopes", "write_hold_scope"),
    "doubted": _insert("in_doubt_holds", "doubted", "write_in_doubt"),
    "undoubted": "DELETE FROM in_doubt_holds WHERE reservation_id = ANY($undoubted::uuid[])",
    "changed_holds": f"""
    UPDATE reservations AS r SET {_CHANGED_HOLD_SET}
    FROM unnest($changed_holds::write_hold[]) AS u
    WHERE r.reservation_id = u.reservation_id
        AND r.reservation_id = ANY({_keys_of("$changed_holds::write_hold[]")})""",
    "charges": """
    INSERT INTO charges (reservation_id, idempotency_key, amount, charged, capped,
                         total_charged, hold_remaining, price_version)
    SELECT * FROM unnest($charges::write_charge[])""",
    "ledger": """
    INSERT INTO ledger (budget_id, reservation_id, kind, held_delta, used_delta, at, period_no)
    SELECT * FROM unnest($ledger::write_ledger[])""",
    "opened": _insert("open_holds", "opened", "write_open_hold"),
    # A renewed or closed hold's row is written by INSERT ... ON CONFLICT DO UPDATE, never
    # found by an UPDATE or a DELETE: PostgreSQL finds the conflicting row with a dirty
    # snapshot, which takes no predicate lock, where a scan of open_holds' few index pages
    # (every Reserve inserts there) made every two batches conflict (migration 0020). A
    # closed hold's row loses its deadline; the sweeper deletes it (Store.sweep_once).
    "extended": _insert(
        "open_holds",
        "extended",
        "write_open_hold",
        " ON CONFLICT (reservation_id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
    ),
    "closed": """
    INSERT INTO open_holds (reservation_id, expires_at)
    SELECT c, NULL FROM unnest($closed::uuid[]) AS c
    ON CONFLICT (reservation_id) DO UPDATE SET expires_at = NULL
    WHERE open_holds.expires_at IS NOT NULL""",
    "windows": _insert(
        "accounts",
        "windows",
        "write_account",
        " ON CONFLICT (account) DO UPDATE"
        " SET window_start = EXCLUDED.window_start, admissions = EXCLUDED.admissions",
    ),
    # Each move is booked to the period of its account and feature that was open when it
    # was charged: the newest cycle budget begun by then, or, when that is the move's own
    # budget and its period has ended, the period after it (its end), which the gate opens
    # when the provider says so. A total only grows by moves, so a late settle adds to the
    # open period and never rewrites a closed one.
    "meter_moves": """
    INSERT INTO meter_outbox (account, feature, cycle_start, total, at, version)
    SELECT m.account, m.feature, m.period_start, sum(m.used_delta), max(m.at), 1
    FROM (
        SELECT u.account, u.feature, u.used_delta, u.at,
            CASE WHEN latest.cycle_start IS NULL OR latest.cycle_start <= u.cycle_start
                 THEN CASE WHEN u.at < u.cycle_end THEN u.cycle_start ELSE u.cycle_end END
                 ELSE latest.cycle_start
            END AS period_start
        FROM unnest($meter_moves::write_meter_move[]) AS u
        LEFT JOIN LATERAL (
            SELECT max(b.cycle_start) AS cycle_start FROM budgets b
            WHERE b.account = u.account AND b.feature = u.feature AND b.cycle_start <= u.at
        ) AS latest ON true
    ) AS m
    GROUP BY m.account, m.feature, m.period_start
    ON CONFLICT (account, feature, cycle_start) DO UPDATE
    SET total = meter_outbox.total + EXCLUDED.total,
        at = greatest(meter_outbox.at, EXCLUDED.at), version = meter_outbox.version + 1""",
    "samples": """
    INSERT INTO tenant_samples (unit, root, job, model, samples)
    SELECT * FROM unnest($samples::write_tenant_samples[])
    ON CONFLICT (unit, root, job, model)
    DO UPDATE SET samples = EXCLUDED.samples, updated_at = now()""",
    # A call's sent fields are the first write's; its usage and evidence, once given.
    "calls": """
    INSERT INTO calls AS c (reservation_id, budget_id, provider, model, service_tier,
        key_label, sent_at, input_tokens, cached_input_tokens, cache_write_input_tokens,
        output_tokens, requests, evidence)
    SELECT * FROM unnest($calls::write_call[])
    ON CONFLICT (reservation_id) DO UPDATE
    SET input_tokens = coalesce(EXCLUDED.input_tokens, c.input_tokens),
        cached_input_tokens = coalesce(EXCLUDED.cached_input_tokens, c.cached_input_tokens),
        cache_write_input_tokens =
            coalesce(EXCLUDED.cache_write_input_tokens, c.cache_write_input_tokens),
        output_tokens = coalesce(EXCLUDED.output_tokens, c.output_tokens),
        requests = coalesce(EXCLUDED.requests, c.requests),
        service_tier = CASE WHEN EXCLUDED.service_tier = '' THEN c.service_tier
            ELSE EXCLUDED.service_tier END,
        evidence = CASE WHEN EXCLUDED.evidence = '' THEN c.evidence ELSE EXCLUDED.evidence END""",
    # A period closed by this batch: its row keeps the budget's ceiling of that period
    # (the statement's snapshot, before the budgets' update below).
    "periods_new": """
    INSERT INTO budget_periods (budget_id, period_no, period_start, period_end, limit_units,
        used, held, open_reservations, ceiling_max)
    SELECT u.budget_id, u.period_no, u.period_start, u.period_end, u.limit_units, u.used,
        u.held, u.open_reservations, b.ceiling_max
    FROM unnest($periods_new::write_budget_period[]) AS u JOIN budgets b USING (budget_id)""",
    "periods_moved": """
    UPDATE budget_periods AS p SET used = u.used, held = u.held,
        open_reservations = u.open_reservations
    FROM unnest($periods_moved::write_budget_period[]) AS u
    WHERE p.budget_id = u.budget_id AND p.period_no = u.period_no""",
    # The dedupe key and the id are unique: an event already written is not written again.
    "events": """
    INSERT INTO events (event_id, kind, budget_id, dedupe_key, payload, created_at)
    SELECT * FROM unnest($events::write_event[])
    ON CONFLICT DO NOTHING""",
    # A budget whose period this batch closed starts the new period's ceiling (the
    # audit's) from its limit, by the rule the trigger keeps ceiling_max with (0021).
    "budgets": f"""
    UPDATE budgets AS b SET used = u.used, held = u.held,
        open_reservations = u.open_reservations, overage_since = u.overage_since,
        period_no = u.period_no, period_start = u.period_start, period_end = u.period_end,
        noticed_bps = u.noticed_bps, exceeded_noticed = u.exceeded_noticed,
        rate_window_start = u.rate_window_start, rate_admissions = u.rate_admissions,
        rate_units = u.rate_units, rate_prev_admissions = u.rate_prev_admissions,
        rate_prev_units = u.rate_prev_units, refusals = u.refusals,
        first_refused_at = u.first_refused_at, last_refused_at = u.last_refused_at,
        refusing_noticed = u.refusing_noticed, refusals_period_no = u.period_no,
        admissions = u.admissions, admissions_period_no = u.period_no,
        open_earlier = u.open_earlier,
        ceiling_max = CASE WHEN NOT u.rolled THEN b.ceiling_max
            ELSE budget_ceiling(b.limit_units, b.overage_policy, b.overage_limit, b.mode) END,
        updated_at = now()
    FROM unnest($budgets::write_budget_totals_3[]) AS u
    WHERE b.budget_id = u.budget_id
        AND b.budget_id = ANY({_keys_of("$budgets::write_budget_totals_3[]", "budget_id")})""",
}


def _period_row(p: PeriodTotals) -> tuple[object, ...]:
    # The ceiling is the statement's to fill in (from the budget's row).
    return (
        p.budget_id, p.period_no, p.period_start, p.period_end, p.limit, p.used, p.held,
        p.open_reservations,
    )  # fmt: skip


def _budget_row(b: Budget, rolled: bool) -> tuple[object, ...]:
    rate = b.rate
    return (
        b.budget_id, b.used, b.held, b.open_reservations, b.overage_since, b.period_no,
        b.period_start, b.period_end, list(b.noticed_bps), b.exceeded_noticed, rate.start,
        rate.admissions, rate.units, rate.prev_admissions, rate.prev_units, rolled,
        b.refusals, b.first_refused_at, b.last_refused_at, b.refusing_noticed, b.admissions,
        b.open_earlier,
    )  # fmt: skip


def call_row(call: CallRecord) -> tuple[object, ...]:
    """A call's write_call row: usage None writes nulls, which keep the stored usage, as
    evidence "" keeps the stored evidence."""
    usage = call.usage
    counts: tuple[int | None, ...] = (None,) * 5
    if usage is not None:
        counts = (
            usage.input_tokens, usage.cached_input_tokens, usage.cache_write_input_tokens,
            usage.output_tokens, usage.requests,
        )  # fmt: skip
    return (
        call.reservation_id, call.budget_id, call.provider, call.model, call.service_tier,
        call.key_label, call.sent_at, *counts, call.evidence,
    )  # fmt: skip


@functools.lru_cache(maxsize=limits.write_statements_max)
def write_statement(kinds: tuple[str, ...]) -> NamedQuery:
    """One statement, one round trip, for the kinds of rows a batch has (in WRITES' order):
    a CTE for each of them and none for the others. PostgreSQL runs a CTE on an empty array
    at its full fixed cost: at two operations per batch the empty ones were a sixth of the
    write (0.78 -> 0.65 ms). Batches make few combinations (a plain Reserve's four kinds, a
    Settle's four or five), each prepared once per connection; one evicted from the cache
    is only built again."""
    assert kinds, "a batch with nothing to write sends no statement"
    parts = ",\n".join(f"{kind} AS ({WRITES[kind]}\n)" for kind in kinds)
    return NamedQuery(f"WITH {parts}\nSELECT")


def _hold_rows(decided: Decided) -> dict[str, list[Any]]:
    """The rows of the holds the decisions made and changed, and of their scopes, doubts and
    deadlines."""
    new_holds = [h for _, d in decided for h in d.new_holds]
    new_ids = {h.reservation_id for h in new_holds}
    changed = [
        h for _, d in decided for h in d.changed_holds.values() if h.reservation_id not in new_ids
    ]
    # A hold may go into doubt and come out of it in one batch (a late Settle that found its
    # lease passed): then it never was in the table.
    doubted = [h for _, d in decided for h in d.doubted if h.state is HoldState.IN_DOUBT]
    doubted_now = {h.reservation_id for _, d in decided for h in d.doubted}
    held = HoldState.HELD
    return {
        "new_holds": [hold_row(h) for h in new_holds],
        "scopes": [
            (b, h.owner, h.idempotency_key, h.reservation_id)
            for h in new_holds
            for b in h.also_budget_ids
        ],
        "doubted": [(h.reservation_id, h.expires_at) for h in doubted],
        "undoubted": [i for _, d in decided for i in d.undoubted if i not in doubted_now],
        "changed_holds": [hold_row(h) for h in changed],
        "opened": [(h.reservation_id, h.expires_at) for h in new_holds if h.state is held],
        "extended": [(h.reservation_id, h.expires_at) for h in changed if h.state is held],
        "closed": [h.reservation_id for h in changed if h.state is not held],
    }


def _money_rows(decided: Decided) -> dict[str, list[Any]]:
    """The rows of what the decisions charged and moved: charges, ledger entries, the
    meter's moves, and the calls they priced."""
    return {
        "charges": [
            (c.reservation_id, c.idempotency_key, c.amount, c.charged, c.capped,
             c.total_charged, c.hold_remaining, c.price_version)
            for _, d in decided for c in d.new_charges
        ],
        "ledger": [
            (e.budget_id, e.reservation_id, str(e.kind), e.held_delta, e.used_delta, e.at,
             e.period_no)
            for _, d in decided for e in d.ledger if e.kind is not LedgerKind.LIMIT
        ],
        "meter_moves": [
            (m.account, m.feature, m.cycle_start, m.cycle_end, m.used_delta, m.at)
            for m in cycles.meter_moves(decided)
        ],
        "calls": [call_row(c) for _, d in decided for c in d.calls.values()],
    }  # fmt: skip


def _budget_rows(decided: Decided) -> dict[str, list[Any]]:
    """The rows of the budgets' state: their totals, the periods the batch closed or moved,
    the rate windows and samples it counted, and the events it raised."""
    sampled: dict[SampleKey, list[int]] = {}
    windows: dict[str, AdmissionWindow] = {}
    for state, decision in decided:
        for key in decision.samples:
            sampled[key] = state.samples[key]
        for account in decision.windows:
            windows[account] = state.windows[account]
    # A period closed by one decision and moved by another of the batch is one new row,
    # with the counters of both.
    periods_new = {key: p for _, d in decided for key, p in d.closed_new.items()}
    periods_moved = {
        key: p for _, d in decided for key, p in d.closed_moved.items() if key not in periods_new
    }
    rolled = {key[0] for key in periods_new}
    touched = {b.budget_id: b for _, d in decided for b in d.touched.values()}
    return {
        "windows": [(w.account, w.window_start, w.admissions) for w in windows.values()],
        "samples": [(*key, json.dumps(values)) for key, values in sampled.items()],
        "periods_new": [_period_row(p) for _, p in sorted(periods_new.items())],
        "periods_moved": [_period_row(p) for _, p in sorted(periods_moved.items())],
        "events": [_event_row(e) for _, d in decided for e in d.events],
        "budgets": [_budget_row(touched[b], b in rolled) for b in sorted(touched)],
    }


# What a batch changed is written only if it changed a hold, a charge, the ledger, a
# budget, a sample or a rate window; the other kinds of rows come only with one of these.
_CHANGES = (
    "new_holds", "changed_holds", "charges", "ledger", "budgets", "samples", "windows",
)  # fmt: skip


def rows_of(decided: Decided) -> dict[str, list[Any]] | None:
    """Every kind of row the decisions write, in WRITES' order; None when they changed
    nothing."""
    found = _hold_rows(decided) | _money_rows(decided) | _budget_rows(decided)
    if not any(found[kind] for kind in _CHANGES):
        return None
    rows = {kind: found[kind] for kind in WRITES}
    assert rows.keys() == found.keys()
    return rows


# A change of limits (core.raises): its ledger rows, with the limit columns the batches'
# write_ledger rows do not have, and the limit each ended temporary limit went back to,
# set by a statement that names limit_units, so that the trigger keeping ceiling_max
# (0021) sees it.
INSERT_LIMIT_ENTRIES = """
INSERT INTO ledger (budget_id, kind, held_delta, used_delta, at, period_no, limit_before,
    limit_after, limit_until, reason)
SELECT u.budget_id, 'limit', 0, 0, u.at, u.period_no, u.limit_before, u.limit_after,
    u.limit_until, u.reason
FROM unnest($1::text[], $2::timestamptz[], $3::integer[], $4::bigint[], $5::bigint[],
    $6::timestamptz[], $7::text[])
    AS u(budget_id, at, period_no, limit_before, limit_after, limit_until, reason)"""
SET_LAPSED_LIMITS = """
UPDATE budgets AS b SET limit_units = u.limit_units, limit_until = NULL, limit_after = NULL,
    limit_reason = '', updated_at = now()
FROM unnest($1::text[], $2::bigint[]) AS u(budget_id, limit_units)
WHERE b.budget_id = u.budget_id"""
INSERT_EVENTS = """
INSERT INTO events (event_id, kind, budget_id, dedupe_key, payload, created_at)
SELECT * FROM unnest($1::write_event[])
ON CONFLICT DO NOTHING"""


async def write_limit_changes(
    conn: Conn,
    entries: Sequence[LedgerEntry],
    lapsed: Sequence[Budget] = (),
    events: Sequence[Event] = (),
) -> None:
    """Writes the ledger entries of kind limit of entries (others are the batch
    statement's), the limits of the budgets whose temporary limit ended, and events."""
    mine = [e for e in entries if e.kind is LedgerKind.LIMIT]
    if lapsed:
        ids, limits_after = [b.budget_id for b in lapsed], [b.limit for b in lapsed]
        await conn.execute(SET_LAPSED_LIMITS, ids, limits_after)
    if mine:
        await conn.execute(
            INSERT_LIMIT_ENTRIES,
            [e.budget_id for e in mine],
            [e.at for e in mine],
            [e.period_no for e in mine],
            [e.limit_before for e in mine],
            [e.limit_after for e in mine],
            [e.limit_until for e in mine],
            [e.reason for e in mine],
        )
    if events:
        await conn.execute(INSERT_EVENTS, [_event_row(e) for e in events])


def _event_row(e: Event) -> tuple[object, ...]:
    return (e.event_id, e.kind, e.budget_id, e.dedupe_key, json.dumps(e.payload), e.created_at)


async def write_decisions(conn: Conn, decided: Decided) -> None:
    """Writes what the decisions changed in one statement, whatever the batch size; nothing
    when they changed nothing. The temporary limits that ended go first, by a statement of
    their own (write_limit_changes), so that a period the batch closes starts its ceiling
    from the limit after them."""
    lapsed = sorted({b.budget_id: b for _, d in decided for b in d.lapsed.values()}.items())
    await write_limit_changes(
        conn, [e for _, d in decided for e in d.ledger], [b for _, b in lapsed]
    )
    rows = rows_of(decided)
    if rows is None:
        return
    statement = write_statement(tuple(kind for kind, written in rows.items() if written))
    await conn.execute(statement.sql, *statement.args(**{k: rows[k] for k in statement.names}))
