"""The plans gate against a fake Kinde over real HTTP and a live sidecar on an injected
clock: a cycle budget is held on only by a Reserve by account, a token's permission is
checked before Kinde is read or a row written, and limits from Kinde keep PutBudget's
bound."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import openai
import pytest
import structlog
from google.protobuf.timestamp_pb2 import Timestamp

from earmark import limits
from earmark.client import AsyncClient, FailedPreconditionError
from earmark.client.llm import metered
from earmark.settings import KINDE_CLIENT_ID, KINDE_CLIENT_SECRET
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde
from tests.fake_openai import fake_openai
from tests.helpers import FakeClock, assert_invariants, fetch_budget_row, reason_of
from tests.service.test_plans import CYCLE, START, plans_sidecar, reserve

RATE = 5
WORKER = "worker-token-0123456789abcdef"


@pytest.fixture
def kinde(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKinde]:
    monkeypatch.setenv(KINDE_CLIENT_ID, CLIENT_ID)
    monkeypatch.setenv(KINDE_CLIENT_SECRET, CLIENT_SECRET)
    with fake_kinde() as fake:
        fake.state.limits["acct"] = {"tokens": 100_000}
        fake.state.limits["other"] = {"tokens": 100_000}
        yield fake


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = START


@pytest.fixture
async def side(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> AsyncIterator[Running]:
    sidecar = plans_sidecar(dsn, socket_dir, kinde, clock, admissions_per_minute=RATE)
    async with running(sidecar, dsn) as s:
        yield s


async def failure(call: Any) -> tuple[grpc.StatusCode, str, str]:
    """The status code, reason and metadata field of a call that must fail."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    reason, about = reason_of(caught.value)
    return caught.value.code(), reason, about.get("field", "")


async def table(dsn: str, sql: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [dict(row) for row in await conn.fetch(sql)]
    finally:
        await conn.close()


NEEDS_ACCOUNT = (grpc.StatusCode.FAILED_PRECONDITION, "CYCLE_BUDGET_NEEDS_ACCOUNT", "account")


async def test_a_cycle_budget_answers_only_to_a_reserve_by_account(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """Naming the cycle budget by id, as budget_id or in also_budget_ids (also from another
    account's Reserve by account), is FAILED_PRECONDITION naming account and changes no
    row; with 5 admissions a minute, 5 of 7 Reserves by account are admitted while 7 by id
    race them; past the stale window with Kinde down, by id is still refused."""
    await side.admin.PutBudget(pb.PutBudgetRequest(budget_id="task", limit=10**6, unit="tokens"))
    first = await side.budget.Reserve(reserve("acct", 10, "k0"))
    before = dict(await fetch_budget_row(side.dsn, CYCLE))
    by_id = pb.ReserveRequest(budget_id=CYCLE, amount=10, idempotency_key="id")
    nested = pb.ReserveRequest(
        budget_id="task", also_budget_ids=[CYCLE], amount=10, idempotency_key="nested"
    )
    refused = [
        await failure(side.budget.Reserve(by_id)),
        await failure(side.budget.Reserve(nested)),
        await failure(side.budget.Reserve(reserve("other", 10, "x", also_budget_ids=[CYCLE]))),
    ]
    after = dict(await fetch_budget_row(side.dsn, CYCLE))
    raced = await asyncio.gather(
        *(side.budget.Reserve(reserve("acct", 10, f"k{i}")) for i in range(1, 7)),
        *(
            side.budget.Reserve(
                pb.ReserveRequest(budget_id=CYCLE, amount=10, idempotency_key=f"i{i}")
            )
            for i in range(7)
        ),
        return_exceptions=True,
    )
    # Read before the clock passes the holds' leases: the sweeper then returns them.
    held = (await fetch_budget_row(side.dsn, CYCLE))["held"]
    kinde.state.failing = True
    clock.advance(timedelta(minutes=11))
    closed = await side.budget.Reserve(reserve("acct", 10, "closed"))
    late = await failure(side.budget.Reserve(by_id))
    replies = [r for r in raced if isinstance(r, pb.ReserveResponse)]
    errors = [reason_of(e)[0] for e in raced if isinstance(e, grpc.aio.AioRpcError)]
    assert [NEEDS_ACCOUNT] * 3 == refused
    assert before == after
    assert (True, 5, 2) == (
        first.admitted,
        1 + sum(r.admitted for r in replies),
        sum(r.reason == pb.REFUSAL_REASON_RATE_LIMITED for r in replies),
    )
    assert ["CYCLE_BUDGET_NEEDS_ACCOUNT"] * 7 == errors
    assert (pb.REFUSAL_REASON_LIMIT_UNAVAILABLE, NEEDS_ACCOUNT) == (closed.reason, late)
    assert 50 == held
    await assert_invariants(side.dsn)


@pytest.fixture
async def tokened(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> AsyncIterator[Running]:
    """A plans sidecar whose one worker token may use budgets under acct1/ only."""
    tokens = socket_dir / "workers"
    tokens.write_text(f"worker {WORKER} acct1/\n")
    sidecar = plans_sidecar(dsn, socket_dir, kinde, clock, worker_token_file=tokens)
    async with running(sidecar, dsn) as s:
        yield s


async def test_a_token_reaches_no_other_account_before_it_is_refused(
    tokened: Running, kinde: FakeKinde
) -> None:
    """A token limited to acct1/ reserving by account victim0..victim49, or by acct1 with a
    victim's cycle in also_budget_ids, is PERMISSION_DENIED (an account with '/', or one
    naming its own cycle again, INVALID_ARGUMENT); Kinde saw no request and no budget or
    account row exists. Its own account's Reserve is admitted."""
    kinde.state.limits["acct1"] = {"tokens": 1_000}
    auth = (("authorization", f"Bearer {WORKER}"),)
    victims = [
        await failure(tokened.budget.Reserve(reserve(f"victim{i}", 1, "k"), metadata=auth))
        for i in range(50)
    ]
    also = reserve("acct1", 1, "k", also_budget_ids=["victim0/tokens/2026-08-01"])
    nested = await failure(tokened.budget.Reserve(also, metadata=auth))
    slash = await failure(tokened.budget.Reserve(reserve("acct1/x", 1, "k"), metadata=auth))
    twice = reserve("acct1", 1, "k", also_budget_ids=["acct1/tokens/2026-08-01"])
    again = await failure(tokened.budget.Reserve(twice, metadata=auth))
    seen = sum(kinde.state.requests.values())
    rows = await table(
        tokened.dsn, "SELECT budget_id FROM budgets UNION ALL SELECT account FROM accounts"
    )
    own = await tokened.budget.Reserve(reserve("acct1", 1, "k"), metadata=auth)
    denied = (grpc.StatusCode.PERMISSION_DENIED, "BUDGET_NOT_PERMITTED")
    assert [(*denied, "budget_id")] * 50 == victims
    assert (*denied, "also_budget_ids[0]") == nested
    assert (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "account") == slash
    assert (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_FIELD", "also_budget_ids") == again
    assert (0, []) == (seen, rows)
    assert (True, "acct1/tokens/2026-08-01") == (own.admitted, own.budget_id)
    await assert_invariants(tokened.dsn)


BAD_MAXIMUMS: dict[str, object] = {
    "two63": 2**63,
    "ten30": 10**30,
    "past": limits.limit_units_max + 1,
    "string": "100",
    "float": 1.5,
}


async def test_a_limit_kinde_should_never_send_fails_closed(
    side: Running, kinde: FakeKinde
) -> None:
    """A maximum of 2^63, 10^30, 10^18+1, a string or a float refuses that account's
    Reserve LIMIT_UNAVAILABLE (never INTERNAL), stores nothing past the bound, and logs the
    value; a maximum of 10^18 admits."""
    for account, maximum in BAD_MAXIMUMS.items():
        kinde.state.limits[account] = {"tokens": maximum}
    kinde.state.limits["top"] = {"tokens": limits.limit_units_max}
    with structlog.testing.capture_logs() as logs:
        refused = [await side.budget.Reserve(reserve(a, 1_000, "k")) for a in BAD_MAXIMUMS]
        top = await side.budget.Reserve(reserve("top", 1_000, "k"))
    failed = {e["account"]: e["error"] for e in logs if e["event"] == "limit_read_failed"}
    stored = await table(side.dsn, "SELECT budget_id, limit_units FROM budgets ORDER BY budget_id")
    assert [(False, pb.REFUSAL_REASON_LIMIT_UNAVAILABLE)] * 5 == [
        (r.admitted, r.reason) for r in refused
    ]
    assert sorted(BAD_MAXIMUMS) == sorted(failed)
    assert [] == [a for a, m in BAD_MAXIMUMS.items() if repr(m) not in failed[a]]
    assert (True, limits.limit_units_max - 1_000) == (top.admitted, top.remaining)
    assert [{"budget_id": "top/tokens/2026-08-01", "limit_units": limits.limit_units_max}] == stored
    await assert_invariants(side.dsn)


async def test_a_bad_limit_keeps_the_last_good_read_until_it_is_stale(
    side: Running, kinde: FakeKinde, clock: FakeClock
) -> None:
    """When a plan's maximum turns into 10^30, Reserves admit on the last good limit while
    it is younger than 10 minutes, then are refused LIMIT_UNAVAILABLE; the row keeps the
    good limit."""
    # The sweeper would close "a" (its lease passes below) while the test reads the row.
    await side.sidecar.stop_sweeper()
    await side.budget.Reserve(reserve("acct", 1_000, "a"))
    kinde.state.limits["acct"] = {"tokens": 10**30}
    clock.advance(timedelta(minutes=9))
    stale = await side.budget.Reserve(reserve("acct", 1_000, "b"))
    clock.advance(timedelta(minutes=1, seconds=1))
    closed = await side.budget.Reserve(reserve("acct", 1_000, "c"))
    row = await fetch_budget_row(side.dsn, CYCLE)
    assert (True, False, pb.REFUSAL_REASON_LIMIT_UNAVAILABLE) == (
        stale.admitted,
        closed.admitted,
        closed.reason,
    )
    assert (100_000, 2_000) == (row["limit_units"], row["held"])
    await assert_invariants(side.dsn)


async def test_an_operators_budget_under_a_cycles_id_is_not_the_cycle(side: Running) -> None:
    """A budget PutBudget made under the id of acct's cycle keeps its own limit when acct
    reserves, and the Reserve by account is FAILED_PRECONDITION naming account."""
    await side.admin.PutBudget(pb.PutBudgetRequest(budget_id=CYCLE, limit=5, unit="tokens"))
    refused = await failure(side.budget.Reserve(reserve("acct", 1, "k")))
    row = await fetch_budget_row(side.dsn, CYCLE)
    assert NEEDS_ACCOUNT == refused
    assert (5, None, 0) == (row["limit_units"], row["account"], row["held"])
    await assert_invariants(side.dsn)


async def test_metered_calls_hold_on_the_plan_by_account(
    dsn: str, socket_dir: Path, kinde: FakeKinde, clock: FakeClock
) -> None:
    """A metered OpenAI call with account holds on the account's cycle (a plan in
    usd_micros) and settles there; metered by the cycle's id it is refused before any
    request reaches the model's provider."""
    since = Timestamp()
    since.FromDatetime(START - timedelta(days=1))
    price = pb.Price(
        provider="openai",
        model="gpt-4o",
        effective_from=since,
        input_usd_micros_per_mtok=2_500_000,
        output_usd_micros_per_mtok=10_000_000,
        source="https://example.com/test-prices",
        captured_at=since,
    )
    ask: dict[str, Any] = {
        "model": "gpt-4o",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "hi"}],
    }
    sidecar = plans_sidecar(dsn, socket_dir, kinde, clock, plan_unit="usd_micros")
    with fake_openai() as provider:
        async with (
            running(sidecar, dsn) as s,
            AsyncClient(s.target) as earmark,
            openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
        ):
            await s.admin.PutPrice(pb.PutPriceRequest(price=price))
            await metered(client, earmark, "", account="acct").chat.completions.create(**ask)
            by_id = metered(client, earmark, CYCLE)
            with pytest.raises(FailedPreconditionError) as refused:
                await by_id.chat.completions.create(**ask)
        sent = len(provider.state.requests)
    row = await fetch_budget_row(dsn, CYCLE)
    assert ("CYCLE_BUDGET_NEEDS_ACCOUNT", 1) == (refused.value.reason, sent)
    assert ("usd_micros", 0, True) == (row["unit"], row["held"], row["used"] > 0)
    await assert_invariants(dsn)
