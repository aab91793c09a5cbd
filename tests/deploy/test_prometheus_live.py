"""A real Prometheus, started on loopback with the project's scrape config and rules, scrapes
a live sidecar; refusals and overshoot are then read back through its HTTP API."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import binary_missing, eventually, eventually_sync, free_port

PROMETHEUS_BIN = shutil.which("prometheus")
PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
READY_SECONDS_MAX = 60.0
QUERY_SECONDS_MAX = 60.0

MISSING = binary_missing("prometheus", "prometheus")
pytestmark = pytest.mark.skipif(MISSING is not None, reason=str(MISSING))


def get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def prometheus(sidecar: Running, tmp_path: Path) -> Iterator[str]:
    """Prometheus with deploy/prometheus's config, its target pointed at the live sidecar and
    its interval at 1 s; stopped at the end, also on failure."""
    config = (PROMETHEUS_DIR / "prometheus.yml").read_text()
    config = config.replace("127.0.0.1:9464", f"127.0.0.1:{sidecar.sidecar.metrics_port}")
    config = config.replace("15s", "1s")
    (tmp_path / "prometheus.yml").write_text(config)
    shutil.copy(PROMETHEUS_DIR / "earmark-rules.yml", tmp_path / "earmark-rules.yml")
    address = f"127.0.0.1:{free_port()}"
    assert PROMETHEUS_BIN is not None
    with (tmp_path / "prometheus.log").open("wb") as log:
        process = subprocess.Popen(
            [
                PROMETHEUS_BIN,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address={address}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://{address}/-/ready", timeout=2):
                    return True
            except OSError:
                assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
                return False

        eventually_sync(ready, within_seconds=READY_SECONDS_MAX, what="prometheus ready")
        yield f"http://{address}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


async def query_until(base: str, promql: str, expected: float) -> float:
    """Queries Prometheus until the instant vector's single value equals expected."""
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    seen: list[float] = []

    async def answered() -> bool:
        body = await asyncio.to_thread(get_json, url)
        result = body["data"]["result"]  # type: ignore[index]
        if result:
            seen.append(float(result[0]["value"][1]))
        return bool(seen) and seen[-1] == expected

    try:
        await eventually(answered, within_seconds=QUERY_SECONDS_MAX, what=f"{promql} = {expected}")
    except AssertionError as missed:
        raise AssertionError(f"{missed}; last seen {seen[-1:] or 'nothing'}") from None
    return seen[-1]


async def test_prometheus_sees_refusals_and_overshoot(sidecar: Running, prometheus: str) -> None:
    """After a run with three refusals and one overshoot of 5,000, Prometheus' query API
    returns exactly those, and the sidecar's target is up."""
    b = sidecar.budget
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="acme", limit=100_000, unit="t"))
    replies = await asyncio.gather(
        *[
            b.Reserve(pb.ReserveRequest(budget_id="acme", amount=40_000, idempotency_key=f"j{i}"))
            for i in range(5)
        ]
    )
    admitted = [r for r in replies if r.admitted]
    assert 2 == len(admitted)
    await b.Settle(pb.SettleRequest(reservation_id=admitted[0].reservation_id, used=45_000))
    await b.Settle(pb.SettleRequest(reservation_id=admitted[1].reservation_id, used=10_000))

    refused = 'sum(earmark_reservations_total{job="earmark", outcome="refused"})'
    assert 3 == await query_until(prometheus, refused, 3)
    assert 1 == await query_until(prometheus, "sum(earmark_overshoot_events_total)", 1)
    assert 5_000 == await query_until(prometheus, "sum(earmark_overshoot_units_total)", 5_000)
    assert 1 == await query_until(prometheus, 'up{job="earmark"}', 1)
