"""`earmark budgets update` and a put that would drop policies (issue 43), over a live
sidecar's Admin socket: update changes only what it names; put on an existing budget
refuses to drop its period, thresholds, mode or windows unless given --replace; get and
list show the threshold basis, the refusals this period and a refusing budget."""

from __future__ import annotations

from typing import Any

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants
from tests.ops.test_commands import columns, failure, rows, run, run_json

TEAM = (
    "budgets", "put", "team", "--unit", "usd_micros", "--limit", "10000000", "--escrow-bps",
    "1000", "--period", "month", "--period-anchor", "15", "--threshold", "80", "--threshold",
    "100", "--threshold-basis", "used", "--mode", "observe", "--admissions-per-minute", "60",
    "--units-per-minute", "1000000",
)  # fmt: skip


def settings(state: dict[str, Any]) -> dict[str, Any]:
    """A budget's JSON less its limit, its current period and its counters."""
    left_out = {"limit", "remaining", "period_start", "resets_at"}
    return {key: value for key, value in state.items() if key not in left_out}


async def test_update_changes_only_what_it_names(clocked: Running) -> None:
    """update --limit keeps the period, thresholds, their basis, mode, escrow and windows;
    --unlimited with --no-thresholds and --clear escrow_bps clears just those; naming
    nothing, or one setting both set and cleared, is one line before any call; an unknown
    budget is NOT_FOUND."""
    await run(clocked, *TEAM)
    before = await run_json(clocked, "budgets", "get", "team")
    raised = await run_json(clocked, "budgets", "update", "team", "--limit", "20000000")
    read = await run_json(clocked, "budgets", "get", "team")
    cleared = await run_json(
        clocked, "budgets", "update", "team", "--unlimited", "--no-thresholds", "--clear",
        "escrow_bps",
    )  # fmt: skip
    nothing = await failure(clocked, "budgets", "update", "team")
    twice = await failure(clocked, "budgets", "update", "team", "--limit", "5", "--unlimited")
    missing = await failure(clocked, "budgets", "update", "nope", "--limit", "5")
    assert (
        ("20000000", settings(before)),
        (None, None, "THRESHOLD_BASIS_USED", "PERIOD_MONTH", "60", "BUDGET_MODE_OBSERVE", None),
    ) == (
        (read["limit"], settings(read)),
        (
            cleared.get("limit"), cleared.get("threshold_bps"), cleared["threshold_basis"],
            cleared["period"], cleared["admissions_per_minute"], cleared["mode"],
            cleared.get("escrow_bps"),
        ),
    )  # fmt: skip
    assert raised == read
    assert (
        "name a setting to change (a put flag, --unlimited, --clear FIELD)",
        "limit: both set and cleared; give one or the other",
        "NOT_FOUND BUDGET_NOT_FOUND: budget 'nope' not found",
    ) == (nothing, twice, missing)
    await assert_invariants(clocked.dsn)


async def test_put_refuses_to_drop_policies_without_replace(clocked: Running) -> None:
    """put on an existing budget that would reset its period, thresholds, basis, mode or
    windows refuses in one line naming each, and changes nothing; naming them again it
    puts; with --replace it drops them; a new budget needs no --replace."""
    await run(clocked, *TEAM)
    before = await run_json(clocked, "budgets", "get", "team")
    refused = await failure(
        clocked, "budgets", "put", "team", "--unit", "usd_micros", "--limit", "20000000"
    )
    after = await run_json(clocked, "budgets", "get", "team")
    again = await run_json(clocked, *TEAM[:6], "20000000", *TEAM[7:])
    replaced = await run(
        clocked, "budgets", "put", "team", "--unit", "usd_micros", "--limit", "5", "--replace"
    )
    fresh = await run(clocked, "budgets", "put", "new", "--unit", "tokens")
    assert (
        "budget 'team': this put would drop period month from the 15th in UTC, thresholds "
        "80%,100%, threshold basis used, mode observe, windows admissions_per_minute 60, "
        "units_per_minute 1,000,000; name them, use `budgets update`, or give --replace"
    ) == refused
    assert (before, "20000000", settings(before)) == (after, again["limit"], settings(again))
    shown = {"PERIOD": "never", "THRESHOLDS": "-", "THRESHOLD BASIS": "committed",
             "MODE": "enforce", "RATE": "-"}  # fmt: skip
    assert (shown, "new") == ({k: columns(replaced)[k] for k in shown}, columns(fresh)["BUDGET"])
    await assert_invariants(clocked.dsn)


async def test_a_refusing_budget_shows_its_refusals(sidecar: Running) -> None:
    """A budget that refused a Reserve for want of room reads refusing, with its refusals
    this period in get (with the latest's time) and list; another reads ok, 0."""
    await run(sidecar, "budgets", "put", "tight", "--unit", "tokens", "--limit", "100")
    await run(sidecar, "budgets", "put", "roomy", "--unit", "tokens", "--limit", "100")
    for key, amount in (("a", 60), ("b", 50), ("c", 45)):
        request = pb.ReserveRequest(budget_id="tight", amount=amount, idempotency_key=key)
        await sidecar.budget.Reserve(request)
    state = await run_json(sidecar, "budgets", "get", "tight")
    got = columns(await run(sidecar, "budgets", "get", "tight"))
    listed = {r[0]: r for r in rows(await run(sidecar, "budgets", "list"))}
    header = listed["BUDGET"]
    assert (
        ("refusing", f"2, last {state['last_refused_at'][:19]}Z", "2"),
        ("ok", "0"),
    ) == (
        (got["STATUS"], got["REFUSALS"], listed["tight"][header.index("REFUSALS")]),
        (listed["roomy"][header.index("STATUS")], listed["roomy"][header.index("REFUSALS")]),
    )
    await assert_invariants(sidecar.dsn)


async def test_put_refuses_to_drop_run_limits_or_end_a_raise_without_replace(
    clocked: Running,
) -> None:
    """put on a budget with run limits and a temporary limit, naming neither, refuses in one
    line naming them, and changes nothing."""
    await run(
        clocked, "budgets", "put", "run", "--unit", "tokens", "--limit", "100",
        "--max-open-holds", "3", "--max-admissions", "5", "--closes-at", "2027-01-01T00:00:00Z",
    )  # fmt: skip
    await run(
        clocked, "budgets", "update", "run", "--limit", "500", "--until", "2026-12-31T00:00:00Z",
        "--reason", "quarter end",
    )  # fmt: skip
    before = await run_json(clocked, "budgets", "get", "run")
    refused = await failure(clocked, "budgets", "put", "run", "--unit", "tokens", "--limit", "9")
    assert (
        "budget 'run': this put would drop run limits max_open_holds 3, max_admissions 5, "
        "closes_at 2027-01-01T00:00:00+00:00, the temporary limit until "
        "2026-12-31T00:00:00+00:00; name them, use `budgets update`, or give --replace"
    ) == refused
    assert before == await run_json(clocked, "budgets", "get", "run")
