"""The stand-in provider through a live sidecar on an injected clock: Reserves by account
against the plans file's limits and periods, the admission rate limit, usage through the
meter outbox (marked sent), an edit of the file while running, `earmark usage` and
`earmark serve` as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import grpc
import pytest

from earmark import limits
from earmark.server import Sidecar, stop_bound_seconds
from earmark.spawn import spawn_sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, assert_invariants, eventually, fetch_budget_row, scrape
from tests.workloads.test_commands import earmark

START = datetime(2026, 12, 1, 12, tzinfo=UTC)
# acme's periods run from the 15th, as its anchor says, not from the sidecar's anchor day.
CYCLE = "acme/tokens/2026-11-15"
PLANS = """
[plans.pro.features]
tokens = 100_000

[accounts.acme]
plan = "pro"
period_anchor = 2026-11-15T00:00:00Z
"""
# Each edit's mtime: distinct and growing, whatever the file system's granularity.
_edits = iter(range(1_800_000_000, 1_900_000_000, 10))


def write_plans(path: Path, text: str) -> None:
    path.write_text(text)
    stamp = next(_edits) * 1_000_000_000
    os.utime(path, ns=(stamp, stamp))


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = START


@pytest.fixture
def plans_file(tmp_path: Path) -> Path:
    path = tmp_path / "plans.toml"
    write_plans(path, PLANS)
    return path


def file_sidecar(
    dsn: str, socket_dir: Path, plans_file: Path, clock: FakeClock, **extra: object
) -> Sidecar:
    settings = sidecar_settings(
        dsn,
        socket_dir,
        limits_provider="file",
        plans_file=plans_file,
        report_interval_seconds=0.05,
        **extra,
    )
    return Sidecar(settings, clock=clock)


@pytest.fixture
async def side(
    dsn: str, socket_dir: Path, plans_file: Path, clock: FakeClock
) -> AsyncIterator[Running]:
    async with running(file_sidecar(dsn, socket_dir, plans_file, clock), dsn) as s:
        yield s


def reserve(account: str, amount: int, key: str) -> pb.ReserveRequest:
    return pb.ReserveRequest(account=account, amount=amount, idempotency_key=key)


async def until_remaining(side: Running, remaining: int) -> None:
    """Waits until acme's cycle shows `remaining` left, asking with Reserves too large for
    any limit here: refused, they hold nothing and say what is left."""

    async def shows() -> bool:
        probe = await side.budget.Reserve(reserve("acme", 10**12, uuid.uuid4().hex))
        return not probe.admitted and remaining == probe.remaining

    await eventually(shows, within_seconds=10, what=f"{remaining} left after a new read")


async def test_reserves_hold_on_the_files_period_and_limit(side: Running) -> None:
    """A Reserve by account holds on ACCOUNT/FEATURE/YYYY-MM-DD of the period from the
    file's anchor, with the plan's limit; past it a Reserve is refused; an account the file
    does not list (and no default plan) is refused LIMIT_UNAVAILABLE naming it and the file."""
    admitted = await side.budget.Reserve(reserve("acme", 60_000, "job-1"))
    refused = await side.budget.Reserve(reserve("acme", 50_000, "job-2"))
    stranger = await side.budget.Reserve(reserve("stranger", 1, "job-3"))
    (cycle,) = (await side.admin.ListCycles(pb.ListCyclesRequest(account="acme"))).cycles
    assert (True, CYCLE, 40_000) == (admitted.admitted, admitted.budget_id, admitted.remaining)
    assert (False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET, 40_000) == (
        refused.admitted,
        refused.reason,
        refused.remaining,
    )
    assert (
        CYCLE,
        100_000,
        datetime(2026, 11, 15, tzinfo=UTC),
        datetime(2026, 12, 15, tzinfo=UTC),
    ) == (
        cycle.budget_id,
        cycle.limit,
        cycle.cycle_start.ToDatetime(tzinfo=UTC),
        cycle.cycle_end.ToDatetime(tzinfo=UTC),
    )
    assert (False, pb.REFUSAL_REASON_LIMIT_UNAVAILABLE) == (stranger.admitted, stranger.reason)
    assert "account 'stranger' is not listed in [accounts]" in stranger.message
    assert str(side.sidecar.settings.plans_file) in stranger.message
    await assert_invariants(side.dsn)


async def test_the_admissions_per_minute_limit_applies(
    dsn: str, socket_dir: Path, plans_file: Path, clock: FakeClock
) -> None:
    """At --admissions-per-minute 5 the sixth admission within the minute is RATE_LIMITED
    and holds nothing; a minute later it is admitted."""
    async with running(
        file_sidecar(dsn, socket_dir, plans_file, clock, admissions_per_minute=5), dsn
    ) as s:
        first = [(await s.budget.Reserve(reserve("acme", 1, f"k{i}"))).admitted for i in range(5)]
        limited = await s.budget.Reserve(reserve("acme", 1, "k5"))
        held = (await fetch_budget_row(dsn, CYCLE))["held"]
        clock.advance(timedelta(seconds=60))
        later = await s.budget.Reserve(reserve("acme", 1, "k5"))
        await assert_invariants(dsn)
    assert [True] * 5 == first
    assert (False, pb.REFUSAL_REASON_RATE_LIMITED, 5) == (limited.admitted, limited.reason, held)
    assert later.admitted


async def sent_total(dsn: str) -> int | None:
    conn = await asyncpg.connect(dsn)
    try:
        total: int | None = await conn.fetchval(
            "SELECT sent_total FROM meter_sent WHERE account = 'acme' AND feature = 'tokens'"
        )
    finally:
        await conn.close()
    return total


async def test_settled_usage_is_marked_sent_and_earmark_usage_shows_it(side: Running) -> None:
    """A Settle's used total reaches the meter outbox and is marked sent (the stand-in
    takes every report); `earmark usage acme`, a real process, prints it per feature and
    period, as a table and as JSON."""
    admitted = await side.budget.Reserve(reserve("acme", 20_000, "job"))
    await side.budget.Settle(pb.SettleRequest(reservation_id=admitted.reservation_id, used=12_345))

    async def reported() -> bool:
        return 12_345 == await sent_total(side.dsn)

    await eventually(reported, within_seconds=10, what="the settled total marked sent")
    url = ("--database-url", side.dsn)
    table_code, table, table_err = await earmark("usage", "acme", *url)
    json_code, document, json_err = await earmark("usage", "acme", *url, "-o", "json")
    (period,) = json.loads(document)["periods"]
    assert (0, 0) == (table_code, json_code), table_err + json_err
    assert [
        "FEATURE   PERIOD                   UNIT       LIMIT     USED   HELD   METERED   "
        "REPORTED   REPORTED AT            STATE",
        "tokens    2026-11-15..2026-12-15   tokens   100,000   12,345      0    12,345     "
        f"12,345   {period['reported_at']}   reported",
    ] == table.splitlines()
    assert {
        "feature": "tokens",
        "budget_id": CYCLE,
        "period_start": "2026-11-15T00:00:00Z",
        "period_end": "2026-12-15T00:00:00Z",
        "unit": "tokens",
        "limit": 100_000,
        "used": 12_345,
        "held": 0,
        "metered": 12_345,
        "reported": 12_345,
        "state": "reported",
    } == {k: v for k, v in period.items() if k not in ("metered_at", "reported_at")}
    await assert_invariants(side.dsn)


async def test_an_edit_applies_after_the_check_interval_and_a_bad_one_is_kept_out(
    side: Running, plans_file: Path, clock: FakeClock
) -> None:
    """The limit cut from 100,000 to 50,000 in the file applies once the check interval has
    passed on the clock, well within the limit's fresh minute (the sidecar watches the
    file); a bad edit after it keeps 50,000, is counted as rejected, and admissions go
    on."""
    await side.budget.Reserve(reserve("acme", 10_000, "before"))
    write_plans(plans_file, PLANS.replace("100_000", "50_000"))
    clock.advance(timedelta(seconds=limits.plans_file_check_seconds))
    await until_remaining(side, 40_000)
    write_plans(plans_file, PLANS.replace("100_000", "-1"))
    clock.advance(timedelta(seconds=limits.plans_file_check_seconds))
    metrics_port = side.sidecar.metrics_port
    rejected = ("earmark_plans_file_reloads_total", (("result", "rejected"),))

    async def counted() -> bool:
        await side.budget.Reserve(reserve("acme", 10**12, uuid.uuid4().hex))
        return 1.0 == scrape(metrics_port).get(rejected)

    await eventually(counted, within_seconds=10, what="the bad edit counted as rejected")
    clock.advance(timedelta(seconds=limits.plans_file_check_seconds))
    after = await side.budget.Reserve(reserve("acme", 1_000, "after"))
    row = await fetch_budget_row(side.dsn, CYCLE)
    loaded = ("earmark_plans_file_reloads_total", (("result", "loaded"),))
    assert (True, 39_000, 50_000) == (after.admitted, after.remaining, row["limit_units"])
    assert 1.0 == scrape(metrics_port).get(loaded)
    await assert_invariants(side.dsn)


async def test_a_bad_plans_file_stops_earmark_serve_in_one_line(tmp_path: Path) -> None:
    """`earmark serve --limits-provider file` with a bad file exits 1 at once, before any
    database is reached, with one line naming the file and the key path."""
    bad = tmp_path / "plans.toml"
    bad.write_text(PLANS.replace('plan = "pro"', 'plan = "gold"'))
    code, out, err = await earmark(
        "serve", "--limits-provider", "file", "--plans-file", str(bad),
        "--database-url", "postgresql://127.0.0.1:1/unreachable", "--data-dir", str(tmp_path),
        "--listen", "127.0.0.1:0", "--metrics-listen", "",
    )  # fmt: skip
    assert (
        1,
        [f"earmark: plans_file: {bad}: accounts.acme.plan: names no plan of [plans] ('gold')"],
    ) == (
        code,
        err.splitlines(),
    ), out


async def test_earmark_usage_of_no_cycle_and_of_a_bad_account(dsn: str) -> None:
    """`earmark usage` of an account without cycle budgets says so; an account name no
    Reserve could use is refused in one line naming the field, exit 1."""
    none_code, none_out, none_err = await earmark("usage", "nobody", "--database-url", dsn)
    bad_code, bad_out, bad_err = await earmark("usage", "a/b", "--database-url", dsn)
    assert (0, "account 'nobody' has no billing-cycle budget yet\n") == (none_code, none_out), (
        none_err
    )
    assert (1, "", ["earmark usage: account: may not contain '/'"]) == (
        bad_code,
        bad_out,
        bad_err.splitlines(),
    )


def fifo_in_place_of(path: Path) -> None:
    """Swaps path for a FIFO in one rename, as a ConfigMap's update swaps a file; nothing
    ever writes to it, so a plain open() for reading would wait for good."""
    fifo = path.with_name("plans.fifo")
    os.mkfifo(fifo)
    os.replace(fifo, path)


async def test_a_fifo_in_place_of_the_plans_file_at_start_is_one_line(tmp_path: Path) -> None:
    """`earmark serve` given a FIFO as its plans file exits 1 at once with one line naming
    the setting and what the path is, instead of waiting for a writer."""
    fifo = tmp_path / "plans.toml"
    os.mkfifo(fifo)
    code, out, err = await earmark(
        "serve", "--limits-provider", "file", "--plans-file", str(fifo),
        "--database-url", "postgresql://127.0.0.1:1/unreachable", "--data-dir", str(tmp_path),
        "--listen", "127.0.0.1:0", "--metrics-listen", "",
    )  # fmt: skip
    assert (1, [f"earmark: plans_file: {fifo}: is a FIFO, not a regular file"]) == (
        code,
        err.splitlines(),
    ), out


async def test_a_plans_file_swapped_for_a_fifo_keeps_the_last_good_plans(
    dsn: str, tmp_path: Path, plans_file: Path
) -> None:
    """A running `earmark serve` whose plans file is swapped for a FIFO keeps admitting on
    the last good plans and counts the swap as rejected; the good file put back is read
    again; SIGTERM then ends the process within its stop bound."""
    sidecar = await asyncio.to_thread(
        spawn_sidecar, tmp_path, "--database-url", dsn, "--limits-provider", "file",
        "--plans-file", str(plans_file), "--shutdown-grace-seconds", "2",
    )  # fmt: skip
    try:
        async with grpc.aio.insecure_channel(sidecar.target) as channel:
            budget = budget_pb2_grpc.BudgetStub(channel)
            assert (await budget.Reserve(reserve("acme", 1_000, "before"))).admitted
            fifo_in_place_of(plans_file)
            rejected = ("earmark_plans_file_reloads_total", (("result", "rejected"),))

            async def counted() -> bool:
                return 1.0 == scrape(sidecar.metrics_port).get(rejected)

            await eventually(counted, within_seconds=20, what="the FIFO counted as rejected")
            during = await budget.Reserve(reserve("acme", 1_000, "during"))
            write_plans(plans_file.with_name("good.toml"), PLANS.replace("100_000", "50_000"))
            os.replace(plans_file.with_name("good.toml"), plans_file)

            async def read_again() -> bool:
                probe = await budget.Reserve(reserve("acme", 10**12, uuid.uuid4().hex))
                return 48_000 == probe.remaining

            await eventually(read_again, within_seconds=20, what="the good file read again")
        assert (True, 98_000) == (during.admitted, during.remaining)
        sidecar.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(sidecar.process.wait, stop_bound_seconds(2.0))
        assert 0 == code
        await assert_invariants(dsn)
    finally:
        sidecar.stop()


TENANTS = """
[plans.pro.features]
tokens = 100_000

[accounts.acme]
plan = "pro"
period_anchor = 2026-11-15T00:00:00Z

[accounts.globex]
plan = "pro"
period_anchor = 2026-11-15T00:00:00Z
"""


async def test_two_accounts_with_one_job_name_learn_apart_and_a_new_cycle_keeps_its_own(
    dsn: str, socket_dir: Path, plans_file: Path, clock: FakeClock
) -> None:
    """acme's settles of job "digest" teach acme alone: globex's first Reserve of it by
    account has no history (and a cycle budget no default), acme's next holds acme's
    median, in this cycle and in the next one (a new budget of the same account)."""
    write_plans(plans_file, TENANTS)
    async with running(file_sidecar(dsn, socket_dir, plans_file, clock), dsn) as s:
        for i, used in enumerate((1_000, 3_000, 2_000)):
            request = pb.ReserveRequest(account="acme", amount=5_000, job="digest")
            request.idempotency_key = f"a{i}"
            held = await s.budget.Reserve(request)
            await s.budget.Settle(
                pb.SettleRequest(
                    reservation_id=held.reservation_id, used=used, outcome=pb.OUTCOME_SUCCEEDED
                )
            )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await s.budget.Reserve(
                pb.ReserveRequest(account="globex", job="digest", idempotency_key="g0")
            )
        learned = await s.budget.Reserve(
            pb.ReserveRequest(account="acme", job="digest", idempotency_key="a3")
        )
        clock.advance(timedelta(days=15))
        next_cycle = await s.budget.Reserve(
            pb.ReserveRequest(account="acme", job="digest", idempotency_key="a4")
        )
        await assert_invariants(dsn)
    assert (grpc.StatusCode.INVALID_ARGUMENT, True) == (
        refused.value.code(),
        "job 'digest' has no settled history" in str(refused.value.details()),
    )
    assert (CYCLE, 2_000, pb.ESTIMATE_SOURCE_JOB_MEDIAN) == (
        learned.budget_id,
        learned.amount,
        learned.estimate_source,
    )
    assert ("acme/tokens/2026-12-15", 2_000, pb.ESTIMATE_SOURCE_JOB_MEDIAN) == (
        next_cycle.budget_id,
        next_cycle.amount,
        next_cycle.estimate_source,
    )
