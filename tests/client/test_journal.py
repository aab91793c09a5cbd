"""The settlement journal: a Settle is on disk before it is sent, so a worker killed after
the provider answered and before its Settle landed loses nothing; the next client with the
same journal sends it once, and a record that cannot be read is set aside."""

from __future__ import annotations

import asyncio
import signal
import stat
import sys
from pathlib import Path

from earmark.client import Client
from earmark.client.journal import QUARANTINE, Journal
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import budget, cost, holds
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants, child, eventually

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("journal_worker.py")


def test_a_record_is_private_read_back_and_an_unreadable_one_set_aside(tmp_path: Path) -> None:
    """A record is written with mode 0600 and read back as the request it was; bytes that
    are no Settle request are moved to quarantine/ and not read back."""
    journal = Journal(tmp_path / "journal")
    request = pb.SettleRequest(reservation_id="r-1", used=7)
    path = journal.write(request)
    (tmp_path / "journal" / "bad.settle").write_bytes(b"\xff\xff not protobuf")
    pending = journal.pending()
    assert (0o600, [request]) == (stat.S_IMODE(path.stat().st_mode), [r for _, r in pending])
    assert ["bad.settle"] == [p.name for p in (tmp_path / "journal" / QUARANTINE).iterdir()]


async def test_a_worker_killed_before_its_settle_landed_is_settled_by_the_next(
    priced: Running, provider: FakeOpenAI, tmp_path: Path
) -> None:
    """The worker is SIGKILLed after the provider answered, its Settle on disk but not
    sent; a new client on the same journal settles the hold at the provider's bill, once:
    a second one finds nothing to send and the budget does not move."""
    await budget(priced, "journal", 5_000_000)
    journal = tmp_path / "journal"
    async with child(
        sys.executable, str(WORKER), priced.target, provider.url, "journal", str(journal),
        cwd=ROOT,
    ) as process:  # fmt: skip

        async def written() -> bool:
            return 1 == len(provider.state.billed) and 1 == len(list(journal.glob("v2-*.json")))

        await eventually(written, within_seconds=60, what="the answer billed and journaled")
        process.send_signal(signal.SIGKILL)
        assert -signal.SIGKILL == await process.wait()

    def recovered() -> list[int]:
        sent = []
        for _ in range(2):
            with Client(priced.target, journal_dir=journal) as earmark:
                sent.append(earmark.recover())
        return sent

    again = await asyncio.to_thread(recovered)
    (billed,) = provider.state.billed
    (hold,) = await holds(priced, "journal")
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="journal"))
    assert ([0, 0], []) == (again, list(journal.glob("v2-*.json")))
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (hold.state, hold.settled_used)
    assert (cost(billed), 0) == (state.used, state.held)
    await assert_invariants(priced.dsn)
