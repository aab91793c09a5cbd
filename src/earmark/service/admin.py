"""The Admin service: what operators call to set and read budgets."""

from __future__ import annotations

import structlog

from earmark import limits
from earmark.errors import FailedPrecondition, Unavailable
from earmark.metrics import Metrics
from earmark.plans.cache import LimitUnavailable
from earmark.plans.gate import PlanGate
from earmark.service import convert, validate
from earmark.service.drain import Drain
from earmark.service.errors import Context, rpc
from earmark.store import Store
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc

log = structlog.get_logger("earmark.admin")


class AdminService(pb_grpc.AdminServicer):
    def __init__(
        self, store: Store, metrics: Metrics, drain: Drain, *, plans: PlanGate | None = None
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.drain = drain
        self.plans = plans

    @rpc("PutBudget")
    async def PutBudget(self, request: pb.PutBudgetRequest, context: Context) -> pb.BudgetState:
        budget_id = validate.budget_id(request.budget_id)
        limit = validate.limit(request.limit) if request.HasField("limit") else None
        unit = validate.unit(request.unit)
        default_estimate = validate.default_estimate(
            request.HasField("default_estimate"), request.default_estimate
        )
        policy = validate.estimate_policy(request.estimate_policy)
        budget = await self.store.put_budget(
            budget_id, limit, unit, default_estimate=default_estimate, estimate_policy=policy
        )
        log.info(
            "put_budget",
            budget_id=budget_id,
            limit=limit,
            unit=budget.unit,
            default_estimate=default_estimate,
            estimate_policy=policy.name,
        )
        return convert.budget_state(budget)

    @rpc("GetBudget")
    async def GetBudget(self, request: pb.GetBudgetRequest, context: Context) -> pb.BudgetState:
        budget = await self.store.get_budget(validate.budget_id(request.budget_id))
        return convert.budget_state(budget)

    @rpc("PutPrice")
    async def PutPrice(self, request: pb.PutPriceRequest, context: Context) -> pb.Price:
        price = await self.store.put_price(validate.price(request.HasField("price"), request.price))
        log.info(
            "put_price",
            provider=price.provider,
            model=price.model,
            version=price.version,
            effective_from=price.effective_from.isoformat(),
            input_per_mtok=price.input_per_mtok,
            output_per_mtok=price.output_per_mtok,
        )
        return convert.price_message(price)

    @rpc("ListPrices")
    async def ListPrices(
        self, request: pb.ListPricesRequest, context: Context
    ) -> pb.ListPricesResponse:
        provider = validate.price_filter("provider", request.provider, limits.provider_length_max)
        model = validate.price_filter("model", request.model, limits.model_length_max)
        found = await self.store.list_prices(provider, model)
        return pb.ListPricesResponse(prices=[convert.price_message(p) for p in found])

    @rpc("ListCycles")
    async def ListCycles(
        self, request: pb.ListCyclesRequest, context: Context
    ) -> pb.ListCyclesResponse:
        found = await self.store.cycles_of(validate.account(request.account))
        return pb.ListCyclesResponse(cycles=[convert.budget_state(b) for b in found])

    @rpc("RefreshLimits")
    async def RefreshLimits(
        self, request: pb.RefreshLimitsRequest, context: Context
    ) -> pb.ListCyclesResponse:
        account = validate.account(request.account)
        if self.plans is None:
            raise FailedPrecondition(
                "account: this sidecar reads no plans; start it with --limits-provider kinde"
            )
        try:
            found = await self.plans.refresh(account)
        except LimitUnavailable as unknown:
            raise Unavailable(str(unknown)) from None
        log.info("refresh_limits", account=account, cycles=len(found))
        return pb.ListCyclesResponse(cycles=[convert.budget_state(b) for b in found])
