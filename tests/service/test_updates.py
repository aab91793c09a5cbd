"""Admin.UpdateBudget (issue 43, AIP-134) through live sidecars on a real PostgreSQL: only
the fields the mask names change, the merge is checked with PutBudget's rules, and two
updates of different fields at the same time are both kept."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, running_all, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, reason_of

CLOCK_START = datetime(2026, 12, 2, 12, tzinfo=UTC)
# Every setting of a budget, none at its default: each can change alone.
FULL: dict[str, Any] = {
    "limit": 1_000,
    "unit": "tokens",
    "default_estimate": 50,
    "estimate_policy": pb.ESTIMATE_POLICY_P75,
    "escrow_bps": 1_000,
    "overage_policy": pb.OVERAGE_POLICY_SOFT,
    "period": pb.PERIOD_MONTH,
    "timezone": "Europe/Berlin",
    "period_anchor": 15,
    "threshold_bps": [8_000, 10_000],
    "mode": pb.BUDGET_MODE_OBSERVE,
    "admissions_per_minute": 60,
    "units_per_minute": 5_000,
    "threshold_basis": pb.THRESHOLD_BASIS_USED,
}
# Each field an update may name, and a new value for it that FULL accepts alone.
CHANGES: dict[str, Any] = {
    "limit": 2_000,
    "unit": "credits",
    "default_estimate": 70,
    "estimate_policy": pb.ESTIMATE_POLICY_MEDIAN,
    "escrow_bps": 500,
    "overage_policy": pb.OVERAGE_POLICY_HARD,
    "overage_limit": 300,
    "period": pb.PERIOD_YEAR,
    "timezone": "America/New_York",
    "period_anchor": 20,
    "threshold_bps": [5_000],
    "mode": pb.BUDGET_MODE_ENFORCE,
    "admissions_per_minute": 120,
    "units_per_minute": 9_000,
    "threshold_basis": pb.THRESHOLD_BASIS_COMMITTED,
}
OPTIONAL = ("limit", "default_estimate", "overage_limit", "admissions_per_minute",
            "units_per_minute")  # fmt: skip


@pytest.fixture
async def side(dsn: str, socket_dir: Path, clock: FakeClock) -> AsyncIterator[Running]:
    async with running(Sidecar(sidecar_settings(dsn, socket_dir), clock=clock), dsn) as s:
        yield s


def settings(state: pb.BudgetState) -> dict[str, Any]:
    """What an operator set of a budget, as BudgetState answers it (None: absent)."""
    found: dict[str, Any] = {}
    for name in CHANGES:
        if name in OPTIONAL:
            found[name] = getattr(state, name) if state.HasField(name) else None
        elif name == "threshold_bps":
            found[name] = list(state.threshold_bps)
        else:
            found[name] = getattr(state, name)
    return found


async def put_full(side: Running, budget_id: str, **fields: Any) -> pb.BudgetState:
    state: pb.BudgetState = await side.admin.PutBudget(
        pb.PutBudgetRequest(budget_id=budget_id, **{**FULL, **fields})
    )
    return state


async def update(side: Running, budget_id: str, paths: list[str] | None, **fields: Any) -> Any:
    """UpdateBudget of budget_id with fields; paths None sends no mask."""
    request = pb.UpdateBudgetRequest(budget=pb.PutBudgetRequest(budget_id=budget_id, **fields))
    if paths is not None:
        request.update_mask.CopyFrom(FieldMask(paths=paths))
    return await side.admin.UpdateBudget(request)


async def refused(call: Any) -> tuple[grpc.StatusCode, str]:
    """The refusal's code and the field its message names first."""
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call
    return error.value.code(), (error.value.details() or "").split(":")[0]


async def read(side: Running, budget_id: str) -> pb.BudgetState:
    state: pb.BudgetState = await side.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    return state


@pytest.mark.parametrize("name", list(CHANGES))
async def test_each_field_named_alone_changes_alone(side: Running, dsn: str, name: str) -> None:
    """A mask naming one field changes that field to the request's value and leaves every
    other setting as it was, though the request sets none of them."""
    before = settings(await put_full(side, "u"))
    answered = await update(side, "u", [name], **{name: CHANGES[name]})
    expected = {**before, name: CHANGES[name]}
    assert (expected, expected) == (settings(answered), settings(await read(side, "u")))
    await assert_invariants(dsn)


async def test_a_named_field_left_unset_is_cleared(side: Running, dsn: str) -> None:
    """A named limit left unset is unlimited, once the settings that need a limit are
    cleared with it; cleared alone, the merge is refused as PutBudget would refuse it."""
    await put_full(side, "c")
    alone = await refused(update(side, "c", ["limit"]))
    cleared = await update(side, "c", ["limit", "escrow_bps", "threshold_bps"])
    assert (
        (grpc.StatusCode.INVALID_ARGUMENT, "escrow_bps"),
        (None, 0, [], 60),
    ) == (
        alone,
        (settings(cleared)["limit"], cleared.escrow_bps, list(cleared.threshold_bps),
         cleared.admissions_per_minute),
    )  # fmt: skip
    await assert_invariants(dsn)


async def test_without_a_mask_the_populated_fields_change(side: Running, dsn: str) -> None:
    """No mask (absent or empty) names the fields the request sets: a mode left at its
    default is not one of them, so the budget keeps OBSERVE."""
    before = settings(await put_full(side, "n"))
    absent = await update(side, "n", None, limit=5_000, admissions_per_minute=7)
    empty = await update(side, "n", [], units_per_minute=11)
    assert (
        {**before, "limit": 5_000, "admissions_per_minute": 7},
        {**before, "limit": 5_000, "admissions_per_minute": 7, "units_per_minute": 11},
    ) == (settings(absent), settings(empty))
    await assert_invariants(dsn)


async def test_a_star_sets_every_field_as_put_does(side: Running, dsn: str) -> None:
    """`*` alone names every field: the request's, and the defaults for those it leaves
    unset, exactly what PutBudget with the same request leaves."""
    await put_full(side, "s")
    starred = await update(side, "s", ["*"], limit=10, unit="tokens")
    put: pb.BudgetState = await side.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="p", limit=10, unit="tokens")
    )
    assert settings(put) == settings(starred)
    await assert_invariants(dsn)


@pytest.mark.parametrize(
    "paths",
    [["limt"], ["budget_id"], ["*", "limit"], ["budget.limit"], ["x" * 200], ["limit"] * 33],
)
async def test_a_mask_naming_no_field_is_refused(side: Running, dsn: str, paths: list[str]) -> None:
    """An unknown path, budget_id, `*` beside another path or more paths than the bound is
    INVALID_ARGUMENT naming update_mask (and the path), and nothing changes."""
    before = settings(await put_full(side, "m"))
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await update(side, "m", paths, limit=9)
    details = error.value.details() or ""
    quoted = paths[0][:64] if len(paths) == 1 and paths[0] != "*" else ""
    assert (grpc.StatusCode.INVALID_ARGUMENT, "update_mask", True, before) == (
        error.value.code(),
        details.split(":")[0],
        quoted in details,
        settings(await read(side, "m")),
    )
    await assert_invariants(dsn)


async def test_an_unknown_budget_is_not_found_as_get_budget_says(side: Running) -> None:
    """UpdateBudget of a budget that does not exist is NOT_FOUND, in GetBudget's words, and
    creates nothing."""
    with pytest.raises(grpc.aio.AioRpcError) as updated:
        await update(side, "nobody", ["limit"], limit=5, unit="tokens")
    with pytest.raises(grpc.aio.AioRpcError) as got:
        await read(side, "nobody")
    assert (grpc.StatusCode.NOT_FOUND, got.value.details(), reason_of(got.value)) == (
        updated.value.code(),
        updated.value.details(),
        reason_of(updated.value),
    )


async def test_the_merge_is_checked_and_put_as_put_budget_does(side: Running, dsn: str) -> None:
    """A bad value named is refused naming its field; a unit in use stays; an archived
    budget is not updated; the overage flag is cleared; threshold_basis out of range is
    refused naming it, and unspecified reads as committed."""
    await put_full(side, "k", mode=pb.BUDGET_MODE_ENFORCE)
    escrow = await refused(update(side, "k", ["escrow_bps"], escrow_bps=20_000))
    basis = await refused(update(side, "k", ["threshold_basis"], threshold_basis=7))
    put_basis = await refused(put_full(side, "k2", threshold_basis=7))
    unspecified = await update(side, "k", ["threshold_basis"])
    await side.budget.Reserve(
        pb.ReserveRequest(budget_id="k", amount=1_100, idempotency_key="past", phase=pb.PHASE_FINAL)
    )
    flagged = await read(side, "k")
    locked = await refused(update(side, "k", ["unit"], unit="credits"))
    cleared = await update(side, "k", ["limit"], limit=5_000)
    await side.admin.PutBudget(pb.PutBudgetRequest(budget_id="gone", unit="tokens"))
    await side.admin.DeleteBudget(pb.DeleteBudgetRequest(budget_id="gone"))
    archived = await refused(update(side, "gone", ["limit"], limit=1))
    assert (
        (grpc.StatusCode.INVALID_ARGUMENT, "escrow_bps"),
        (grpc.StatusCode.INVALID_ARGUMENT, "threshold_basis"),
        (grpc.StatusCode.INVALID_ARGUMENT, "threshold_basis"),
        pb.THRESHOLD_BASIS_COMMITTED,
        True,
        (grpc.StatusCode.FAILED_PRECONDITION, "budget 'k' is in use"),
        (False, "tokens", 5_000),
        grpc.StatusCode.FAILED_PRECONDITION,
    ) == (
        escrow,
        basis,
        put_basis,
        unspecified.threshold_basis,
        flagged.HasField("overage_since"),
        locked,
        (cleared.HasField("overage_since"), cleared.unit, cleared.limit),
        archived[0],
    )
    await assert_invariants(dsn)


async def test_a_period_named_changes_at_the_next_boundary(side: Running, dsn: str) -> None:
    """A period changed by an update keeps the current period's window until its end, as
    PutBudget's change does, and the budget's counters stay."""
    first = await put_full(side, "w")
    await side.budget.Reserve(pb.ReserveRequest(budget_id="w", amount=10, idempotency_key="a"))
    changed = await update(side, "w", ["period", "period_anchor"], period=pb.PERIOD_DAY)
    assert (first.period_start, first.resets_at, 10, pb.PERIOD_DAY, 0) == (
        changed.period_start,
        changed.resets_at,
        changed.held,
        changed.period,
        changed.period_anchor,
    )
    await assert_invariants(dsn)


ROUNDS = 12


async def test_concurrent_updates_of_two_fields_are_both_kept(dsn: str, socket_dir: Path) -> None:
    """Two sidecars update the same budget at the same time, one its limit, the other its
    admissions window, round after round: every round keeps both."""
    for n in range(2):
        (socket_dir / str(n)).mkdir()
    sides = [Sidecar(sidecar_settings(dsn, socket_dir / str(n))) for n in range(2)]
    async with running_all(sides, dsn) as (one, two):
        await put_full(one, "race")
        kept = []
        for n in range(1, ROUNDS + 1):
            await asyncio.gather(
                update(one, "race", ["limit"], limit=1_000 + n),
                update(two, "race", ["admissions_per_minute"], admissions_per_minute=60 + n),
                update(one, "race", ["threshold_bps"], threshold_bps=[100 * n]),
            )
            state = await read(two, "race")
            kept.append((state.limit, state.admissions_per_minute, list(state.threshold_bps)))
    assert [(1_000 + n, 60 + n, [100 * n]) for n in range(1, ROUNDS + 1)] == kept
    await assert_invariants(dsn)
