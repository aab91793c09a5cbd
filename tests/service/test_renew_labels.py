"""Renew's labels: what a worker learns after its Reserve (a background response's id) is
added to the hold's labels, within the Reserve's bounds, and kept once the hold closes; a
label once set is never rewritten."""

from __future__ import annotations

import uuid

import grpc
import pytest

from earmark import limits
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.helpers import assert_invariants, reason_of

BUDGET = "renewed"


async def held(s: Running, **labels: str) -> str:
    """A hold of 100 on the test's budget, with labels; its reservation id."""
    budget_id = BUDGET
    await s.admin.PutBudget(pb.PutBudgetRequest(budget_id=budget_id, limit=1_000, unit="tokens"))
    reply = await s.budget.Reserve(
        pb.ReserveRequest(
            budget_id=budget_id, amount=100, idempotency_key=uuid.uuid4().hex, labels=labels
        )
    )
    assert reply.admitted
    return reply.reservation_id


async def hold_of(s: Running, reservation_id: str) -> pb.Hold:
    page = await s.admin.ListHolds(pb.ListHoldsRequest(budget_id=BUDGET))
    (hold,) = [h for h in page.holds if h.reservation_id == reservation_id]
    return hold


async def labels_of(s: Running, reservation_id: str) -> dict[str, str]:
    return dict((await hold_of(s, reservation_id)).labels)


async def test_a_renewal_adds_its_labels_to_the_holds(sidecar: Running) -> None:
    """A Renew's labels join those of the Reserve, one that names a label again with its
    own value (a retried Renew) changes nothing, and a Renew without labels changes none;
    they stay once the hold is in doubt."""
    rid = await held(sidecar, team="a", step="1")
    await sidecar.budget.Renew(
        pb.RenewRequest(reservation_id=rid, labels={"openai.response_id": "resp_1", "step": "1"})
    )
    await sidecar.budget.Renew(
        pb.RenewRequest(reservation_id=rid, labels={"openai.response_id": "resp_1"})
    )
    await sidecar.budget.Renew(pb.RenewRequest(reservation_id=rid))
    await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=0, outcome=pb.OUTCOME_UNKNOWN)
    )
    expected = {"team": "a", "step": "1", "openai.response_id": "resp_1"}
    assert expected == await labels_of(sidecar, rid)
    await assert_invariants(sidecar.dsn)


async def test_a_label_once_set_is_never_rewritten(sidecar: Running) -> None:
    """A Renew that would change a label's value (the Reserve's, or one a Renew added:
    a background response's id, which reconcile resolves the hold by) fails
    INVALID_ARGUMENT naming labels, and the hold keeps its labels and its lease, a label
    it would have added too."""
    rid = await held(sidecar, team="a")
    await sidecar.budget.Renew(
        pb.RenewRequest(reservation_id=rid, labels={"openai.response_id": "resp_costly"})
    )
    before = await hold_of(sidecar, rid)
    rewrites = [{"openai.response_id": "resp_cheap"}, {"team": "b", "added": "1"}]
    failures = []
    for labels in rewrites:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await sidecar.budget.Renew(pb.RenewRequest(reservation_id=rid, labels=labels))
        failures.append((refused.value.code(), reason_of(refused.value)[1].get("field")))
    after = await hold_of(sidecar, rid)
    assert [(grpc.StatusCode.INVALID_ARGUMENT, "labels")] * 2 == failures
    assert {"team": "a", "openai.response_id": "resp_costly"} == dict(after.labels)
    assert before.expires_at == after.expires_at
    await assert_invariants(sidecar.dsn)


async def test_labels_past_the_bounds_are_refused_and_change_nothing(sidecar: Running) -> None:
    """A Renew whose labels would take the hold past label_count_max, or that has a key
    the Reserve would refuse, fails INVALID_ARGUMENT naming labels, and the hold keeps its
    labels and its lease."""
    first = {f"k{n}": "v" for n in range(limits.label_count_max - 1)}
    rid = await held(sidecar, **first)
    too_many = pb.RenewRequest(reservation_id=rid, labels={"x": "1", "y": "2"})
    bad_key = pb.RenewRequest(reservation_id=rid, labels={"no spaces": "1"})
    failures = []
    for request in (too_many, bad_key):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await sidecar.budget.Renew(request)
        failures.append((refused.value.code(), reason_of(refused.value)[1].get("field")))
    assert [(grpc.StatusCode.INVALID_ARGUMENT, "labels")] * 2 == failures
    assert first == await labels_of(sidecar, rid)
    await assert_invariants(sidecar.dsn)
