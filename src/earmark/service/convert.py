"""Core answers to wire messages."""

from __future__ import annotations

from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp

from earmark.core.model import Budget
from earmark.core.ops import ChargeResult, RenewResult, ReserveResult, SettleResult
from earmark.v1 import budget_pb2 as pb


def timestamp(at: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(at)
    return stamp


def reserve_response(result: ReserveResult) -> pb.ReserveResponse:
    reply = pb.ReserveResponse(
        admitted=result.admitted,
        reservation_id=result.reservation_id,
        amount=result.amount,
        reason=int(result.reason),  # type: ignore[arg-type]
        message=result.message,
    )
    if result.remaining is not None:
        reply.remaining = result.remaining
    if result.expires_at is not None:
        reply.expires_at.CopyFrom(timestamp(result.expires_at))
    return reply


def charge_response(result: ChargeResult) -> pb.ChargeResponse:
    return pb.ChargeResponse(
        charged=result.charged,
        capped=result.capped,
        total_charged=result.total_charged,
        hold_remaining=result.hold_remaining,
        expires_at=timestamp(result.expires_at),
    )


def renew_response(result: RenewResult) -> pb.RenewResponse:
    return pb.RenewResponse(expires_at=timestamp(result.expires_at))


def settle_response(result: SettleResult) -> pb.SettleResponse:
    return pb.SettleResponse(
        charged=result.charged,
        released=result.released,
        overshoot=result.overshoot,
        state=int(result.state),  # type: ignore[arg-type]
    )


def budget_state(budget: Budget) -> pb.BudgetState:
    reply = pb.BudgetState(
        budget_id=budget.budget_id,
        used=budget.used,
        held=budget.held,
        unit=budget.unit,
        open_reservations=budget.open_reservations,
    )
    if budget.limit is not None:
        reply.limit = budget.limit
        remaining = budget.remaining()
        assert remaining is not None
        reply.remaining = remaining
    return reply
