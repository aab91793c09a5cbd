"""A bounded load of Reserve/Charge/Settle on one hot budget that records what each call
was told, and the checks every fault test ends on."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import grpc
from google.protobuf.duration_pb2 import Duration

from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.helpers import eventually

# Codes a fault may legitimately produce; INTERNAL and UNKNOWN never.
FAULT_CODES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.FAILED_PRECONDITION,  # a Charge or Settle on a hold the sweeper closed
}
CALLS_PER_WORKER_MAX = 10_000


@dataclass
class Told:
    """What callers were told: acknowledged reservations and settles, and error codes."""

    reserved: dict[str, str] = field(default_factory=dict)  # reservation id -> key
    settled: dict[str, int] = field(default_factory=dict)  # reservation id -> used
    codes: dict[grpc.StatusCode, int] = field(default_factory=dict)
    # When callers were first and last told UNAVAILABLE (time.monotonic()).
    unavailable_from: float | None = None
    unavailable_to: float | None = None

    def count(self, code: grpc.StatusCode) -> None:
        self.codes[code] = self.codes.get(code, 0) + 1
        if code == grpc.StatusCode.UNAVAILABLE:
            now = time.monotonic()
            self.unavailable_from = self.unavailable_from or now
            self.unavailable_to = now


async def run_load(
    target: str, budget_id: str, told: Told, stop: asyncio.Event, workers: int = 50
) -> None:
    """workers loops of Reserve, Charge, Settle until stop is set (bounded per worker)."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = budget_pb2_grpc.BudgetStub(channel)

        async def worker() -> None:
            for _ in range(CALLS_PER_WORKER_MAX):
                if stop.is_set():
                    return
                try:
                    key = uuid.uuid4().hex
                    reply = await stub.Reserve(
                        pb.ReserveRequest(
                            budget_id=budget_id, amount=10, idempotency_key=key,
                            lease=Duration(seconds=2),
                        ),
                        timeout=5,
                    )  # fmt: skip
                    if not reply.admitted:
                        continue
                    told.reserved[reply.reservation_id] = key
                    rid = reply.reservation_id
                    await stub.Charge(
                        pb.ChargeRequest(reservation_id=rid, amount=3, idempotency_key="c"),
                        timeout=5,
                    )
                    await stub.Settle(pb.SettleRequest(reservation_id=rid, used=7), timeout=5)
                    told.settled[rid] = 7
                except grpc.aio.AioRpcError as error:
                    told.count(error.code())
                    await asyncio.sleep(0.05)

        await asyncio.gather(*[worker() for _ in range(workers)])


async def acknowledged(told: Told, more: int, what: str, within_seconds: float = 60) -> None:
    """Waits until the load has had `more` Reserves acknowledged than now: a load's length
    in work done rather than in seconds, so that a slow machine runs it as far."""
    target = len(told.reserved) + more

    async def enough() -> bool:
        return len(told.reserved) >= target

    await eventually(enough, within_seconds=within_seconds, what=what)


def embedded_dsn(data_dir: Path, database: str = "earmark") -> str:
    """The DSN of the embedded PostgreSQL running on data_dir, from its postmaster.pid."""
    lines = (data_dir / "pgdata" / "postmaster.pid").read_text().splitlines()
    port, socket_dir = lines[3], lines[4]
    return f"postgresql://postgres@/{database}?host={socket_dir}&port={port}"


async def check_told(dsn: str, told: Told) -> list[str]:
    """Every acknowledged Reserve exists exactly once with its key, every acknowledged
    Settle is recorded with its used; returns what is wrong."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            "SELECT reservation_id::text AS rid, idempotency_key, settled_used FROM reservations "
            "WHERE reservation_id = ANY($1::uuid[])",
            list(told.reserved),
        )
    finally:
        await conn.close()
    found = {r["rid"]: r for r in rows}
    problems = [f"{rid}: acknowledged but missing" for rid in told.reserved if rid not in found]
    problems += [
        f"{rid}: key differs" for rid, key in told.reserved.items()
        if rid in found and found[rid]["idempotency_key"] != key
    ]  # fmt: skip
    problems += [
        f"{rid}: settle with used={used} not recorded" for rid, used in told.settled.items()
        if rid not in found or found[rid]["settled_used"] != used
    ]  # fmt: skip
    return problems


async def held(dsn: str, budget_id: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT held FROM budgets WHERE budget_id = $1", budget_id))
    finally:
        await conn.close()


async def held_beyond_doubt(dsn: str, budget_id: str) -> int:
    """What the budget holds beyond its in-doubt holds: holds a sweeper still has to close.
    A dispatched hold whose worker died stays held, in doubt, for an operator."""
    conn = await asyncpg.connect(dsn)
    try:
        doubted = await conn.fetchval(
            "SELECT coalesce(sum(amount - charged), 0) FROM reservations "
            "WHERE budget_id = $1 AND state = 4",
            budget_id,
        )
        total = await conn.fetchval("SELECT held FROM budgets WHERE budget_id = $1", budget_id)
        return int(total - doubted)
    finally:
        await conn.close()
