"""The conformance kit (docs/conformance.md): every SDK's adapter passes every scenario of
scenarios.json, and an adapter that reuses no idempotency key fails it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conformance.runner import ROOT, Result, run_kit, scenarios
from tests.conftest import Running
from tests.helpers import FakeClock

HERE = Path(__file__).resolve().parent
ADAPTERS = {
    "python": [sys.executable, str(HERE / "adapters" / "python.py")],
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
    """An SDK that sends each attempt with a key of its own fails the kit: a lost Reserve
    answer, asked again under a new key, is a second hold."""
    broken = [*ADAPTERS["python"], "--broken-fresh-keys"]
    results = await run_kit(broken, clocked, clock, tmp_path, "broken")
    failed = {r.scenario_id: r.diagnostic for r in results if not r.passed}
    assert ["lost-answers-are-retried-with-the-same-request"] == sorted(failed)
    assert "Reserve requests should be one request sent again" in failed[sorted(failed)[0]]
