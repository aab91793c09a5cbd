"""What operators see: one log line per decision, and the metrics catalogue on /metrics."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import grpc
import pytest
import structlog
from google.protobuf.duration_pb2 import Duration

import earmark
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import FakeClock, eventually, fetch_budget_row, scrape


async def test_each_decision_is_one_log_line(sidecar: Running) -> None:
    """An admitted and a refused Reserve each log one line with ids, amount, decision, reason
    and the request's context."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="t"))
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        admitted = await sidecar.budget.Reserve(
            pb.ReserveRequest(budget_id="b", amount=60, idempotency_key="k1"),
            metadata=(("x-request-id", "req-1"),),
        )
        await sidecar.budget.Reserve(
            pb.ReserveRequest(budget_id="b", amount=60, idempotency_key="k2"),
            metadata=(("x-request-id", "req-2"),),
        )
    decisions = [e for e in logs if e["event"] == "reserve"]
    assert [
        ("req-1", "Reserve", "b", admitted.reservation_id, 60, "admitted", None),
        ("req-2", "Reserve", "b", None, 60, "refused", "INSUFFICIENT_BUDGET"),
    ] == [
        (
            e["request_id"], e["rpc"], e["budget_id"], e["reservation_id"], e["amount"],
            e["decision"], e["reason"],
        )
        for e in decisions
    ]  # fmt: skip


async def test_errors_log_their_status_code(sidecar: Running) -> None:
    """A rejected call logs the status code it answered with."""
    with structlog.testing.capture_logs() as logs, pytest.raises(grpc.aio.AioRpcError):
        await sidecar.budget.Reserve(pb.ReserveRequest(budget_id="", amount=1))
    errors = [e for e in logs if e["event"] == "rpc_error"]
    assert [("INVALID_ARGUMENT", "budget_id: is required")] == [
        (e["code"], e["error"]) for e in errors
    ]


async def test_metrics_catalogue_counts_a_run(clocked: Running, clock: FakeClock) -> None:
    """After admits, a refusal, a capped charge, an overshoot, an expiry and a late settle,
    /metrics counts each of them."""
    sidecar = clocked
    b = sidecar.budget
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=10_000, unit="tokens"))
    first = await b.Reserve(pb.ReserveRequest(budget_id="b", amount=4_000, idempotency_key="1"))
    await b.Reserve(pb.ReserveRequest(budget_id="b", amount=9_000, idempotency_key="2"))
    await b.Charge(
        pb.ChargeRequest(reservation_id=first.reservation_id, amount=5_000, idempotency_key="c")
    )
    await b.Settle(pb.SettleRequest(reservation_id=first.reservation_id, used=6_000))
    short = await b.Reserve(
        pb.ReserveRequest(
            budget_id="b", amount=1_000, idempotency_key="3", lease=Duration(seconds=1)
        )
    )
    clock.advance(timedelta(seconds=2))

    async def swept() -> bool:
        return 0 == (await fetch_budget_row(sidecar.dsn, "b"))["open_reservations"]

    # The sweeper (every 0.2 s here) closes the short hold now that its lease passed.
    await eventually(swept, within_seconds=10, what="the short hold swept")
    await b.Settle(pb.SettleRequest(reservation_id=short.reservation_id, used=500))
    used = ("earmark_budget_used", (("budget_id", "b"), ("unit", "tokens")))

    async def refreshed() -> bool:
        # The database gauges refresh every 0.2 s here: one after the late settle.
        return 6_500 == scrape(sidecar.sidecar.metrics_port).get(used)

    await eventually(refreshed, within_seconds=10, what="the gauges refreshed")
    m = scrape(sidecar.sidecar.metrics_port)
    assert 2 == m[("earmark_reservations_total", (("outcome", "admitted"), ("reason", "")))]
    refused = (
        "earmark_reservations_total",
        (("outcome", "refused"), ("reason", "insufficient_budget")),
    )
    assert 1 == m[refused]
    assert 5_000 == m[("earmark_reserved_units_total", (("unit", "tokens"),))]
    assert 1 == m[("earmark_charges_total", (("capped", "true"),))]
    assert 1 == m[("earmark_overshoot_events_total", ())]
    assert 2_000 == m[("earmark_overshoot_units_total", (("unit", "tokens"),))]
    assert 1 == m[("earmark_sweeper_expired_holds_total", ())]
    assert 1 == m[("earmark_late_settles_total", ())]
    # Cumulative buckets: the late settle used 0.5 of its hold, the overshoot 1.5.
    assert 1 == m[("earmark_settle_used_ratio_bucket", (("le", "1.25"),))]
    assert 2 == m[("earmark_settle_used_ratio_bucket", (("le", "1.5"),))]
    assert 1 == m[("earmark_database_up", ())]
    assert 0 == m[("earmark_open_holds", (("unit", "tokens"),))]
    assert 6_500 == m[("earmark_budget_used", (("budget_id", "b"), ("unit", "tokens")))]
    assert 3_500 == m[("earmark_budget_remaining", (("budget_id", "b"), ("unit", "tokens")))]
    ok = ("earmark_rpc_duration_seconds_count", (("code", "OK"), ("method", "Reserve")))
    assert 3 == m[ok]
    # Spend: the capped Charge's 4,000, the Settle's 2,000 more, the late settle's 500.
    assert 6_500 == m[("earmark_charged_units_total", (("unit", "tokens"),))]
    assert 1 == m[("earmark_build_info", (("version", earmark.__version__),))]
    assert 0 < m[("process_resident_memory_bytes", ())]


async def test_budget_gauges_are_capped_to_the_most_used(dsn: str, socket_dir: Path) -> None:
    """With the cap at 2, only the two most used budgets get per-budget gauges."""
    side = Sidecar(sidecar_settings(dsn, socket_dir, metrics_budgets_max=2))
    async with running(side, dsn) as s:
        for i, amount in enumerate([10, 90, 50, 70, 30]):
            await s.admin.PutBudget(pb.PutBudgetRequest(budget_id=f"b{i}", limit=100, unit="t"))
            await s.budget.Reserve(
                pb.ReserveRequest(
                    budget_id=f"b{i}", amount=amount, idempotency_key=uuid.uuid4().hex
                )
            )

        def gauges() -> tuple[float, float, dict[str, float]]:
            """Open holds, budgets exported and each exported budget's held, one scrape."""
            m = scrape(side.metrics_port)
            held = {
                dict(k)["budget_id"]: v for (n, k), v in m.items() if n == "earmark_budget_held"
            }
            opened = m.get(("earmark_open_holds", (("unit", "t"),)), 0.0)
            return opened, m.get(("earmark_budgets_exported", ()), 0.0), held

        # A refresh sets the gauges one after another while a scrape may come between them,
        # and one between the fourth Reserve and the fifth already exports b1 and b3: the
        # gauges are judged once a scrape shows the refresh that counted all five holds.
        expected = (5.0, 2.0, {"b1": 90.0, "b3": 70.0})
        seen: list[tuple[float, float, dict[str, float]]] = []

        async def refreshed() -> bool:
            seen.append(gauges())
            return expected == seen[-1]

        await eventually(refreshed, within_seconds=10, what=f"the gauges {expected}")
        assert expected == seen[-1]
