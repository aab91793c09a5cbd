"""The operator's commands over a live sidecar's Admin socket, called in-process (in a
thread: the sidecar answers on the test's event loop)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration

from earmark import cli, limits
from earmark.ops import OpsError
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, eventually


async def run(s: Running, *argv: str) -> str:
    """What `earmark ARGV --admin-target ADMIN` prints."""
    args = cli.parser().parse_args([*argv, "--admin-target", s.admin_target])
    return str(await asyncio.to_thread(args.run, args))


async def run_json(s: Running, *argv: str) -> dict[str, Any]:
    return json.loads(await run(s, *argv, "-o", "json"))


def rows(table: str) -> list[list[str]]:
    """A table's rows (header first), split on its column gaps."""
    return [[cell.strip() for cell in line.split("   ") if cell] for line in table.splitlines()]


def columns(table: str) -> dict[str, str]:
    """A one-budget table's cells by their header."""
    header, row = rows(table)
    return dict(zip(header, row, strict=True))


async def failure(s: Running, *argv: str) -> str:
    with pytest.raises(OpsError) as caught:
        await run(s, *argv)
    return str(caught.value)


async def test_a_budget_is_put_read_and_deleted(sidecar: Running) -> None:
    """put sets every field its flags name, get shows it as a table and as JSON, delete
    archives it, and a put on the archived budget is the code and reason in one line."""
    put = await run(
        sidecar, "budgets", "put", "session", "--unit", "usd_micros", "--limit", "10000000",
        "--escrow-bps", "1500", "--overage-policy", "soft", "--overage-limit", "500000",
        "--default-estimate", "20000", "--estimate-policy", "p75",
    )  # fmt: skip
    assert [
        ["BUDGET", "UNIT", "LIMIT", "USED", "HELD", "REMAINING", "HOLDS", "POLICY", "ESCROW",
         "STATUS", "MODE", "PERIOD", "PERIOD START", "RESETS AT", "THRESHOLDS",
         "THRESHOLD BASIS", "RATE", "REFUSALS", "ADMISSIONS", "CLOSES AT"],
        ["session", "usd_micros", "$10.00", "$0.00", "$0.00", "$10.00", "0", "soft +$0.50",
         "15%", "ok", "enforce", "never", "-", "-", "-", "committed", "-", "0", "0", "-"],
    ] == rows(put)  # fmt: skip
    state = await run_json(sidecar, "budgets", "get", "session")
    assert ("10000000", 1500, "OVERAGE_POLICY_SOFT", "500000", "20000", "ESTIMATE_POLICY_P75") == (
        state["limit"], state["escrow_bps"], state["overage_policy"], state["overage_limit"],
        state["default_estimate"], state["estimate_policy"],
    )  # fmt: skip
    deleted = await run_json(sidecar, "budgets", "delete", "session")
    assert "archived_at" in deleted
    assert "archived" == columns(await run(sidecar, "budgets", "get", "session"))["STATUS"]
    refused = await failure(sidecar, "budgets", "put", "session", "--unit", "usd_micros")
    assert refused.startswith("FAILED_PRECONDITION BUDGET_ARCHIVED: ")


async def test_a_budgets_policies_are_put_and_shown(
    clocked: Running, capsys: pytest.CaptureFixture[str]
) -> None:
    """put's policy flags set the period, its timezone and anchor, thresholds in percent,
    the mode and the rate windows; get and list show them as columns and as JSON; a put
    without them sets their defaults, the current period keeping its end; a threshold that
    is no percent is refused before any call, a timezone that is none by the sidecar."""
    put = await run(
        clocked, "budgets", "put", "team", "--unit", "usd_micros", "--limit", "10000000",
        "--period", "month", "--timezone", "Europe/Berlin", "--period-anchor", "15",
        "--threshold", "80", "--threshold", "95.5", "--threshold", "100%", "--mode", "observe",
        "--admissions-per-minute", "120", "--units-per-minute", "1000000",
    )  # fmt: skip
    state = await run_json(clocked, "budgets", "get", "team")
    listed = await run(clocked, "budgets", "list", "--prefix", "team")
    again = await run(clocked, "budgets", "put", "team", "--unit", "usd_micros", "--replace")
    # The clock reads 2026-12-01 12:00 UTC: Berlin's month from the 15th runs from November
    # 15th to December 15th, at its midnights (23:00 UTC the day before).
    shown = {
        "MODE": "observe",
        "PERIOD": "month from the 15th in Europe/Berlin",
        "PERIOD START": "2026-11-14T23:00:00Z",
        "RESETS AT": "2026-12-14T23:00:00Z",
        "THRESHOLDS": "80%,95.5%,100%",
        "RATE": "120 admissions/min, $1.00/min",
    }
    assert (shown, shown) == (
        {k: columns(put)[k] for k in shown},
        {k: columns(listed)[k] for k in shown},
    )
    assert (
        "PERIOD_MONTH", "Europe/Berlin", 15, [8_000, 9_550, 10_000], "BUDGET_MODE_OBSERVE", "120",
        "1000000", "2026-11-14T23:00:00Z", "2026-12-14T23:00:00Z",
    ) == (
        state["period"], state["timezone"], state["period_anchor"], state["threshold_bps"],
        state["mode"], state["admissions_per_minute"], state["units_per_minute"],
        state["period_start"], state["resets_at"],
    )  # fmt: skip
    assert {
        **shown, "MODE": "enforce", "PERIOD": "never", "THRESHOLDS": "-", "RATE": "-"
    } == {k: columns(again)[k] for k in shown}  # fmt: skip
    with pytest.raises(SystemExit):
        await run(clocked, "budgets", "put", "x", "--unit", "t", "--threshold", "80.125")
    refused = await failure(
        clocked, "budgets", "put", "x", "--unit", "t", "--period", "day", "--timezone", "Mars/Base"
    )
    assert "argument --threshold: '80.125' is not a percent with at most 2 decimals" in (
        capsys.readouterr().err
    )
    assert refused.startswith("INVALID_ARGUMENT"), refused
    assert "timezone: 'Mars/Base' is no IANA timezone" in refused


async def test_budgets_are_listed(sidecar: Running) -> None:
    """budgets list shows every budget in id order, or those under --prefix."""
    for budget_id in ("a/one", "a/two", "b/one"):
        await run(sidecar, "budgets", "put", budget_id, "--unit", "tokens", "--limit", "100")
    every = [r[0] for r in rows(await run(sidecar, "budgets", "list"))[1:]]
    under = await run_json(sidecar, "budgets", "list", "--prefix", "a/")
    assert (["a/one", "a/two", "b/one"], ["a/one", "a/two"]) == (
        every,
        [b["budget_id"] for b in under["budgets"]],
    )


async def test_an_unlimited_budget_and_a_missing_one(sidecar: Running) -> None:
    """No --limit is unlimited; a budget that is not there is NOT_FOUND BUDGET_NOT_FOUND."""
    put = rows(await run(sidecar, "budgets", "put", "meter", "--unit", "tokens"))
    assert [
        "meter", "tokens", "unlimited", "0", "0", "-", "0", "hard", "-", "ok", "enforce", "never",
        "-", "-", "-", "committed", "-", "0", "0", "-",
    ] == put[1]  # fmt: skip
    missing = await failure(sidecar, "budgets", "get", "nope")
    assert "NOT_FOUND BUDGET_NOT_FOUND: budget 'nope' not found" == missing


async def test_prices_are_put_and_listed(sidecar: Running) -> None:
    """put appends a version, list shows every version oldest first, rates in dollars."""
    rates = ("--input-usd-micros-per-mtok", "2500000", "--output-usd-micros-per-mtok", "10000000")
    first = await run_json(
        sidecar, "prices", "put", "openai", "gpt-4o", *rates,
        "--effective-from", "2026-01-01T00:00:00Z", "--source", "https://openai.com/api/pricing",
    )  # fmt: skip
    assert ("1", "2026-01-01T00:00:00Z") == (first["version"], first["effective_from"])
    await run(sidecar, "prices", "put", "openai", "gpt-4o", *rates, "--request-usd-micros", "1000")
    listed = rows(await run(sidecar, "prices", "list", "--provider", "openai"))
    assert [["openai", "gpt-4o", "default", "1", "$2.50", "$10.00", "$0.00"],
            ["openai", "gpt-4o", "default", "2", "$2.50", "$10.00", "$0.001"]] == [
        [r[0], r[1], r[2], r[3], r[6], r[7], r[10]] for r in listed[1:]
    ]  # fmt: skip
    assert 2 == len((await run_json(sidecar, "prices", "list"))["prices"])


async def reserve(s: Running, budget: str, amount: int, charge: int = 0) -> str:
    reply = await s.budget.Reserve(
        pb.ReserveRequest(
            budget_id=budget, amount=amount, idempotency_key=uuid.uuid4().hex,
            lease=Duration(seconds=10),
        )
    )  # fmt: skip
    assert reply.admitted
    if charge:
        step = pb.ChargeRequest(
            reservation_id=reply.reservation_id, amount=charge, idempotency_key="c"
        )
        await s.budget.Charge(step)
    return reply.reservation_id


async def test_holds_are_listed_resolved_and_released(clocked: Running, clock: FakeClock) -> None:
    """A dispatched hold past its lease lists as in doubt and resolves at what was billed;
    a held one nobody will settle is released; the ledger shows each step."""
    await run(clocked, "budgets", "put", "d", "--unit", "usd_micros", "--limit", "1000000")
    doubtful = await reserve(clocked, "d", 50_000, charge=10_000)
    clock.advance(timedelta(seconds=11))

    async def in_doubt() -> bool:
        listed = await run_json(clocked, "holds", "list", "d", "--state", "in-doubt")
        return [doubtful] == [h["reservation_id"] for h in listed.get("holds", [])]

    await eventually(in_doubt, within_seconds=10, what="the sweeper put the hold in doubt")
    held = await reserve(clocked, "d", 40_000)
    table = rows(await run(clocked, "holds", "list", "d"))
    assert {
        (doubtful, "in-doubt (dispatched)", "$0.05", "$0.01"),
        (held, "held", "$0.04", "$0.00"),
    } == {(r[0], r[2], r[3], r[4]) for r in table[1:]}
    resolved = rows(await run(clocked, "holds", "resolve", doubtful, "--used", "12000"))
    assert [doubtful, "settled", "12,000", "38,000", "0"] == resolved[1]
    released = await run_json(clocked, "holds", "release", held)
    assert "40000" == released["released"]
    kinds = [r[2] for r in rows(await run(clocked, "ledger", "d"))[1:]]
    assert ["hold", "charge", "in_doubt", "hold", "resolve", "release"] == kinds
    still_held = await run_json(clocked, "holds", "list", "d", "--state", "held")
    assert [] == still_held.get("holds", [])
    await assert_invariants(clocked.dsn)


async def test_resolve_needs_used_or_usage(sidecar: Running) -> None:
    """resolve with neither --used nor usage flags stops before any call: a forgotten flag
    never resolves a hold at 0."""
    message = await failure(sidecar, "holds", "resolve", str(uuid.uuid4()))
    assert "give --used, or the usage flags (--input-tokens, ...), not both" == message


async def test_listings_follow_every_page_up_to_the_bound(
    sidecar: Running, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With pages of 2, the ledger's 6 entries all list; past cli_pages_max pages the
    listing stops, says so on stderr, and the JSON keeps the next page's token."""
    await run(sidecar, "budgets", "put", "p", "--unit", "tokens", "--limit", "100")
    for _ in range(3):
        rid = await reserve(sidecar, "p", 1)
        await sidecar.budget.Settle(pb.SettleRequest(reservation_id=rid, used=1))
    monkeypatch.setattr(limits, "page_size_max", 2)
    entries = (await run_json(sidecar, "ledger", "p"))["entries"]
    assert (6, "") == (len(entries), capsys.readouterr().err)
    monkeypatch.setattr(limits, "cli_pages_max", 2)
    cut = await run_json(sidecar, "ledger", "p")
    assert (4, True) == (len(cut["entries"]), bool(cut["next_page_token"]))
    assert "stopped after 2 pages (4 entries); more remain" in capsys.readouterr().err
