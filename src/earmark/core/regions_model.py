"""A model of one budget across regions (issue 48), in memory, on core/regions.py's rules:
the home and its regions, a network that holds messages as a bag (any of them may be
delivered, dropped or repeated, in any order), links cut and healed, regions crashed and
restarted, the home crashed mid-grant, one true clock and a clock per node within
limits.region_clock_skew_seconds_max of it, and the workers' holds and settles.
Whoever drives it (tests/core/test_regions_model.py, a Hypothesis state machine) chooses
every step; check() states the invariants, quiesce() the end every run reaches.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from earmark import limits
from earmark.core import regions as rules
from earmark.core.regions import Answer, Ask, Home, HomeShare, Region, Report, Verdict

HOME = "home"
START = datetime(2026, 12, 1, 12, tzinfo=UTC)
SKEW = limits.region_clock_skew_seconds_max


@dataclass(frozen=True, slots=True)
class Waiting:
    """A Reserve a region's share could not admit, waiting on the region's ask for what it
    needs (its worker gives up at any time)."""

    amount: int
    lease: timedelta
    dispatched: bool = False


Payload = Ask | Answer | Report


@dataclass(frozen=True, slots=True)
class Message:
    """In the network between the home and region (either way)."""

    region: str
    to_home: bool
    payload: Payload


@dataclass(frozen=True, slots=True)
class Work:
    """A worker's hold: where it was admitted, for how much."""

    node: str
    amount: int


@dataclass
class World:
    limit: int
    names: tuple[str, ...]
    now: datetime = START
    home: Home = field(init=False)
    regions: dict[str, Region] = field(init=False)
    # The home's own holds: amount and lease end, on its clock.
    home_holds: dict[str, tuple[int, datetime]] = field(default_factory=dict)
    # Reserves waiting on a region's ask, by region and hold id.
    waiting: dict[str, dict[str, Waiting]] = field(default_factory=dict)
    network: list[Message] = field(default_factory=list)
    cut: set[str] = field(default_factory=set)
    offsets: dict[str, float] = field(default_factory=dict)
    readings: dict[str, datetime] = field(default_factory=dict)
    works: dict[str, Work] = field(default_factory=dict)
    # What the workers were told was charged, in all.
    charged: int = 0
    # Usage a region recorded that the home had not heard of when it reclaimed the share.
    unreported_at_reclaim: int = 0
    reclaims: int = 0
    seq: int = 0

    def __post_init__(self) -> None:
        self.home = Home(limit=self.limit)
        self.regions = {name: Region(name) for name in self.names}
        self.waiting = {name: {} for name in self.names}

    # Clocks.

    def clock(self, node: str) -> datetime:
        """The node's clock: the true time plus its offset, never going back."""
        reading = self.now + timedelta(seconds=self.offsets.get(node, 0.0))
        last = self.readings.get(node, reading)
        self.readings[node] = max(last, reading)
        return self.readings[node]

    def advance(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += timedelta(seconds=seconds)

    def skew(self, node: str, seconds: float) -> None:
        assert abs(seconds) <= SKEW
        self.offsets[node] = seconds

    # Workers.

    def reserve(
        self, node: str, amount: int, lease: timedelta, *, dispatched: bool = False
    ) -> Verdict:
        """A worker's Reserve at node; ADMIT, ASK (it waits on the region's ask for what it
        needs) or REFUSE. dispatched: its call is sent at once (past its lease in a region,
        it is in doubt)."""
        self.seq += 1
        hold_id = f"h{self.seq}"
        if node == HOME:
            return self._admit_at_home(hold_id, amount, lease)
        wait = Waiting(amount, lease, dispatched)
        return self._admit_in_region(node, hold_id, wait, ask=True)

    def reserve_together(self, node: str, amounts: list[int], lease: timedelta) -> list[Verdict]:
        """Reserves at once in region node: those its share cannot admit wait on one ask for
        all of what they lack, and the least of it (the agent's batch, RegionAgent.demand)."""
        verdicts: list[Verdict] = []
        needs: list[int] = []
        for amount in amounts:
            self.seq += 1
            wait = Waiting(amount, lease, False)
            verdicts.append(
                self._admit_in_region(node, f"h{self.seq}", wait, ask=False, needs=needs)
            )
        if needs:
            smallest = min(needs) if len(needs) > 1 else 0
            group = rules.NeedInput(self.regions[node], 0, self.clock(node), sum(needs), smallest)
            asked = rules.region_ask(group)
            assert asked is not None
            self.send(Message(node, True, asked))
        return verdicts

    def _admit_in_region(
        self, node: str, hold_id: str, wait: Waiting, *, ask: bool, needs: list[int] | None = None
    ) -> Verdict:
        now = self.clock(node)
        decided = rules.region_admit(
            rules.AdmitInput(
                self.regions[node], hold_id, wait.amount, wait.lease, now, wait.dispatched
            )
        )
        self.regions[node] = decided.region
        if decided.verdict is Verdict.ADMIT:
            self.works[hold_id] = Work(node, wait.amount)
        elif decided.verdict is Verdict.ASK and needs is not None:
            # Waiting on the ask its caller sends for several (reserve_together).
            self.waiting[node][hold_id] = wait
            needs.append(decided.need)
        elif decided.verdict is Verdict.ASK and ask:
            self.waiting[node][hold_id] = wait
            need = rules.NeedInput(self.regions[node], 0, now, decided.need)
            asked = rules.region_ask(need)
            assert asked is not None
            self.send(Message(node, True, asked))
        return decided.verdict

    def give_up(self, node: str) -> None:
        """The region's waiting Reserves' workers stop waiting: they are refused."""
        self.waiting[node].clear()

    def _admit_at_home(self, hold_id: str, amount: int, lease: timedelta) -> Verdict:
        admitted = rules.home_admit(self.home, amount)
        if not admitted.admitted:
            return Verdict.REFUSE
        self.home = admitted.home
        self.home_holds[hold_id] = (amount, self.clock(HOME) + lease)
        self.works[hold_id] = Work(HOME, amount)
        return Verdict.ADMIT

    def settle(self, hold_id: str, used: int) -> None:
        """The worker settles at used (within its hold, past it, or after its lease)."""
        work = self.works.pop(hold_id)
        self.charged += used
        if work.node == HOME:
            held = 0
            hold = self.home_holds.pop(hold_id, None)
            if hold is not None and self.clock(HOME) < hold[1]:
                held = hold[0]
            elif hold is not None:
                self.home = rules.home_expire(self.home, hold[0])
            self.home = rules.home_settle(self.home, held, used)
        else:
            region = self.regions[work.node]
            self.regions[work.node] = rules.region_settle(
                region, hold_id, used, self.clock(work.node)
            )

    def sweep(self, node: str) -> None:
        """Closes the node's holds whose lease passed."""
        now = self.clock(node)
        if node != HOME:
            self.regions[node] = rules.region_expire(self.regions[node], now)
            return
        for hold_id, (amount, until) in list(self.home_holds.items()):
            if now >= until:
                del self.home_holds[hold_id]
                self.home = rules.home_expire(self.home, amount)

    # The protocol.

    def ask(self, name: str, units_per_minute: int) -> None:
        """The region asks for a renewal or a top up if it needs one."""
        asked = rules.region_ask(
            rules.NeedInput(self.regions[name], units_per_minute, self.clock(name))
        )
        if asked is not None:
            self.send(Message(name, True, asked))

    def give_back(self, name: str, units_per_minute: int) -> None:
        """The region returns its idle room and reports."""
        region = rules.region_return(self.regions[name], rules.keep_for(units_per_minute))
        self.regions[name] = region
        self.send(Message(name, True, region.report(self.clock(name))))

    def report(self, name: str) -> None:
        self.send(Message(name, True, self.regions[name].report(self.clock(name))))

    def reclaim(self) -> None:
        """The home takes back every share whose lease, grace and margin passed."""
        for name in self.names:
            share = self.home.share(name)
            taken = rules.reclaim(self.home, name, self.clock(HOME))
            if taken.amount == 0:
                continue
            region = self.regions[name]
            now = self.clock(name)
            open_holds = {k: h for k, h in region.holds.items() if h.until > now}
            assert not open_holds, ("reclaimed under open holds", name, open_holds, now)
            assert region.lease_until is None or region.lease_until <= now, (
                "reclaimed under a live lease",
                region.lease_until,
                now,
            )
            # Use, and holds in doubt, the home had not heard of: settled, each is late there.
            self.unreported_at_reclaim += max(0, region.used - share.used)
            self.unreported_at_reclaim += max(0, region.doubt(now) - share.doubt)
            self.reclaims += 1
            self.home = taken.home

    # The network.

    def send(self, message: Message) -> None:
        """Sends message; over a cut link, a region's call fails at once (the relay resets
        it), and the region notes when."""
        if message.region in self.cut and message.to_home:
            region = self.regions[message.region]
            self.regions[message.region] = replace(region, failed_at=self.clock(message.region))
            return
        self.network.append(message)

    def deliverable(self) -> list[int]:
        return [i for i, m in enumerate(self.network) if m.region not in self.cut]

    def deliver(self, index: int, *, answer: bool = True) -> None:
        """Delivers one message over a link that is up; answer=False: the home crashed after
        committing an ask's grant and before sending its answer."""
        message = self.network.pop(index)
        assert message.region not in self.cut
        payload = message.payload
        if isinstance(payload, Ask):
            asked = rules.answer_ask(self.home, payload, self.clock(HOME))
            self.home = asked.home
            if answer:
                self.send(Message(message.region, False, asked.answer))
        elif isinstance(payload, Report):
            self.home = rules.apply_report(self.home, payload)
        else:
            name = message.region
            self.regions[name] = rules.region_answer(self.regions[name], payload, self.clock(name))
            # The waiting Reserves try again on the answer, once: admitted or refused.
            waiting, self.waiting[name] = self.waiting[name], {}
            for hold_id, wait in waiting.items():
                self._admit_in_region(name, hold_id, wait, ask=False)

    def drop(self, index: int) -> None:
        self.network.pop(index)

    def duplicate(self, index: int) -> None:
        self.network.append(self.network[index])

    def crash(self, name: str) -> None:
        """A region's process dies and restarts: its database survives; what it heard and
        the messages on their way to it do not."""
        self.regions[name] = self.regions[name].restarted()
        self.waiting[name] = {}
        self.network = [m for m in self.network if m.region != name or m.to_home]

    # What must hold.

    @property
    def excused(self) -> int:
        """Use past the limit that the design allows: settles past their holds or after
        their leases, and use a reclaim did not know of (each a late settle)."""
        late = sum(r.late for r in self.regions.values())
        return self.home.late_local + late + self.unreported_at_reclaim

    def claims(self) -> int:
        """Everything used, and held by a hold whose lease has not passed, everywhere."""
        total = self.home.used_local + self.home.held_local
        for name, region in self.regions.items():
            now = self.clock(name)
            live = (h for h in region.holds.values() if h.until > now or h.in_doubt(now))
            total += region.used + sum(h.amount for h in live)
        return total

    def check(self) -> None:
        """The invariants, after every step."""
        assert self.claims() <= self.limit + self.excused, (self.claims(), self.excused)
        assert self.home.granted_out <= self.limit, self.home
        for name, region in self.regions.items():
            share = self.home.share(name)
            assert region.granted <= share.granted, (name, region, share)
            assert region.used >= share.used, (name, region, share)
            assert region.returned >= share.returned, (name, region, share)
            self._check_lease(name, region, share)

    def _check_lease(self, name: str, region: Region, share: HomeShare) -> None:
        """While the region's view of its lease lasts, the home's lease lasts (but for the
        clocks' margin) and the region has seen every reclaim; while a hold of it is open,
        the home's lease lasts the grace longer: the home's reclaim never finds either."""
        now = self.clock(name)
        home_now = self.clock(HOME)
        if region.lease_until is not None and now < region.lease_until:
            assert share.lease_until is not None
            assert home_now < share.lease_until + rules.LEASE_MARGIN, (name, region, share)
            assert region.returned >= share.released, (name, region, share)
        for hold in region.holds.values():
            if now < hold.until:
                assert share.lease_until is not None
                grace = rules.LEASE_MARGIN - rules.SETTLE_GRACE
                assert home_now < share.lease_until + grace, (name, hold, share)

    def quiesce(self) -> None:
        """Links heal and every message is delivered, every hold's lease passes and every
        node sweeps, and every region's report reaches the home: the home then counts every
        settled use exactly once, and holds nothing."""
        self.cut.clear()
        while self.network:
            self.deliver(0)
        self.advance(limits.lease_seconds_max_ceiling)
        for node in (HOME, *self.names):
            self.sweep(node)
        for name in self.names:
            self.report(name)
        while self.network:
            self.deliver(0)
        for name, region in self.regions.items():
            assert self.home.share(name).used == region.used, (name, region)
        used = self.home.used_local + sum(r.used for r in self.regions.values())
        assert self.charged == used, (self.charged, used)
        assert self.home.held_local == 0
