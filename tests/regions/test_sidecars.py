"""Budgets across regions (issue 48) through real sidecars: a home and a region, each on
its own database, the region reaching the home through a relay that adds 40 ms each way."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running_all, sidecar_settings
from tests.helpers import assert_invariants, eventually, fetch_budget_row
from tests.ops.test_commands import rows, run
from tests.relay import Relay


@dataclass
class Regions:
    home: Running
    region: Running
    relay: Relay
    home_dsn: str
    region_dsn: str

    async def audit(self) -> None:
        await assert_invariants(self.home_dsn)
        await assert_invariants(self.region_dsn)


@pytest.fixture
async def regions(
    dsn: str, region_dsn: str, socket_dir: Path, tmp_path: Path
) -> AsyncIterator[Regions]:
    home_dir = socket_dir / "home"
    region_dir = socket_dir / "eu"
    home_dir.mkdir()
    region_dir.mkdir()
    home_side = Sidecar(sidecar_settings(dsn, home_dir, region="home", region_listen="127.0.0.1:0"))
    async with running_all([home_side], dsn) as (home,):
        with Relay(("127.0.0.1", home_side.region_port)) as relay:
            region_side = Sidecar(
                sidecar_settings(region_dsn, region_dir, region="eu", home=relay.address)
            )
            async with running_all([region_side], region_dsn) as (region,):
                yield Regions(home, region, relay, dsn, region_dsn)


def reserve(key: str, amount: int, budget_id: str = "b") -> pb.ReserveRequest:
    return pb.ReserveRequest(budget_id=budget_id, idempotency_key=key, amount=amount)


async def test_a_region_admits_from_its_share_and_its_use_reaches_the_home(
    regions: Regions,
) -> None:
    """The region's first Reserve asks the home for what it needs; its settle reaches the
    home's used by the agent's next report; both ledgers audit clean."""
    await regions.home.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="b", limit=1_000, unit="tokens")
    )
    first = await regions.region.budget.Reserve(reserve("k1", 300))
    await regions.region.budget.Settle(
        pb.SettleRequest(reservation_id=first.reservation_id, used=250)
    )

    async def reported() -> bool:
        return (await fetch_budget_row(regions.home_dsn, "b"))["used"] == 250

    await eventually(reported, within_seconds=10, what="the region's use at the home")
    assert first.admitted
    await regions.audit()


async def test_a_region_cut_off_refuses_once_its_share_is_spent(regions: Regions) -> None:
    """Cut off from the home, a region admits within its share and then refuses at once."""
    await regions.home.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="b", limit=1_000, unit="tokens")
    )
    first = await regions.region.budget.Reserve(reserve("k1", 100))
    regions.relay.cut()
    row = await fetch_budget_row(regions.region_dsn, "b")
    room = row["limit_units"] - row["used"] - row["held"]
    within = await regions.region.budget.Reserve(reserve("k2", room)) if room else None
    beyond = await regions.region.budget.Reserve(reserve("k3", 1))
    assert first.admitted
    assert within is None or within.admitted
    assert (False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET) == (beyond.admitted, beyond.reason)
    await regions.audit()


async def test_operators_list_shares_at_the_home_and_in_the_region(regions: Regions) -> None:
    """Admin.ListShares (and `earmark regions list`) shows the region's share at the home,
    with the escrow held for it, and the region's own view, with its room."""
    await regions.home.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="b", limit=1_000, unit="tokens")
    )
    admitted = await regions.region.budget.Reserve(reserve("k1", 300))
    home = await regions.home.admin.ListShares(pb.ListSharesRequest())
    region = await regions.region.admin.ListShares(pb.ListSharesRequest(budget_id="b"))
    (at_home,) = home.shares
    (in_region,) = region.shares
    assert admitted.admitted
    assert ("b", "eu", True, "") == (
        at_home.budget_id,
        at_home.region,
        at_home.home,
        home.next_budget_id,
    )
    assert (at_home.granted, False, at_home.granted - 300) == (
        in_region.granted,
        in_region.home,
        in_region.outstanding,
    )
    listed = rows(await run(regions.home, "regions", "list"))
    assert ["b", "eu", "home"] == listed[1][:3]
    await regions.audit()
