"""The stand-in provider: the plans file parsed and checked, periods from an anchor, and the
file read again when it changes, on an injected clock."""

from __future__ import annotations

import asyncio
import itertools
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog

from earmark import limits
from earmark.plans.file import AccountEntry, FileProvider, Plans, PlansFileError, parse, period_at
from earmark.plans.provider import Period, ProviderUnavailable
from tests.helpers import FakeClock

EXAMPLE = """
default_plan = "free"

[plans.free.features]
tokens = 10_000

[plans.pro.features]
tokens = 1_000_000
images = "unlimited"

[accounts.acme]
plan = "pro"
period_anchor = 2026-11-15T00:00:00Z

[accounts.globex]
plan = "free"
"""
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
# Each edit's mtime: distinct and growing, so that an edit is seen whatever the file
# system's timestamp granularity.
_MTIMES = itertools.count(1_700_000_000_000_000_000, 1_000_000_000)


def write(path: Path, text: str) -> None:
    path.write_text(text)
    stamp = next(_MTIMES)
    os.utime(path, ns=(stamp, stamp))


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def test_the_example_parses_to_plans_accounts_and_a_default() -> None:
    """Plans with their limits ("unlimited" as no maximum), accounts with their plan and
    anchor (or none), and the default plan."""
    expected = Plans(
        plans={"free": {"tokens": 10_000}, "pro": {"tokens": 1_000_000, "images": None}},
        accounts={
            "acme": AccountEntry("pro", utc(2026, 11, 15)),
            "globex": AccountEntry("free", None),
        },
        default_plan="free",
    )
    assert expected == parse(EXAMPLE)


def test_an_anchor_may_be_a_day_or_have_any_offset() -> None:
    """A day alone anchors at its midnight UTC; an instant with an offset is taken in UTC."""
    text = (
        "[plans.p]\n[accounts.a]\nplan = 'p'\nperiod_anchor = 2026-11-15\n"
        "[accounts.b]\nplan = 'p'\nperiod_anchor = 2026-11-15T02:00:00+02:00\n"
    )
    found = parse(text).accounts
    assert (utc(2026, 11, 15), utc(2026, 11, 15)) == (found["a"].anchor, found["b"].anchor)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[plans.pro.features]\ntokens = -1", "plans.pro.features.tokens: is -1; it must be >= 0"),
        (
            "[plans.pro.features]\ntokens = 1_000_000_000_000_000_001",
            "plans.pro.features.tokens: is 1000000000000000001; at most 1000000000000000000",
        ),
        (
            '[plans.pro.features]\ntokens = "lots"',
            "plans.pro.features.tokens: is 'lots'; give a whole number from 0 to "
            '1000000000000000000, or "unlimited"',
        ),
        (
            "[plans.pro.features]\ntokens = true",
            "plans.pro.features.tokens: is True, not a whole number",
        ),
        ("[plans.pro]\nfeature = {}", "plans.pro.feature: is not a key here (known: features)"),
        (
            "colour = 1\n[plans.p]",
            "colour: is not a key here (known: default_plan, plans, accounts)",
        ),
        ("", "plans: is missing; give at least one, like [plans.free.features]"),
        ("plans = 3", "plans: is an integer, not a table"),
        (
            '[plans."a b".features]',
            'plans."a b": may hold only printable ASCII characters without spaces',
        ),
        ('[plans.p.features]\n"a/b" = 1', "plans.p.features.\"a/b\": may not contain '/'"),
        (
            f"[plans.p.features]\n{'f' * 49} = 1",
            f"plans.p.features.{'f' * 49}: is 49 characters; at most 48",
        ),
        (
            f"[plans.p]\n[accounts.{'a' * 65}]\nplan = 'p'",
            f'accounts."{"a" * 61}...": is 65 characters; at most 64',
        ),
        (
            "[plans.p]\n[accounts.acme]\nplan = 'q'",
            "accounts.acme.plan: names no plan of [plans] ('q')",
        ),
        ("[plans.p]\n[accounts.acme]", "accounts.acme.plan: is missing; give the name of a plan"),
        (
            "[plans.p]\n[accounts.acme]\nplan = 'p'\nseats = 3",
            "accounts.acme.seats: is not a key here (known: plan, period_anchor)",
        ),
        (
            "[plans.p]\n[accounts.acme]\nplan = 'p'\nperiod_anchor = 2026-11-15T00:00:00",
            "accounts.acme.period_anchor: 2026-11-15T00:00:00 has no offset; give one, like "
            "2026-11-15T00:00:00Z",
        ),
        (
            "[plans.p]\n[accounts.acme]\nplan = 'p'\nperiod_anchor = 'soon'",
            "accounts.acme.period_anchor: is a string; give an instant like 2026-11-15T00:00:00Z",
        ),
        ("default_plan = 'gold'\n[plans.p]", "default_plan: names no plan of [plans] ('gold')"),
        ("[plans.p]\naccounts = 'x'", "plans.p.accounts: is not a key here (known: features)"),
        ("plans = {", "is not TOML: "),
        (
            "[plans.p]\n[accounts.acme]\nplan = 'p'\nperiod_anchor = 07:00:00",
            "accounts.acme.period_anchor: is a time; give an instant like 2026-11-15T00:00:00Z",
        ),
    ],
)
def test_a_bad_file_names_the_key_path(text: str, message: str) -> None:
    """Each problem is refused with the key path where it is, and what is wrong there."""
    with pytest.raises(PlansFileError) as refused:
        parse(text)
    assert message == str(refused.value)[: len(message)]


def test_counts_are_bounded() -> None:
    """More plans than limits.plans_file_plans_max is refused, naming plans."""
    text = "\n".join(f"[plans.p{i}]" for i in range(limits.plans_file_plans_max + 1))
    with pytest.raises(PlansFileError) as refused:
        parse(text)
    assert (
        f"plans: has {limits.plans_file_plans_max + 1} entries; at most "
        f"{limits.plans_file_plans_max}"
    ) == str(refused.value)


def test_a_file_too_large_not_utf8_or_missing_is_refused_naming_it(tmp_path: Path) -> None:
    """The file's own problems name the setting and the path: too large, not UTF-8, absent."""
    large, binary, absent = tmp_path / "large.toml", tmp_path / "binary.toml", tmp_path / "no"
    large.write_text("# " + "x" * limits.plans_file_bytes_max)
    binary.write_bytes(b"\xff\xfe")
    problems = []
    for path in (large, binary, absent):
        with pytest.raises(PlansFileError) as refused:
            FileProvider(path, FakeClock(NOW))
        problems.append(str(refused.value))
    assert [
        f"plans_file: {large}: is larger than {limits.plans_file_bytes_max} bytes",
        f"plans_file: {binary}: is not UTF-8",
        f"plans_file: {absent}: cannot read it (FileNotFoundError)",
    ] == problems


@pytest.mark.parametrize(
    ("anchor", "at", "expected"),
    [
        # An instant mid-month: the period runs from the 15th to the 15th.
        (utc(2026, 11, 15), utc(2026, 12, 1, 12), (utc(2026, 11, 15), utc(2026, 12, 15))),
        (utc(2026, 11, 15), utc(2026, 12, 15), (utc(2026, 12, 15), utc(2027, 1, 15))),
        # The 31st: February's period starts on its last day, March's on the 31st again.
        (utc(2026, 1, 31), utc(2026, 3, 1), (utc(2026, 2, 28), utc(2026, 3, 31))),
        (utc(2026, 1, 31), utc(2026, 4, 30, 1), (utc(2026, 4, 30), utc(2026, 5, 31))),
        (utc(2026, 1, 31), utc(2028, 2, 29, 5), (utc(2028, 2, 29), utc(2028, 3, 31))),
        # The 29th of a leap February: the 28th in other years.
        (utc(2024, 2, 29), utc(2025, 2, 28), (utc(2025, 2, 28), utc(2025, 3, 29))),
        # Before the anchor: periods run back from it too.
        (utc(2026, 11, 15), utc(2026, 10, 1), (utc(2026, 9, 15), utc(2026, 10, 15))),
        # A time of day is kept.
        (
            utc(2026, 1, 10, 8, 30),
            utc(2026, 3, 10, 8, 29),
            (utc(2026, 2, 10, 8, 30), utc(2026, 3, 10, 8, 30)),
        ),
    ],
)
def test_periods_are_months_from_the_anchor(
    anchor: datetime, at: datetime, expected: tuple[datetime, datetime]
) -> None:
    """The period containing `at` starts on the anchor's day of a month (its last day when
    the month is shorter) at the anchor's time, and ends a month later."""
    assert Period(*expected) == period_at(anchor, at)


async def test_limits_and_periods_per_account(tmp_path: Path) -> None:
    """A listed account gets its plan and its anchor's period; one without an anchor and an
    unlisted one (the default plan) get no period; usage reports succeed."""
    path = tmp_path / "plans.toml"
    write(path, EXAMPLE)
    provider = FileProvider(path, FakeClock(NOW))
    found = (
        await provider.read_limits("acme"),
        await provider.read_period("acme", "tokens"),
        await provider.read_limits("globex"),
        await provider.read_period("globex", "tokens"),
        await provider.read_limits("someone"),
        await provider.read_period("someone", "tokens"),
    )
    await provider.report_usage("acme", "tokens", 5, NOW)
    await provider.close()
    assert (
        {"tokens": 1_000_000, "images": None},
        Period(utc(2026, 11, 15), utc(2026, 12, 15)),
        {"tokens": 10_000},
        None,
        {"tokens": 10_000},
        None,
    ) == found


async def test_an_unlisted_account_without_a_default_plan_is_unavailable(tmp_path: Path) -> None:
    """Without default_plan, an account not listed is ProviderUnavailable naming it and the
    file, for its limits and its period alike."""
    path = tmp_path / "plans.toml"
    write(path, EXAMPLE.replace('default_plan = "free"', ""))
    provider = FileProvider(path, FakeClock(NOW))
    messages = []
    for read in (provider.read_limits("stranger"), provider.read_period("stranger", "tokens")):
        with pytest.raises(ProviderUnavailable) as unavailable:
            await read
        messages.append(str(unavailable.value))
    expected = (
        f"file {path}: account 'stranger' is not listed in [accounts] and the file has no "
        "default_plan"
    )
    assert [expected, expected] == messages


async def test_an_edit_is_read_after_the_check_interval(tmp_path: Path) -> None:
    """An edit is not looked for before limits.plans_file_check_seconds have passed on the
    clock; after that the next read sees it, and the reload is counted."""
    path = tmp_path / "plans.toml"
    write(path, EXAMPLE)
    clock = FakeClock(NOW)
    results: list[str] = []
    provider = FileProvider(path, clock, on_reload=results.append)
    write(path, EXAMPLE.replace("tokens = 1_000_000", "tokens = 2_000_000"))
    clock.advance(timedelta(seconds=limits.plans_file_check_seconds / 2))
    before = await provider.read_limits("acme")
    clock.advance(timedelta(seconds=limits.plans_file_check_seconds / 2))
    after = await provider.read_limits("acme")
    assert (1_000_000, 2_000_000, ["loaded"]) == (before["tokens"], after["tokens"], results)


async def test_a_bad_edit_keeps_the_last_good_plans(tmp_path: Path) -> None:
    """A bad edit is logged once (plans_file_rejected, naming the key path) and counted
    once, however many checks find it; the last good plans answer meanwhile; a fixed file
    is loaded again."""
    path = tmp_path / "plans.toml"
    write(path, EXAMPLE)
    clock = FakeClock(NOW)
    results: list[str] = []
    provider = FileProvider(path, clock, on_reload=results.append)
    step = timedelta(seconds=limits.plans_file_check_seconds)
    with structlog.testing.capture_logs() as logs:
        write(path, EXAMPLE.replace("tokens = 1_000_000", "tokens = -5"))
        clock.advance(step)
        during = await provider.read_limits("acme")
        clock.advance(step)
        again = await provider.read_limits("acme")
        write(path, EXAMPLE.replace("tokens = 1_000_000", "tokens = 3_000_000"))
        clock.advance(step)
        fixed = await provider.read_limits("acme")
    rejected = [e for e in logs if e["event"] == "plans_file_rejected"]
    assert (1_000_000, 1_000_000, 3_000_000) == (during["tokens"], again["tokens"], fixed["tokens"])
    assert ["rejected", "loaded"] == results
    assert [f"plans_file: {path}: plans.pro.features.tokens: is -5; it must be >= 0"] == [
        e["error"] for e in rejected
    ]


async def test_a_removed_file_keeps_the_last_good_plans(tmp_path: Path) -> None:
    """A file deleted while running is a rejected reload, not a lost plan."""
    path = tmp_path / "plans.toml"
    write(path, EXAMPLE)
    clock = FakeClock(NOW)
    results: list[str] = []
    provider = FileProvider(path, clock, on_reload=results.append)
    path.unlink()
    clock.advance(timedelta(seconds=limits.plans_file_check_seconds))
    kept = await provider.read_limits("globex")
    assert ({"tokens": 10_000}, ["rejected"]) == (kept, results)


async def test_reads_during_a_reload_answer_the_new_plans(tmp_path: Path) -> None:
    """Reads that come while another looks at the changed file wait for it: none of them
    answers the plans being replaced."""
    path = tmp_path / "plans.toml"
    write(path, EXAMPLE)
    clock = FakeClock(NOW)
    provider = FileProvider(path, clock)
    write(path, EXAMPLE.replace("tokens = 1_000_000", "tokens = 4_000_000"))
    clock.advance(timedelta(seconds=limits.plans_file_check_seconds))
    found = await asyncio.gather(*(provider.read_limits("acme") for _ in range(5)))
    assert [4_000_000] * 5 == [limits_read["tokens"] for limits_read in found]
