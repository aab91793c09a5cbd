"""A PutBudgetRequest's settings (limit, unit, estimates, escrow, overage, and issue 34's
period, notices, mode and rate windows, issue 43's threshold_basis), and an
UpdateBudgetRequest's mask and temporary limit (issue 47). The rules themselves are
core.specs' (PutBudget's, which the store also runs on an update's merge), core.updates'
(the mask) and core.raises' (the temporary limit); each failure names its field."""

from __future__ import annotations

from earmark.core import raises, specs, updates
from earmark.v1 import budget_pb2 as pb
from earmark.validate import prices


def fields(request: pb.PutBudgetRequest) -> specs.Fields:
    """The request as plain data, unchecked: an absent optional is None."""

    def optional(name: str) -> int | None:
        value: int = getattr(request, name)
        return value if request.HasField(name) else None

    return specs.Fields(
        budget_id=request.budget_id,
        limit=optional("limit"),
        unit=request.unit,
        default_estimate=optional("default_estimate"),
        estimate_policy=request.estimate_policy,
        escrow_bps=request.escrow_bps,
        overage_policy=request.overage_policy,
        overage_limit=optional("overage_limit"),
        period=request.period,
        timezone=request.timezone,
        period_anchor=request.period_anchor,
        threshold_bps=tuple(request.threshold_bps),
        mode=request.mode,
        admissions_per_minute=optional("admissions_per_minute"),
        units_per_minute=optional("units_per_minute"),
        threshold_basis=request.threshold_basis,
        max_open_holds=optional("max_open_holds"),
        max_admissions=optional("max_admissions"),
        closes_at=(
            prices.timestamp("closes_at", request.closes_at)
            if request.HasField("closes_at")
            else None
        ),
    )


def spec(request: pb.PutBudgetRequest) -> specs.Spec:
    """What PutBudget sets, or InvalidArgument naming the first field that is wrong."""
    return specs.checked(fields(request))


def update(request: pb.UpdateBudgetRequest) -> tuple[specs.Fields, frozenset[str]]:
    """An update's fields (unchecked: the store checks their merge) and the names of those
    it changes, or InvalidArgument naming update_mask."""
    given = fields(request.budget)
    paths = list(request.update_mask.paths) if request.HasField("update_mask") else []
    return given, updates.mask(paths, given)


def raised(request: pb.UpdateBudgetRequest) -> raises.Raise:
    """An update's temporary limit: limit_until (absent: the limit is permanent) and reason,
    parsed; the store checks them against its clock and the mask (core.raises.check)."""
    until = None
    if request.HasField("limit_until"):
        until = prices.timestamp("limit_until", request.limit_until)
    return raises.Raise(until=until, reason=request.reason)
