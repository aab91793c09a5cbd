"""`earmark reconcile` as an operator runs it (a real process) against the fake OpenAI's own
usage and cost reports, after a workload driven through the metered client: calls billed
and then timed out, calls timed out before the provider started them, an SDK's retries of a
timed-out call, and calls made with the same key outside Earmark."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import openai
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.client import AsyncClient, RetryPolicy
from earmark.client.llm import metered
from earmark.core.prices import Price, Usage, usage_cost
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import ONCE, ask
from tests.conftest import Running
from tests.fake_openai import Billed, FakeOpenAI, fake_openai
from tests.fake_shared_reports import Publication, publish
from tests.helpers import FakeClock, assert_invariants, binary_missing, child, eventually, free_port
from tests.http_fake import JsonHandler, StateServer, serving
from tests.workloads.test_commands import earmark

T0 = datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
KEY, KEY_ID, ADMIN_KEY = "sk-metered", "key_metered", "sk-admin-" + "a1" * 24
# The book's rates for gpt-4o: what the fake charges too, unless a test makes it charge
# more. Micro-dollars per million tokens.
INPUT, CACHED, OUTPUT = 2_500_000, 1_250_000, 10_000_000
BOOK = Price("openai", "gpt-4o", 1, T0 - timedelta(days=1), None, INPUT, OUTPUT, CACHED)
# Well under the fake's late answer.
TIMEOUT_SECONDS = 0.3
# Three attempts, as the SDK retries a timed-out call, each on its own hold.
RETRIED = RetryPolicy(3, 0.001, 0.01)


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = T0


@pytest.fixture
def fake(clock: FakeClock) -> Any:
    with fake_openai() as provider:
        provider.state.clock = lambda: clock().timestamp()
        provider.state.api_key_ids = {KEY: KEY_ID}
        provider.state.admin_keys = {ADMIN_KEY}
        provider.state.late_seconds = 30.0
        yield provider
        provider.state.slow.set()


@pytest.fixture
async def book(clocked: Running) -> Running:
    since = Timestamp()
    since.FromDatetime(BOOK.effective_from)
    await clocked.admin.PutPrice(pb.PutPriceRequest(price=pb.Price(
        provider="openai", model="gpt-4o", effective_from=since,
        input_usd_micros_per_mtok=INPUT, cached_input_usd_micros_per_mtok=CACHED,
        output_usd_micros_per_mtok=OUTPUT, max_output_tokens=4_096,
    )))  # fmt: skip
    await clocked.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="team", limit=50_000_000, unit="usd_micros")
    )
    return clocked


@dataclass
class Workload:
    earmark: AsyncClient
    # Sends once; and the same with the SDK's retries.
    metered: openai.AsyncOpenAI
    retried: openai.AsyncOpenAI
    # The same key, not metered.
    outside: openai.AsyncOpenAI


@pytest.fixture
async def workload(book: Running, fake: FakeOpenAI) -> AsyncIterator[Workload]:
    async with (
        AsyncClient(book.target, admin_target=book.admin_target) as client,
        openai.AsyncOpenAI(api_key=KEY, base_url=fake.url, timeout=TIMEOUT_SECONDS) as sdk,
        openai.AsyncOpenAI(api_key=KEY, base_url=fake.url, max_retries=0) as outside,
    ):
        yield Workload(
            client,
            metered(sdk, client, "team", key_label=KEY_ID, retry=ONCE),
            metered(sdk, client, "team", key_label=KEY_ID, retry=RETRIED),
            outside,
        )


def cost(bill: Billed) -> int:
    """A bill at the book's price, as the sidecar prices a usage."""
    usage = Usage(bill.prompt_tokens, bill.completion_tokens, bill.cached_tokens)
    return usage_cost(BOOK, usage)


async def reconcile(s: Running, fake: FakeOpenAI, tmp_path: Path, *flags: str) -> tuple[int, Any]:
    """`earmark reconcile` over the workload's day, its exit status and JSON."""
    key_file = tmp_path / "openai-admin-key"
    key_file.write_text(ADMIN_KEY)
    key_file.chmod(0o600)
    code, out, err = await earmark(
        "reconcile", "--provider", "openai", "--api-base", fake.url,
        "--admin-key-file", str(key_file), "--api-key-id", KEY_ID,
        "--since", "2026-12-01T00:00:00Z", "--until", "2026-12-02T00:00:00Z",
        "--admin-target", s.admin_target, "-o", "json", *flags,
    )  # fmt: skip
    assert out, err
    return code, json.loads(out)


async def billed_count(fake: FakeOpenAI, count: int) -> None:
    """Waits for the fake to bill count calls (late answers bill once released)."""
    fake.state.slow.set()

    async def done() -> bool:
        return count == len(fake.state.billed)

    await eventually(done, within_seconds=30, what=f"{count} calls billed")


async def test_reconcile_resolves_in_doubt_holds_by_the_providers_usage(
    workload: Workload, book: Running, fake: FakeOpenAI, clock: FakeClock, tmp_path: Path
) -> None:
    """After --apply every in-doubt hold alone in its minute is resolved at what the fake
    billed, three retried attempts that all ran share their minute's surplus, a call that
    never started is resolved at 0, used equals the fake's bill for the metered calls, the
    call made outside Earmark is provider-only, the exit status is 3 and a second run
    changes nothing."""
    w = workload
    # Each kind in minutes of its own with quiet minutes between: an in-doubt call may be
    # billed in any minute until it can have ended (--call-seconds-max 60: its minute and
    # the next), so its window proves it only when the minutes around it balance.
    await w.metered.chat.completions.create(**ask("one", max_tokens=50))
    await w.metered.chat.completions.create(**ask("two", max_tokens=50))
    clock.advance(4 * MINUTE)
    with pytest.raises(openai.APITimeoutError):
        await w.metered.chat.completions.create(**ask("late", max_tokens=50))
    clock.advance(4 * MINUTE)
    with pytest.raises(openai.APITimeoutError):
        await w.metered.chat.completions.create(**ask("unstarted", max_tokens=50))
    clock.advance(4 * MINUTE)
    with pytest.raises(openai.APITimeoutError):
        await w.retried.chat.completions.create(**ask("late", max_tokens=60))
    clock.advance(4 * MINUTE)
    await w.outside.chat.completions.create(**ask("outside", max_tokens=50))
    await w.earmark.flush()
    await billed_count(fake, 7)
    doubted = await book.admin.ListHolds(pb.ListHoldsRequest(state=pb.RESERVATION_STATE_IN_DOUBT))
    code, found = await reconcile(book, fake, tmp_path, "--apply", "--call-seconds-max", "60")
    again, repeated = await reconcile(book, fake, tmp_path, "--apply", "--call-seconds-max", "60")
    classes = [(b["model"], b["class"], len(b["resolutions"])) for b in found["buckets"]]
    assert [
        ("gpt-4o", "matched", 0),
        ("gpt-4o", "matched", 1),
        ("gpt-4o", "matched", 1),
        ("gpt-4o", "matched", 3),
        ("gpt-4o", "provider-only", 0),
    ] == classes
    assert (3, 5, 5, []) == (
        code,
        len(doubted.holds),
        len(found["resolved"]),
        found["refused"],
    )
    assert (3, [], ["matched"] * 4 + ["provider-only"]) == (
        again,
        repeated["resolved"],
        [b["class"] for b in repeated["buckets"]],
    )
    outside_at = (T0 + 16 * MINUTE).timestamp()
    metered_bills = [b for b in fake.state.billed if b.at < outside_at]
    state = await book.admin.GetBudget(pb.GetBudgetRequest(budget_id="team"))
    assert (6, sum(cost(b) for b in metered_bills), 0, 0) == (
        len(metered_bills),
        state.used,
        state.held,
        state.open_reservations,
    )
    ledger = await book.admin.ListLedger(pb.ListLedgerRequest(budget_id="team"))
    evidence = [e.evidence for e in ledger.entries if e.kind == "resolve"]
    assert 5 == len(evidence)
    assert all(e.startswith("openai key_metered buckets 2026-12-01T10:") for e in evidence)
    assert {"2026-12-01T10:04Z", "2026-12-01T10:08Z", "2026-12-01T10:12Z"} == {
        e.split()[3] for e in evidence
    }
    await assert_invariants(book.dsn)


async def test_a_stale_price_is_reported_as_drift_with_its_ratio(
    workload: Workload, book: Running, fake: FakeOpenAI, tmp_path: Path
) -> None:
    """When the provider bills 1.83 times the book's rate, every bucket matches on tokens
    and the day's cost drifts from the ledger by that ratio: exit status 3."""
    fake.state.rates = {model: r.times(1.83) for model, r in fake.state.rates.items()}
    for text in ("a", "b", "c"):
        await workload.metered.chat.completions.create(**ask(text, max_tokens=50))
    await workload.earmark.flush()
    code, found = await reconcile(book, fake, tmp_path)
    (drift,) = found["drift"]
    assert (3, ["matched"], "gpt-4o", True) == (
        code,
        [b["class"] for b in found["buckets"]],
        drift["model"],
        drift["beyond_tolerance"],
    )
    assert 1.83 == pytest.approx(drift["ratio"], abs=0.01)
    await assert_invariants(book.dsn)


async def test_findings_are_metrics_and_a_refused_key_is_one_line(
    workload: Workload, book: Running, fake: FakeOpenAI, clock: FakeClock, tmp_path: Path
) -> None:
    """A run writes earmark_reconcile_* for a textfile collector (failing 1 for a call made
    outside Earmark), and says what it found when the file cannot be written; a wrong admin
    key is the provider's 401 in one line, not the key."""
    await workload.outside.chat.completions.create(**ask("outside", max_tokens=50))
    metrics = tmp_path / "reconcile.prom"
    code, _ = await reconcile(book, fake, tmp_path, "--metrics-file", str(metrics))
    text = metrics.read_text()
    labels = 'key="key_metered",provider="openai"'
    assert (3, True, True) == (
        code,
        f"earmark_reconcile_failing{{{labels}}} 1.0" in text,
        f'earmark_reconcile_buckets{{class="provider-only",{labels}}} 1.0' in text,
    )
    unwritable = tmp_path / "no-such-dir" / "reconcile.prom"
    code, found = await reconcile(book, fake, tmp_path, "--metrics-file", str(unwritable))
    assert (3, True, ["provider-only"]) == (
        code,
        found["metrics_error"].startswith("cannot write --metrics-file"),
        [b["class"] for b in found["buckets"]],
    )
    fake.state.admin_keys = {"sk-admin-" + "b2" * 24}
    key_file = tmp_path / "openai-admin-key"
    code, out, err = await earmark(
        "reconcile", "--provider", "openai", "--api-base", fake.url,
        "--admin-key-file", str(key_file), "--admin-target", book.admin_target,
    )  # fmt: skip
    assert (1, "", True, False) == (
        code,
        out,
        err.startswith("earmark reconcile: openai answered 401 to GET /organization/usage"),
        ADMIN_KEY in err,
    )


PUSHGATEWAY_MISSING = binary_missing("prometheus-pushgateway", "prometheus-pushgateway")


@pytest.mark.skipif(PUSHGATEWAY_MISSING is not None, reason=str(PUSHGATEWAY_MISSING))
async def test_findings_are_pushed_to_a_pushgateway(
    workload: Workload, book: Running, fake: FakeOpenAI, tmp_path: Path
) -> None:
    """With --pushgateway a run's findings reach a real Pushgateway, grouped by provider
    and key under the job earmark_reconcile, as the CronJob sends them."""
    await workload.outside.chat.completions.create(**ask("outside", max_tokens=50))
    port = free_port()
    async with child(
        "prometheus-pushgateway", f"--web.listen-address=127.0.0.1:{port}",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    ):  # fmt: skip
        gateway = f"http://127.0.0.1:{port}"

        async def listening() -> bool:
            return await asyncio.to_thread(_get, f"{gateway}/-/ready") is not None

        await eventually(listening, within_seconds=30, what="the Pushgateway ready")
        code, _ = await reconcile(book, fake, tmp_path, "--pushgateway", gateway)
        exposed = await asyncio.to_thread(_get, f"{gateway}/metrics") or ""
    pushed = [
        line for line in exposed.splitlines() if line.startswith("earmark_reconcile_failing{")
    ]
    assert (3, ['earmark_reconcile_failing{instance="",job="earmark_reconcile",'
                'key="key_metered",provider="openai"} 1']) == (code, pushed)  # fmt: skip


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


@dataclass
class Crafted:
    """What a provider's usage report answers: the buckets of its one page (the
    completions report's; the others are empty), or, trickling, a byte a second."""

    completions: list[dict[str, Any]] = field(default_factory=list)
    trickle: bool = False
    costs: list[dict[str, Any]] = field(default_factory=list)


class _CraftedReports(JsonHandler):
    server: StateServer[Crafted]

    def do_GET(self) -> None:
        crafted = self.server.state
        if crafted.trickle:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", "100000")
            self.end_headers()
            for _ in range(120):
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(1)
            return
        completions = self.path.startswith("/v1/organization/usage/completions")
        costs = self.path.startswith("/v1/organization/costs")
        data = crafted.completions if completions else crafted.costs if costs else []
        self.send_json(200, {"object": "page", "data": data, "has_more": False, "next_page": None})


def _bucket(start: float, **counts: Any) -> dict[str, Any]:
    """A completions bucket of T0's minute with one result of the metered key's gpt-4o."""
    result = {"model": "gpt-4o", "api_key_id": KEY_ID, "input_tokens": 12, "output_tokens": 5}
    return {"start_time": start, "results": [{**result, "num_model_requests": 1, **counts}]}


MINUTE_OF_T0 = int(T0.timestamp()) // 60 * 60
REFUSED = {
    "a duplicated bucket": (
        [_bucket(MINUTE_OF_T0), _bucket(MINUTE_OF_T0)],
        "the bucket of start_time 1796119200 comes twice",
    ),
    "a negative count": (
        [_bucket(MINUTE_OF_T0, num_model_requests=-1)],
        "bucket 2026-12-01T10:00Z model gpt-4o api_key_id key_metered: num_model_requests "
        "is -1, not an integer",
    ),
    "Infinity": (
        [_bucket(MINUTE_OF_T0, output_tokens=float("inf"))],
        "output_tokens is inf, not an integer",
    ),
    "a 1e20 timestamp": ([_bucket(1e20)], "start_time 1e+20 lies outside the range asked for"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_a_report_that_fails_its_checks_is_one_line_and_resolves_nothing(
    case: str, workload: Workload, book: Running, tmp_path: Path
) -> None:
    """A duplicated bucket, a negative count, Infinity or a 1e20 timestamp in the usage
    report is one line naming it (exit 3), and the in-doubt hold stays in doubt."""
    with pytest.raises(openai.APITimeoutError):
        await workload.metered.chat.completions.create(**ask("unstarted", max_tokens=50))
    await workload.earmark.flush()
    buckets, named = REFUSED[case]
    with serving(StateServer(_CraftedReports, Crafted(buckets)), "crafted reports") as port:
        code, out, err = await _reconcile_text(book, f"http://127.0.0.1:{port}/v1", tmp_path)
    doubted = await book.admin.ListHolds(pb.ListHoldsRequest(state=pb.RESERVATION_STATE_IN_DOUBT))
    assert (3, 1, True, "", 1) == (
        code,
        len(out.splitlines()),
        out.startswith("openai's usage report /organization/usage/completions is refused, "
                       "and nothing is resolved: ") and named in out,
        err,
        len(doubted.holds),
    ), out  # fmt: skip
    await assert_invariants(book.dsn)


async def test_a_trickling_report_ends_at_its_deadline_in_one_line(
    book: Running, tmp_path: Path
) -> None:
    """A server that sends its answer a byte a second (each read well within its timeout)
    is given up at --http-deadline-seconds, in one line."""
    with serving(StateServer(_CraftedReports, Crafted(trickle=True)), "trickling") as port:
        started = time.monotonic()
        code, out, err = await _reconcile_text(
            book, f"http://127.0.0.1:{port}/v1", tmp_path, "--http-deadline-seconds", "3"
        )
        took = time.monotonic() - started
    assert (1, "", [
        "earmark reconcile: openai's answer to GET /organization/usage/completions did not "
        "end within 3 seconds (--http-deadline-seconds)"
    ], True) == (code, out, err.splitlines(), took < 20)  # fmt: skip
    await assert_invariants(book.dsn)


async def _reconcile_text(
    s: Running, base: str, tmp_path: Path, *flags: str
) -> tuple[int, str, str]:
    """`earmark reconcile` over the workload's day against base, as text."""
    key_file = tmp_path / "openai-admin-key"
    key_file.write_text(ADMIN_KEY)
    key_file.chmod(0o600)
    return await earmark(
        "reconcile", "--provider", "openai", "--api-base", base,
        "--admin-key-file", str(key_file), "--api-key-id", KEY_ID,
        "--since", "2026-12-01T00:00:00Z", "--until", "2026-12-02T00:00:00Z",
        "--admin-target", s.admin_target, *flags,
    )  # fmt: skip


async def test_not_billed_only_from_a_window_seen_whole(
    workload: Workload, book: Running, fake: FakeOpenAI, clock: FakeClock, tmp_path: Path
) -> None:
    """A call that may run 4 minutes, run 3, is booked at its completion minute and
    published late: --apply before its window is whole resolves nothing (the hold listed
    with when it can be decided); after, the hold resolves at the bill."""
    publish(fake.state, Publication(booked_after_seconds=180, published_after_seconds=120))
    with pytest.raises(openai.APITimeoutError):
        await workload.metered.chat.completions.create(**ask("late", max_tokens=50))
    await workload.earmark.flush()
    await billed_count(fake, 1)
    within = ("--apply", "--call-seconds-max", "240")
    code, early = await reconcile(book, fake, tmp_path, *within, "--until",
                                  "2026-12-01T10:04:05Z")  # fmt: skip
    clock.advance(10 * MINUTE)
    late_code, late = await reconcile(book, fake, tmp_path, *within)
    (pending,) = early["buckets"]
    assert (0, [], "pending", True) == (
        code,
        early["resolved"],
        pending["class"],
        pending["note"].startswith(
            "window 2026-12-01T10:00Z to 10:04Z not yet whole: can be decided from "
            "2026-12-01T10:16Z"
        ),
    ), early
    # Exit 3: the day's drift is of the ledger as the run found it, before it resolved.
    assert (3, 1, ["matched", "matched"]) == (
        late_code,
        len(late["resolved"]),
        [b["class"] for b in late["buckets"]],
    ), late
    state = await book.admin.GetBudget(pb.GetBudgetRequest(budget_id="team"))
    (bill,) = fake.state.billed
    assert (cost(bill), 0, 0) == (state.used, state.held, state.open_reservations)
    await assert_invariants(book.dsn)


async def test_a_cost_report_in_another_currency_stops_the_run_in_one_line(
    book: Running, tmp_path: Path
) -> None:
    """A cost line in euros is one line naming it (exit 3), not compared as dollars."""
    day = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp())
    line = {"amount": {"value": 1.5, "currency": "eur"}, "line_item": "gpt-4o, input"}
    crafted = Crafted(costs=[{"start_time": day, "results": [line]}])
    with serving(StateServer(_CraftedReports, crafted), "crafted costs") as port:
        code, out, err = await _reconcile_text(book, f"http://127.0.0.1:{port}/v1", tmp_path)
    assert (3, [
        "openai's cost report is refused, and nothing is resolved: day 2026-12-01 gpt-4o "
        "amount.currency is 'eur', not USD: its dollars are not comparable"
    ], "") == (code, out.splitlines(), err)  # fmt: skip
    await assert_invariants(book.dsn)
