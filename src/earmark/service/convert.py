"""Core answers to wire messages."""

from __future__ import annotations

from datetime import datetime

from google.protobuf.timestamp_pb2 import Timestamp

from earmark.core.model import Budget, Hold, LedgerKind
from earmark.core.ops import ChargeResult, RenewResult, ReserveResult, SettleResult
from earmark.core.prices import Price
from earmark.store.calls import CallRow
from earmark.store.operator import LedgerRow
from earmark.v1 import budget_pb2 as pb


def timestamp(at: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(at)
    return stamp


def reserve_response(result: ReserveResult, budget_id: str) -> pb.ReserveResponse:
    reply = pb.ReserveResponse(
        budget_id=budget_id,
        admitted=result.admitted,
        reservation_id=result.reservation_id,
        amount=result.amount,
        reason=int(result.reason),  # type: ignore[arg-type]
        message=result.message,
        estimate_source=int(result.source),  # type: ignore[arg-type]
        price_version=result.price_version,
        refused_budget_id=result.refused_budget_id,
        overage_policy=int(result.policy),  # type: ignore[arg-type]
        over_limit=result.over_limit,
        charged=result.charged,
        max_output_tokens=result.max_output_tokens,
        degraded=result.degraded,
    )
    if result.remaining is not None:
        reply.remaining = result.remaining
    if result.expires_at is not None:
        reply.expires_at.CopyFrom(timestamp(result.expires_at))
    if result.retry_after is not None:
        reply.retry_after.FromTimedelta(result.retry_after)
    if result.resets_at is not None:
        reply.resets_at.CopyFrom(timestamp(result.resets_at))
    if result.would_refuse is not None:
        reply.would_refuse = True
        reply.would_refuse_reason = int(result.would_refuse)  # type: ignore[assignment]
    return reply


def charge_response(result: ChargeResult) -> pb.ChargeResponse:
    return pb.ChargeResponse(
        charged=result.charged,
        capped=result.capped,
        total_charged=result.total_charged,
        hold_remaining=result.hold_remaining,
        expires_at=timestamp(result.expires_at),
        price_version=result.price_version,
        requested=result.requested,
        output_usd_micros_per_mtok=result.output_per_mtok,
    )


def renew_response(result: RenewResult) -> pb.RenewResponse:
    return pb.RenewResponse(expires_at=timestamp(result.expires_at))


def settle_response(result: SettleResult) -> pb.SettleResponse:
    return pb.SettleResponse(
        charged=result.charged,
        released=result.released,
        overshoot=result.overshoot,
        state=int(result.state),  # type: ignore[arg-type]
        price_version=result.price_version,
    )


def budget_state(budget: Budget) -> pb.BudgetState:
    reply = pb.BudgetState(
        budget_id=budget.budget_id,
        used=budget.used,
        held=budget.held,
        unit=budget.unit,
        open_reservations=budget.open_reservations,
        estimate_policy=int(budget.estimate_policy),  # type: ignore[arg-type]
        exceeded=budget.exceeded(),
        escrow_bps=budget.escrow_bps,
        overage_policy=int(budget.overage_policy),  # type: ignore[arg-type]
        period=int(budget.period),  # type: ignore[arg-type]
        timezone=budget.timezone,
        period_anchor=budget.period_anchor,
        mode=int(budget.mode),  # type: ignore[arg-type]
        threshold_bps=list(budget.threshold_bps),
        threshold_basis=int(budget.threshold_basis),  # type: ignore[arg-type]
        refusals=budget.refusals,
    )
    if budget.admissions_per_minute is not None:
        reply.admissions_per_minute = budget.admissions_per_minute
    if budget.units_per_minute is not None:
        reply.units_per_minute = budget.units_per_minute
    for name in ("max_open_holds", "max_admissions"):
        most = getattr(budget, name)
        if most is not None:
            setattr(reply, name, most)
    reply.admissions = budget.admissions
    if budget.limit_until is not None:
        reply.limit_until.CopyFrom(timestamp(budget.limit_until))
        if budget.limit_after is not None:
            reply.limit_after = budget.limit_after
        reply.limit_reason = budget.limit_reason
    reply.template_id = budget.template_id or ""
    reply.changed_by_hand = budget.changed_by_hand
    if budget.period_start is not None:
        reply.period_start.CopyFrom(timestamp(budget.period_start))
    if budget.period_end is not None:
        reply.resets_at.CopyFrom(timestamp(budget.period_end))
    if budget.overage_limit is not None:
        reply.overage_limit = budget.overage_limit
    if budget.default_estimate is not None:
        reply.default_estimate = budget.default_estimate
    if budget.account is not None:
        reply.account = budget.account
        reply.feature = budget.feature or ""
    for name in (
        "cycle_start", "cycle_end", "limit_read_at", "overage_since", "archived_at",
        "first_refused_at", "last_refused_at", "closes_at",
    ):  # fmt: skip
        at = getattr(budget, name)
        if at is not None:
            getattr(reply, name).CopyFrom(timestamp(at))
    if budget.limit is not None:
        reply.limit = budget.limit
        remaining = budget.remaining()
        assert remaining is not None
        reply.remaining = remaining
    return reply


def price_message(price: Price) -> pb.Price:
    reply = pb.Price(
        provider=price.provider,
        model=price.model,
        effective_from=timestamp(price.effective_from),
        input_usd_micros_per_mtok=price.input_per_mtok,
        output_usd_micros_per_mtok=price.output_per_mtok,
        cached_input_usd_micros_per_mtok=price.cached_input_per_mtok,
        cache_write_usd_micros_per_mtok=price.cache_write_per_mtok,
        request_usd_micros=price.request_fee,
        source=price.source,
        version=price.version,
        daily_from_minute=price.daily_from_minute,
        daily_to_minute=price.daily_to_minute,
        max_output_tokens=price.max_output_tokens,
        cache_write_long_usd_micros_per_mtok=price.cache_write_long_per_mtok,
        service_tier=price.service_tier,
        tool_usd_micros=dict(price.tool_fees),
        input_tokens_above=price.input_tokens_above,
        window_timezone=price.window_timezone,
    )
    if price.effective_to is not None:
        reply.effective_to.CopyFrom(timestamp(price.effective_to))
    if price.captured_at is not None:
        reply.captured_at.CopyFrom(timestamp(price.captured_at))
    return reply


def hold_message(hold: Hold) -> pb.Hold:
    reply = pb.Hold(
        reservation_id=hold.reservation_id,
        budget_id=hold.budget_id,
        also_budget_ids=list(hold.also_budget_ids),
        state=int(hold.state),  # type: ignore[arg-type]
        amount=hold.amount,
        charged=hold.charged,
        dispatched=hold.dispatched,
        phase=int(hold.phase),  # type: ignore[arg-type]
        idempotency_key=hold.idempotency_key,
        owner=hold.owner,
        job=hold.job,
        labels=hold.labels,
        created_at=timestamp(hold.created_at),
        expires_at=timestamp(hold.expires_at),
    )
    if hold.closed_at is not None:
        reply.closed_at.CopyFrom(timestamp(hold.closed_at))
    if hold.settlement is not None:
        reply.settled_used = hold.settlement.used
    return reply


def ledger_message(row: LedgerRow) -> pb.LedgerEntry:
    entry = row.entry
    message = pb.LedgerEntry(
        entry_id=row.entry_id,
        budget_id=entry.budget_id,
        reservation_id=entry.reservation_id or "",
        kind=str(entry.kind),
        held_delta=entry.held_delta,
        used_delta=entry.used_delta,
        at=timestamp(entry.at),
        evidence=row.evidence,
        reason=entry.reason,
    )
    # A limit entry's limits (core.raises); absent is unlimited.
    if entry.kind is LedgerKind.LIMIT:
        if entry.limit_before is not None:
            message.limit_before = entry.limit_before
        if entry.limit_after is not None:
            message.limit_after = entry.limit_after
        if entry.limit_until is not None:
            message.limit_until.CopyFrom(timestamp(entry.limit_until))
    return message


def call_message(call: CallRow) -> pb.Call:
    message = pb.Call(
        reservation_id=call.reservation_id,
        budget_id=call.budget_id,
        also_budget_ids=call.also_budget_ids,
        provider=call.provider,
        model=call.model,
        service_tier=call.service_tier,
        key_label=call.key_label,
        sent_at=timestamp(call.sent_at),
        state=int(call.state),  # type: ignore[arg-type]
        amount=call.amount,
        charged=call.charged,
        evidence=call.evidence,
        unit=call.unit,
    )
    if call.usage is not None:
        u = call.usage
        message.usage.CopyFrom(
            pb.TokenUsage(
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                cached_input_tokens=u.cached_input_tokens,
                requests=u.requests,
                provider=u.provider,
                model=u.model,
                cache_write_input_tokens=u.cache_write_input_tokens,
                service_tier=u.service_tier,
            )
        )
    if call.settled_used is not None:
        message.settled_used = call.settled_used
    return message
