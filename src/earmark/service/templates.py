"""Budget templates on the wire (issue 47): a PutBudgetTemplateRequest as core data, and a
template as the BudgetTemplate it is answered with."""

from __future__ import annotations

from earmark.core import specs
from earmark.core.templates import Template, TemplateInput
from earmark.service.convert import timestamp
from earmark.v1 import budget_pb2 as pb
from earmark.validate import policies


def template_input(request: pb.PutBudgetTemplateRequest) -> TemplateInput:
    """The request as core data; core.templates checks it (budget_id is ignored)."""
    fields = policies.fields(request.budget)
    return TemplateInput(request.template_id, request.pattern, fields)


def budget_request(fields: specs.Fields) -> pb.PutBudgetRequest:
    """What a template puts, as the PutBudgetRequest that would put it (budget_id "")."""
    request = pb.PutBudgetRequest(
        unit=fields.unit,
        estimate_policy=fields.estimate_policy,  # type: ignore[arg-type]
        escrow_bps=fields.escrow_bps,
        overage_policy=fields.overage_policy,  # type: ignore[arg-type]
        period=fields.period,  # type: ignore[arg-type]
        timezone=fields.timezone,
        period_anchor=fields.period_anchor,
        threshold_bps=list(fields.threshold_bps),
        mode=fields.mode,  # type: ignore[arg-type]
        threshold_basis=fields.threshold_basis,  # type: ignore[arg-type]
    )
    for name in (
        "limit", "default_estimate", "overage_limit", "admissions_per_minute",
        "units_per_minute", "max_open_holds", "max_admissions",
    ):  # fmt: skip
        value = getattr(fields, name)
        if value is not None:
            setattr(request, name, value)
    if fields.closes_at is not None:
        request.closes_at.CopyFrom(timestamp(fields.closes_at))
    return request


def template_message(template: Template) -> pb.BudgetTemplate:
    return pb.BudgetTemplate(
        template_id=template.template_id,
        pattern=template.pattern,
        budget=budget_request(template.fields),
        version=template.version,
        updated_at=timestamp(template.updated_at),
    )
