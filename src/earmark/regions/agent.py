"""A region's sidecar's agent: every tick it gives back its shares' idle room, renews their
leases, tops up those running low and reports their use, in batched calls to the home; a
Reserve its share cannot admit asks through it for what it needs (demand). Every count it
sends is cumulative (core.regions), so a call lost, repeated or cut off halfway is
harmless: the next carries as much.

Several sidecars of one region share its database; each runs an agent. Their asks carry
the same cumulative counts and the home applies them by max, so they need no leader.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import grpc
import structlog
from google.protobuf.timestamp_pb2 import Timestamp

from earmark import limits
from earmark.core import regions
from earmark.errors import FailedPrecondition
from earmark.metrics import Metrics
from earmark.store.regions import RegionShare, ShareOutcome
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc

log = structlog.get_logger("earmark.regions")


class Asked(StrEnum):
    """How a Reserve's ask went: the home answered with the budget, answered that it has no
    such budget, did not answer, or was not asked (it has been silent)."""

    ANSWERED = "answered"
    NOT_FOUND = "not_found"
    UNREACHABLE = "unreachable"
    SILENT = "silent"


class RegionStore(Protocol):
    """What the agent needs of the region's store (store/regions.py)."""

    async def region_shares(self, after: str = ..., count: int = ...) -> list[RegionShare]: ...

    async def region_share(self, budget_id: str) -> RegionShare | None: ...

    async def apply_share_answer(
        self, name: str, outcome: ShareOutcome
    ) -> regions.Region | None: ...

    async def give_back_share(self, name: str, budget_id: str, keep: int, short: bool) -> int: ...


@dataclass(frozen=True, slots=True)
class HomeLink:
    """Where the home's region listener is and how to reach it: its HOST:PORT, the bearer
    token the region presents (None: the home takes no region tokens), and the CA that
    signs its certificate (None: plaintext)."""

    target: str
    token: str | None = None
    root_certificates: bytes | None = None

    def channel(self) -> grpc.aio.Channel:
        options = [("grpc.max_receive_message_length", limits.rpc_message_bytes_max)]
        if self.root_certificates is None:
            return grpc.aio.insecure_channel(self.target, options=options)
        credentials = grpc.ssl_channel_credentials(root_certificates=self.root_certificates)
        return grpc.aio.secure_channel(self.target, credentials, options=options)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return () if self.token is None else (("authorization", f"Bearer {self.token}"),)


@dataclass
class _Seen:
    """What the agent remembers of one share between ticks: its consumption (used +
    held) at recent ticks, whether the home last said it is short, and the counts the home
    last acknowledged."""

    samples: deque[tuple[datetime, int]] = field(
        default_factory=lambda: deque(maxlen=limits.region_rate_samples_max)
    )
    short: bool = False
    acked: tuple[int, int, int] | None = None


class RegionAgent:
    def __init__(
        self,
        store: RegionStore,
        metrics: Metrics,
        *,
        name: str,
        home: HomeLink,
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._metrics = metrics
        self.name = name
        self._home = home
        self._clock = clock
        self._channel: grpc.aio.Channel | None = None
        self._stub: Any = None
        self._started_at = clock()
        # When the home last answered (any call); what every share's verdict reads.
        self.heard_at: datetime | None = None
        # When a call to the home last failed (None: not since it last answered).
        self._failed_at: datetime | None = None
        self._seen: dict[str, _Seen] = {}
        # The shares looked at in the pass under way, and where the next page starts.
        self._visited: set[str] = set()
        self._cursor = ""
        self._failing = False
        # The Reserves' asks, by budget: one call at a time a budget, and the Reserves that
        # come while it is under way wait together for the next, which asks for all their
        # needs at once; so a burst of Reserves at a budget the region has too little of (a
        # fresh budget, a share run dry) sends the home a call or two, not one each. An
        # entry lives while its calls do, each waiting at most limits.region_call_seconds
        # for the home (and its store's reads and writes around it).
        self._asking: dict[str, _Asking] = {}
        self._closed = False

    def open(self) -> None:
        self._channel = self._home.channel()
        self._stub = pb_grpc.RegionsStub(self._channel)

    async def close(self) -> None:
        self._closed = True
        tasks = [a.task for a in self._asking.values() if a.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # A task cancelled before its first step never ran its finally.
        for asking in self._asking.values():
            asking.answer_all(Asked.UNREACHABLE)
        self._asking.clear()
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None

    # The tick: off the request path.

    async def tick(self) -> None:
        """Gives back idle room, then asks for what the shares need (renewals, top ups) and
        reports what changed, at most limits.region_outbox_batch_max budgets a call; at
        most limits.region_share_pages_per_tick_max pages of shares a tick, the next tick
        going on from where this one stopped."""
        now = self._clock()
        asks: list[tuple[str, regions.Ask]] = []
        room = 0
        for _ in range(limits.region_share_pages_per_tick_max):
            page = await self._store.region_shares(self._cursor, limits.region_shares_per_tick_max)
            for share in page:
                asked = await self._look_at(share, now)
                if asked is not None:
                    asks.append((share.budget_id, asked))
                room += max(0, share.room)
            if len(page) < limits.region_shares_per_tick_max:
                self._end_pass()
                break
            self._cursor = page[-1].budget_id
        self._metrics.region_room_units.set(room)
        for start in range(0, len(asks), limits.region_outbox_batch_max):
            await self._send(asks[start : start + limits.region_outbox_batch_max], "background")
        silent_since = self.heard_at or self._started_at
        self._metrics.region_home_silence_seconds.set(
            max(0.0, (self._clock() - silent_since).total_seconds())
        )

    async def _look_at(self, share: RegionShare, now: datetime) -> regions.Ask | None:
        """One share's turn in a tick: its rate sampled, its idle room given back, and the
        ask it needs (a renewal, a top up, or a report of what changed), if any."""
        self._visited.add(share.budget_id)
        seen = self._seen.setdefault(share.budget_id, _Seen())
        seen.samples.append((now, share.used + share.held))
        rate = _units_per_minute(seen.samples)
        region = share.region(self.name, (self.heard_at, seen.short))
        keep = regions.keep_for(rate)
        if regions.region_return(region, keep) is not region:
            # Only then a transaction, which gives back what is idle under the stripe lock.
            given = await self._store.give_back_share(self.name, share.budget_id, keep, seen.short)
            region = replace(region, returned=region.returned + given)
        ask = regions.region_ask(regions.NeedInput(region, rate, now))
        report = region.report(now)
        if ask is None and seen.acked != (report.used, report.returned, report.doubt):
            # Nothing to ask for, but a report to send (and a renewal with it).
            ask = regions.Ask(self.name, now, 0, report.returned, report.used, doubt=report.doubt)
        return ask

    def _end_pass(self) -> None:
        """Every share was looked at: what is remembered of shares gone is forgotten."""
        self._seen = {k: v for k, v in self._seen.items() if k in self._visited}
        self._visited = set()
        self._cursor = ""

    # A Reserve's ask: on the request path, bounded by limits.region_call_seconds.

    async def demand(self, budget_id: str, need: int, *, shares_only: bool = False) -> Asked:
        """Asks the home for need more of the budget for a waiting Reserve, unless a call to
        the home failed since it last answered, within HOME_SILENCE (core.regions.may_ask:
        SILENT, the share's refusal stands), so that a cut-off region does not make every
        Reserve wait out a call. Reserves that need the budget at once wait for one call
        together; one that comes after the call under way read its batch waits for the next
        call, with every other that comes meanwhile (at most two calls' wait)."""
        if self._closed:
            return Asked.UNREACHABLE
        loop = asyncio.get_running_loop()
        asking = self._asking.get(budget_id)
        if asking is None:
            asking = _Asking(_Batch(loop.create_future()))
            self._asking[budget_id] = asking
            asking.task = asyncio.create_task(self._ask_for(budget_id, asking))
        elif asking.first.sealed and asking.next is None:
            asking.next = _Batch(loop.create_future())
        batch = asking.next or asking.first
        batch.add(max(1, need), shares_only)
        # Shielded: a Reserve whose caller is gone does not cancel what others wait on.
        return await asyncio.shield(batch.done)

    async def _ask_for(self, budget_id: str, asking: _Asking) -> None:
        """The budget's calls, one after the other while Reserves wait for one."""
        batch: _Batch | None = asking.first
        try:
            while batch is not None:
                try:
                    batch.done.set_result(await self._demand(budget_id, batch))
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    batch.done.set_exception(error)
                batch, asking.next = asking.next, None
                if batch is not None:
                    asking.first = batch
        finally:
            if self._asking.get(budget_id) is asking:
                del self._asking[budget_id]
            asking.answer_all(Asked.UNREACHABLE)

    async def _demand(self, budget_id: str, batch: _Batch) -> Asked:
        """One call for the batch's Reserves (demand)."""
        now = self._clock()
        share = await self._store.region_share(budget_id)
        # What the batch asks for is read from here on: later Reserves wait for the next.
        batch.sealed = True
        if share is None and batch.shares_only:
            # A budget of the region's own refused: its home is here.
            return Asked.SILENT
        if not regions.may_ask(self.heard_at, self._failed_at, now):
            return Asked.SILENT
        seen = self._seen.get(budget_id) or _Seen()
        region = (
            regions.Region(self.name)
            if share is None
            else share.region(self.name, (self.heard_at, seen.short))
        )
        rate = _units_per_minute(seen.samples)
        ask = regions.region_ask(regions.NeedInput(region, rate, now, *batch.needs()))
        assert ask is not None
        outcomes = await self._send([(budget_id, ask)], "reserve")
        if not outcomes:
            return Asked.UNREACHABLE
        return Asked.ANSWERED if outcomes[0].found else Asked.NOT_FOUND

    async def _send(self, asks: Sequence[tuple[str, regions.Ask]], kind: str) -> list[ShareOutcome]:
        """One Share call with asks; the answers applied to the shares. [] when the call
        failed (logged once a run of failures)."""
        assert self._stub is not None, "open() first"
        # Stamped as they leave, not when the tick began: a tick over many shares takes a
        # while, and the home refuses an ask stamped further behind its clock than the
        # skews and a call's wait (core.regions.sent_at_problem); the share's lease counts
        # from the stamp, so the later one is the truer one too.
        sent_at = self._clock()
        asks = [(budget_id, replace(ask, sent_at=sent_at)) for budget_id, ask in asks]
        request = pb.ShareRequest(region=self.name, asks=[_ask_pb(b, a) for b, a in asks])
        try:
            reply = await self._stub.Share(
                request,
                timeout=limits.region_call_seconds,
                metadata=self._home.metadata(),
            )
        except grpc.aio.AioRpcError as error:
            self._metrics.region_asks.labels(kind, "failed").inc()
            self._failed_at = self._clock()
            if not self._failing:
                log.warning(
                    "region_home_unreachable",
                    region=self.name,
                    code=error.code().name,
                    error=error.details(),
                )
            self._failing = True
            return []
        self._metrics.region_asks.labels(kind, "answered").inc()
        if self._failing:
            log.info("region_home_reachable", region=self.name)
        self._failing = False
        self.heard_at = self._clock()
        outcomes = []
        for (budget_id, ask), answer in zip(asks, reply.answers, strict=False):
            outcome = _outcome(budget_id, answer, ask)
            outcomes.append(outcome)
            if not outcome.found or outcome.answer is None:
                if outcome.message:
                    log.warning("share_refused", budget_id=budget_id, reason=outcome.message)
                continue
            try:
                await self._store.apply_share_answer(self.name, outcome)
            except FailedPrecondition as error:
                # One share's answer fails itself alone (a unit the home changed).
                log.error("share_not_applied", budget_id=budget_id, error=error.message)
                outcomes[-1] = replace(outcome, found=False, message=error.message)
                continue
            seen = self._seen.setdefault(budget_id, _Seen())
            seen.short = outcome.answer.short
            seen.acked = (ask.used, ask.returned, ask.doubt)
        return outcomes


@dataclass(slots=True)
class _Batch:
    """The Reserves waiting for one call: their needs summed and the least of them, whether
    every one of them asks only for a share the region already has (RegionAgent.demand's
    shares_only), whether the call has read them (sealed: later ones wait for the next),
    and the call's answer."""

    done: asyncio.Future[Asked]
    smallest: int = 0
    total: int = 0
    count: int = 0
    shares_only: bool = True
    sealed: bool = False

    def __post_init__(self) -> None:
        # Retrieved here too: every Reserve waiting for it may have gone.
        self.done.add_done_callback(lambda done: done.cancelled() or done.exception())

    def add(self, need: int, shares_only: bool) -> None:
        assert not self.sealed
        self.smallest = need if self.count == 0 else min(self.smallest, need)
        # Within what the home reads as a count (a share's remaining below 0 can make one
        # Reserve's need more than its amount).
        self.total = min(limits.limit_units_max, self.total + need)
        self.count += 1
        self.shares_only = self.shares_only and shares_only

    def needs(self) -> tuple[int, int]:
        """The ask's need (what they all lack) and its smallest (the least one of them lacks;
        0 for one Reserve alone): core.regions.grant_size grants them much as it would one
        by one."""
        return self.total, (min(self.smallest, self.total) if self.count > 1 else 0)


@dataclass(slots=True)
class _Asking:
    """A budget's calls: the batch sent first, the one waiting for the call under way, and
    the task that sends them."""

    first: _Batch
    next: _Batch | None = None
    task: asyncio.Task[None] | None = None

    def answer_all(self, asked: Asked) -> None:
        """Answers every batch not yet answered (the call is gone: the agent is closing)."""
        for batch in (self.first, self.next):
            if batch is not None and not batch.done.done():
                batch.done.set_result(asked)


def _units_per_minute(samples: deque[tuple[datetime, int]]) -> int:
    """The share's consumption (used + held) over its samples, a minute's worth; 0 with
    fewer than two samples or none of it."""
    if len(samples) < 2:
        return 0
    (first, early), (last, late) = samples[0], samples[-1]
    seconds = (last - first).total_seconds()
    if seconds <= 0 or late <= early:
        return 0
    return int((late - early) * 60 / seconds)


def _timestamp(at: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(at)
    return stamp


def _ask_pb(budget_id: str, ask: regions.Ask) -> pb.ShareAsk:
    return pb.ShareAsk(
        budget_id=budget_id,
        sent_at=_timestamp(ask.sent_at),
        want=ask.want,
        need=ask.need,
        returned=ask.returned,
        used=ask.used,
        doubt=ask.doubt,
        smallest_need=ask.smallest,
    )


def _outcome(budget_id: str, answer: pb.ShareAnswer, ask: regions.Ask) -> ShareOutcome:
    """The home's answer as the store applies it; one for another budget, or with an
    asked_at other than the ask's, is not believed (found False)."""
    if answer.budget_id != budget_id or not answer.found:
        return ShareOutcome(budget_id, found=False, message=answer.message)
    asked_at = answer.asked_at.ToDatetime(tzinfo=ask.sent_at.tzinfo)
    if asked_at != ask.sent_at or min(answer.granted, answer.released, answer.granted_now) < 0:
        return ShareOutcome(budget_id, found=False, message="an answer to another ask")
    return ShareOutcome(
        budget_id,
        found=True,
        answer=regions.Answer(
            region=ask.region,
            asked_at=ask.sent_at,
            granted=answer.granted,
            released=answer.released,
            short=answer.short,
        ),
        granted_now=answer.granted_now,
        unit=answer.unit,
    )
