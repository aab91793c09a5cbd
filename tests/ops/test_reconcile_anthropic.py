"""`earmark reconcile --provider anthropic` against the fake Anthropic's usage report, whose
buckets count tokens and no requests: an in-doubt message alone in its minute is resolved
at the minute's surplus, and one the provider never started at 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anthropic
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.client import AsyncClient
from earmark.client.llm import metered
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import CEILING, CLAUDE, CLAUDE_RATES, ONCE
from tests.conftest import Running
from tests.fake_anthropic import FakeAnthropic, fake_anthropic
from tests.helpers import FakeClock, assert_invariants, eventually
from tests.workloads.test_commands import earmark

T0 = datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
KEY, KEY_ID = "sk-ant-metered", "apikey_metered"
ADMIN_KEY = "sk-ant-admin01-" + "c3" * 24


# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = T0


@pytest.fixture
def claude(clock: FakeClock) -> Iterator[FakeAnthropic]:
    with fake_anthropic(CLAUDE_RATES) as fake:
        fake.state.clock = lambda: clock().timestamp()
        fake.state.api_key_ids = {KEY: KEY_ID}
        fake.state.admin_keys = {ADMIN_KEY}
        fake.state.late_seconds = 1.0
        yield fake


def ask(text: str) -> dict[str, object]:
    return {"model": CLAUDE, "max_tokens": 50, "messages": [{"role": "user", "content": text}]}


async def test_anthropic_in_doubt_messages_are_resolved_by_the_usage_report(
    clocked: Running, claude: FakeAnthropic, clock: FakeClock, tmp_path: Path
) -> None:
    """A late message (billed after the client gave up) alone in its minute is resolved at
    the fake's bill and an unstarted one at 0: used equals the fake's bill, nothing is in
    doubt, every bucket matches and the run exits 0."""
    since = Timestamp()
    since.FromDatetime(T0 - timedelta(days=1))
    r = CLAUDE_RATES
    await clocked.admin.PutPrice(pb.PutPriceRequest(price=pb.Price(
        provider="anthropic", model=CLAUDE, effective_from=since,
        input_usd_micros_per_mtok=r.input, output_usd_micros_per_mtok=r.output,
        cached_input_usd_micros_per_mtok=r.cache_read,
        cache_write_usd_micros_per_mtok=r.cache_write, max_output_tokens=CEILING,
    )))  # fmt: skip
    await clocked.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="team", limit=50_000_000, unit="usd_micros")
    )
    async with (
        AsyncClient(clocked.target, admin_target=clocked.admin_target) as client,
        anthropic.AsyncAnthropic(api_key=KEY, base_url=claude.url, timeout=0.3) as sdk,
    ):
        llm = metered(sdk, client, "team", key_label=KEY_ID, retry=ONCE)
        await llm.messages.create(**ask("hello"))  # type: ignore[call-overload]
        # Quiet minutes between each (--call-seconds-max 60): see tests/ops/test_reconcile.py.
        clock.advance(4 * MINUTE)
        with pytest.raises(anthropic.APITimeoutError):
            await llm.messages.create(**ask("late"))  # type: ignore[call-overload]
        clock.advance(4 * MINUTE)
        with pytest.raises(anthropic.APITimeoutError):
            await llm.messages.create(**ask("unstarted"))  # type: ignore[call-overload]
        await client.flush()

    async def settled_down() -> bool:
        return 2 == len(claude.state.billed) and 1 == claude.state.unstarted

    await eventually(settled_down, within_seconds=30, what="the late message billed")
    key_file = tmp_path / "anthropic-admin-key"
    key_file.write_text(ADMIN_KEY)
    key_file.chmod(0o600)
    code, out, err = await earmark(
        "reconcile", "--provider", "anthropic", "--api-base", claude.url,
        "--admin-key-file", str(key_file), "--api-key-id", KEY_ID,
        "--since", "2026-12-01T10:00:00Z", "--until", "2026-12-01T11:00:00Z",
        "--admin-target", clocked.admin_target, "-o", "json", "--apply",
        "--call-seconds-max", "60",
    )  # fmt: skip
    found = json.loads(out or err)
    state = await clocked.admin.GetBudget(pb.GetBudgetRequest(budget_id="team"))
    assert (0, ["matched"] * 3, 2) == (
        code,
        [b["class"] for b in found["buckets"]],
        len(found["resolved"]),
    )
    assert (claude.state.billed_micros(), 0, 0) == (
        state.used,
        state.held,
        state.open_reservations,
    )
    await assert_invariants(clocked.dsn)
