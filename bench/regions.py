"""Scenario 15, budgets across regions (issue 48): a home "us" and regions "eu" and "ap" on
this machine, each with its own PostgreSQL server and its own sidecar process, every link
from a region to the home through a relay (tests.relay.Relay) that adds 40 ms each way;
nothing else shared.

1. Reserve p50 in eu, with room in its share, against the home's own p50: one worker, one
   call at a time, Reserve then Settle, the two taking turns (ABBA) after a warm-up that
   lets eu's agent top up its share by its rate. Beside it, today's way: a sidecar in eu
   whose database is the home's PostgreSQL, through a relay of the same 40 ms.
2. A skewed load (10 workers, each job sent to eu, us or ap at 80 / 10 / 10 %) spends a
   budget of SKEW_LIMIT; what the three regions admitted (the home's used once the last reports
   arrived) against the same load on one sidecar of one region alone.
3. ap killed (SIGKILL) while it holds a share with open holds: the escrow it strands, read
   at the home, against its share, and when the home takes it back (lease_until +
   core.regions.RECLAIM_AFTER; the lease is 600 s, which this run does not wait out).

Every run ends on the audit of the three databases, and on used + held <= limit at the
home for every budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import asyncpg
import grpc
from prometheus_client.parser import text_string_to_metric_families

from bench.harness import Figure, Loop, scrape
from bench.regions_links import UnixBridge, region_port, socket_path
from bench.scenarios import Env, Stubs, stubs
from earmark.core.regions import RECLAIM_AFTER, SETTLE_GRACE, SHARE_LEASE
from earmark.spawn import SpawnedSidecar, spawn_sidecar
from earmark.store.audit import audit_database
from earmark.store.embedded import EmbeddedPostgres, ensure_database
from earmark.v1 import budget_pb2 as pb
from tests.relay import Relay

LABEL = "regions"
HOME = "us"
REGIONS = ("eu", "ap")
DELAY_SECONDS = 0.04
DATABASE = "earmark"
RETRIES = "earmark_tx_serialization_retries_total"

# 1. A large limit, and amounts large enough that eu's rate during the warm-up earns it
# grants above the home's smallest (core.regions.share_floor: a thousandth of the limit).
LATENCY_LIMIT = 10**12
LATENCY_AMOUNT = 10**7
LATENCY_CALLS = 300
WARM_WORKERS = 4
WARM_SECONDS_MIN = 4.0
WARM_SECONDS_MAX = 30.0
HOME_WARM_CALLS = 30
# Today's way: every statement crosses the relay, so a few dozen calls say enough.
BASELINE_CALLS = 30
BASELINE_WARM_CALLS = 3

# 2. The skewed load.
SKEW_LIMIT = 200_000
SKEW_AMOUNT = 100
# Each job goes to a region drawn with these weights (80 % of the jobs in eu, whatever
# each region's latency), from SKEW_WORKERS closed-loop workers.
SKEW_WEIGHTS = {"us": 1, "eu": 8, "ap": 1}
SKEW_WORKERS = 10
REFUSED_IN_A_ROW = 25
SKEW_DEADLINE_SECONDS = 120.0
# How long to wait for the regions' last reports to reach the home's row, and how long the
# row must stay unchanged to be called final when it does not reach the workers' count.
REPORT_WAIT_SECONDS = 30.0
REPORT_QUIET_SECONDS = 5.0
POLL_SECONDS = 0.25

# 3. The dead region.
DEAD_WARM_SECONDS = 4.0
DEAD_OPEN_HOLDS = 3


def name(what: str) -> str:
    return f"{LABEL}: {what}"


P50_HOME = name("us (home) Reserve p50")
P50_EU = name("eu Reserve p50, room in its share")
P50_DIFF = name("eu - us Reserve p50, run by run")
P99_HOME = name("us (home) Reserve p99")
P99_EU = name("eu Reserve p99, room in its share")
SETTLE_HOME = name("us (home) Settle p50")
SETTLE_EU = name("eu Settle p50")
EU_ASKS = name("eu Reserves that waited on the home")
RETRIES_HOME = name("us (home) serialization retries per call")
RETRIES_EU = name("eu serialization retries per call")
TODAY_RESERVE = name("today, eu on the home's PostgreSQL: Reserve p50")
TODAY_SETTLE = name("today, eu on the home's PostgreSQL: Settle p50")
SKEW_ADMITTED = name("skewed, admitted over 3 regions")
ALONE_ADMITTED = name("skewed, admitted by one region alone")
SKEW_RATIO = name("skewed / one region alone admitted, run by run")
SKEW_EU_PART = name("skewed, eu's part of the admitted")
SKEW_SECONDS = name("skewed, seconds until spent")
SKEW_REPORT_WAIT = name("skewed, seconds for the last reports")
SKEW_UNAVAILABLE = name("skewed and alone: UNAVAILABLE")
PAST_LIMIT = name("admitted past the limit (home used + held)")
DEAD_STRANDED = name("dead ap: stranded at the home")
DEAD_SHARE = name("dead ap: its share at the kill")
DEAD_RATIO = name("dead ap: stranded / share")
DEAD_LEASE = name("dead ap: its lease left at the kill")
DEAD_BACK = name("dead ap: back at the home after the kill")

UNITS = {
    P50_HOME: "ms",
    P50_EU: "ms",
    P50_DIFF: "ms",
    P99_HOME: "ms",
    P99_EU: "ms",
    SETTLE_HOME: "ms",
    SETTLE_EU: "ms",
    EU_ASKS: "calls",
    RETRIES_HOME: "retries",
    RETRIES_EU: "retries",
    TODAY_RESERVE: "ms",
    TODAY_SETTLE: "ms",
    SKEW_ADMITTED: "units",
    ALONE_ADMITTED: "units",
    SKEW_RATIO: "ratio",
    SKEW_EU_PART: "ratio",
    SKEW_SECONDS: "s",
    SKEW_REPORT_WAIT: "s",
    SKEW_UNAVAILABLE: "calls",
    PAST_LIMIT: "units",
    DEAD_STRANDED: "units",
    DEAD_SHARE: "units",
    DEAD_RATIO: "ratio",
    DEAD_LEASE: "s",
    DEAD_BACK: "s",
}


# The pure parts: figures from what was read, and the targets.


def stranded(granted: int, returned: int, reclaimed_to: int, used: int) -> int:
    """A share's outstanding escrow at the home (core.regions.HomeShare.outstanding): what
    a dead region strands until the home reclaims it."""
    return max(0, granted - max(returned, reclaimed_to) - used)


def share_of(granted: int, returned: int, reclaimed_to: int, used: int) -> int:
    """The share's footprint on the limit (core.regions.HomeShare.footprint)."""
    return max(granted - max(returned, reclaimed_to), used)


def back_after_seconds(lease_until: datetime, killed_at: datetime) -> float:
    """When the home takes a dead region's share back, from the kill: its lease's end on the
    home's clock plus the reclaim delay (core.regions.reclaim_due)."""
    return (lease_until + RECLAIM_AFTER - killed_at).total_seconds()


def back_target_seconds() -> float:
    """The issue's bound: the share's lease plus the settle grace. The home waits the
    clocks' margin (LEASE_MARGIN, 2 s) more by design, and the lease counts from the home's
    receipt of the last ask, which may still be on the relay at the kill."""
    return (SHARE_LEASE + SETTLE_GRACE).total_seconds()


def past_limit(used: int, held: int, limit: int) -> int:
    return max(0, used + held - limit)


def ratio(over: float, under: float) -> float:
    return over / under if under else float("nan")


def targets(median: Callable[[str], float]) -> list[Callable[[], tuple[str, bool]]]:
    """Issue 48's targets, each measured by this scenario (a KeyError when it did not run)."""
    return [
        lambda: (
            "regions: Reserve p50 in eu, room in its share, <= the home's + 1 ms (median of "
            f"run-by-run differences; today's way {median(TODAY_RESERVE):,.0f} ms)",
            median(P50_DIFF) <= 1.0,
        ),
        lambda: (
            "regions: skewed load (80 % in eu) admits >= 0.95 x one region alone (median ratio)",
            median(SKEW_RATIO) >= 0.95,
        ),
        lambda: (
            "regions: a dead region strands <= its share, back at the home within the lease "
            f"+ settle grace ({back_target_seconds():,.0f} s; computed from lease_until, not "
            "waited)",
            median(DEAD_RATIO) <= 1.0 and median(DEAD_BACK) <= back_target_seconds(),
        ),
        lambda: ("regions: 0 admissions past the limit", median(PAST_LIMIT) == 0),
    ]


# The parts that run.


@dataclass
class Site:
    """One region: its PostgreSQL, its sidecar and stubs, and its relay to the home."""

    name: str
    pg: EmbeddedPostgres
    dsn: str
    sidecar: SpawnedSidecar
    stubs: Stubs
    relay: Relay | None = None


@dataclass
class Spent:
    """What a skewed load's workers settled, by region."""

    settled: dict[str, int] = field(default_factory=dict)
    unavailable: int = 0

    @property
    def total(self) -> int:
        return sum(self.settled.values())


async def job(
    s: Stubs, budget_id: str, amount: int, loop: Loop, *, settle: bool = True
) -> bool | None:
    """Reserve amount, then Settle it at the amount (unless not settle); whether it was
    admitted, None for UNAVAILABLE. Latencies go to loop."""
    request = pb.ReserveRequest(
        budget_id=budget_id, idempotency_key=uuid.uuid4().hex, amount=amount
    )
    started = time.perf_counter()
    try:
        reply = await s.budget.Reserve(request, timeout=30)
    except grpc.aio.AioRpcError as error:
        if error.code() != grpc.StatusCode.UNAVAILABLE:
            raise
        loop.record("unavailable", started)
        return None
    loop.record("reserve", started)
    if not reply.admitted:
        return False
    if settle:
        started = time.perf_counter()
        try:
            await s.budget.Settle(
                pb.SettleRequest(reservation_id=reply.reservation_id, used=amount), timeout=30
            )
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.UNAVAILABLE:
                raise
            loop.record("unavailable", started)
            return None
        loop.record("settle", started)
    return True


async def put_budget(home: Site, prefix: str, limit: int) -> str:
    budget_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    await home.stubs.admin.PutBudget(
        pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit="t")
    )
    return budget_id


async def budget_row(dsn: str, budget_id: str) -> asyncpg.Record | None:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchrow(
            "SELECT limit_units, used, held FROM budgets WHERE budget_id = $1", budget_id
        )
    finally:
        await conn.close()


def reserve_asks(metrics_port: int) -> float:
    """A region's calls to the home on behalf of a waiting Reserve, so far."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "earmark_region_asks_total" and sample.labels.get("kind") == "reserve"
    )


async def sequential(s: Stubs, budget_id: str, amount: int, calls: int, into: Loop) -> None:
    for _ in range(calls):
        await job(s, budget_id, amount, into)


async def warm_share(eu: Site, budget_id: str) -> None:
    """WARM_WORKERS in eu, in rounds of a second, until its share has room for twice the
    measured calls, after WARM_SECONDS_MIN at least (a few ticks of its agent: its asks
    follow its rate), WARM_SECONDS_MAX at most."""
    started = time.monotonic()
    need = 2 * LATENCY_CALLS * LATENCY_AMOUNT
    while True:
        round_ends = time.monotonic() + 1.0

        async def worker(until: float = round_ends) -> None:
            while time.monotonic() < until:
                await job(eu.stubs, budget_id, LATENCY_AMOUNT, Loop())

        await asyncio.gather(*[worker() for _ in range(WARM_WORKERS)])
        elapsed = time.monotonic() - started
        if elapsed >= WARM_SECONDS_MAX:
            return
        if elapsed < WARM_SECONDS_MIN:
            continue
        row = await budget_row(eu.dsn, budget_id)
        if row is not None and row["limit_units"] - row["used"] - row["held"] >= need:
            return


async def latency(home: Site, eu: Site, out: dict[str, Figure], run: int) -> None:
    """1. One worker, Reserve then Settle, at the home and in eu in ABBA halves."""
    budget_id = await put_budget(home, "near", LATENCY_LIMIT)
    await warm_share(eu, budget_id)
    await sequential(home.stubs, budget_id, LATENCY_AMOUNT, HOME_WARM_CALLS, Loop())
    loops = {HOME: Loop(), "eu": Loop()}
    sites = {HOME: home, "eu": eu}
    order = [HOME, "eu"] if run % 2 == 0 else ["eu", HOME]
    asks_before = reserve_asks(eu.sidecar.metrics_port)
    retries = {where: 0.0 for where in sites}
    for where in order + order[::-1]:
        before = scrape(sites[where].sidecar.metrics_port).get(RETRIES, 0.0)
        await sequential(
            sites[where].stubs, budget_id, LATENCY_AMOUNT, LATENCY_CALLS // 2, loops[where]
        )
        retries[where] += scrape(sites[where].sidecar.metrics_port).get(RETRIES, 0.0) - before
    asks = reserve_asks(eu.sidecar.metrics_port) - asks_before
    values = {
        P50_HOME: loops[HOME].ms("reserve", 0.5),
        P50_EU: loops["eu"].ms("reserve", 0.5),
        P99_HOME: loops[HOME].ms("reserve", 0.99),
        P99_EU: loops["eu"].ms("reserve", 0.99),
        SETTLE_HOME: loops[HOME].ms("settle", 0.5),
        SETTLE_EU: loops["eu"].ms("settle", 0.5),
        EU_ASKS: asks,
        RETRIES_HOME: retries[HOME] / max(1, 2 * LATENCY_CALLS),
        RETRIES_EU: retries["eu"] / max(1, 2 * LATENCY_CALLS),
    }
    values[P50_DIFF] = values[P50_EU] - values[P50_HOME]
    for key, value in values.items():
        out[key].values.append(value)


async def today(home: Site, far: Stubs, out: dict[str, Figure]) -> None:
    """1, today's way: a sidecar in eu on the home's database, across the relay."""
    budget_id = await put_budget(home, "far", LATENCY_LIMIT)
    await sequential(far, budget_id, LATENCY_AMOUNT, BASELINE_WARM_CALLS, Loop())
    loop = Loop()
    await sequential(far, budget_id, LATENCY_AMOUNT, BASELINE_CALLS, loop)
    out[TODAY_RESERVE].values.append(loop.ms("reserve", 0.5))
    out[TODAY_SETTLE].values.append(loop.ms("settle", 0.5))


Route = Callable[[], tuple[str, Stubs]]


def weighted(sites: dict[str, Site], seed: int) -> Route:
    """Draws each job's region by SKEW_WEIGHTS."""
    rng = random.Random(seed)
    names = list(SKEW_WEIGHTS)
    weights = [SKEW_WEIGHTS[n] for n in names]

    def route() -> tuple[str, Stubs]:
        (where,) = rng.choices(names, weights)
        return where, sites[where].stubs

    return route


async def spend(route: Route, budget_id: str, spent: Spent, deadline: float) -> None:
    """SKEW_WORKERS workers loop Reserve then Settle at SKEW_AMOUNT, each job where route
    says, until each is refused REFUSED_IN_A_ROW times in a row or the deadline."""

    async def worker() -> None:
        refused = 0
        while refused < REFUSED_IN_A_ROW and time.monotonic() < deadline:
            where, s = route()
            admitted = await job(s, budget_id, SKEW_AMOUNT, Loop())
            if admitted:
                refused = 0
                spent.settled[where] = spent.settled.get(where, 0) + SKEW_AMOUNT
            else:
                refused += 1
                if admitted is None:
                    spent.unavailable += 1
                    await asyncio.sleep(0.1)

    await asyncio.gather(*[worker() for _ in range(SKEW_WORKERS)])


async def final_used(dsn: str, budget_id: str, expected: int) -> tuple[int, int, float]:
    """The home's used and held for the budget once the regions' reports stop moving it:
    when used reaches what the workers settled, or after REPORT_QUIET_SECONDS unchanged,
    REPORT_WAIT_SECONDS at most; and the seconds waited."""
    started = time.monotonic()
    last: tuple[int, int] | None = None
    changed = started
    while True:
        row = await budget_row(dsn, budget_id)
        assert row is not None
        now = (int(row["used"]), int(row["held"]))
        if now != last:
            last, changed = now, time.monotonic()
        waited = time.monotonic() - started
        if (
            now[0] >= expected
            or time.monotonic() - changed >= REPORT_QUIET_SECONDS
            or waited >= REPORT_WAIT_SECONDS
        ):
            return now[0], now[1], waited
        await asyncio.sleep(POLL_SECONDS)


async def skewed(
    home: Site, sites: dict[str, Site], out: dict[str, Figure], run: int, problems: list[str]
) -> None:
    """2. The skewed load over the three regions, and the same load on the home alone, in
    alternating order run by run."""
    routes: dict[str, Route] = {
        "regions": weighted(sites, run),
        "alone": lambda: (HOME, home.stubs),
    }
    admitted: dict[str, float] = {}
    unavailable = 0
    for shape in ("regions", "alone") if run % 2 == 0 else ("alone", "regions"):
        budget_id = await put_budget(home, f"skew-{shape}", SKEW_LIMIT)
        spent = Spent()
        started = time.monotonic()
        await spend(routes[shape], budget_id, spent, started + SKEW_DEADLINE_SECONDS)
        seconds = time.monotonic() - started
        used, held, waited = await final_used(home.dsn, budget_id, spent.total)
        unavailable += spent.unavailable
        if used != spent.total:
            problems.append(
                f"regions, {shape}: the home's used {used} != settled by the workers "
                f"{spent.total} after {waited:.1f} s"
            )
        out[PAST_LIMIT].values.append(past_limit(used, held, SKEW_LIMIT))
        admitted[shape] = used
        if shape == "regions":
            out[SKEW_SECONDS].values.append(seconds)
            out[SKEW_REPORT_WAIT].values.append(waited)
            out[SKEW_EU_PART].values.append(ratio(spent.settled.get("eu", 0), spent.total))
    out[SKEW_ADMITTED].values.append(admitted["regions"])
    out[ALONE_ADMITTED].values.append(admitted["alone"])
    out[SKEW_RATIO].values.append(ratio(admitted["regions"], admitted["alone"]))
    out[SKEW_UNAVAILABLE].values.append(unavailable)


async def dead_region(home: Site, ap: Site, out: dict[str, Figure]) -> None:
    """3. ap earns a share by its rate, opens holds, and is killed; its share as the home
    sees it then."""
    budget_id = await put_budget(home, "dead", LATENCY_LIMIT)
    started = time.monotonic()

    async def worker() -> None:
        while time.monotonic() - started < DEAD_WARM_SECONDS:
            await job(ap.stubs, budget_id, LATENCY_AMOUNT, Loop())

    await asyncio.gather(*[worker() for _ in range(WARM_WORKERS)])
    for _ in range(DEAD_OPEN_HOLDS):
        await job(ap.stubs, budget_id, LATENCY_AMOUNT, Loop(), settle=False)
    ap.sidecar.process.kill()
    await asyncio.to_thread(ap.sidecar.process.wait, 30)
    conn = await asyncpg.connect(home.dsn)
    try:
        killed_at: datetime = await conn.fetchval("SELECT now()")
        # Anything ap sent before it died has arrived by now (one relay leg is 40 ms).
        await asyncio.sleep(1.0)
        row = await conn.fetchrow(
            "SELECT granted, returned, reclaimed_to, used, lease_until FROM region_shares "
            "WHERE budget_id = $1 AND region = 'ap'",
            budget_id,
        )
    finally:
        await conn.close()
    assert row is not None, "ap held no share of the budget"
    counts = (row["granted"], row["returned"], row["reclaimed_to"], row["used"])
    out[DEAD_STRANDED].values.append(stranded(*counts))
    out[DEAD_SHARE].values.append(share_of(*counts))
    out[DEAD_RATIO].values.append(ratio(stranded(*counts), share_of(*counts)))
    out[DEAD_LEASE].values.append((row["lease_until"] - killed_at).total_seconds())
    out[DEAD_BACK].values.append(back_after_seconds(row["lease_until"], killed_at))


async def past_limit_anywhere(dsn: str) -> int:
    """Over every budget with a limit at the home: used + held beyond it."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT coalesce(sum(greatest(0, used + held - limit_units)), 0) FROM budgets "
                "WHERE limit_units IS NOT NULL"
            )
        )
    finally:
        await conn.close()


async def start_pg(folder: Path, stack: contextlib.ExitStack) -> tuple[EmbeddedPostgres, str]:
    pg = EmbeddedPostgres(folder / "db")
    stack.callback(pg.stop)
    await asyncio.to_thread(pg.start)
    await ensure_database(pg.uri(), DATABASE)
    return pg, pg.uri(DATABASE)


def spawn(folder: Path, stack: contextlib.ExitStack, *flags: str) -> SpawnedSidecar:
    folder.mkdir(parents=True, exist_ok=True)
    sidecar = spawn_sidecar(folder, *flags)
    stack.callback(sidecar.stop)
    return sidecar


async def regions(env: Env, folder: Path) -> list[Figure]:
    """15. The three regions, env.runs runs of 1 and 2, then 3 once; the audit of every
    database at the end."""
    out = {key: Figure(key, unit) for key, unit in UNITS.items()}
    opened: list[Stubs] = []
    with contextlib.ExitStack() as stack:
        try:
            pgs = {}
            for where in (HOME, *REGIONS):
                pgs[where] = await start_pg(folder / where, stack)
            home_pg, home_dsn = pgs[HOME]
            home_sidecar = await asyncio.to_thread(
                spawn, folder / HOME / "sidecar", stack, "--database-url", home_dsn,
                "--region", HOME, "--region-listen", "127.0.0.1:0",
            )  # fmt: skip
            home = Site(HOME, home_pg, home_dsn, home_sidecar, stubs(home_sidecar))
            opened.append(home.stubs)
            sites = {HOME: home}
            for where in REGIONS:
                relay = stack.enter_context(
                    Relay(("127.0.0.1", region_port(home_sidecar)), DELAY_SECONDS)
                )
                pg, dsn = pgs[where]
                sidecar = await asyncio.to_thread(
                    spawn, folder / where / "sidecar", stack, "--database-url", dsn,
                    "--region", where, "--home", relay.address,
                )  # fmt: skip
                sites[where] = Site(where, pg, dsn, sidecar, stubs(sidecar), relay)
                opened.append(sites[where].stubs)
            # Today's way: eu's sidecar on the home's PostgreSQL, across a relay.
            bridge = stack.enter_context(UnixBridge(socket_path(home_pg.pgdata)))
            far_relay = stack.enter_context(Relay(("127.0.0.1", bridge.port), DELAY_SECONDS))
            far_dsn = f"postgresql://postgres@127.0.0.1:{far_relay.port}/{DATABASE}"
            far_sidecar = await asyncio.to_thread(
                spawn, folder / "eu-far", stack, "--database-url", far_dsn
            )
            far = stubs(far_sidecar)
            opened.append(far)
            for run in range(env.runs):
                await latency(home, sites["eu"], out, run)
                await today(home, far, out)
                await skewed(home, sites, out, run, env.problems)
            await dead_region(home, sites["ap"], out)
            over = await past_limit_anywhere(home_dsn)
            if over:
                env.problems.append(f"regions: {over} units past the limit at the home")
            for where, site in sites.items():
                problems, _ = await audit_database(site.dsn)
                env.problems += [f"regions, {where}'s database: {p}" for p in problems]
        finally:
            for each in opened:
                await each.close()
    return [figure for figure in out.values() if figure.values]
