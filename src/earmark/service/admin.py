"""The Admin service: what operators call to set and read budgets, prices and holds,
and to resolve what workers left behind."""

from __future__ import annotations

import structlog

from earmark import limits, validate
from earmark.core import resets, templates
from earmark.core.model import Budget
from earmark.core.ops import ReleaseOp, ResolveOp, SettleResult
from earmark.errors import FailedPrecondition, Reason, Unavailable
from earmark.metrics import Metrics
from earmark.plans.cache import LimitUnavailable
from earmark.plans.gate import PlanGate
from earmark.service import convert
from earmark.service import regions as service_regions
from earmark.service import templates as service_templates
from earmark.service.drain import Drain
from earmark.service.errors import Context
from earmark.service.middleware import rpc
from earmark.store.interface import AdminStore
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc
from earmark.validate import calls as validate_calls
from earmark.validate import policies as validate_policies
from earmark.validate import prices as validate_prices
from earmark.validate import scopes as validate_scopes
from earmark.validate import spend as validate_spend

log = structlog.get_logger("earmark.admin")


class AdminService(pb_grpc.AdminServicer):
    def __init__(
        self, store: AdminStore, metrics: Metrics, drain: Drain, *, plans: PlanGate | None = None
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.drain = drain
        self.plans = plans

    @rpc("PutBudget")
    async def PutBudget(self, request: pb.PutBudgetRequest, context: Context) -> pb.BudgetState:
        budget_id = validate.budget_id(request.budget_id)
        spec = validate_policies.spec(request)
        given = spec.budget
        budget = await self.store.put_budget(
            budget_id,
            given.limit,
            given.unit,
            default_estimate=given.default_estimate,
            estimate_policy=given.estimate_policy,
            escrow_bps=given.escrow_bps,
            overage_policy=given.overage_policy,
            overage_limit=given.overage_limit,
            policies=spec.policies,
        )
        log.info("put_budget", **_settings(budget))
        return convert.budget_state(budget)

    @rpc("UpdateBudget")
    async def UpdateBudget(
        self, request: pb.UpdateBudgetRequest, context: Context
    ) -> pb.BudgetState:
        """Sets only the fields the mask names (AIP-134), and with limit_until a temporary
        limit (core.raises); the store merges them into the budget it locked and checks the
        whole as PutBudget does."""
        validate.budget_id(request.budget.budget_id)
        given, named = validate_policies.update(request)
        raised = validate_policies.raised(request)
        budget = await self.store.update_budget(given, named, raised=raised)
        log.info(
            "update_budget",
            update_mask=sorted(named),
            limit_until=None if raised.until is None else raised.until.isoformat(),
            **_settings(budget),
        )
        return convert.budget_state(budget)

    @rpc("PutBudgetTemplate")
    async def PutBudgetTemplate(
        self, request: pb.PutBudgetTemplateRequest, context: Context
    ) -> pb.BudgetTemplate:
        """Creates or replaces a template; the store checks it against every other."""
        template = await self.store.put_template(service_templates.template_input(request))
        log.info(
            "put_budget_template",
            template_id=template.template_id,
            pattern=template.pattern,
            version=template.version,
        )
        return service_templates.template_message(template)

    @rpc("ListBudgetTemplates")
    async def ListBudgetTemplates(
        self, request: pb.ListBudgetTemplatesRequest, context: Context
    ) -> pb.ListBudgetTemplatesResponse:
        found = await self.store.list_templates()
        return pb.ListBudgetTemplatesResponse(
            templates=[service_templates.template_message(t) for t in found]
        )

    @rpc("ListShares")
    async def ListShares(
        self, request: pb.ListSharesRequest, context: Context
    ) -> pb.ListSharesResponse:
        budget_id = validate.budget_id(request.budget_id) if request.budget_id else ""
        after = ""
        if request.after_budget_id:
            after = validate.identifier(
                "after_budget_id", request.after_budget_id, limits.budget_id_length_max
            )
        views, following = await self.store.list_shares(budget_id, after)
        return pb.ListSharesResponse(
            shares=[service_regions.share_message(v) for v in views], next_budget_id=following
        )

    @rpc("DeleteBudgetTemplate")
    async def DeleteBudgetTemplate(
        self, request: pb.DeleteBudgetTemplateRequest, context: Context
    ) -> pb.BudgetTemplate:
        template = await self.store.delete_template(templates.template_id(request.template_id))
        log.info("delete_budget_template", template_id=template.template_id)
        reply = service_templates.template_message(template)
        reply.deleted_at.CopyFrom(convert.timestamp(self.store.now()))
        return reply

    @rpc("GetBudget")
    async def GetBudget(self, request: pb.GetBudgetRequest, context: Context) -> pb.BudgetState:
        budget = await self.store.get_budget(validate.budget_id(request.budget_id))
        return convert.budget_state(budget)

    @rpc("PutPrice")
    async def PutPrice(self, request: pb.PutPriceRequest, context: Context) -> pb.Price:
        price = await self.store.put_price(
            validate_prices.price(request.HasField("price"), request.price)
        )
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
        found = await self.store.scans.list_prices(provider, model)
        prices = await self.store.scans.pacer.map(convert.price_message, found)
        return pb.ListPricesResponse(prices=prices)

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
                "account: this sidecar reads no plans; start it with --limits-provider kinde "
                "or --limits-provider file",
                Reason.NO_LIMITS_PROVIDER,
                field="account",
            )
        try:
            found = await self.plans.refresh(account)
        except LimitUnavailable as unknown:
            raise Unavailable(str(unknown), Reason.LIMITS_UNAVAILABLE, account=account) from None
        log.info("refresh_limits", account=account, cycles=len(found))
        return pb.ListCyclesResponse(cycles=[convert.budget_state(b) for b in found])

    @rpc("ListHolds")
    async def ListHolds(
        self, request: pb.ListHoldsRequest, context: Context
    ) -> pb.ListHoldsResponse:
        # An empty budget_id lists every budget's holds in one open state.
        budget_id = validate.budget_id(request.budget_id) if request.budget_id else ""
        state = validate_scopes.hold_state(request.state)
        size = validate_scopes.page_size(request.page_size)
        token = validate_scopes.page_token(request.page_token)
        if budget_id:
            page = await self.store.scans.list_holds(budget_id, state, size, token)
        else:
            across = validate_scopes.state_across_budgets(state)
            page = await self.store.scans.list_holds_across(across, size, token)
        holds = await self.store.scans.pacer.map(convert.hold_message, page.items)
        for hold in holds:
            hold.released = hold.reservation_id in page.released
        return pb.ListHoldsResponse(holds=holds, next_page_token=page.next_page_token)

    @rpc("ListLedger")
    async def ListLedger(
        self, request: pb.ListLedgerRequest, context: Context
    ) -> pb.ListLedgerResponse:
        page = await self.store.scans.list_ledger(
            validate.budget_id(request.budget_id),
            validate_scopes.page_size(request.page_size),
            validate_scopes.page_token(request.page_token),
        )
        entries = await self.store.scans.pacer.map(convert.ledger_message, page.items)
        return pb.ListLedgerResponse(entries=entries, next_page_token=page.next_page_token)

    @rpc("ListBudgets")
    async def ListBudgets(
        self, request: pb.ListBudgetsRequest, context: Context
    ) -> pb.ListBudgetsResponse:
        prefix = request.prefix
        if prefix:
            prefix = validate.identifier("prefix", prefix, limits.budget_id_length_max)
        page = await self.store.scans.list_budgets(
            prefix,
            validate_scopes.page_size(request.page_size),
            validate_scopes.page_token(request.page_token),
        )
        now = self.store.now()
        current = [resets.current(budget, now) for budget in page.items]
        budgets = await self.store.scans.pacer.map(convert.budget_state, current)
        return pb.ListBudgetsResponse(budgets=budgets, next_page_token=page.next_page_token)

    @rpc("ListCalls")
    async def ListCalls(
        self, request: pb.ListCallsRequest, context: Context
    ) -> pb.ListCallsResponse:
        query = validate_calls.calls_query(request)
        page = await self.store.scans.list_calls(query)
        calls = await self.store.scans.pacer.map(convert.call_message, page.items)
        return pb.ListCallsResponse(calls=calls, next_page_token=page.next_page_token)

    @rpc("GetSpend")
    async def GetSpend(self, request: pb.GetSpendRequest, context: Context) -> pb.GetSpendResponse:
        spent = await self.store.scans.spend(validate_spend.spend_query(request))
        rows = [pb.SpendRow(key=r.key, used=r.used, holds=r.holds) for r in spent.rows]
        return pb.GetSpendResponse(rows=rows, used=spent.used, groups=spent.groups, unit=spent.unit)

    @rpc("ResolveHold")
    async def ResolveHold(
        self, request: pb.ResolveHoldRequest, context: Context
    ) -> pb.SettleResponse:
        used, usage = validate_prices.amount_or_usage(
            "used", request.used, request.HasField("usage"), request.usage
        )
        op = ResolveOp(
            reservation_id=validate.reservation_id(request.reservation_id),
            used=used,
            usage=usage,
            evidence=validate_calls.evidence(request.evidence),
        )
        result = await self.store.submit(op)
        assert isinstance(result, SettleResult)
        if not result.duplicate:
            self.metrics.in_doubt_closed.labels("resolve").inc()
            self.metrics.charged_units.labels(result.unit).inc(max(0, result.used_delta))
        log.info(
            "resolve_hold",
            reservation_id=op.reservation_id,
            used=result.used,
            charged=result.charged,
            released=result.released,
            duplicate=result.duplicate,
        )
        return convert.settle_response(result)

    @rpc("ReleaseHold")
    async def ReleaseHold(
        self, request: pb.ReleaseHoldRequest, context: Context
    ) -> pb.SettleResponse:
        op = ReleaseOp(reservation_id=validate.reservation_id(request.reservation_id))
        result = await self.store.submit(op)
        assert isinstance(result, SettleResult)
        if result.was_in_doubt:
            self.metrics.in_doubt_closed.labels("release").inc()
        log.info(
            "release_hold",
            reservation_id=op.reservation_id,
            charged=result.charged,
            released=result.released,
            was_in_doubt=result.was_in_doubt,
        )
        return convert.settle_response(result)

    @rpc("DeleteBudget")
    async def DeleteBudget(
        self, request: pb.DeleteBudgetRequest, context: Context
    ) -> pb.BudgetState:
        budget = await self.store.archive_budget(validate.budget_id(request.budget_id))
        log.info("delete_budget", budget_id=budget.budget_id)
        return convert.budget_state(budget)


def _settings(budget: Budget) -> dict[str, object]:
    """What an operator set of a budget, as PutBudget and UpdateBudget log it."""
    return {
        "budget_id": budget.budget_id,
        "limit": budget.limit,
        "unit": budget.unit,
        "default_estimate": budget.default_estimate,
        "estimate_policy": budget.estimate_policy.name,
        "escrow_bps": budget.escrow_bps or None,
        "overage_policy": budget.overage_policy.name,
        "overage_limit": budget.overage_limit,
        "period": budget.period.name,
        "timezone": budget.timezone or None,
        "period_anchor": budget.period_anchor or None,
        "threshold_bps": list(budget.threshold_bps) or None,
        "threshold_basis": budget.threshold_basis.name,
        "mode": budget.mode.name,
        "admissions_per_minute": budget.admissions_per_minute,
        "units_per_minute": budget.units_per_minute,
    }
