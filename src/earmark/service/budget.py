"""The Budget service: what workers call before, during and after they spend."""

from __future__ import annotations

import uuid

import structlog

from earmark import validate
from earmark.core.model import HoldState, RefusalReason
from earmark.core.ops import (
    ChargeOp,
    ChargeResult,
    RenewOp,
    RenewResult,
    ReserveOp,
    ReserveResult,
    SettleOp,
    SettleResult,
)
from earmark.errors import FailedPrecondition, InvalidArgument, PermissionDenied, Reason
from earmark.metrics import Metrics
from earmark.plans.cache import LimitUnavailable
from earmark.plans.gate import PlanGate
from earmark.service import convert
from earmark.service.auth import CALLER
from earmark.service.drain import Drain
from earmark.service.errors import Context
from earmark.service.middleware import rpc
from earmark.store.interface import Holds
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc
from earmark.validate import prices as validate_prices
from earmark.validate import scopes as validate_scopes

log = structlog.get_logger("earmark.budget")


def _owner() -> str:
    """The calling token's name, which owns the holds it makes; "" without tokens."""
    caller = CALLER.get()
    return "" if caller is None else caller.name


def _not_in(cycle_budget_id: str, also: tuple[str, ...]) -> str:
    """The account's cycle budget, unless also_budget_ids names it again."""
    if cycle_budget_id in also:
        raise InvalidArgument(
            "also_budget_ids", f"names the account's cycle budget {cycle_budget_id!r} again"
        )
    return cycle_budget_id


def _log_reserve(op: ReserveOp, result: ReserveResult) -> None:
    """The one line a Reserve decision leaves in the log."""
    log.info(
        "reserve",
        budget_id=op.budget_id,
        caller=op.owner or None,
        reservation_id=result.reservation_id or None,
        amount=result.amount,
        source=result.source.name,
        price_version=result.price_version or None,
        job=op.job or None,
        decision="admitted" if result.admitted else "refused",
        reason=result.reason.name if not result.admitted else None,
        also_budget_ids=list(op.also_budget_ids) or None,
        phase=op.phase.name,
        refused_budget_id=result.refused_budget_id or None,
        over_limit=result.over_limit or None,
        remaining=result.remaining,
        duplicate=result.duplicate,
        charged=result.charged or None,
        max_output_tokens=result.max_output_tokens or None,
        degraded=result.degraded or None,
    )


class BudgetService(pb_grpc.BudgetServicer):
    def __init__(
        self,
        store: Holds,
        metrics: Metrics,
        drain: Drain,
        *,
        lease_seconds_max: float,
        plans: PlanGate | None = None,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.drain = drain
        self.lease_seconds_max = lease_seconds_max
        self.plans = plans

    def _named(self, request: pb.ReserveRequest) -> tuple[str, str, str]:
        """(budget_id, account, feature) as the request names them, checked; budget_id is
        "" for a Reserve by account."""
        if not request.account:
            return validate.budget_id(request.budget_id), "", ""
        if request.budget_id:
            raise InvalidArgument("budget_id", "and account are both given; a Reserve names one")
        if self.plans is None:
            raise FailedPrecondition(
                "account: this sidecar reads no plans; start it with --limits-provider kinde "
                "or --limits-provider file",
                Reason.NO_LIMITS_PROVIDER,
                field="account",
            )
        account = validate.account(request.account)
        return "", account, validate.feature(request.feature or self.plans.default_feature)

    async def _cycle_budget(self, account: str, feature: str, amount: int) -> str | ReserveResult:
        """The account's current cycle budget, or a refusal when its limit is unknown."""
        assert self.plans is not None
        try:
            return await self.plans.budget_for(account, feature)
        except LimitUnavailable as unknown:
            # Fail closed: an unknown limit admits nothing, and says so as a refusal.
            return ReserveResult(
                admitted=False,
                reservation_id="",
                amount=amount,
                remaining=None,
                reason=RefusalReason.LIMIT_UNAVAILABLE,
                message=str(unknown),
                expires_at=None,
            )

    @staticmethod
    def _permit(budget_id: str, also: tuple[str, ...]) -> None:
        """PERMISSION_DENIED unless the calling token's prefixes cover every budget the
        Reserve names."""
        caller = CALLER.get()
        if caller is None:
            return
        for field, named in [("budget_id", budget_id)] + [
            (f"also_budget_ids[{i}]", b) for i, b in enumerate(also)
        ]:
            if not caller.may_use(named):
                raise PermissionDenied(
                    f"{field}: the token named {caller.name!r} may not use budget {named!r}",
                    Reason.BUDGET_NOT_PERMITTED,
                    field=field,
                    budget_id=named,
                )

    @rpc("Reserve")
    async def Reserve(self, request: pb.ReserveRequest, context: Context) -> pb.ReserveResponse:
        # Everything the request carries is checked before any budget or provider is asked.
        budget_id, account, feature = self._named(request)
        amount, shape = validate_prices.reserve_amount(request)
        charge = (
            validate_prices.usage(request.charge, "charge") if request.HasField("charge") else None
        )
        if request.degrade and shape is None:
            raise InvalidArgument("degrade", "needs a shape: only a shape's output can be lowered")
        job = validate.job(request.job)
        key = validate.idempotency_key(request.idempotency_key)
        lease = validate.lease(request.HasField("lease"), request.lease, self.lease_seconds_max)
        labels = validate.labels(dict(request.labels))
        phase = validate_scopes.phase(request.phase)
        also = validate_scopes.also_budget_ids(request.also_budget_ids, budget_id)
        if account:
            # Checked first: the cycle budget's id is known without reading the plan or
            # writing a row, so a request that names it again, or a caller that may not
            # use it, causes neither.
            assert self.plans is not None
            self._permit(_not_in(self.plans.cycle_budget_id(account, feature), also), also)
            target = await self._cycle_budget(account, feature, amount)
            if isinstance(target, ReserveResult):
                self._count_reserve(target)
                log.info("reserve", account=account, feature=feature, decision="refused",
                         reason=target.reason.name, message=target.message)  # fmt: skip
                return convert.reserve_response(target, "")
            # Again after the gate: a cycle may have begun since the first check.
            budget_id = _not_in(target, also)
        self._permit(budget_id, also)
        rate = self.plans.admissions_per_minute if account and self.plans else 0
        op = ReserveOp(
            budget_id=budget_id,
            amount=amount,
            shape=shape,
            job=job,
            idempotency_key=key,
            lease=lease,
            labels=labels,
            new_reservation_id=str(uuid.uuid4()),
            owner=_owner(),
            account=account,
            admissions_per_minute=rate,
            also_budget_ids=also,
            phase=phase,
            charge=charge,
            degrade=request.degrade,
        )
        result = await self.store.submit(op)
        assert isinstance(result, ReserveResult)
        if result.admitted:
            self.drain.track(result.reservation_id)
        self._count_reserve(result)
        _log_reserve(op, result)
        return convert.reserve_response(result, op.budget_id)

    @rpc("Charge")
    async def Charge(self, request: pb.ChargeRequest, context: Context) -> pb.ChargeResponse:
        amount, usage = validate_prices.amount_or_usage(
            "amount", request.amount, request.HasField("usage"), request.usage
        )
        op = ChargeOp(
            reservation_id=validate.reservation_id(request.reservation_id),
            amount=amount,
            usage=usage,
            idempotency_key=validate.idempotency_key(request.idempotency_key),
            owner=_owner(),
        )
        result = await self.store.submit(op)
        assert isinstance(result, ChargeResult)
        if not result.duplicate:
            m = self.metrics
            m.child(m.charges, str(result.capped).lower()).inc()
            m.child(m.charged_units, result.unit).inc(result.charged)
        log.info(
            "charge",
            reservation_id=op.reservation_id,
            amount=result.requested,
            price_version=result.price_version or None,
            charged=result.charged,
            capped=result.capped,
            duplicate=result.duplicate,
        )
        return convert.charge_response(result)

    @rpc("Renew")
    async def Renew(self, request: pb.RenewRequest, context: Context) -> pb.RenewResponse:
        op = RenewOp(
            reservation_id=validate.reservation_id(request.reservation_id),
            lease=validate.lease(request.HasField("lease"), request.lease, self.lease_seconds_max),
            owner=_owner(),
            labels=validate.labels(dict(request.labels)),
        )
        result = await self.store.submit(op)
        assert isinstance(result, RenewResult)
        return convert.renew_response(result)

    @rpc("Settle")
    async def Settle(self, request: pb.SettleRequest, context: Context) -> pb.SettleResponse:
        used, usage = validate_prices.amount_or_usage(
            "used", request.used, request.HasField("usage"), request.usage
        )
        op = SettleOp(
            reservation_id=validate.reservation_id(request.reservation_id),
            used=used,
            usage=usage,
            outcome=validate.outcome(request.outcome),
            owner=_owner(),
        )
        result = await self.store.submit(op)
        assert isinstance(result, SettleResult)
        self.drain.untrack(op.reservation_id)
        if not result.duplicate:
            self._count_settle(op, result)
        log.info(
            "settle",
            reservation_id=op.reservation_id,
            used=result.used,
            price_version=result.price_version or None,
            outcome=op.outcome.name,
            charged=result.charged,
            released=result.released,
            overshoot=result.overshoot,
            state=result.state.name,
            duplicate=result.duplicate,
        )
        return convert.settle_response(result)

    def _count_reserve(self, result: ReserveResult) -> None:
        m = self.metrics
        if result.duplicate:
            m.child(m.reservations, "duplicate", "").inc()
        elif result.admitted:
            m.child(m.reservations, "admitted", "").inc()
            m.child(m.reserved_units, result.unit).inc(result.amount)
            if result.charged:
                m.child(m.charged_units, result.unit).inc(result.charged)
            if result.over_limit:
                m.overage_admissions.inc()
            if result.would_refuse is not None:
                m.child(m.would_refuse, result.would_refuse.name.lower()).inc()
        else:
            m.child(m.reservations, "refused", result.reason.name.lower()).inc()

    def _count_settle(self, op: SettleOp, result: SettleResult) -> None:
        m = self.metrics
        m.child(m.settles, result.state.name.lower(), op.outcome.name.lower()).inc()
        m.child(m.released_units, result.unit).inc(result.released)
        # A counter only grows: a Settle below the charges refunds, which it does not count.
        m.child(m.charged_units, result.unit).inc(max(0, result.used_delta))
        if result.amount:
            # A hold of 0 (a call the price book says is free) has no ratio to observe.
            ratio = result.used / result.amount
            m.used_ratio.observe(ratio)
            m.child(m.estimate_ratio, result.source.name.lower()).observe(ratio)
        if result.state is HoldState.EXPIRED:
            m.late_settles.inc()
        if result.was_in_doubt:
            m.child(m.in_doubt_closed, "settle").inc()
        if result.overshoot:
            m.overshoot_events.inc()
            m.child(m.overshoot_units, result.unit).inc(result.overshoot)
