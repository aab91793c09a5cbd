"""What the ledger keeps of each provider call for reconciliation: when it was sent, to which
model and with which key, the usage it was settled with, and a resolve's evidence."""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest

from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants
from tests.service.test_calls import NOW, budget, call, price, side, stamp

__all__ = ["side"]


def listing(since_minutes: int = 5, **fields: object) -> pb.ListCallsRequest:
    values: dict[str, object] = {
        "provider": "openai",
        "since": stamp(NOW - timedelta(minutes=since_minutes)),
    }
    values.update(fields)
    return pb.ListCallsRequest(**values)  # type: ignore[arg-type]


async def test_a_call_is_recorded_when_sent_and_completed_by_its_settle(
    side: Running, clock: FakeClock
) -> None:
    """A Reserve that charges the prompt records the call then, with its key label; the
    Settle's usage completes it; an undispatched hold records nothing."""
    await budget(side, "b", 10_000_000)
    request = call("b", "k1", 500)
    request.labels["earmark.key"] = "key_abc"
    sent = await side.budget.Reserve(request)
    await side.budget.Reserve(pb.ReserveRequest(budget_id="b", idempotency_key="k2", amount=5))
    clock.advance(timedelta(seconds=30))
    usage = pb.TokenUsage(input_tokens=1_000, output_tokens=200, cached_input_tokens=100)
    await side.budget.Settle(pb.SettleRequest(reservation_id=sent.reservation_id, usage=usage))
    listed = await side.admin.ListCalls(listing())
    (only,) = listed.calls
    assert (sent.reservation_id, "gpt-5", "key_abc", NOW, pb.RESERVATION_STATE_SETTLED) == (
        only.reservation_id,
        only.model,
        only.key_label,
        only.sent_at.ToDatetime().replace(tzinfo=NOW.tzinfo),
        only.state,
    )
    assert (1_000, 100, 200, 1) == (
        only.usage.input_tokens,
        only.usage.cached_input_tokens,
        only.usage.output_tokens,
        only.usage.requests,
    )
    assert [] == list((await side.admin.ListCalls(listing(key_label="key_other"))).calls)
    await assert_invariants(side.dsn)


async def test_a_resolve_keeps_its_evidence_on_its_ledger_entry(
    side: Running, clock: FakeClock
) -> None:
    """An in-doubt call resolved with evidence shows it on its resolve entry and its call."""
    await budget(side, "b", 10_000_000)
    sent = await side.budget.Reserve(call("b", "k1", 500))
    await side.budget.Settle(
        pb.SettleRequest(reservation_id=sent.reservation_id, outcome=pb.OUTCOME_UNKNOWN)
    )
    evidence = "openai key_abc bucket 2026-12-01T12:00Z model gpt-5: not billed"
    await side.admin.ResolveHold(
        pb.ResolveHoldRequest(reservation_id=sent.reservation_id, used=0, evidence=evidence)
    )
    ledger = await side.admin.ListLedger(pb.ListLedgerRequest(budget_id="b"))
    (call_record,) = (await side.admin.ListCalls(listing())).calls
    assert [("resolve", evidence)] == [(e.kind, e.evidence) for e in ledger.entries if e.evidence]
    assert (evidence, 0) == (call_record.evidence, call_record.settled_used)
    await assert_invariants(side.dsn)


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.ListCallsRequest(provider="openai"), "since"),
        (pb.ListCallsRequest(since=stamp(NOW)), "provider"),
        (listing(until=stamp(NOW - timedelta(hours=1))), "until"),
        (listing(page_token="forged"), "page_token"),
    ],
)
async def test_a_bad_listing_names_its_field(
    side: Running, request_: pb.ListCallsRequest, field: str
) -> None:
    """A listing without its provider or start, with an empty range or a forged token is
    INVALID_ARGUMENT naming the field."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await side.admin.ListCalls(request_)
    assert (grpc.StatusCode.INVALID_ARGUMENT, True) == (
        caught.value.code(),
        field in (caught.value.details() or ""),
    )


async def test_evidence_past_its_bound_changes_nothing(side: Running) -> None:
    """Evidence longer than its bound is INVALID_ARGUMENT naming evidence, and the hold
    stays in doubt."""
    await budget(side, "b", 10_000_000)
    sent = await side.budget.Reserve(call("b", "k1", 500))
    await side.budget.Settle(
        pb.SettleRequest(reservation_id=sent.reservation_id, outcome=pb.OUTCOME_UNKNOWN)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await side.admin.ResolveHold(
            pb.ResolveHoldRequest(reservation_id=sent.reservation_id, evidence="x" * 1_025)
        )
    (call_record,) = (await side.admin.ListCalls(listing())).calls
    assert (grpc.StatusCode.INVALID_ARGUMENT, pb.RESERVATION_STATE_IN_DOUBT) == (
        caught.value.code(),
        call_record.state,
    )
    assert "evidence" in (caught.value.details() or "")


async def test_a_call_keeps_the_tier_its_settle_was_priced_at(side: Running) -> None:
    """A call sent for the priority tier that ran at the default one is recorded at the
    default tier, which its Settle priced it at (reconcile prices its tokens there)."""
    await side.admin.PutPrice(price(service_tier="priority", input_usd_micros_per_mtok=4_375_000))
    await budget(side, "tiers", 10_000_000)
    sent = [
        await side.budget.Reserve(call("tiers", key, 100, service_tier="priority"))
        for key in ("ran-priority", "ran-default")
    ]
    for reply, tier in zip(sent, ("priority", "default"), strict=True):
        usage = pb.TokenUsage(input_tokens=1_000, output_tokens=100, service_tier=tier)
        await side.budget.Settle(pb.SettleRequest(reservation_id=reply.reservation_id, usage=usage))
    tiers = {
        c.reservation_id: c.service_tier for c in (await side.admin.ListCalls(listing())).calls
    }
    assert ["priority", "default"] == [tiers[reply.reservation_id] for reply in sent]
    await assert_invariants(side.dsn)
