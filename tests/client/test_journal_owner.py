"""A journal only its owner can write: a directory another user could write is refused at
start, and a file in it that is not a regular file of the worker's user no larger than a
record (a FIFO, a symlink, a sparse file of gigabytes, another user's record) is set aside
unread within a second, never replayed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from earmark.client import AsyncClient
from earmark.client.journal import (
    QUARANTINE,
    Journal,
    UnsafeJournalError,
    encode_record,
    legacy_record_name,
    record_name,
)
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import budget
from tests.conftest import Running
from tests.helpers import assert_invariants, eventually

# The other user is made by the first test of this module on a worker and removed after its
# last: the module's tests run on one worker, so that no worker removes the user while
# another's test runs as it (seen once: runuser failed mid-test under five workers).
pytestmark = pytest.mark.xdist_group("journal_owner")

OTHER_USER = "earmark-journal-test"
# A record's name on a sparse file of 1.5 GB: read whole, it would hold the client's start.
HUGE_BYTES = 1536 << 20


@pytest.fixture(scope="module")
def other_user() -> Iterator[str]:
    """A local user that is not the test's, made for these tests (and removed after) unless
    it is already there."""
    made = subprocess.run(["id", "-u", OTHER_USER], capture_output=True).returncode != 0
    if made:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
            check=True,
        )
    try:
        yield OTHER_USER
    finally:
        if made:
            subprocess.run(["userdel", OTHER_USER], check=False)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder the other user can make things in, as in /tmp (pytest's tmp_path is private
    to the test's user)."""
    folder = Path(tempfile.mkdtemp(prefix="earmark-journal-owner-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_user(user: str, *command: str, data: bytes | None = None) -> None:
    """Runs command as user, a process of their own (runuser), failing if it fails."""
    subprocess.run(["runuser", "-u", user, "--", *command], input=data, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def quarantined(journal: Path) -> list[str]:
    """The names set aside in journal's quarantine/."""
    folder = journal / QUARANTINE
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


async def test_a_journal_others_can_write_or_own_is_refused_at_start_naming_it(
    other_user: str, shared: Path
) -> None:
    """A directory of mode 1777, a symlink to one, and one another user made (mode 0700) are
    each refused when the client starts, the error naming the directory given."""
    open_to_all = shared / "sticky"
    open_to_all.mkdir()
    open_to_all.chmod(0o1777)
    link = shared / "link"
    link.symlink_to(open_to_all)
    theirs = shared / "theirs"
    as_user(other_user, "mkdir", "-m", "700", str(theirs))
    refused = []
    for directory in (open_to_all, link, theirs):
        with pytest.raises(UnsafeJournalError) as caught:
            AsyncClient("127.0.0.1:1", journal_dir=directory)
        refused.append(str(directory) in str(caught.value))
    assert [True, True, True] == refused
    assert "owned by uid" in str(caught.value)


async def test_a_fifo_a_symlink_and_a_huge_file_named_as_records_are_quarantined(
    tmp_path: Path,
) -> None:
    """FIFOs named as a record and as a first-format record, a symlink to a valid record
    elsewhere and a 1.5 GB sparse file are quarantined unread within a second, counted; the
    valid record beside them is read back."""
    journal = Journal(tmp_path / "journal")
    mine = pb.SettleRequest(reservation_id="mine", used=5)
    journal.write(mine)
    fifo, legacy_fifo = journal.path_of("fifo"), journal.directory / legacy_record_name("fifo")
    os.mkfifo(fifo, 0o600)
    os.mkfifo(legacy_fifo, 0o600)
    # Followed, the link would replay a settle the journal never wrote.
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(encode_record(pb.SettleRequest(reservation_id="linked", used=1)))
    journal.path_of("linked").symlink_to(elsewhere)
    huge = journal.path_of("huge")
    huge.touch(mode=0o600)
    os.truncate(huge, HUGE_BYTES)
    names = sorted(p.name for p in (fifo, legacy_fifo, journal.path_of("linked"), huge))
    reading = asyncio.create_task(asyncio.to_thread(journal.pending))
    try:

        async def set_aside() -> bool:
            return names == quarantined(journal.directory)

        await eventually(set_aside, within_seconds=1.0, what="the four files quarantined")
        found = await asyncio.wait_for(reading, timeout=1.0)
    finally:
        # A reader stuck on a FIFO (the fault under test) is let go, so the test ends.
        for path in (fifo, legacy_fifo):
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert ([mine], 4) == ([r for _, r in found], journal.quarantined)
    left = sorted(p.name for p in journal.directory.glob("*.json"))
    assert [journal.path_of("mine").name] == left


async def test_a_record_planted_by_another_user_is_never_replayed(
    sidecar: Running, other_user: str, shared: Path
) -> None:
    """A directory once shared (1777) holds a valid record another user wrote for a live hold
    that is not theirs; made private (0700), the next client start quarantines it unread and
    the hold stays open, while the worker's own record beside it settles its hold."""
    await budget(sidecar, "planted", 100_000, unit="tokens")
    holds = []
    for key in ("victim", "own"):
        answer = await sidecar.budget.Reserve(
            pb.ReserveRequest(budget_id="planted", amount=40_000, idempotency_key=key)
        )
        holds.append(answer.reservation_id)
    victim, own = holds
    journal = shared / "journal"
    journal.mkdir()
    journal.chmod(0o1777)
    planted = journal / record_name(victim)
    forged = encode_record(pb.SettleRequest(reservation_id=victim, used=0))
    as_user(other_user, "tee", str(planted), data=forged)
    journal.chmod(0o700)
    Journal(journal).write(pb.SettleRequest(reservation_id=own, used=1_000))
    async with AsyncClient(sidecar.target, journal_dir=journal) as client:
        again = await client.recover()
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="planted"))
    assert (0, [planted.name], []) == (again, quarantined(journal), list(journal.glob("*.json")))
    assert (1_000, 40_000) == (state.used, state.held)
    await assert_invariants(sidecar.dsn)
