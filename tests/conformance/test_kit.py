"""The conformance kit (docs/conformance.md): every SDK's adapter passes every scenario of
scenarios.json, and an adapter that reuses no idempotency key fails it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conformance.runner import ROOT, Result, run_kit, scenarios
from tests.conftest import Running
from tests.helpers import FakeClock

HERE = Path(__file__).resolve().parent
ADAPTERS = {
    "python": [sys.executable, str(HERE / "adapters" / "python.py")],
    "typescript": ["node", str(HERE / "adapters" / "typescript.mjs")],
    "go": [str(ROOT / "clients" / "go" / "bin" / "conformance")],
}


def failures(results: list[Result]) -> list[str]:
    return [f"{r.scenario_id}: {r.diagnostic}" for r in results if not r.passed]


@pytest.mark.parametrize("sdk", sorted(ADAPTERS))
async def test_the_sdk_passes_every_scenario(
    sdk: str, clocked: Running, clock: FakeClock, tmp_path: Path
) -> None:
    """Each SDK's adapter passes every scenario of the kit."""
    results = await run_kit(ADAPTERS[sdk], clocked, clock, tmp_path, sdk)
    assert ([], len(scenarios())) == (failures(results), len(results))


async def test_an_adapter_that_reuses_no_idempotency_key_fails_the_kit(
    clocked: Running, clock: FakeClock, tmp_path: Path
) -> None:
    """An SDK that sends each attempt with a key of its own fails the kit's scenario of lost
    answers: a lost Reserve answer, asked again under a new key, is a second hold. (It
    passes every other scenario; the suite runs only this one, to keep its time.)"""
    broken = [*ADAPTERS["python"], "--broken-fresh-keys"]
    lost = "lost-answers-are-retried-with-the-same-request"
    (result,) = await run_kit(broken, clocked, clock, tmp_path, "broken", only=[lost])
    assert (lost, False) == (result.scenario_id, result.passed)
    assert "Reserve requests should be one request sent again" in result.diagnostic


# Earmark's own rules the kit holds every SDK to, besides the Cycles profile's scenarios.
EARMARK_RULES = {
    "idempotent retry after a lost answer",
    "renew while alive",
    "expiry when dead",
    "settle after expiry recorded",
    "in doubt on unknown",
    "refusal not retried",
    "journal replay once",
}


def test_the_scenarios_cover_the_profile_and_earmarks_rules() -> None:
    """Every scenario id of the Cycles profile's catalog (core, durable, boundary) and every
    rule of Earmark's own is covered by a scenario, and scenario ids are unique."""
    profile = json.loads(
        (ROOT / "tests" / "client" / "recovery_profile_scenarios.json").read_text()
    )
    ids = {s["id"] for s in profile["scenarios"]}
    covered = {c for s in scenarios() for c in s["covers"]}
    names = [s["id"] for s in scenarios()]
    assert (set(), set(), len(names)) == (ids - covered, EARMARK_RULES - covered, len(set(names)))
