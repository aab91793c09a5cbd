"""The Admin service: what operators call to set and read budgets."""

from __future__ import annotations

import structlog

from earmark.metrics import Metrics
from earmark.service import convert, validate
from earmark.service.drain import Drain
from earmark.service.errors import Context, rpc
from earmark.store import Store
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc

log = structlog.get_logger("earmark.admin")


class AdminService(pb_grpc.AdminServicer):
    def __init__(self, store: Store, metrics: Metrics, drain: Drain) -> None:
        self.store = store
        self.metrics = metrics
        self.drain = drain

    @rpc("PutBudget")
    async def PutBudget(self, request: pb.PutBudgetRequest, context: Context) -> pb.BudgetState:
        budget_id = validate.budget_id(request.budget_id)
        limit = validate.limit(request.limit) if request.HasField("limit") else None
        unit = validate.unit(request.unit)
        budget = await self.store.put_budget(budget_id, limit, unit)
        log.info("put_budget", budget_id=budget_id, limit=limit, unit=budget.unit)
        return convert.budget_state(budget)

    @rpc("GetBudget")
    async def GetBudget(self, request: pb.GetBudgetRequest, context: Context) -> pb.BudgetState:
        budget = await self.store.get_budget(validate.budget_id(request.budget_id))
        return convert.budget_state(budget)
