"""The operator's pages: every hold and every ledger row of a large budget exactly once."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta

import grpc
import pytest

from earmark.core.model import Outcome
from earmark.core.ops import ChargeOp, Op, ReserveOp, ReserveResult, Result, SettleOp
from earmark.store import Store
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants

# Three full pages of holds and nine of ledger rows at the largest page size.
HOLDS = 3_000
NESTED = 100  # of HOLDS: made on a child budget, also holding on the listed one
CHUNK = 500


async def in_chunks(store: Store, ops: Sequence[Op]) -> list[Result]:
    results: list[Result] = []
    for start in range(0, len(ops), CHUNK):
        results += await asyncio.gather(*[store.submit(op) for op in ops[start : start + CHUNK]])
    return results


async def pages(fetch: Callable[[str], Awaitable[tuple[list[object], str]]]) -> list[object]:
    """Every item of every page, following next_page_token to its end."""
    items: list[object] = []
    token = ""
    for _ in range(HOLDS):
        found, token = await fetch(token)
        items += found
        if not token:
            return items
    raise AssertionError("the pages never ended")


async def test_paging_returns_each_hold_and_ledger_row_once(sidecar: Running) -> None:
    """3,000 holds (100 nested from a child budget) charged and settled, 9,000 ledger
    rows: pages of 1,000 return each exactly once, in order, and a state filter pages too."""
    store = await Store.open(sidecar.dsn)
    try:
        await store.put_budget("pages", None, "t")
        await store.put_budget("pages/child", None, "t")
        reserves = [
            ReserveOp(
                budget_id="pages/child" if i < NESTED else "pages",
                idempotency_key=f"k{i:05d}",
                amount=10,
                lease=timedelta(minutes=10),
                new_reservation_id=str(uuid.uuid4()),
                also_budget_ids=("pages",) if i < NESTED else (),
            )
            for i in range(HOLDS)
        ]
        held = await in_chunks(store, reserves)
        ids = [r.reservation_id for r in held if isinstance(r, ReserveResult)]
        assert HOLDS == len(set(ids))
        await in_chunks(store, [ChargeOp(rid, "c", 4) for rid in ids])
        await in_chunks(store, [SettleOp(rid, 6, Outcome.SUCCEEDED) for rid in ids])
    finally:
        await store.close()

    async def holds(state: pb.ReservationState) -> list[str]:
        async def fetch(token: str) -> tuple[list[object], str]:
            page = await sidecar.admin.ListHolds(
                pb.ListHoldsRequest(
                    budget_id="pages",
                    state=state,
                    page_size=1_000,
                    page_token=token,
                )
            )
            return [h.reservation_id for h in page.holds], page.next_page_token

        return [str(i) for i in await pages(fetch)]

    async def ledger(token: str) -> tuple[list[object], str]:
        page = await sidecar.admin.ListLedger(
            pb.ListLedgerRequest(budget_id="pages", page_size=1_000, page_token=token)
        )
        return [e.entry_id for e in page.entries], page.next_page_token

    listed = await holds(pb.RESERVATION_STATE_UNSPECIFIED)
    settled = await holds(pb.RESERVATION_STATE_SETTLED)
    entries = [int(str(e)) for e in await pages(ledger)]
    assert (HOLDS, sorted(ids)) == (len(listed), sorted(listed))
    assert sorted(ids) == sorted(settled)
    assert [] == await holds(pb.RESERVATION_STATE_HELD)
    assert (3 * HOLDS, sorted(entries)) == (len(set(entries)), entries)
    await assert_invariants(sidecar.dsn)


NIL_PLUS_ONE = str(uuid.UUID(int=1))


def token(value: object) -> str:
    """A page token as the sidecar encodes one, around a value it never gave."""
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


async def test_budgets_are_listed_once_each_under_a_prefix(sidecar: Running) -> None:
    """250 budgets under two prefixes, listed 100 a page: every budget exactly once, in id
    order, archived ones included; a prefix keeps only its own."""
    ids = [f"team{t}/b{i:03d}" for t in (1, 2) for i in range(125)]
    for budget_id in ids:
        await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id=budget_id, unit="t"))
    await sidecar.admin.DeleteBudget(pb.DeleteBudgetRequest(budget_id=ids[0]))

    async def listed(prefix: str) -> list[str]:
        seen: list[str] = []
        token = ""
        while True:
            page = await sidecar.admin.ListBudgets(
                pb.ListBudgetsRequest(prefix=prefix, page_size=100, page_token=token)
            )
            seen += [b.budget_id for b in page.budgets]
            token = page.next_page_token
            if not token:
                return seen

    assert (sorted(ids), ids[:125], []) == (
        await listed(""),
        await listed("team1/"),
        await listed("nobody/"),
    )


async def test_page_requests_name_their_field(sidecar: Running) -> None:
    """A page size out of range, a token the sidecar never gave, an unknown state or budget
    are refused by status, naming what is wrong."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="p", unit="t"))
    cases: list[tuple[Awaitable[object], grpc.StatusCode, str]] = [
        (
            sidecar.admin.ListHolds(pb.ListHoldsRequest(budget_id="p", page_size=1_001)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_size",
        ),
        (
            sidecar.admin.ListHolds(pb.ListHoldsRequest(budget_id="p", page_token="!!")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_token",
        ),
        (
            sidecar.admin.ListLedger(pb.ListLedgerRequest(budget_id="p", page_token="WyJhIl0")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_token",
        ),
        (
            sidecar.admin.ListLedger(pb.ListLedgerRequest(budget_id="p", page_token=token(2**64))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_token",
        ),
        (
            sidecar.admin.ListHolds(
                pb.ListHoldsRequest(
                    budget_id="p", page_token=token(["\x00", "k", str(uuid.UUID(int=1))])
                )
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_token",
        ),
        (
            sidecar.admin.ListHolds(pb.ListHoldsRequest(budget_id="p", state=9)),  # type: ignore[arg-type]
            grpc.StatusCode.INVALID_ARGUMENT,
            "state",
        ),
        (
            sidecar.admin.ListBudgets(pb.ListBudgetsRequest(page_token=token(["\x00"]))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_token",
        ),
        (
            sidecar.admin.ListBudgets(pb.ListBudgetsRequest(page_token=token("\ud800"))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_token",
        ),
        (
            sidecar.admin.ListBudgets(pb.ListBudgetsRequest(prefix="a b")),
            grpc.StatusCode.INVALID_ARGUMENT,
            "prefix",
        ),
        (
            sidecar.admin.ListLedger(pb.ListLedgerRequest(budget_id="none")),
            grpc.StatusCode.NOT_FOUND,
            "budget 'none' not found",
        ),
    ]
    for call, code, words in cases:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert (code, True) == (caught.value.code(), words in str(caught.value.details()))
