"""max_open_holds (issue 47) raced through the gRPC API: 50 workers Reserve, wait a little
and Settle, round after round, while a sampler reads the database all along; never more
holds open than the limit, on a budget of its own or on a parent named in also_budget_ids.
Each ends on what callers were told and on the invariants."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg
from google.protobuf.duration_pb2 import Duration

from earmark.core.model import OPEN_STATES
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants, fetch_budget_row

LIMIT = 3
WORKERS = 50
ROUNDS = 4
AMOUNT = 10
USED = 7
OPEN = [int(state) for state in sorted(OPEN_STATES)]
# A budget's open holds as the database has them, in one snapshot: its counter, and its
# reservations in an open state (held or in doubt) that it is the budget of or nested in.
SAMPLE = """
SELECT b.open_reservations,
       (SELECT count(*) FROM reservations r
        WHERE (r.budget_id = $1 OR $1 = ANY (r.also_budget_ids)) AND r.state = ANY ($2))
FROM budgets b WHERE b.budget_id = $1
"""


@dataclass
class Told:
    """What the workers were told, and what the sampler saw."""

    admitted: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)
    refused: list[pb.ReserveResponse] = field(default_factory=list)
    samples: list[tuple[int, int]] = field(default_factory=list)


async def put(s: Running, budget_id: str, max_open_holds: int | None = None) -> None:
    await s.admin.PutBudget(
        pb.PutBudgetRequest(
            budget_id=budget_id, limit=1_000_000, unit="tokens", max_open_holds=max_open_holds
        )
    )


async def race(s: Running, watched: str, budgets: Sequence[str], also: Sequence[str]) -> Told:
    """WORKERS workers, worker i on budgets[i % len(budgets)] with also_budget_ids also,
    ROUNDS rounds each of Reserve, a short wait and Settle when admitted; the sampler reads
    watched's open holds from the first Reserve to the last Settle."""
    told = Told()
    done = asyncio.Event()

    async def sampler() -> None:
        conn = await asyncpg.connect(s.dsn)
        try:
            while not done.is_set():
                row = await conn.fetchrow(SAMPLE, watched, OPEN)
                assert row is not None
                told.samples.append((row[0], row[1]))
                await asyncio.sleep(0.001)
        finally:
            await conn.close()

    async def worker(index: int) -> None:
        budget_id = budgets[index % len(budgets)]
        for _ in range(ROUNDS):
            reply = await s.budget.Reserve(
                pb.ReserveRequest(
                    budget_id=budget_id,
                    amount=AMOUNT,
                    idempotency_key=uuid.uuid4().hex,
                    also_budget_ids=list(also),
                    lease=Duration(seconds=60),
                )
            )
            if not reply.admitted:
                told.refused.append(reply)
                await asyncio.sleep(random.uniform(0.001, 0.01))
                continue
            told.admitted.append(reply.reservation_id)
            await asyncio.sleep(random.uniform(0.005, 0.02))
            await s.budget.Settle(
                pb.SettleRequest(
                    reservation_id=reply.reservation_id, used=USED, outcome=pb.OUTCOME_SUCCEEDED
                )
            )
            told.settled.append(reply.reservation_id)

    sampling = asyncio.create_task(sampler())
    try:
        await asyncio.gather(*[worker(i) for i in range(WORKERS)])
    finally:
        done.set()
        await sampling
    return told


async def closed_holds(dsn: str) -> list[tuple[str, int]]:
    """(reservation id, state) of every reservation."""
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch("SELECT reservation_id::text, state FROM reservations")
    finally:
        await conn.close()
    return sorted((r[0], r[1]) for r in rows)


def assert_raced(told: Told, refused_by: str) -> None:
    """Never more than LIMIT open in any sample (counter and rows alike); the race was
    contended; every refusal is TOO_MANY_OPEN by refused_by, naming the count; every
    admitted hold settled, once."""
    assert told.samples, "the sampler read nothing"
    assert max(max(sample) for sample in told.samples) <= LIMIT, told.samples
    assert all(counter == rows for counter, rows in told.samples), told.samples
    assert LIMIT == max(counter for counter, _ in told.samples)
    assert told.refused
    assert told.admitted
    assert WORKERS * ROUNDS == len(told.admitted) + len(told.refused)
    assert {(pb.REFUSAL_REASON_TOO_MANY_OPEN, refused_by)} == {
        (r.reason, r.refused_budget_id) for r in told.refused
    }
    assert all(
        f"it has {LIMIT} holds open; max_open_holds is {LIMIT}" in r.message for r in told.refused
    ), {r.message for r in told.refused}
    assert sorted(told.admitted) == sorted(told.settled)
    assert len(set(told.admitted)) == len(told.admitted)


async def test_fifty_workers_never_hold_more_than_three_open(sidecar: Running) -> None:
    """max_open_holds 3 raced by 50 workers: the database never shows more than 3 open,
    every refusal says TOO_MANY_OPEN with the count, exactly the admitted holds settled,
    and the budget's used is what they settled."""
    await put(sidecar, "run", LIMIT)
    told = await race(sidecar, "run", ["run"], [])
    row = await fetch_budget_row(sidecar.dsn, "run")
    assert_raced(told, "run")
    assert [(rid, 2) for rid in sorted(told.admitted)] == await closed_holds(sidecar.dsn)
    assert (USED * len(told.admitted), 0, 0) == (row["used"], row["held"], row["open_reservations"])
    await assert_invariants(sidecar.dsn)


async def test_a_parents_max_open_holds_binds_its_children(sidecar: Running) -> None:
    """Reserves on five unlimited children, each naming a parent of max_open_holds 3 in
    also_budget_ids: the parent never has more than 3 open, and every refusal names it."""
    children = [f"child-{n}" for n in range(5)]
    await put(sidecar, "parent", LIMIT)
    for child in children:
        await put(sidecar, child)
    told = await race(sidecar, "parent", children, ["parent"])
    parent = await fetch_budget_row(sidecar.dsn, "parent")
    rows = [await fetch_budget_row(sidecar.dsn, child) for child in children]
    assert_raced(told, "parent")
    assert [(rid, 2) for rid in sorted(told.admitted)] == await closed_holds(sidecar.dsn)
    assert (USED * len(told.admitted), 0, 0) == (
        parent["used"],
        parent["held"],
        parent["open_reservations"],
    )
    assert USED * len(told.admitted) == sum(r["used"] for r in rows)
    await assert_invariants(sidecar.dsn)
