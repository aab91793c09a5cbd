"""`earmark reconcile --project-key-file` (a real process) against the fake OpenAI: a
background response whose metered client closed before it completed leaves its hold in
doubt with the response's id; the run retrieves the response by that id, leaves it in
doubt while it runs, and resolves it at the fake's bill with --apply (only reports it
without); an answer out of shape is refused and applied to nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.client import AsyncClient
from earmark.client.llm import metered
from earmark.client.openai_background import RESPONSE_ID_LABEL
from earmark.core.prices import Price, Usage, usage_cost
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.fake_openai import Billed, FakeOpenAI, fake_openai
from tests.helpers import assert_invariants
from tests.workloads.test_commands import earmark

KEY, KEY_ID, PROJECT_ID = "sk-metered", "key_metered", "proj_metered"
PROJECT_KEY, ADMIN_KEY = "sk-proj-" + "b2" * 24, "sk-admin-" + "a1" * 24
# The book's rates for gpt-4o, micro-dollars per million tokens.
INPUT, CACHED, OUTPUT = 2_500_000, 1_250_000, 10_000_000
SINCE = datetime.now(UTC) - timedelta(days=1)
BOOK = Price("openai", "gpt-4o", 1, SINCE, None, INPUT, OUTPUT, CACHED)


@pytest.fixture
def fake() -> Any:
    with fake_openai() as provider:
        provider.state.api_key_ids = {KEY: KEY_ID}
        provider.state.project_ids = {KEY: PROJECT_ID, PROJECT_KEY: PROJECT_ID}
        provider.state.admin_keys = {ADMIN_KEY}
        yield provider


@pytest.fixture
async def book(sidecar: Running) -> Running:
    since = Timestamp()
    since.FromDatetime(SINCE)
    await sidecar.admin.PutPrice(pb.PutPriceRequest(price=pb.Price(
        provider="openai", model="gpt-4o", effective_from=since,
        input_usd_micros_per_mtok=INPUT, cached_input_usd_micros_per_mtok=CACHED,
        output_usd_micros_per_mtok=OUTPUT, max_output_tokens=4_096,
    )))  # fmt: skip
    await sidecar.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="team", limit=50_000_000, unit="usd_micros")
    )
    return sidecar


@pytest.fixture
async def left_in_doubt(book: Running, fake: FakeOpenAI) -> str:
    """A background response created through the metered client, which closes before the
    response completes; its id."""
    async with (
        AsyncClient(book.target) as client,
        openai.AsyncOpenAI(api_key=KEY, base_url=fake.url) as sdk,
    ):
        llm = metered(sdk, client, "team", key_label=KEY_ID)
        created = await llm.responses.create(
            model="gpt-4o", input="hello", background=True, max_output_tokens=500
        )
    return created.id


def cost(bill: Billed) -> int:
    """A bill at the book's price, as the sidecar prices a usage."""
    usage = Usage(bill.prompt_tokens, bill.completion_tokens, bill.cached_tokens)
    return usage_cost(BOOK, usage)


async def reconcile(s: Running, fake: FakeOpenAI, tmp_path: Path, *flags: str) -> tuple[int, Any]:
    """`earmark reconcile` with the project key over the last day: its exit status and
    JSON; neither key shows in anything it prints."""
    files = {"admin": ADMIN_KEY, "project": PROJECT_KEY}
    for name, key in files.items():
        (tmp_path / name).write_text(key)
        (tmp_path / name).chmod(0o600)
    code, out, err = await earmark(
        "reconcile", "--provider", "openai", "--api-base", fake.url,
        "--admin-key-file", str(tmp_path / "admin"), "--api-key-id", KEY_ID,
        "--project-key-file", str(tmp_path / "project"),
        "--admin-target", s.admin_target, "-o", "json", *flags,
    )  # fmt: skip
    assert out, err
    assert [] == [key for key in files.values() if key in out + err]
    return code, json.loads(out)


async def one_hold(s: Running) -> pb.Hold:
    (hold,) = (await s.admin.ListHolds(pb.ListHoldsRequest(budget_id="team"))).holds
    return hold


async def test_reconcile_resolves_a_background_response_at_its_bill(
    book: Running, fake: FakeOpenAI, left_in_doubt: str, tmp_path: Path
) -> None:
    """The closed client's hold is in doubt with the response's id; reconcile leaves it in
    doubt while the response runs (exit 0), reports it ended without --apply (exit 3),
    resolves it at the fake's bill with --apply (exit 0), the response named as evidence,
    and a run after changes nothing."""
    doubted = await one_hold(book)
    running_code, running = await reconcile(book, fake, tmp_path)
    (billed,) = fake.state.finish()
    reported_code, reported = await reconcile(book, fake, tmp_path)
    reported_hold = await one_hold(book)
    applied_code, applied = await reconcile(book, fake, tmp_path, "--apply")
    again_code, again = await reconcile(book, fake, tmp_path, "--apply")
    hold = await one_hold(book)
    state = await book.admin.GetBudget(pb.GetBudgetRequest(budget_id="team"))
    ledger = await book.admin.ListLedger(pb.ListLedgerRequest(budget_id="team"))
    (evidence,) = [e.evidence for e in ledger.entries if e.kind == "resolve"]
    assert (pb.RESERVATION_STATE_IN_DOUBT, left_in_doubt) == (
        doubted.state,
        doubted.labels[RESPONSE_ID_LABEL],
    )
    found = [(r["response_id"], r["found"], r["resolved"]) for r in running["responses"]]
    assert (0, [(left_in_doubt, "running", False)]) == (running_code, found)
    found = [(r["found"], r["status"], r["resolved"]) for r in reported["responses"]]
    assert (3, [("ended", "completed", False)]) == (reported_code, found)
    assert pb.RESERVATION_STATE_IN_DOUBT == reported_hold.state
    found = [(r["found"], r["resolved"], r["refused"]) for r in applied["responses"]]
    assert (0, [("ended", True, "")]) == (applied_code, found)
    assert (0, []) == (again_code, again["responses"])
    assert (pb.RESERVATION_STATE_SETTLED, cost(billed)) == (hold.state, hold.settled_used)
    assert (cost(billed), 0, 0) == (state.used, state.held, state.open_reservations)
    assert evidence.startswith(f"openai response {left_in_doubt} completed: ")
    await assert_invariants(book.dsn)


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"id": "resp_another"}, id="another response"),
        pytest.param({"usage": None}, id="completed without usage"),
        pytest.param({"usage": {"input_tokens": -5, "output_tokens": 10}}, id="a negative count"),
        pytest.param(
            {"usage": {"input_tokens": 5, "output_tokens": "10"}}, id="a count not a number"
        ),
    ],
)
async def test_an_answer_out_of_shape_is_refused_and_applied_to_nothing(
    book: Running, fake: FakeOpenAI, left_in_doubt: str, tmp_path: Path, changes: Any
) -> None:
    """A retrieved answer that is not the response asked for, or not in its published
    shape, is refused and reported (exit 3), and the hold stays in doubt as it was."""
    fake.state.finish()
    fake.state.retrieved_changes = changes
    code, found = await reconcile(book, fake, tmp_path, "--apply")
    hold = await one_hold(book)
    (response,) = found["responses"]
    assert (3, "refused", False) == (code, response["found"], response["resolved"])
    assert response["note"]
    assert pb.RESERVATION_STATE_IN_DOUBT == hold.state
    await assert_invariants(book.dsn)
