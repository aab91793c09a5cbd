"""The Cycles SDK Recovery Conformance Profile (runcycles/cycles-protocol,
client-recovery/), each scenario of its core and durable levels and its boundary held by
a test named after it, against a real sidecar on 127.0.0.1 (a FakeClock where leases must
pass) and, where the scenario injects a fault, a proxy between worker and sidecar
(recovery_profile_proxy.py). docs/recovery-conformance.md maps HTTP's terms onto Earmark's
and says which scenarios are met; recovery_profile_scenarios.json binds each scenario id
to its tests, and the last tests here keep that file, the doc and the tests from drifting
apart. The profile's own runner runs these through recovery_profile_adapter.py."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import openai
import pytest

from earmark.client import AsyncClient, Client
from earmark.client.errors import ClientError, UnauthenticatedError, UnavailableError
from earmark.client.journal import (
    QUARANTINE,
    Journal,
    encode_record,
    legacy_record_name,
    record_name,
)
from earmark.client.llm import metered
from earmark.client.types import RetryPolicy
from earmark.core.model import HoldState
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import ONCE, ask, budget, holds
from tests.client.recovery_profile_proxy import (
    Context,
    Forward,
    answer_lost,
    answered_with,
    held,
    proxy,
    refused,
)
from tests.conftest import Running, running, sidecar_settings
from tests.fake_openai import FakeOpenAI
from tests.helpers import FakeClock, assert_invariants, child, eventually

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORKER = HERE / "recovery_profile_worker.py"
BINDINGS = HERE / "recovery_profile_scenarios.json"
DOC = ROOT / "docs" / "recovery-conformance.md"
TS_PACKAGE = ROOT / "clients" / "typescript"
TS_TESTS = TS_PACKAGE / "test" / "recovery-profile.test.mjs"
# One attempt a call, so that a refusal the proxy makes reaches the test at once.
ONE_ATTEMPT = RetryPolicy(1, 0.001, 0.01)
# A hold's lease that no test outlives unless its clock is moved past it.
LONG_LEASE_SECONDS = 300.0


async def hold_on(s: Running, budget_id: str, amount: int = 40_000, **reserve: Any) -> str:
    """A fresh budget of 100,000 tokens and a hold of amount on it; its reservation id."""
    await budget(s, budget_id, 100_000, unit="tokens")
    answer = await s.budget.Reserve(
        pb.ReserveRequest(
            budget_id=budget_id, amount=amount, idempotency_key=f"{budget_id}-job", **reserve
        )
    )
    assert answer.admitted
    return str(answer.reservation_id)


async def used_held(s: Running, budget_id: str) -> tuple[int, int]:
    state = await s.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))
    return state.used, state.held


async def expired(s: Running, clock: FakeClock, budget_id: str, lease_seconds: float) -> None:
    """Moves the clock past the lease and waits for the sweeper to take the hold."""
    clock.advance(timedelta(seconds=lease_seconds + 1))

    async def swept() -> bool:
        return [pb.RESERVATION_STATE_EXPIRED] == [h.state for h in await holds(s, budget_id)]

    await eventually(swept, within_seconds=10, what="the hold expired by the sweeper")


def records(journal: Path) -> list[str]:
    """The names of the journal's records (not its quarantine)."""
    return sorted(p.name for p in journal.glob("*.json"))


def settle(reservation_id: str, used: int) -> pb.SettleRequest:
    return pb.SettleRequest(reservation_id=reservation_id, used=used, outcome=pb.OUTCOME_SUCCEEDED)


def settle_of(data: bytes) -> pb.SettleRequest:
    return pb.SettleRequest.FromString(data)


def warnings_of(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


# Core.


async def test_cr_core_001_a_lost_settle_answer_is_sent_again_as_it_was(sidecar: Running) -> None:
    """CR-CORE-001: the sidecar applies hold()'s Settle and its answer is lost; the client
    sends the very same request again (the reservation id is the Settle's idempotency key),
    and the second answer is the first's: the budget is charged once."""
    await budget(sidecar, "core-1", 100_000, unit="tokens")
    async with proxy(sidecar.target) as middle, AsyncClient(middle.target) as client:
        middle.faults["Settle"] = [answer_lost()]
        async with client.hold("core-1", 40_000) as h:
            h.used = 31_200
    first, again = middle.seen["Settle"]
    (hold,) = await holds(sidecar, "core-1")
    assert first == again
    assert (h.reservation_id, 31_200) == (settle_of(first).reservation_id, settle_of(first).used)
    assert (HoldState.SETTLED, 31_200) == (
        h.settled.state if h.settled else None,
        hold.settled_used,
    )
    assert (31_200, 0) == await used_held(sidecar, "core-1")
    await assert_invariants(sidecar.dsn)


async def test_cr_core_002_a_settle_after_expiry_records_the_actual_as_a_late_settle(
    clocked: Running, clock: FakeClock
) -> None:
    """CR-CORE-002: hold()'s lease passes and the sweeper returns the hold before the block
    ends; the Settle it then sends (Earmark's late settle, HTTP's expired commit turned event)
    carries the original reservation, outcome and actual, is answered EXPIRED, and charges
    the actual once, with no second request."""
    await budget(clocked, "core-2", 100_000, unit="tokens")
    async with (
        proxy(clocked.target) as middle,
        AsyncClient(middle.target) as client,
        client.hold("core-2", 40_000, lease_seconds=LONG_LEASE_SECONDS) as h,
    ):
        await expired(clocked, clock, "core-2", LONG_LEASE_SECONDS)
        assert (0, 0) == await used_held(clocked, "core-2")
        h.used = 7_000
    (sent,) = middle.settles()
    (hold,) = await holds(clocked, "core-2")
    assert (h.reservation_id, 7_000, pb.OUTCOME_SUCCEEDED) == (
        sent.reservation_id,
        sent.used,
        sent.outcome,
    )
    assert HoldState.EXPIRED == (h.settled.state if h.settled else None)
    assert (pb.RESERVATION_STATE_EXPIRED, 7_000) == (hold.state, hold.settled_used)
    assert (7_000, 0) == await used_held(clocked, "core-2")
    await assert_invariants(clocked.dsn)


async def renewals_failing(
    s: Running, caplog: pytest.LogCaptureFixture, budget_id: str
) -> tuple[str, list[str], list[bytes], int]:
    """hold() with a 1 s lease on the clocked sidecar (which never lets it pass), whose
    first two renewals the proxy refuses UNAVAILABLE: the hold's reservation id, the
    renewal warnings, the Renew requests and what the budget was charged."""
    caplog.set_level(logging.WARNING, logger="earmark.client")
    await budget(s, budget_id, 100_000, unit="tokens")
    async with proxy(s.target) as middle, AsyncClient(middle.target, retry=ONE_ATTEMPT) as client:
        middle.faults["Renew"] = [refused(grpc.StatusCode.UNAVAILABLE)] * 2

        async def renewed() -> bool:
            return await middle.seen_at_least("Renew", 3)

        async with client.hold(budget_id, 40_000, lease_seconds=1.0) as h:
            await eventually(renewed, within_seconds=10, what="two failed renewals and one more")
            charged = await h.charge(10_000)
            h.used = 25_000
    warned = warnings_of(caplog, "earmark renew of reservation")
    used, _ = await used_held(s, budget_id)
    assert (10_000, HoldState.SETTLED) == (charged.charged, h.settled.state if h.settled else None)
    return h.reservation_id, warned, middle.seen["Renew"], used


async def test_cr_core_003_a_failed_renewal_is_a_warning_and_the_hold_still_settles(
    clocked: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """CR-CORE-003: two renewals fail in transport; each is a warning, the next renewal
    sends the same request, the block goes on (it charges after them) and its Settle is
    sent and lands at what the block used."""
    reservation_id, warned, renewals, used = await renewals_failing(clocked, caplog, "core-3")
    (renewal,) = set(renewals)
    assert 2 == len(warned)
    assert pb.RenewRequest(reservation_id=reservation_id, lease={"seconds": 1}) == (
        pb.RenewRequest.FromString(renewal)
    )
    assert 25_000 == used


async def test_cr_core_003_a_failed_renewal_warning_names_the_reservation_and_the_retry(
    clocked: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """CR-CORE-003: the warning of a failed renewal names the reservation and says the
    renewal is tried again."""
    reservation_id, warned, _, _ = await renewals_failing(clocked, caplog, "core-3-named")
    assert 2 == len(warned)
    assert all(reservation_id in w and "retr" in w for w in warned), warned


# A Settle answer in no state a Settle answers (HELD), and bytes that are no SettleResponse.
NOT_SETTLED = pb.SettleResponse(charged=31_200, state=pb.RESERVATION_STATE_HELD)


@pytest.mark.parametrize(
    "body",
    [b"\xff\xff\xff", NOT_SETTLED.SerializeToString()],
    ids=["undecodable", "held-state"],
)
async def test_cr_core_004_a_settle_answer_that_is_no_settled_answer_keeps_the_record(
    sidecar: Running, tmp_path: Path, body: bytes
) -> None:
    """CR-CORE-004: the sidecar applies a journaled Settle and the worker gets an OK answer
    that is no settled answer; the settle raises INTERNAL and its record stays, and
    recover() sends the same request again, which lands once and removes the record."""
    rid = await hold_on(sidecar, "core-4")
    journal = tmp_path / "journal"
    async with (
        proxy(sidecar.target) as middle,
        AsyncClient(middle.target, journal_dir=journal) as client,
    ):
        middle.faults["Settle"] = [answered_with(body)]
        with pytest.raises(ClientError) as ambiguous:
            await client.settle(rid, 31_200)
        kept = records(journal)
        assert 1 == await client.recover()
    first, again = middle.seen["Settle"]
    assert (grpc.StatusCode.INTERNAL, [record_name(rid)]) == (ambiguous.value.code, kept)
    assert (first, []) == (again, records(journal))
    assert (31_200, 0) == await used_held(sidecar, "core-4")
    await assert_invariants(sidecar.dsn)


# Durable.


async def test_cr_durable_001_a_settle_in_flight_when_its_worker_dies_is_replayed_once(
    sidecar: Running, tmp_path: Path
) -> None:
    """CR-DURABLE-001: a worker process's Settle is on disk before it reaches the proxy, the
    sidecar applies it and the worker is SIGKILLed before the answer comes; its record
    survives as it was sent, and a new client replays the same request, is answered, removes
    the record, and the budget is charged once."""
    rid = await hold_on(sidecar, "durable-1")
    journal = tmp_path / "journal"
    on_disk: list[list[str]] = []
    applied, never = asyncio.Event(), asyncio.Event()

    async def in_flight(request: bytes, forward: Forward, context: Context) -> bytes:
        on_disk.append(records(journal))
        answer = await forward()
        applied.set()
        await never.wait()
        return answer

    async with proxy(sidecar.target) as middle:
        middle.faults["Settle"] = [in_flight]
        async with child(
            sys.executable, str(WORKER), "settle", middle.target, str(journal), rid, "31200",
            cwd=ROOT,
        ) as worker:  # fmt: skip
            await asyncio.wait_for(applied.wait(), timeout=60)
            worker.send_signal(signal.SIGKILL)
            assert -signal.SIGKILL == await worker.wait()
        (sent,) = middle.seen["Settle"]
    (left,) = Journal(journal).pending()
    async with AsyncClient(sidecar.target, journal_dir=journal) as fresh:
        again = await fresh.recover()
    (hold,) = await holds(sidecar, "durable-1")
    assert ([[record_name(rid)]], sent) == (on_disk, left[1].SerializeToString())
    assert (0, []) == (again, records(journal))  # entering the client replayed it
    assert (pb.RESERVATION_STATE_SETTLED, 31_200) == (hold.state, hold.settled_used)
    assert (31_200, 0) == await used_held(sidecar, "durable-1")
    await assert_invariants(sidecar.dsn)


async def test_cr_durable_002_a_replayed_settle_of_an_expired_hold_lands_late_once(
    clocked: Running, clock: FakeClock, tmp_path: Path
) -> None:
    """CR-DURABLE-002: a dead worker's record is replayed after the hold expired; the
    sidecar takes it as a late settle but the answer is lost, so the record stays, unchanged
    (a late settle is the same request: there is no mode to switch); the next client's
    replay is answered EXPIRED, removes the record, and the actual is charged once."""
    rid = await hold_on(clocked, "durable-2", lease={"seconds": 60})
    journal = tmp_path / "journal"
    Journal(journal).write(settle(rid, 7_000))
    before = (journal / record_name(rid)).read_bytes()
    await expired(clocked, clock, "durable-2", 60)
    async with proxy(clocked.target) as middle:
        middle.faults["Settle"] = [answer_lost()]
        first = AsyncClient(middle.target, journal_dir=journal, retry=ONE_ATTEMPT)
        try:
            assert 0 == await first.recover()
        finally:
            await first.close()
    after_loss = (journal / record_name(rid)).read_bytes()
    late = await used_held(clocked, "durable-2")
    second = AsyncClient(clocked.target, journal_dir=journal)
    try:
        replayed = await second.recover()
    finally:
        await second.close()
    (hold,) = await holds(clocked, "durable-2")
    assert (before, (7_000, 0)) == (after_loss, late)
    assert (1, []) == (replayed, records(journal))
    assert (pb.RESERVATION_STATE_EXPIRED, 7_000) == (hold.state, hold.settled_used)
    assert (7_000, 0) == await used_held(clocked, "durable-2")
    await assert_invariants(clocked.dsn)


async def test_cr_durable_003_a_settle_refused_resource_exhausted_keeps_its_record(
    sidecar: Running, tmp_path: Path
) -> None:
    """CR-DURABLE-003 (in part: no Earmark answer carries a retry floor to persist): a
    Settle refused RESOURCE_EXHAUSTED, as gRPC refuses calls past a server's limit, is not
    retried at once and its record stays; a fresh client replays the same request, which
    lands once and removes the record."""
    rid = await hold_on(sidecar, "durable-3")
    journal = tmp_path / "journal"
    async with proxy(sidecar.target) as middle:
        middle.faults["Settle"] = [refused(grpc.StatusCode.RESOURCE_EXHAUSTED)]
        async with AsyncClient(middle.target, journal_dir=journal) as client:
            with pytest.raises(ClientError) as exhausted:
                await client.settle(rid, 31_200)
        kept = records(journal)
        async with AsyncClient(middle.target, journal_dir=journal):
            pass  # entering replays
        first, again = middle.seen["Settle"]
    assert (grpc.StatusCode.RESOURCE_EXHAUSTED, [record_name(rid)]) == (
        exhausted.value.code,
        kept,
    )
    assert (first, []) == (again, records(journal))
    assert (31_200, 0) == await used_held(sidecar, "durable-3")


OLD_TOKEN = "old-worker-token-0123456789"
NEW_TOKEN = "new-worker-token-9876543210"


async def test_cr_durable_004_a_record_outlives_a_worker_token_rotation(
    dsn: str, socket_dir: Path, tmp_path: Path
) -> None:
    """CR-DURABLE-004: a hold made under worker token "w1"'s old secret has its Settle
    journaled but not sent, in a record that holds no token; after the sidecar restarts with
    a new secret for w1, a client with the old one is UNAUTHENTICATED and the record stays,
    and a client with the new one finds it, replays it, and the hold is settled."""
    tokens = socket_dir / "workers"
    journal = tmp_path / "journal"
    tokens.write_text(f"w1 {OLD_TOKEN} *\n")
    async with running(
        Sidecar(sidecar_settings(dsn, socket_dir, worker_token_file=tokens)), dsn
    ) as s:
        await budget(s, "durable-4", 100_000, unit="tokens")
        async with (
            proxy(s.target) as middle,
            AsyncClient(
                middle.target, token=OLD_TOKEN, journal_dir=journal, retry=ONE_ATTEMPT
            ) as old,
        ):
            reservation = await old.reserve("durable-4", 40_000)
            middle.faults["Settle"] = [refused(grpc.StatusCode.UNAVAILABLE)]
            with pytest.raises(ClientError):
                await old.settle(reservation.reservation_id, 31_200)  # type: ignore[union-attr]
    rid = reservation.reservation_id  # type: ignore[union-attr]
    stored = b"".join(p.read_bytes() for p in journal.iterdir())
    tokens.write_text(f"w1 {NEW_TOKEN} *\n")
    async with running(
        Sidecar(sidecar_settings(dsn, socket_dir, worker_token_file=tokens)), dsn
    ) as s:
        stale = AsyncClient(s.target, token=OLD_TOKEN, journal_dir=journal, retry=ONE_ATTEMPT)
        try:
            assert 0 == await stale.recover()
            with pytest.raises(UnauthenticatedError):
                await stale.reserve("durable-4", 1)
        finally:
            await stale.close()
        kept = records(journal)
        rotated = AsyncClient(s.target, token=NEW_TOKEN, journal_dir=journal)
        try:
            replayed = await rotated.recover()
        finally:
            await rotated.close()
        (hold,) = await holds(s, "durable-4")
        assert (31_200, 0) == await used_held(s, "durable-4")
    assert (OLD_TOKEN.encode() in stored, [record_name(rid)]) == (False, kept)
    assert (1, []) == (replayed, records(journal))
    assert (pb.RESERVATION_STATE_SETTLED, 31_200, "w1") == (
        hold.state,
        hold.settled_used,
        hold.owner,
    )


async def test_cr_durable_005_unreadable_and_unknown_records_are_quarantined_and_reported(
    sidecar: Running, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """CR-DURABLE-005: a record that is no JSON, one of an unknown record version, and a
    first-format file that is no Settle request are moved to quarantine/, each named in a
    warning; the valid record beside them is replayed and removed."""
    caplog.set_level(logging.WARNING, logger="earmark.client")
    rid = await hold_on(sidecar, "durable-5")
    journal = tmp_path / "journal"
    Journal(journal).write(settle(rid, 31_200))
    corrupt = record_name("corrupt")
    (journal / corrupt).write_bytes(b'{"version": 2, "reserv')
    future = record_name("future")
    newer = json.loads(encode_record(settle("future", 5)))
    (journal / future).write_text(json.dumps({**newer, "version": 3}))
    (journal / "bad.settle").write_bytes(b"\xff\xff not protobuf")
    async with AsyncClient(sidecar.target, journal_dir=journal):
        pass  # entering replays
    quarantined = sorted(p.name for p in (journal / QUARANTINE).iterdir())
    warned = warnings_of(caplog, "earmark journal:")
    assert (sorted([corrupt, future, "bad.settle"]), []) == (quarantined, records(journal))
    assert 3 == len(warned)
    for name, why in ((corrupt, "JSONDecodeError"), (future, "unsupported record version 3")):
        assert any(name in w and why in w for w in warned), (name, warned)
    assert (31_200, 0) == await used_held(sidecar, "durable-5")


async def test_cr_durable_006_two_workers_replaying_one_record_settle_it_once(
    sidecar: Running, tmp_path: Path
) -> None:
    """CR-DURABLE-006: two worker processes, each a fresh client on the same journal, replay
    one record while the proxy holds each Settle until both have arrived and then lets both
    through at once; both carry the same request, both are answered, the record is gone and
    the budget is charged once."""
    rid = await hold_on(sidecar, "durable-6")
    journal = tmp_path / "journal"
    Journal(journal).write(settle(rid, 31_200))
    both = asyncio.Event()

    async def together(request: bytes, forward: Forward, context: Context) -> bytes:
        if await middle.seen_at_least("Settle", 2):
            both.set()
        await both.wait()
        return await forward()

    async with proxy(sidecar.target) as middle:
        middle.faults["Settle"] = [together, together]
        argv = (sys.executable, str(WORKER), "recover", middle.target, str(journal))
        async with (
            child(*argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE) as one,
            child(*argv, cwd=ROOT, stdout=asyncio.subprocess.PIPE) as two,
        ):
            outs = await asyncio.wait_for(
                asyncio.gather(one.communicate(), two.communicate()), timeout=60
            )
        first, second = middle.seen["Settle"]
    answers = [json.loads(out.decode()) for out, _ in outs]
    (hold,) = await holds(sidecar, "durable-6")
    assert [{"recovered": 1}] * 2 == answers
    assert (first, []) == (second, records(journal))
    assert (pb.RESERVATION_STATE_SETTLED, 31_200) == (hold.state, hold.settled_used)
    assert (31_200, 0) == await used_held(sidecar, "durable-6")
    await assert_invariants(sidecar.dsn)


# Reservation ids that a name made by escaping, case folding, Unicode normalization or
# truncation would confuse: each must have a file of its own.
CONFUSABLE_IDS = (
    "r/1", "r_1", "R/1", "r%2F1", "caf\u00e9", "cafe\u0301", "\U0001f600",
    "x" * 300 + "a", "x" * 300 + "b",
)  # fmt: skip


def test_cr_durable_007_a_record_is_named_by_the_sha256_of_its_exact_utf8_id(
    tmp_path: Path,
) -> None:
    """CR-DURABLE-007: each record's file is v2-<SHA-256 of the id's exact UTF-8 bytes>.json,
    so ids that differ only by case, escaping, normalization or past a prefix never share a
    file, and each is read back as its own."""
    journal = Journal(tmp_path / "journal")
    names = [journal.write(settle(rid, n)).name for n, rid in enumerate(CONFUSABLE_IDS)]
    expected = [
        f"v2-{hashlib.sha256(rid.encode('utf-8')).hexdigest()}.json" for rid in CONFUSABLE_IDS
    ]
    read = {r.reservation_id: r.used for _, r in journal.pending()}
    assert (expected, len(CONFUSABLE_IDS)) == (names, len(set(names)))
    assert {rid: n for n, rid in enumerate(CONFUSABLE_IDS)} == read


def test_cr_durable_007_a_first_format_record_moves_to_its_name_and_a_shared_name_stays(
    tmp_path: Path,
) -> None:
    """CR-DURABLE-007: a first-format file under one id's name that holds another id (a
    name two ids shared) is not removed with the first id's record; then each first-format
    record moves to the standard name of the id it holds, and one of the id being removed
    goes with its record."""
    folder = tmp_path / "journal"
    journal = Journal(folder)
    (folder / legacy_record_name("a")).write_bytes(settle("a", 1).SerializeToString())
    (folder / legacy_record_name("c")).write_bytes(settle("b", 2).SerializeToString())
    journal.remove(journal.write(settle("c", 3)), "c")
    shared = sorted(p.name for p in folder.glob("*.settle"))
    migrated = {r.reservation_id: (p.name, r.used) for p, r in journal.pending()}
    assert sorted([legacy_record_name("a"), legacy_record_name("c")]) == shared
    assert {"a": (record_name("a"), 1), "b": (record_name("b"), 2)} == migrated
    assert [] == sorted(p.name for p in folder.glob("*.settle"))
    (folder / legacy_record_name("a")).write_bytes(settle("a", 1).SerializeToString())
    journal.remove(journal.path_of("a"), "a")
    assert ([], [record_name("b")]) == (sorted(folder.glob("*.settle")), records(folder))


# Boundary.


async def test_cr_boundary_001_a_call_with_no_actual_settles_nothing_and_raises(
    priced: Running, provider: FakeOpenAI, tmp_path: Path
) -> None:
    """CR-BOUNDARY-001: a metered call the provider fails with a 503 returns no usage; the
    caller gets the provider's error, and the one Settle sent claims no actual (outcome
    UNKNOWN, with only the prompt charged before the call was sent, no usage): the hold
    stays IN_DOUBT, nothing of it released, until an operator or a later Settle brings the
    truth."""
    await budget(priced, "boundary", 5_000_000)
    async with (
        proxy(priced.target) as middle,
        AsyncClient(middle.target, journal_dir=tmp_path / "journal") as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "boundary", retry=ONCE)
        with pytest.raises(openai.InternalServerError):
            await llm.chat.completions.create(**ask("fail:503", max_tokens=100))
    (sent,) = middle.settles()
    (hold,) = await holds(priced, "boundary")
    used, still = await used_held(priced, "boundary")
    assert (pb.OUTCOME_UNKNOWN, hold.charged, False) == (
        sent.outcome,
        sent.used,
        sent.HasField("usage"),
    )
    assert (pb.RESERVATION_STATE_IN_DOUBT, hold.charged) == (hold.state, used)
    assert (hold.amount - hold.charged, []) == (still, records(tmp_path / "journal"))
    await assert_invariants(priced.dsn)


# flush(timeout): a shutdown waits a bounded time and leaves what did not land on disk.


async def test_flush_times_out_with_a_settle_in_flight_and_leaves_its_record(
    sidecar: Running, tmp_path: Path
) -> None:
    """AsyncClient.flush(timeout_seconds) answers False while a journaled Settle waits on an
    unresponsive sidecar and leaves its record on disk; a fresh client replays it."""
    rid = await hold_on(sidecar, "flush-late")
    journal = tmp_path / "journal"
    release = asyncio.Event()
    async with proxy(sidecar.target) as middle:
        middle.faults["Settle"] = [held(release)]
        client = AsyncClient(middle.target, journal_dir=journal)
        settling = asyncio.ensure_future(client.settle(rid, 31_200))

        async def sent() -> bool:
            return await middle.seen_at_least("Settle", 1)

        await eventually(sent, within_seconds=10, what="the settle sent")
        flushed = await client.flush(timeout_seconds=0.05)
        kept = records(journal)
        async with AsyncClient(sidecar.target, journal_dir=journal):
            pass  # the next worker's client replays it on entering
        release.set()
        answered = await settling
        await client.close()
    assert (False, [record_name(rid)]) == (flushed, kept)
    assert (HoldState.SETTLED, []) == (answered.state, records(journal))
    assert (31_200, 0) == await used_held(sidecar, "flush-late")


async def test_flush_answers_true_once_the_settles_in_flight_landed(
    sidecar: Running, tmp_path: Path
) -> None:
    """flush() waits for a Settle in flight and answers True once it landed, its record
    removed."""
    rid = await hold_on(sidecar, "flush-landed")
    journal = tmp_path / "journal"
    release = asyncio.Event()
    async with proxy(sidecar.target) as middle:
        middle.faults["Settle"] = [held(release)]
        async with AsyncClient(middle.target, journal_dir=journal) as client:
            settling = asyncio.ensure_future(client.settle(rid, 31_200))

            async def sent() -> bool:
                return await middle.seen_at_least("Settle", 1)

            await eventually(sent, within_seconds=10, what="the settle sent")
            flushing = asyncio.ensure_future(client.flush(timeout_seconds=60))
            release.set()
            flushed = await flushing
            await settling
    assert (True, []) == (flushed, records(journal))


async def test_sync_client_flush_times_out_and_leaves_the_record_of_a_stopped_sidecar(
    dsn: str, socket_dir: Path, tmp_path: Path
) -> None:
    """Client.flush(timeout_seconds) answers False while another thread's Settle waits on a
    sidecar that stopped; the Settle fails at its deadline and its record stays, and once a
    sidecar is back a new Client replays it on construction."""
    journal = tmp_path / "journal"
    async with running(Sidecar(sidecar_settings(dsn, socket_dir)), dsn) as s:
        rid = await hold_on(s, "flush-sync")
    # Nothing listens there now: the Settle waits for a sidecar until its deadline.
    client = await asyncio.to_thread(Client, s.target, journal_dir=journal, timeout_seconds=1)
    settling = asyncio.ensure_future(asyncio.to_thread(client.settle, rid, 31_200))

    async def journaled() -> bool:
        return [record_name(rid)] == records(journal)

    await eventually(journaled, within_seconds=10, what="the settle journaled")
    flushed = await asyncio.to_thread(client.flush, 0.05)
    with pytest.raises(UnavailableError):
        await settling
    await asyncio.to_thread(client.close)
    kept = records(journal)
    async with running(Sidecar(sidecar_settings(dsn, socket_dir)), dsn) as back:
        fresh = await asyncio.to_thread(Client, back.target, journal_dir=journal)
        await asyncio.to_thread(fresh.close)
        settled = await used_held(back, "flush-sync")
    assert (False, [record_name(rid)]) == (flushed, kept)
    assert ((31_200, 0), []) == (settled, records(journal))


async def test_a_journal_that_cannot_be_written_does_not_stop_the_settle(
    sidecar: Running, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A journal directory that cannot take a record (a file now stands in its place) is
    an error in the log naming the reservation, and the Settle is sent all the same."""
    caplog.set_level(logging.WARNING, logger="earmark.client")
    rid = await hold_on(sidecar, "unwritable")
    journal = tmp_path / "journal"
    async with AsyncClient(sidecar.target, journal_dir=journal) as client:
        shutil.rmtree(journal)
        journal.write_bytes(b"not a directory")
        settled = await client.settle(rid, 31_200)
    (error,) = warnings_of(caplog, "earmark journal: the settle of")
    assert HoldState.SETTLED == settled.state
    assert (True, True) == (rid in error, "sending it without a record" in error)
    assert (31_200, 0) == await used_held(sidecar, "unwritable")


async def test_a_record_refused_permission_denied_stays_for_its_own_caller(
    dsn: str, socket_dir: Path, tmp_path: Path
) -> None:
    """A record replayed under another worker's token (a journal two workers share) is
    refused PERMISSION_DENIED and stays; the hold's own worker replays it later."""
    tokens = socket_dir / "workers"
    tokens.write_text(f"w1 {OLD_TOKEN} *\nw2 {NEW_TOKEN} *\n")
    journal = tmp_path / "journal"
    async with running(
        Sidecar(sidecar_settings(dsn, socket_dir, worker_token_file=tokens)), dsn
    ) as s:
        await budget(s, "shared", 100_000, unit="tokens")
        async with AsyncClient(s.target, token=OLD_TOKEN) as w1:
            reservation = await w1.reserve("shared", 40_000)
        rid = reservation.reservation_id  # type: ignore[union-attr]
        Journal(journal).write(settle(rid, 31_200))
        other = AsyncClient(s.target, token=NEW_TOKEN, journal_dir=journal)
        try:
            assert 0 == await other.recover()
        finally:
            await other.close()
        kept = records(journal)
        own = AsyncClient(s.target, token=OLD_TOKEN, journal_dir=journal)
        try:
            replayed = await own.recover()
        finally:
            await own.close()
        assert (31_200, 0) == await used_held(s, "shared")
    assert ([record_name(rid)], 1, []) == (kept, replayed, records(journal))


# What the Python and the TypeScript SDK write for SettleRequest(reservation_id="res-1",
# used=31200, outcome=OUTCOME_SUCCEEDED): the record's name and bytes
# (clients/typescript/test/journal.test.mjs holds the same two).
RES_1_NAME = "v2-7d3decde0c1e575f39de6e67f49c425ecb053e7d1645582c686867f23ce1ff31.json"
RES_1_BYTES = b'{"version":2,"reservation_id":"res-1","settle":"CgVyZXMtMRDg8wEYAQ=="}'


def test_a_record_has_the_name_and_bytes_the_typescript_sdk_writes(tmp_path: Path) -> None:
    """A record is compact UTF-8 JSON of its version, its reservation id and the Settle's
    protobuf in base64, under v2-<sha256>.json: the name and bytes the TypeScript SDK writes
    and reads."""
    path = Journal(tmp_path / "journal").write(settle("res-1", 31_200))
    assert (RES_1_NAME, RES_1_BYTES) == (path.name, path.read_bytes())


# The bindings: scenario ids, the doc's table and the tests cannot drift apart.


def bindings() -> list[dict[str, Any]]:
    scenarios: list[dict[str, Any]] = json.loads(BINDINGS.read_text())["scenarios"]
    return scenarios


def python_tests() -> set[str]:
    """The test functions of this module."""
    return {name for name in globals() if name.startswith("test_")}


def typescript_tests() -> set[str]:
    """The titles of recovery-profile.test.mjs's tests."""
    return set(re.findall(r"^test\(\s*'([^']+)'", TS_TESTS.read_text(), re.M))


def test_every_scenario_is_bound_to_tests_that_exist_and_to_a_row_of_the_doc() -> None:
    """recovery_profile_scenarios.json binds every scenario of the profile's core, durable
    and boundary levels (the ids of the fetched catalog, by its digest) to Python tests of
    this module and TypeScript tests that exist, and docs/recovery-conformance.md has a row
    for each naming the same tests and status."""
    document = json.loads(BINDINGS.read_text())
    doc = DOC.read_text()
    ids = [s["id"] for s in document["scenarios"]]
    levels = {s["level"] for s in document["scenarios"]}
    assert document["catalog_sha256"] in doc
    assert ({"core", "durable", "boundary"}, len(ids)) == (levels, len(set(ids)))
    assert 12 == len(ids)
    rows = {
        row.split("|")[1].strip(" `"): row for row in doc.splitlines() if row.startswith("| `CR-")
    }
    assert sorted(ids) == sorted(rows)
    for scenario in document["scenarios"]:
        row = rows[scenario["id"]]
        assert f"**{scenario['status']}**" in row, scenario["id"]
        functions = {node.split("::")[1].split("[")[0] for node in scenario["python"]}
        assert (True, set()) == (bool(functions), functions - python_tests()), scenario["id"]
        assert all(f"`{name}`" in row for name in functions), scenario["id"]
        titles = set(scenario["typescript"])
        assert (True, set()) == (bool(titles), titles - typescript_tests()), scenario["id"]
        assert all(title.startswith(scenario["id"]) for title in titles), scenario["id"]
        assert all(f"`{title}`" in row for title in titles), scenario["id"]


NODE = shutil.which("node")
# A TAP line of a test's result: "ok 3 - CR-CORE-001 title" or "not ok 4 - title # TODO why".
TAP_RESULT = re.compile(r"^\s*(not ok|ok) \d+ - (CR-[A-Z]+-\d{3} [^#\n]*?)\s*(?:# (\w+).*)?$", re.M)


def typescript_bound() -> list[Any]:
    return [pytest.param(scenario, id=scenario["id"]) for scenario in bindings()]


@pytest.mark.skipif(NODE is None, reason="node is not on this machine")
# The node suite (tests/clients/test_typescript.py) runs every test of recovery-profile.test.mjs
# in one process; these run them a scenario at a time, for the profile's runner alone.
@pytest.mark.cycles_runner
@pytest.mark.parametrize("scenario", typescript_bound())
async def test_typescript_scenario(
    scenario: dict[str, Any], sidecar: Running, provider: FakeOpenAI, ts_dist: None
) -> None:
    """The scenario's TypeScript tests (clients/typescript/test/recovery-profile.test.mjs,
    selected by the scenario id) run against a live sidecar and the fake OpenAI: exactly the
    bound ones ran and none failed (a `todo` one, a gap the doc names, may)."""
    assert NODE is not None
    process = await asyncio.create_subprocess_exec(
        NODE, "--test", "--test-reporter=tap", f"--test-name-pattern=^{scenario['id']} ",
        str(TS_TESTS.relative_to(TS_PACKAGE)),
        cwd=TS_PACKAGE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "EARMARK_TARGET": sidecar.target,
             "EARMARK_ADMIN_TARGET": sidecar.admin_target, "FAKE_OPENAI_URL": provider.url},
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=170)
    text = out.decode()
    # Node 20 reports the tests the pattern left out as skipped.
    ran = {
        name: (result, directive)
        for result, name, directive in TAP_RESULT.findall(text)
        if directive != "SKIP"
    }
    failed = [
        name
        for name, (result, directive) in ran.items()
        if result == "not ok" and directive != "TODO"
    ]
    assert 0 == process.returncode, f"{text}\n{err.decode()}"
    assert (sorted(scenario["typescript"]), []) == (sorted(ran), failed), text
