"""`earmark prices import` and `check` against the real genai-prices package and a live
sidecar on the injected clock: every tier, window, dated version and ceiling the database
has is in the book and prices calls, a hand-put price is kept, and check names what is
wrong with exit status 3 (issue 44)."""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from earmark import cli
from earmark.ops.connect import Answer, OpsError
from earmark.ops.price_import import DISAGREE_STATUS, REFUSED_STATUS
from earmark.ops.price_sources import SOURCE_PREFIX
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, eventually, fetch_budget_row

# 03:00 UTC: inside DeepSeek's standard hours (00:30-16:30 UTC).
CLOCK_START = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
IMPORTED = (
    ("google", "gemini-2.5-pro"),
    ("anthropic", "claude-sonnet-4-5"),
    ("deepseek", "deepseek-chat"),
    ("openai", "gpt-4o"),
)
BUDGET = "usd"

# The installed release names itself in the command's summary (pyproject allows any 0.2.x
# from 0.2.3: a fresh clone installs the newest).
GENAI_PRICES = importlib.metadata.version("genai-prices")


def stamp(at: datetime) -> Timestamp:
    result = Timestamp()
    result.FromDatetime(at)
    return result


async def run(s: Running, now: datetime, *argv: str) -> Answer:
    """What `earmark prices ARGV --admin-target ADMIN` answers at `now`."""
    args = cli.parser().parse_args(["prices", *argv, "--admin-target", s.admin_target])
    answer = await asyncio.to_thread(args.run, args, now)
    assert isinstance(answer, Answer)
    return answer


async def import_all(s: Running, now: datetime, *more: str) -> list[Answer]:
    """The issue's four models imported, one provider at a time."""
    return [
        await run(s, now, "import", "--provider", provider, "--model", model, *more)
        for provider, model in IMPORTED
    ]


async def check_all(s: Running, now: datetime) -> list[Answer]:
    return [
        await run(s, now, "check", "--provider", provider, "--model", model, "-o", "json")
        for provider, model in IMPORTED
    ]


async def held(s: Running, key: str, model: str, input_tokens: int, **shape: Any) -> int:
    """What a Reserve by the shape holds on the test's budget."""
    provider = dict((m, p) for p, m in IMPORTED).get(model, "deepseek")
    answer = await s.budget.Reserve(
        pb.ReserveRequest(
            budget_id=BUDGET,
            idempotency_key=key,
            shape=pb.UsageShape(provider=provider, model=model, input_tokens=input_tokens, **shape),
        )
    )
    assert answer.admitted, answer.message
    return answer.amount


async def put(s: Running, **fields: Any) -> None:
    await s.admin.PutPrice(pb.PutPriceRequest(price=pb.Price(**fields)))


async def book(s: Running, provider: str = "", model: str = "") -> list[pb.Price]:
    listed = await s.admin.ListPrices(pb.ListPricesRequest(provider=provider, model=model))
    return list(listed.prices)


@pytest.fixture
async def side(clocked: Running) -> Running:
    """The clocked sidecar with a budget of $1,000."""
    await clocked.admin.PutBudget(
        pb.PutBudgetRequest(budget_id=BUDGET, limit=1_000_000_000, unit="usd_micros")
    )
    return clocked


async def test_an_import_prices_every_tier_window_and_ceiling_and_keeps_a_hand_put_price(
    side: Running, clock: FakeClock
) -> None:
    """The four models imported over a hand-put gpt-4o price: no $0 row; gemini-2.5-pro's
    prompt-length tier and ceiling hold 135,000, 640,000 and 780,360 µ$; deepseek-chat's two
    windows both in the book, each pricing the hour the clock is in; gpt-4o kept at the
    hand-put rates until --replace."""
    await put(
        side,
        provider="openai",
        model="gpt-4o",
        effective_from=stamp(CLOCK_START - timedelta(days=1)),
        input_usd_micros_per_mtok=3_000_000,
        output_usd_micros_per_mtok=12_000_000,
        max_output_tokens=16_384,
        source="https://example.com/our-negotiated-rate",
    )
    answers = await import_all(side, CLOCK_START)
    rows = await book(side)
    windows = {
        (p.daily_from_minute, p.daily_to_minute, p.window_timezone)
        for p in rows
        if p.model == "deepseek-chat"
    }
    short = await held(side, "short", "gemini-2.5-pro", 100_000, max_output_tokens=1_000)
    long = await held(side, "long", "gemini-2.5-pro", 250_000, max_output_tokens=1_000)
    ceiling = await held(side, "ceiling", "gemini-2.5-pro", 100_000, output_ceiling=True)
    day = await held(side, "day", "deepseek-chat", 10_000, max_output_tokens=1_000)
    clock.set(CLOCK_START.replace(hour=20))
    night = await held(side, "night", "deepseek-chat", 10_000, max_output_tokens=1_000)
    kept = await held(side, "kept", "gpt-4o", 10_000, max_output_tokens=1_000)
    replaced = await run(
        side, clock(), "import", "--provider", "openai", "--model", "gpt-4o", "--replace"
    )
    imported = await held(side, "imported", "gpt-4o", 10_000, max_output_tokens=1_000)
    assert [0, 0, 0, 0] == [a.status for a in answers]
    assert [] == [
        (p.model, p.service_tier, p.input_tokens_above)
        for p in rows
        if not p.input_usd_micros_per_mtok or not p.output_usd_micros_per_mtok
    ]
    assert (135_000, 640_000, 125_000 + 65_536 * 10) == (short, long, ceiling)
    assert {(30, 990, ""), (990, 30, "")} == windows
    assert (2_700 + 1_100, 1_350 + 550) == (day, night)
    assert "gpt-4o default: version 1, https://example.com/our-negotiated-rate" in answers[3].text
    assert (30_000 + 12_000, 25_000 + 10_000) == (kept, imported)
    assert 0 == replaced.status


async def test_an_import_run_twice_puts_nothing_and_a_dry_run_puts_nothing(
    side: Running,
) -> None:
    """A dry run lists deepseek-chat's two window rows with zone, rates and ceiling and puts
    none; the import then puts them, and a second import puts nothing."""
    dry = await run(
        side,
        CLOCK_START,
        "import",
        "--provider",
        "deepseek",
        "--model",
        "deepseek-chat",
        "--dry-run",
        "-o",
        "json",
    )
    after_dry = await book(side)
    first = await run(
        side, CLOCK_START, "import", "--provider", "deepseek", "--model", "deepseek-chat"
    )
    second = await run(
        side,
        CLOCK_START + timedelta(hours=9),
        "import",
        "--provider",
        "deepseek",
        "--model",
        "deepseek-chat",
        "-o",
        "json",
    )
    would = json.loads(dry.text)["put"]
    assert [
        ("00:30-16:30 UTC", 270_000, 1_100_000, 8_192),
        ("16:30-00:30 UTC", 135_000, 550_000, 8_192),
    ] == [
        (
            r["window"],
            r["input_usd_micros_per_mtok"],
            r["output_usd_micros_per_mtok"],
            r["max_output_tokens"],
        )
        for r in would
    ]
    assert ([], True) == (after_dry, json.loads(dry.text)["dry_run"])
    assert first.text.endswith(
        f"put 2 rows; 0 tiers already as genai-prices {GENAI_PRICES} has them; 0 kept; "
        "0 models refused"
    )
    assert ([], 2) == (json.loads(second.text)["put"], len(await book(side)))


async def test_check_is_clean_after_an_import_at_any_hour(side: Running) -> None:
    """After the import, check agrees on all four models at 03:00 and at 12:00 UTC, within
    and outside DeepSeek's standard hours alike."""
    await import_all(side, CLOCK_START)
    early = await check_all(side, CLOCK_START)
    noon = await check_all(side, CLOCK_START.replace(hour=12))
    evening = await check_all(side, CLOCK_START.replace(hour=20))
    found = [json.loads(a.text)["disagreements"] for a in (*early, *noon, *evening)]
    assert [[]] * 12 == found
    assert [0] * 12 == [a.status for a in (*early, *noon, *evening)]


async def test_check_names_a_0_row_a_flattened_window_and_a_missing_ceiling(
    side: Running,
) -> None:
    """After the import, a $0 gemini-2.5-pro version, an all-day deepseek-chat version and a
    gpt-4o version without max_output_tokens are each named by check, which exits 3."""
    await import_all(side, CLOCK_START)
    later = stamp(CLOCK_START + timedelta(minutes=1))
    await put(
        side,
        provider="google",
        model="gemini-2.5-pro",
        effective_from=later,
        max_output_tokens=65_536,
        source=f"{SOURCE_PREFIX}0.2.2: old import",
    )
    await put(
        side,
        provider="deepseek",
        model="deepseek-chat",
        effective_from=later,
        input_usd_micros_per_mtok=270_000,
        output_usd_micros_per_mtok=1_100_000,
        cached_input_usd_micros_per_mtok=70_000,
        max_output_tokens=8_192,
    )
    await put(
        side,
        provider="openai",
        model="gpt-4o",
        effective_from=later,
        input_usd_micros_per_mtok=2_500_000,
        output_usd_micros_per_mtok=10_000_000,
        cached_input_usd_micros_per_mtok=1_250_000,
        tool_usd_micros={"web_search": 10_000, "file_search": 2_500},
    )
    answers = await check_all(side, CLOCK_START.replace(hour=12))
    found = {
        (d["model"], d["service_tier"], d["where"], d["difference"])
        for a in answers
        for d in json.loads(a.text)["disagreements"]
    }
    assert [DISAGREE_STATUS, 0, DISAGREE_STATUS, DISAGREE_STATUS] == [a.status for a in answers]
    assert {
        (
            "gemini-2.5-pro",
            "default",
            "every call",
            "input_usd_micros_per_mtok: $0 in the book where genai-prices has 1250000",
        ),
        (
            "gemini-2.5-pro",
            "default",
            "above 200000 input tokens",
            "output_usd_micros_per_mtok: $0 in the book where genai-prices has 15000000",
        ),
        (
            "deepseek-chat",
            "default",
            "16:30-00:30 UTC",
            "an all-day price where genai-prices has daily windows (flattened)",
        ),
        (
            "deepseek-chat",
            "default",
            "16:30-00:30 UTC",
            "input_usd_micros_per_mtok: book 270000 vs 135000",
        ),
        (
            "gpt-4o",
            "default",
            "every call",
            "max_output_tokens: none in the book (no output ceiling)",
        ),
    } <= found


async def test_a_dated_version_starts_at_the_providers_midnight_and_reprices_a_hold(
    side: Running, clock: FakeClock
) -> None:
    """deepseek-v4-flash's 2026-08-17 price starts at 16:00 UTC on 2026-08-16 (midnight in
    Beijing): 8,000 in / 2,000 out holds $0.00168 before it and the new rate after it, and
    a hold open across it is repriced to the new rate."""
    clock.set(datetime(2026, 8, 16, 15, 59, 30, tzinfo=UTC))
    answer = await run(
        side, clock(), "import", "--provider", "deepseek", "--model", "deepseek-v4-flash"
    )
    before = await held(side, "before", "deepseek-v4-flash", 8_000, max_output_tokens=2_000)
    clock.set(datetime(2026, 8, 16, 16, 0, tzinfo=UTC))
    after = await held(side, "after", "deepseek-v4-flash", 8_000, max_output_tokens=2_000)
    new_rate = 8_000 * 22 // 100 + 2_000 * 66 // 100

    async def repriced() -> bool:
        return 2 * new_rate == (await fetch_budget_row(side.dsn, BUDGET))["held"]

    await eventually(repriced, within_seconds=10, what="the open hold repriced at 16:00 UTC")
    starts = {p.effective_from.ToDatetime(tzinfo=UTC) for p in await book(side)}
    assert 0 == answer.status
    assert (1_680, 3_080) == (before, after)
    assert {datetime(2026, 8, 16, 16, tzinfo=UTC), datetime(2026, 9, 9, 16, tzinfo=UTC)} <= starts


async def test_a_model_the_book_cannot_hold_is_refused_with_exit_3(side: Running) -> None:
    """whisper-1, priced by hours of audio, is refused with its reason and exit 3, and no
    row of it is written; gpt-4o beside it is imported."""
    answer = await run(
        side,
        CLOCK_START,
        "import",
        "--provider",
        "openai",
        "--model",
        "whisper-1",
        "--model",
        "gpt-4o",
        "-o",
        "json",
    )
    refused = json.loads(answer.text)["refused"]
    assert REFUSED_STATUS == answer.status
    assert ["whisper-1"] == list(refused)
    assert refused["whisper-1"][0].startswith("no rate for text input tokens (priced by audio")
    assert ({"gpt-4o"}, []) == (
        {p.model for p in await book(side, "openai")},
        await book(side, "openai", "whisper-1"),
    )


async def test_ceilings_come_from_the_file_given(side: Running, tmp_path: Any) -> None:
    """--ceilings FILE gives deepseek-chat's ceiling; a file with none for it (or none
    valid) leaves the model listed as without one; a folder is refused."""
    given = tmp_path / "map.json"
    given.write_text(
        json.dumps(
            {"deepseek/deepseek-chat": {"litellm_provider": "deepseek", "max_output_tokens": 4_000}}
        )
    )
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps({"deepseek-chat": {"litellm_provider": "deepseek", "max_output_tokens": "8k"}})
    )
    chosen = ("--provider", "deepseek", "--model", "deepseek-chat", "--dry-run", "-o", "json")
    good = json.loads(
        (await run(side, CLOCK_START, "import", *chosen, "--ceilings", str(given))).text
    )
    none = json.loads(
        (await run(side, CLOCK_START, "import", *chosen, "--ceilings", str(bad))).text
    )
    with pytest.raises(OpsError, match="is not a regular file"):
        await run(side, CLOCK_START, "import", *chosen, "--ceilings", str(tmp_path))
    assert [4_000, 4_000] == [r["max_output_tokens"] for r in good["put"]]
    assert (["deepseek-chat"], [0, 0]) == (
        none["without_ceiling"],
        [r["max_output_tokens"] for r in none["put"]],
    )


async def test_a_model_without_a_ceiling_is_imported_once_and_named_by_check(
    side: Running, tmp_path: Any
) -> None:
    """With a ceilings file that has none for deepseek-chat, it is imported and listed as
    without one; a second import puts nothing; check names the missing ceiling, exit 3."""
    empty = tmp_path / "map.json"
    empty.write_text("{}")
    chosen = ("--provider", "deepseek", "--model", "deepseek-chat", "--ceilings", str(empty))
    first = await run(side, CLOCK_START, "import", *chosen, "-o", "json")
    second = await run(side, CLOCK_START, "import", *chosen, "-o", "json")
    checked = await run(side, CLOCK_START, "check", *chosen, "-o", "json")
    found = {d["difference"] for d in json.loads(checked.text)["disagreements"]}
    assert (["deepseek-chat"], 2) == (
        json.loads(first.text)["without_ceiling"],
        len(json.loads(first.text)["put"]),
    )
    assert [] == json.loads(second.text)["put"]
    assert DISAGREE_STATUS == checked.status
    assert {
        "max_output_tokens: none in the book (no output ceiling), nor in the ceilings source"
    } == found


def test_check_exits_3_from_the_command_line() -> None:
    """The command line turns a check's findings into exit status 3."""
    args = argparse.Namespace(
        command="prices", verb="check", run=lambda _: Answer("found", DISAGREE_STATUS)
    )
    with pytest.raises(SystemExit) as exited:
        cli.run_operator_command(args)
    assert DISAGREE_STATUS == exited.value.code


async def test_prices_put_takes_a_prompt_length_tier_and_a_zoned_window(side: Running) -> None:
    """`prices put --input-tokens-above --window-timezone` puts both, and `prices list`
    shows the tier and the window with its zone."""
    args = cli.parser().parse_args([
        "prices", "put", "deepseek", "deepseek-chat", "--input-usd-micros-per-mtok", "270000",
        "--input-tokens-above", "32000", "--daily-from-minute", "510", "--daily-to-minute", "30",
        "--window-timezone", "Asia/Shanghai", "--admin-target", side.admin_target,
    ])  # fmt: skip
    await asyncio.to_thread(args.run, args)
    listing = cli.parser().parse_args(["prices", "list", "--admin-target", side.admin_target])
    shown = str(await asyncio.to_thread(listing.run, listing)).splitlines()
    (price,) = await book(side)
    assert (32_000, "Asia/Shanghai") == (price.input_tokens_above, price.window_timezone)
    assert (True, True) == ("INPUT ABOVE" in shown[0], " 32000 " in shown[1])
    assert "08:30-00:30 Asia/Shanghai" in shown[1]


async def test_a_bedrock_model_is_imported_under_both_of_its_ids(side: Running) -> None:
    """A Bedrock model genai-prices names with AWS's version suffix is in the book under its
    bare id too (its match clause takes both), at the same rates and ceiling, prices a
    Reserve under either, and check is clean; a second version gets no first version's id."""
    named = "global.anthropic.claude-sonnet-4-6-v1:0"
    alias = "global.anthropic.claude-sonnet-4-6"
    answer = await run(side, CLOCK_START, "import", "--provider", "aws", "--model", named)
    imported = json.loads(
        (await run(side, CLOCK_START, "import", "--provider", "aws", "--model", named, "-o",
                   "json", "--dry-run")).text
    )  # fmt: skip
    rows = {p.model: p for p in await book(side, "aws")}
    checked = await run(side, CLOCK_START, "check", "--provider", "aws", "--model", named)
    versioned = await run(
        side, CLOCK_START, "import", "--provider", "aws", "--model",
        "regional.anthropic.claude-3-5-sonnet-20241022-v2:0", "-o", "json", "--dry-run",
    )  # fmt: skip
    assert 0 == answer.status, answer.text
    assert f"{alias} (as {named})" in answer.text
    assert {alias: named} == imported["aliases"]
    assert {named, alias} == set(rows)
    assert (rows[named].input_usd_micros_per_mtok, rows[named].max_output_tokens) == (
        rows[alias].input_usd_micros_per_mtok,
        rows[alias].max_output_tokens,
    )
    assert 0 < rows[alias].max_output_tokens
    assert (0, {}) == (checked.status, json.loads(versioned.text)["aliases"])
    amounts = []
    for model in (named, alias):
        shape = pb.UsageShape(provider="aws", model=model, input_tokens=1000, max_output_tokens=10)
        reserved = await side.budget.Reserve(
            pb.ReserveRequest(budget_id=BUDGET, idempotency_key=model, shape=shape)
        )
        assert reserved.admitted, reserved.message
        amounts.append(reserved.amount)
    assert amounts[0] == amounts[1]
