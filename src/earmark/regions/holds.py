"""A region's store for the workers' service: the region's own store, but a Reserve its
shares cannot admit (no room, a lease too short, no share yet) waits on an ask for what it
needs (RegionAgent.demand) and is tried again, once per budget of its scope at most. Every
admission is still the region's own batch: an answer only moves the share's limit."""

from __future__ import annotations

from typing import Any

from earmark.core.model import RefusalReason
from earmark.core.ops import Op, ReserveOp, ReserveResult, Result
from earmark.errors import NotFound, Reason, Unavailable
from earmark.regions.agent import Asked, RegionAgent
from earmark.store.interface import Holds

# The refusals an answer from the home may lift.
SHARE_REFUSALS = frozenset(
    {
        RefusalReason.INSUFFICIENT_BUDGET,
        RefusalReason.SHARE_LEASE_ENDED,
        RefusalReason.HOLD_OUTLIVES_SHARE,
    }
)


class RegionHolds:
    """Holds, with a Reserve's shortfall asked of the home (everything else as the region's
    store answers it)."""

    def __init__(self, store: Holds, agent: RegionAgent) -> None:
        self._store = store
        self._agent = agent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def submit(self, op: Op) -> Result:
        if not isinstance(op, ReserveOp):
            return await self._store.submit(op)
        # Each budget of the scope may need one ask (a first share, or more room), and the
        # last attempt's answer is the caller's.
        for _ in range(len(op.also_budget_ids) + 1):
            try:
                result = await self._store.submit(op)
            except NotFound as missing:
                budget_id = missing.about.get("budget_id", "")
                if missing.reason is not Reason.BUDGET_NOT_FOUND or not budget_id:
                    raise
                asked = await self._agent.demand(budget_id, max(1, op.amount))
                if asked is Asked.NOT_FOUND:
                    raise
                if asked is not Asked.ANSWERED:
                    raise Unavailable(
                        f"budget {budget_id!r}: this region has no share of it yet, and its "
                        "home does not answer; try again",
                        Reason.HOME_UNREACHABLE,
                        budget_id=budget_id,
                    ) from None
                continue
            assert isinstance(result, ReserveResult)
            if result.admitted or result.reason not in SHARE_REFUSALS:
                return result
            budget_id = result.refused_budget_id or op.budget_id
            # A share its late use took past its level (remaining below 0) needs that too.
            need = result.amount - (result.remaining or 0)
            asked = await self._agent.demand(budget_id, max(1, need), shares_only=True)
            if asked is not Asked.ANSWERED:
                return result
        return await self._store.submit(op)
