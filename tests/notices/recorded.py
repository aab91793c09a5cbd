"""Events as the batches record them, written straight into the tables (the batches that
write them are tested on their own), and what the deliverer recorded, read back."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg

AT = datetime(2026, 12, 1, 11, 59, 30, tzinfo=UTC)
# A key of 32 bytes, as Standard Webhooks' examples have them.
SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()


def threshold_payload(budget_id: str, bps: int = 8_000) -> dict[str, Any]:
    return {
        "type": "budget.threshold_crossed",
        "timestamp": "2026-12-01T11:59:30Z",
        "data": {
            "budget_id": budget_id, "unit": "usd_micros", "limit": 5_000_000,
            "used": 3_900_000, "held": 150_000, "threshold_bps": bps,
            "period_start": "2026-12-01T00:00:00Z", "resets_at": "2027-01-01T00:00:00Z",
            "mode": "enforce",
        },
    }  # fmt: skip


def exceeded_payload(budget_id: str) -> dict[str, Any]:
    return {
        "type": "budget.exceeded",
        "timestamp": "2026-12-01T11:59:31Z",
        "data": {
            "budget_id": budget_id, "unit": "tokens", "limit": 100_000,
            "overage_limit": 20_000, "used": 100_400, "held": 0, "period_start": None,
            "resets_at": None, "mode": "enforce",
        },
    }  # fmt: skip


def in_doubt_payload(budget_id: str) -> dict[str, Any]:
    return {
        "type": "hold.in_doubt",
        "timestamp": "2026-12-01T11:59:32Z",
        "data": {
            "reservation_id": "0b8f2c4e-2f1d-4c55-9a43-8d3e3c1f9a10", "budget_id": budget_id,
            "also_budget_ids": ["acme"], "amount": 40_000, "charged": 12_000,
            "created_at": "2026-12-01T11:50:00Z", "in_doubt_at": "2026-12-01T11:59:32Z",
        },
    }  # fmt: skip


async def insert_event(dsn: str, payload: dict[str, Any], *, event_id: str | None = None) -> str:
    """Records payload as a batch would (its kind is its type); returns its event id."""
    event_id = event_id or f"msg_{uuid.uuid4().hex}"
    budget_id = payload["data"].get("budget_id", "")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO events (event_id, kind, budget_id, dedupe_key, payload, created_at) "
            "VALUES ($1, $2, $3, $4, $5::jsonb, $6)",
            event_id, payload["type"], budget_id, f"{payload['type']}:{event_id}",
            json.dumps(payload), AT,
        )  # fmt: skip
    finally:
        await conn.close()
    return event_id


async def deliveries(dsn: str) -> dict[str, asyncpg.Record]:
    """Each event's delivery row, by event id (events never tried have none)."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT e.event_id, d.* FROM event_deliveries d JOIN events e USING (seq)"
        )
    finally:
        await conn.close()
    return {row["event_id"]: row for row in rows}
