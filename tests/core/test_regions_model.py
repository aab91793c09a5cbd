"""Budgets across regions (issue 48): a Hypothesis state machine drives the model of a home
and three regions (core/regions_model.py) through Reserves, settles (within, past and after
their holds), sweeps, asks, returns, reports, messages delivered, dropped, repeated and
reordered, links cut and healed, regions crashed, the home crashed mid-grant, reclaims and
a moving clock with skewed nodes, and checks the invariants after every step; every run ends
quiescent, every settled use counted at the home exactly once. EARMARK_REGIONS_EXAMPLES
runs it longer."""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from earmark import limits
from earmark.core.regions import Verdict
from earmark.core.regions_model import HOME, World

EXAMPLES = int(os.environ.get("EARMARK_REGIONS_EXAMPLES", "25"))
NAMES = ("r1", "r2", "r3")
LIMIT = 3_000

nodes = st.sampled_from((HOME, *NAMES))
regions = st.sampled_from(NAMES)
rates = st.sampled_from([0, 600, 6_000, 60_000])
picks = st.integers(0, 10**6)
leases = st.sampled_from([5, 20, 60, 120, 280]).map(lambda s: timedelta(seconds=s))
skews = st.floats(-limits.region_clock_skew_seconds_max, limits.region_clock_skew_seconds_max)


class Regions(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World(limit=LIMIT, names=NAMES)
        self.verdicts: list[Verdict] = []

    @initialize(rate=rates)
    def lease(self, rate: int) -> None:
        """Every region starts with a share asked for at rate."""
        for name in NAMES:
            self.round_trip(name, rate)

    @rule(name=regions, rate=rates)
    def round_trip(self, name: str, rate: int) -> None:
        """The region asks and, if its link is up, hears the answer at once."""
        self.world.ask(name, rate)
        while ready := [
            i for i in self.world.deliverable() if self.world.network[i].region == name
        ]:
            self.world.deliver(ready[0])

    @rule(
        node=nodes,
        amounts=st.lists(st.integers(1, 800), min_size=1, max_size=6),
        lease=leases,
    )
    def burst(self, node: str, amounts: list[int], lease: timedelta) -> None:
        """Several Reserves at one node."""
        for amount in amounts:
            self.verdicts.append(self.world.reserve(node, amount, lease))

    @rule(seconds=st.sampled_from([0.5, 5, 30, 120, 400, 700]), sweep=st.booleans())
    def tick(self, seconds: float, sweep: bool) -> None:
        """Time passes; the home's sweeper may take back the shares due."""
        self.world.advance(seconds)
        if sweep:
            self.world.reclaim()

    @rule(name=regions, before=st.sampled_from([1, 6, 12, 25, 100, 250]))
    def near_lease_end(self, name: str, before: float) -> None:
        """Time passes until before seconds are left of the region's view of its lease."""
        until = self.world.regions[name].lease_until
        if until is not None:
            left = (until - self.world.clock(name)).total_seconds() - before
            self.world.advance(max(0.0, left))

    @rule(node=nodes, seconds=skews)
    def skew(self, node: str, seconds: float) -> None:
        self.world.skew(node, seconds)

    @rule(
        node=nodes,
        amount=st.integers(1, 1_500),
        lease=leases,
        dispatched=st.booleans(),
    )
    def reserve(self, node: str, amount: int, lease: timedelta, dispatched: bool) -> None:
        """A Reserve, its call sent at once or not (a sent one whose lease passes in a
        region is in doubt, still held)."""
        self.verdicts.append(self.world.reserve(node, amount, lease, dispatched=dispatched))

    @rule(node=nodes, amounts=st.lists(st.integers(1, 800), min_size=1, max_size=6))
    def calls(self, node: str, amounts: list[int]) -> None:
        """Whole calls at one node: each admitted one settled at once, at its hold."""
        for amount in amounts:
            hold_id = f"h{self.world.seq + 1}"
            self.verdicts.append(self.world.reserve(node, amount, timedelta(seconds=60)))
            if hold_id in self.world.works:
                self.world.settle(hold_id, amount)

    @rule(name=regions, amounts=st.lists(st.integers(1, 800), min_size=2, max_size=6))
    def together(self, name: str, amounts: list[int]) -> None:
        """Reserves at once in a region, those its share cannot admit waiting on one ask
        for all of what they lack (the agent's batch)."""
        lease = timedelta(seconds=60)
        self.verdicts += self.world.reserve_together(name, amounts, lease)

    @precondition(lambda self: self.world.works)
    @rule(pick=picks, share=st.sampled_from([0, 50, 100, 130]))
    def settle(self, pick: int, share: int) -> None:
        """Settles an open hold at 0, half, all or 130 % of it (after its lease if it
        passed: a late settle)."""
        hold_id = sorted(self.world.works)[pick % len(self.world.works)]
        self.world.settle(hold_id, self.world.works[hold_id].amount * share // 100)

    @rule(node=nodes)
    def sweep(self, node: str) -> None:
        self.world.sweep(node)

    @rule(name=regions, rate=rates)
    def ask(self, name: str, rate: int) -> None:
        self.world.ask(name, rate)

    @rule(name=regions, rate=rates)
    def give_back(self, name: str, rate: int) -> None:
        self.world.give_back(name, rate)

    @rule(name=regions)
    def report(self, name: str) -> None:
        self.world.report(name)

    @precondition(lambda self: self.world.deliverable())
    @rule(pick=picks)
    def deliver(self, pick: int) -> None:
        ready = self.world.deliverable()
        self.world.deliver(ready[pick % len(ready)])

    @precondition(lambda self: self.world.deliverable())
    @rule()
    def deliver_all(self) -> None:
        """Every message over a link that is up, in the order sent."""
        while ready := self.world.deliverable():
            self.world.deliver(ready[0])

    @precondition(lambda self: self.world.network)
    @rule(pick=picks)
    def drop(self, pick: int) -> None:
        self.world.drop(pick % len(self.world.network))

    @precondition(lambda self: self.world.network)
    @rule(pick=picks)
    def duplicate(self, pick: int) -> None:
        self.world.duplicate(pick % len(self.world.network))

    @rule(name=regions)
    def cut(self, name: str) -> None:
        self.world.cut.add(name)

    @rule(name=regions)
    def heal(self, name: str) -> None:
        self.world.cut.discard(name)

    @rule(name=regions)
    def give_up(self, name: str) -> None:
        """The Reserves waiting on the region's ask stop waiting."""
        self.world.give_up(name)

    @rule(name=regions)
    def crash(self, name: str) -> None:
        self.world.crash(name)

    @precondition(lambda self: self.world.deliverable())
    @rule(pick=picks)
    def crash_home_mid_grant(self, pick: int) -> None:
        """The home commits what it answers an ask (a grant, a renewal) and dies before
        sending the answer (dying before the commit is the ask lost: drop)."""
        ready = self.world.deliverable()
        self.world.deliver(ready[pick % len(ready)], answer=False)

    @rule()
    def reclaim(self) -> None:
        self.world.reclaim()

    @invariant()
    def holds(self) -> None:
        self.world.check()

    def teardown(self) -> None:
        self.world.quiesce()
        self.world.check()


def test_regions_keep_the_budget_and_count_every_use_once() -> None:
    """Random steps on the home and three regions: never past the limit but for the late
    use the design allows, and every settled use reaches the home exactly once."""
    run_state_machine_as_test(
        Regions,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=60,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
