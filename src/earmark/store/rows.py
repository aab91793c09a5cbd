"""Conversions between database rows and the core's plain data."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import asyncpg

from earmark.core.model import (
    Budget,
    BudgetMode,
    ChargeRecord,
    EstimatePolicy,
    EstimateSource,
    Hold,
    HoldState,
    Outcome,
    OveragePolicy,
    PeriodTotals,
    Phase,
    RateCounts,
    Settlement,
    ThresholdBasis,
)
from earmark.core.periods import Period
from earmark.core.prices import Price, Shape, counts

BUDGET_COLUMNS = (
    "budget_id, limit_units, unit, used, held, open_reservations, default_estimate, "
    "estimate_policy, account, feature, cycle_start, cycle_end, limit_read_at, escrow_bps, "
    "overage_policy, overage_limit, overage_since, archived_at, period, timezone, "
    "period_anchor, period_no, period_start, period_end, threshold_bps, noticed_bps, "
    "exceeded_noticed, mode, admissions_per_minute, units_per_minute, rate_window_start, "
    "rate_admissions, rate_units, rate_prev_admissions, rate_prev_units, threshold_basis, "
    "refusals, first_refused_at, last_refused_at, refusing_noticed, refusals_period_no, "
    "max_open_holds, max_admissions, closes_at, admissions, admissions_period_no, limit_until, "
    "limit_after, limit_reason, template_id, template_version, changed_by_hand, open_earlier, "
    "share_until"
)
BUDGET_COLUMN_TYPES = {
    "budget_id": "text", "limit_units": "bigint", "unit": "text", "used": "bigint",
    "held": "bigint", "open_reservations": "bigint", "default_estimate": "bigint",
    "estimate_policy": "smallint", "account": "text", "feature": "text",
    "cycle_start": "timestamptz", "cycle_end": "timestamptz", "limit_read_at": "timestamptz",
    "escrow_bps": "integer", "overage_policy": "smallint", "overage_limit": "bigint",
    "overage_since": "timestamptz", "archived_at": "timestamptz", "period": "smallint",
    "timezone": "text", "period_anchor": "smallint", "period_no": "integer",
    "period_start": "timestamptz", "period_end": "timestamptz", "threshold_bps": "integer[]",
    "noticed_bps": "integer[]", "exceeded_noticed": "boolean", "mode": "smallint",
    "admissions_per_minute": "bigint", "units_per_minute": "bigint",
    "rate_window_start": "timestamptz", "rate_admissions": "bigint", "rate_units": "bigint",
    "rate_prev_admissions": "bigint", "rate_prev_units": "bigint",
    "threshold_basis": "smallint", "refusals": "bigint", "first_refused_at": "timestamptz",
    "last_refused_at": "timestamptz", "refusing_noticed": "boolean",
    "refusals_period_no": "integer", "max_open_holds": "bigint", "max_admissions": "bigint",
    "closes_at": "timestamptz", "admissions": "bigint", "admissions_period_no": "integer",
    "limit_until": "timestamptz", "limit_after": "bigint", "limit_reason": "text",
    "template_id": "text", "template_version": "bigint", "changed_by_hand": "boolean",
    "open_earlier": "bigint", "share_until": "timestamptz",
}  # fmt: skip
assert list(BUDGET_COLUMN_TYPES) == BUDGET_COLUMNS.split(", ")
PRICE_COLUMNS = (
    "price_id, provider, model, version, effective_from, effective_to, input_per_mtok, "
    "output_per_mtok, cached_input_per_mtok, request_fee, source, captured_at, "
    "daily_from_minute, daily_to_minute, cache_write_per_mtok, max_output_tokens, "
    "cache_write_long_per_mtok, service_tier, tool_fees, input_tokens_above, window_timezone"
)

HOLD_COLUMN_NAMES = (
    "reservation_id", "budget_id", "idempotency_key", "amount", "charged", "state", "lease_ms",
    "expires_at", "created_at", "closed_at", "labels", "settled_used", "settled_outcome",
    "settled_charged", "settled_released", "settled_overshoot", "owner", "source",
    "price_version", "shape", "job", "settled_price_version", "also_budget_ids", "dispatched",
    "phase", "periods",
)  # fmt: skip
HOLD_COLUMNS = ", ".join(HOLD_COLUMN_NAMES)
HOLD_COLUMN_TYPES = {
    "reservation_id": "uuid", "budget_id": "text", "idempotency_key": "text",
    "amount": "bigint", "charged": "bigint", "state": "smallint", "lease_ms": "bigint",
    "expires_at": "timestamptz", "created_at": "timestamptz", "closed_at": "timestamptz",
    "labels": "jsonb", "settled_used": "bigint", "settled_outcome": "smallint",
    "settled_charged": "bigint", "settled_released": "bigint", "settled_overshoot": "bigint",
    "owner": "text", "source": "smallint", "price_version": "bigint", "shape": "text",
    "job": "text", "settled_price_version": "bigint", "also_budget_ids": "text[]",
    "dispatched": "boolean", "phase": "smallint", "periods": "integer[]",
}  # fmt: skip
# What a decision may change in a reservation that exists.
UPDATABLE_HOLD_COLUMNS = (
    "amount", "price_version", "settled_price_version", "charged", "state", "lease_ms",
    "expires_at", "closed_at", "settled_used", "settled_outcome", "settled_charged",
    "settled_released", "settled_overshoot", "dispatched", "labels",
)  # fmt: skip
assert set(HOLD_COLUMN_TYPES) == set(HOLD_COLUMN_NAMES)
assert set(UPDATABLE_HOLD_COLUMNS) < set(HOLD_COLUMN_NAMES)

CHARGE_COLUMNS = (
    "reservation_id, idempotency_key, amount, charged, capped, total_charged, "
    "hold_remaining, price_version"
)


def _refusals_of(row: asyncpg.Record) -> dict[str, Any]:
    """The refusal columns, when they count the row's current period: a period a previous
    release rolled (migration 0024) has refused nothing yet."""
    if row["refusals_period_no"] != row["period_no"]:
        return {}
    return {
        "refusals": row["refusals"],
        "first_refused_at": row["first_refused_at"],
        "last_refused_at": row["last_refused_at"],
        "refusing_noticed": row["refusing_noticed"],
    }


def budget_from_row(row: asyncpg.Record) -> Budget:
    return Budget(
        budget_id=row["budget_id"],
        limit=row["limit_units"],
        unit=row["unit"],
        used=row["used"],
        held=row["held"],
        open_reservations=row["open_reservations"],
        default_estimate=row["default_estimate"],
        estimate_policy=EstimatePolicy(row["estimate_policy"]),
        account=row["account"],
        feature=row["feature"],
        cycle_start=row["cycle_start"],
        cycle_end=row["cycle_end"],
        limit_read_at=row["limit_read_at"],
        escrow_bps=row["escrow_bps"],
        overage_policy=OveragePolicy(row["overage_policy"]),
        overage_limit=row["overage_limit"],
        overage_since=row["overage_since"],
        archived_at=row["archived_at"],
        period=Period(row["period"]),
        timezone=row["timezone"],
        period_anchor=row["period_anchor"],
        period_no=row["period_no"],
        period_start=row["period_start"],
        period_end=row["period_end"],
        threshold_bps=tuple(row["threshold_bps"]),
        noticed_bps=tuple(row["noticed_bps"]),
        exceeded_noticed=row["exceeded_noticed"],
        threshold_basis=ThresholdBasis(row["threshold_basis"]),
        **_refusals_of(row),
        mode=BudgetMode(row["mode"]),
        admissions_per_minute=row["admissions_per_minute"],
        units_per_minute=row["units_per_minute"],
        max_open_holds=row["max_open_holds"],
        max_admissions=row["max_admissions"],
        closes_at=row["closes_at"],
        # A period a previous release rolled (migration 0027) has admitted nothing yet.
        admissions=row["admissions"] if row["admissions_period_no"] == row["period_no"] else 0,
        limit_until=row["limit_until"],
        limit_after=row["limit_after"],
        limit_reason=row["limit_reason"],
        template_id=row["template_id"],
        template_version=row["template_version"],
        changed_by_hand=row["changed_by_hand"],
        open_earlier=row["open_earlier"],
        share_until=row["share_until"],
        rate=RateCounts(
            start=row["rate_window_start"],
            admissions=row["rate_admissions"],
            units=row["rate_units"],
            prev_admissions=row["rate_prev_admissions"],
            prev_units=row["rate_prev_units"],
        ),
    )


def period_from_row(row: asyncpg.Record) -> PeriodTotals:
    return PeriodTotals(
        budget_id=row["budget_id"],
        period_no=row["period_no"],
        period_start=row["period_start"],
        period_end=row["period_end"],
        limit=row["limit_units"],
        used=row["used"],
        held=row["held"],
        open_reservations=row["open_reservations"],
    )


def price_from_row(row: asyncpg.Record) -> Price:
    return Price(
        provider=row["provider"],
        model=row["model"],
        version=row["version"],
        effective_from=row["effective_from"],
        effective_to=row["effective_to"],
        input_per_mtok=row["input_per_mtok"],
        output_per_mtok=row["output_per_mtok"],
        cached_input_per_mtok=row["cached_input_per_mtok"],
        request_fee=row["request_fee"],
        source=row["source"],
        captured_at=row["captured_at"],
        daily_from_minute=row["daily_from_minute"],
        daily_to_minute=row["daily_to_minute"],
        cache_write_per_mtok=row["cache_write_per_mtok"],
        max_output_tokens=row["max_output_tokens"],
        cache_write_long_per_mtok=row["cache_write_long_per_mtok"],
        service_tier=row["service_tier"],
        tool_fees=counts(json.loads(row["tool_fees"]).items()),
        input_tokens_above=row["input_tokens_above"],
        window_timezone=row["window_timezone"],
    )


# A hold's shape is stored as a compact JSON array in a text column: it is written with
# every version of the row, and keys or a jsonb encoding would make each one wider.
# Fields are only ever appended (a shape stored before a field existed has its default).
_SHAPE_FIELDS = (
    "provider", "model", "input_tokens", "max_output_tokens", "cached_input_tokens", "attempts",
    "cache_write_input_tokens", "cache_write_long_input_tokens", "service_tier", "max_tool_calls",
    "output_ceiling",
)  # fmt: skip
# The shape's counts by kind are stored as [[kind, n], ...] and read back as tuples.
_COUNTS_FIELD = _SHAPE_FIELDS.index("max_tool_calls")


def shape_to_text(shape: Shape | None) -> str | None:
    if shape is None:
        return None
    return json.dumps([getattr(shape, name) for name in _SHAPE_FIELDS], separators=(",", ":"))


def shape_from_text(text: str | None) -> Shape | None:
    if text is None:
        return None
    values = json.loads(text)
    if len(values) > _COUNTS_FIELD:
        values[_COUNTS_FIELD] = counts(tuple(pair) for pair in values[_COUNTS_FIELD])
    return Shape(*values)


def hold_from_row(row: asyncpg.Record) -> Hold:
    settlement = None
    if row["settled_used"] is not None:
        settlement = Settlement(
            used=row["settled_used"],
            outcome=Outcome(row["settled_outcome"]),
            charged=row["settled_charged"],
            released=row["settled_released"],
            overshoot=row["settled_overshoot"],
            price_version=row["settled_price_version"] or 0,
        )
    return Hold(
        reservation_id=str(row["reservation_id"]),
        budget_id=row["budget_id"],
        idempotency_key=row["idempotency_key"],
        amount=row["amount"],
        charged=row["charged"],
        state=HoldState(row["state"]),
        lease=timedelta(milliseconds=row["lease_ms"]),
        expires_at=row["expires_at"],
        created_at=row["created_at"],
        closed_at=row["closed_at"],
        labels=json.loads(row["labels"]),
        settlement=settlement,
        owner=row["owner"],
        source=EstimateSource(row["source"]),
        price_version=row["price_version"],
        shape=shape_from_text(row["shape"]),
        job=row["job"],
        also_budget_ids=tuple(row["also_budget_ids"]),
        dispatched=row["dispatched"],
        phase=Phase(row["phase"]),
        periods=tuple(row["periods"] or ()),
    )


def charge_from_row(row: asyncpg.Record) -> ChargeRecord:
    return ChargeRecord(
        reservation_id=str(row["reservation_id"]),
        idempotency_key=row["idempotency_key"],
        amount=row["amount"],
        charged=row["charged"],
        capped=row["capped"],
        total_charged=row["total_charged"],
        hold_remaining=row["hold_remaining"],
        price_version=row["price_version"],
    )


def hold_row(h: Hold) -> tuple[Any, ...]:
    """A reservation as a row of its table, in HOLD_COLUMN_NAMES order (the table's own)."""
    settled = h.settlement
    return (
        h.reservation_id,
        h.budget_id,
        h.idempotency_key,
        h.amount,
        h.charged,
        int(h.state),
        lease_ms(h.lease),
        h.expires_at,
        h.created_at,
        h.closed_at,
        json.dumps(h.labels, sort_keys=True),
        settled.used if settled else None,
        int(settled.outcome) if settled else None,
        settled.charged if settled else None,
        settled.released if settled else None,
        settled.overshoot if settled else None,
        h.owner,
        int(h.source),
        h.price_version,
        shape_to_text(h.shape),
        h.job,
        settled.price_version if settled else None,
        list(h.also_budget_ids),
        h.dispatched,
        int(h.phase),
        list(h.periods) if h.periods else None,
    )


def lease_ms(lease: timedelta) -> int:
    return max(1, round(lease.total_seconds() * 1000))
