"""`earmark reconcile` with cost lines that name no model (a real process, against a report
server on 127.0.0.1 answering in OpenAI's published shape): built-in tool lines compared,
as one row a day, with the tool fees the ledger's calls were priced with; storage listed
as not metered; a line of no kind Earmark knows listed as other; none compared as a
model."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.core.reconcile_model import NOT_METERED, UNRECOGNISED
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants
from tests.http_fake import JsonHandler, StateServer, serving
from tests.workloads.test_commands import earmark

T0 = datetime(2026, 12, 1, 10, 0, 5, tzinfo=UTC)
KEY_ID, ADMIN_KEY = "key_metered", "sk-admin-" + "c3" * 24
# Micro-dollars per million tokens, and per tool call (OpenAI's pricing page: web search
# $10, file search $2.50 per 1,000 calls; code interpreter $0.03 a container).
INPUT, OUTPUT = 2_500_000, 10_000_000
FEES = {"web_search": 10_000, "file_search": 2_500, "code_interpreter": 30_000}
# One call: 1,000 input and 200 output tokens ($0.0025 + $0.002), two web searches, four
# file searches and a code interpreter container ($0.02 + $0.01 + $0.03).
TOOL_CALLS = {"web_search": 2, "file_search": 4, "code_interpreter": 1}
TOKENS_USD_MICROS, TOOLS_USD_MICROS = 4_500, 60_000
DAY_START = int(datetime(2026, 12, 1, tzinfo=UTC).timestamp())
MINUTE_OF_T0 = int(T0.timestamp()) // 60 * 60

# Where the conftest's `clock` starts for this module's tests.
CLOCK_START = T0


@dataclass
class Reports:
    """What the report server answers: the completions report's buckets and the cost
    report's (the embeddings report is empty), each in one page."""

    completions: list[dict[str, Any]] = field(default_factory=list)
    costs: list[dict[str, Any]] = field(default_factory=list)


class _Reports(JsonHandler):
    server: StateServer[Reports]

    def do_GET(self) -> None:
        reports = self.server.state
        data: list[dict[str, Any]] = []
        if self.path.startswith("/v1/organization/usage/completions"):
            data = reports.completions
        elif self.path.startswith("/v1/organization/costs"):
            data = reports.costs
        self.send_json(200, {"object": "page", "data": data, "has_more": False, "next_page": None})


def _completions() -> list[dict[str, Any]]:
    """The call's minute as OpenAI's completions usage report gives it."""
    result = {
        "object": "organization.usage.completions.result",
        "input_tokens": 1_000,
        "input_cached_tokens": 0,
        "output_tokens": 200,
        "num_model_requests": 1,
        "model": "gpt-4o-2024-08-06",
        "api_key_id": KEY_ID,
        "project_id": None,
    }
    return [{"object": "bucket", "start_time": MINUTE_OF_T0, "end_time": MINUTE_OF_T0 + 60,
             "results": [result]}]  # fmt: skip


def _costs(web_search_usd: float) -> list[dict[str, Any]]:
    """The day's cost report grouped by line_item: the model's lines, the tools' lines
    (web search at web_search_usd), vector store storage and "Image models" (OpenAI's
    published example of a line item)."""
    lines = {
        "gpt-4o-2024-08-06, input": 0.0025,
        "gpt-4o-2024-08-06, output": 0.002,
        "web search tool calls": web_search_usd,
        "file search tool calls": 0.01,
        "code interpreter sessions": 0.03,
        "vector store storage": 0.1,
        "Image models": 0.05,
    }
    results = [
        {
            "object": "organization.costs.result",
            "amount": {"value": value, "currency": "usd"},
            "line_item": line,
            "project_id": None,
            "api_key_id": None,
            "quantity": None,
        }
        for line, value in lines.items()
    ]
    return [{"object": "bucket", "start_time": DAY_START, "end_time": DAY_START + 86_400,
             "results": results}]  # fmt: skip


@pytest.fixture
async def settled(clocked: Running) -> Running:
    """A sidecar whose book prices gpt-4o's tool calls, with one call settled with its
    tokens and its tool calls on the metered key."""
    since = Timestamp()
    since.FromDatetime(T0 - timedelta(days=1))
    await clocked.admin.PutPrice(pb.PutPriceRequest(price=pb.Price(
        provider="openai", model="gpt-4o", effective_from=since,
        input_usd_micros_per_mtok=INPUT, output_usd_micros_per_mtok=OUTPUT,
        tool_usd_micros=FEES,
    )))  # fmt: skip
    await clocked.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="team", limit=50_000_000, unit="usd_micros")
    )
    held = await clocked.budget.Reserve(pb.ReserveRequest(
        budget_id="team", idempotency_key="tools-1",
        shape=pb.UsageShape(provider="openai", model="gpt-4o", input_tokens=1_000,
                            max_output_tokens=200, max_tool_calls=TOOL_CALLS),
        charge=pb.TokenUsage(input_tokens=1_000), lease=Duration(seconds=60),
        labels={"earmark.key": KEY_ID},
    ))  # fmt: skip
    await clocked.budget.Settle(pb.SettleRequest(
        reservation_id=held.reservation_id,
        usage=pb.TokenUsage(input_tokens=1_000, output_tokens=200, tool_calls=TOOL_CALLS),
    ))  # fmt: skip
    return clocked


async def _reconcile(
    s: Running, reports: Reports, tmp_path: Path, *flags: str
) -> tuple[int, str, str]:
    """`earmark reconcile` of the metered key's day against the report server."""
    key_file = tmp_path / "openai-admin-key"
    key_file.write_text(ADMIN_KEY)
    key_file.chmod(0o600)
    with serving(StateServer(_Reports, reports), "tool cost reports") as port:
        return await earmark(
            "reconcile", "--provider", "openai", "--api-base", f"http://127.0.0.1:{port}/v1",
            "--admin-key-file", str(key_file), "--api-key-id", KEY_ID,
            "--since", "2026-12-01T00:00:00Z", "--until", "2026-12-02T00:00:00Z",
            "--admin-target", s.admin_target, *flags,
        )  # fmt: skip


async def test_tool_lines_agreeing_with_the_ledgers_tool_fees_are_no_drift(
    settled: Running, tmp_path: Path
) -> None:
    """The model's lines compare with the call's tokens, the tool lines as one row with its
    tool fees, storage is listed as not metered and "Image models" as other: exit 0."""
    reports = Reports(_completions(), _costs(web_search_usd=0.02))
    code, out, err = await _reconcile(settled, reports, tmp_path, "-o", "json")
    found = json.loads(out)
    rows = [
        (d["kind"], d["model"], d["lines"], d["provider_usd_micros"], d["ledger_usd_micros"],
         d["beyond_tolerance"], d["unverifiable"])
        for d in found["drift"]
    ]  # fmt: skip
    assert [
        ("model", "gpt-4o", [], TOKENS_USD_MICROS, TOKENS_USD_MICROS, False, ""),
        ("tools", "",
         ["code interpreter sessions", "file search tool calls", "web search tool calls"],
         TOOLS_USD_MICROS, TOOLS_USD_MICROS, False, ""),
        ("other", "", ["Image models"], 50_000, 0, False, UNRECOGNISED),
        ("storage", "", ["vector store storage"], 100_000, 0, False, NOT_METERED),
    ] == rows  # fmt: skip
    assert (0, ["matched"], False, "") == (
        code,
        [b["class"] for b in found["buckets"]],
        found["failing"],
        err,
    )
    await assert_invariants(settled.dsn)


async def test_a_tool_line_beyond_the_ledgers_tool_fees_is_drift(
    settled: Running, tmp_path: Path
) -> None:
    """Web search billed at $0.05 against the $0.02 the ledger priced makes the tools row
    drift (exit 3); the model row still agrees and storage is still not metered."""
    reports = Reports(_completions(), _costs(web_search_usd=0.05))
    code, out, err = await _reconcile(settled, reports, tmp_path)
    rows = {line.split()[1]: line.split() for line in out.splitlines() if line[:4] == "2026"}
    assert (3, "") == (code, err)
    assert (["0.090000", "0.060000", "1.500", "DRIFT"], ["ok"], ["not", "metered"]) == (
        rows["tools"][-4:],
        rows["model"][-1:],
        rows["storage"][-2:],
    ), out
    assert "other: unverifiable" in out, out
    await assert_invariants(settled.dsn)
