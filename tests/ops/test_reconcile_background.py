"""`earmark reconcile --project-key-file` (a real process) against the fake OpenAI: a
background response whose metered client closed before it completed leaves its hold in
doubt with the response's id; the run retrieves the response by that id, leaves it in
doubt while it runs, and resolves it at the fake's bill with --apply (only reports it
without); an answer out of shape is refused and applied to nothing, and so is one that
cannot be the hold's call: a response on two holds, of another model, older than its hold,
or with more output than its hold could pay for."""

from __future__ import annotations

import json
import uuid
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


async def background(s: Running, fake: FakeOpenAI, **create: Any) -> str:
    """A background response of gpt-4o created through the metered client, which closes
    before the response completes; its id."""
    async with (
        AsyncClient(s.target) as client,
        openai.AsyncOpenAI(api_key=KEY, base_url=fake.url) as sdk,
    ):
        llm = metered(sdk, client, "team", key_label=KEY_ID)
        created = await llm.responses.create(
            model="gpt-4o", input="hello", background=True, **create
        )
    return created.id


@pytest.fixture
async def left_in_doubt(book: Running, fake: FakeOpenAI) -> str:
    """A background response told at most 500 output tokens, left in doubt; its id."""
    return await background(book, fake, max_output_tokens=500)


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


async def claimed(s: Running, response_id: str) -> str:
    """A worker's own hold of a gpt-4o call, not made through the metered client, whose
    Reserve names response_id and which goes in doubt; its reservation id."""
    reply = await s.budget.Reserve(pb.ReserveRequest(
        budget_id="team", idempotency_key=uuid.uuid4().hex,
        shape=pb.UsageShape(provider="openai", model="gpt-4o", input_tokens=10,
                            max_output_tokens=500),
        labels={RESPONSE_ID_LABEL: response_id, "earmark.key": KEY_ID},
    ))  # fmt: skip
    assert reply.admitted
    await s.budget.Settle(
        pb.SettleRequest(reservation_id=reply.reservation_id, used=0, outcome=pb.OUTCOME_UNKNOWN)
    )
    return reply.reservation_id


def found_of(answer: Any) -> list[tuple[str, str, bool]]:
    """What the run found of each background response: found, the field failed, resolved."""
    return [(r["found"], r["failed"], r["resolved"]) for r in answer["responses"]]


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


async def test_a_response_on_two_holds_is_applied_to_neither(
    book: Running, fake: FakeOpenAI, left_in_doubt: str, tmp_path: Path
) -> None:
    """A second in-doubt hold naming the same response (its worker's Reserve claimed it):
    one response is one call, so both holds are reported duplicate, the response is not
    retrieved, and neither hold is resolved (exit 3)."""
    other = await claimed(book, left_in_doubt)
    fake.state.finish()
    code, found = await reconcile(book, fake, tmp_path, "--apply")
    holds = (await book.admin.ListHolds(pb.ListHoldsRequest(budget_id="team"))).holds
    retrieved = [
        r.path for r in fake.state.received if r.method == "GET" and "/responses/" in r.path
    ]
    assert 3 == code
    assert [("duplicate", RESPONSE_ID_LABEL, False)] * 2 == found_of(found)
    assert {h.reservation_id for h in holds} == {r["reservation_id"] for r in found["responses"]}
    assert other in {r["reservation_id"] for r in found["responses"]}
    assert [pb.RESERVATION_STATE_IN_DOUBT] * 2 == [h.state for h in holds]
    assert [] == retrieved
    await assert_invariants(book.dsn)


@pytest.mark.parametrize(
    ("output_tokens", "expected"),
    [
        pytest.param(500, (0, [("ended", "", True)]), id="at its cap"),
        pytest.param(4_000, (3, [("refused", "usage.output_tokens", False)]), id="past its cap"),
    ],
)
async def test_more_output_than_the_hold_paid_for_is_refused(
    book: Running,
    fake: FakeOpenAI,
    left_in_doubt: str,
    tmp_path: Path,
    output_tokens: int,
    expected: Any,
) -> None:
    """A response reporting more output tokens than the hold's call was sent with (500,
    which is what its hold paid for on a HARD budget) is refused and the hold stays in
    doubt; one at the cap is resolved."""
    fake.state.finish()
    fake.state.retrieved_changes = {"usage": {"input_tokens": 10, "output_tokens": output_tokens}}
    code, found = await reconcile(book, fake, tmp_path, "--apply")
    hold = await one_hold(book)
    state = pb.RESERVATION_STATE_SETTLED if expected[0] == 0 else pb.RESERVATION_STATE_IN_DOUBT
    assert expected == (code, found_of(found))
    assert state == hold.state
    await assert_invariants(book.dsn)


@pytest.mark.parametrize(
    ("output_tokens", "expected"),
    [
        pytest.param(3_000, (0, [("ended", "", True)]), id="within the ceiling"),
        pytest.param(5_000, (3, [("refused", "usage.output_tokens", False)]), id="past it"),
    ],
)
async def test_a_soft_budgets_call_is_bounded_by_the_models_ceiling(
    book: Running, fake: FakeOpenAI, tmp_path: Path, output_tokens: int, expected: Any
) -> None:
    """On a SOFT budget a call that sets no maximum is held at an estimate but sent with
    the model's ceiling (4,096): a response within the ceiling is resolved, past it
    refused."""
    await book.admin.PutBudget(pb.PutBudgetRequest(
        budget_id="team", limit=50_000_000, unit="usd_micros",
        overage_policy=pb.OVERAGE_POLICY_SOFT,
    ))  # fmt: skip
    await background(book, fake)
    fake.state.finish()
    fake.state.retrieved_changes = {"usage": {"input_tokens": 10, "output_tokens": output_tokens}}
    code, found = await reconcile(book, fake, tmp_path, "--apply")
    assert expected == (code, found_of(found))
    await assert_invariants(book.dsn)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        pytest.param("gpt-4o-2024-08-06", (0, [("ended", "", True)]), id="a dated snapshot"),
        pytest.param("gpt-4o-mini", (3, [("refused", "model", False)]), id="another model"),
        pytest.param(
            "gpt-4o-mini-2024-07-18", (3, [("refused", "model", False)]), id="its snapshot"
        ),
    ],
)
async def test_a_response_of_another_model_is_refused(
    book: Running,
    fake: FakeOpenAI,
    left_in_doubt: str,
    tmp_path: Path,
    model: str,
    expected: Any,
) -> None:
    """A response of a model other than the one the hold's call was held for (gpt-4o) is
    refused, a cheaper one named like it too; a dated snapshot of gpt-4o is resolved."""
    fake.state.finish()
    fake.state.retrieved_changes = {"model": model}
    code, found = await reconcile(book, fake, tmp_path, "--apply")
    assert expected == (code, found_of(found))
    await assert_invariants(book.dsn)


@pytest.mark.parametrize(
    ("seconds_before", "expected"),
    [
        pytest.param(10, (0, [("ended", "", True)]), id="within the clock skew"),
        pytest.param(3_600, (3, [("refused", "created_at", False)]), id="an hour before"),
    ],
)
async def test_a_response_older_than_its_hold_is_refused(
    book: Running,
    fake: FakeOpenAI,
    left_in_doubt: str,
    tmp_path: Path,
    seconds_before: int,
    expected: Any,
) -> None:
    """A response created an hour before the hold that names it cannot be its call and is
    refused, the hold left in doubt; one 10 s before is within the clocks' skew."""
    hold = await one_hold(book)
    fake.state.finish()
    fake.state.retrieved_changes = {"created_at": hold.created_at.seconds - seconds_before}
    code, found = await reconcile(book, fake, tmp_path, "--apply")
    state = (await one_hold(book)).state
    in_doubt = state == pb.RESERVATION_STATE_IN_DOUBT
    assert expected == (code, found_of(found))
    assert (expected[0] == 3) == in_doubt
    await assert_invariants(book.dsn)
