"""`earmark templates put|list|delete`: budget templates (issue 47), through Admin.

A template makes a budget whose id matches its pattern (a budget id with one '/'-separated
segment that is '*' alone, as `end-user/*`) on that budget's first Reserve, with the
settings the template was put with. `put` takes the settings as `earmark budgets put`
does (a flag not given takes its default) and a `--pattern`; a pattern that overlaps
another template's is refused (FAILED_PRECONDITION). `delete` stops new budgets being made
from it; the budgets it made stay."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from google.protobuf.message import Message

from earmark import options
from earmark.ops import budgets, policies, render
from earmark.ops.connect import Admin, access_from, add_admin_arguments
from earmark.options import Option
from earmark.v1 import budget_pb2 as pb

HEADERS = (
    "TEMPLATE", "PATTERN", "UNIT", "LIMIT", "POLICY", "MODE", "PERIOD", "THRESHOLDS", "RATE",
    "OPEN HOLDS", "ADMISSIONS", "CLOSES AT", "VERSION", "UPDATED AT", "DELETED AT",
)  # fmt: skip
AMOUNTS = ("LIMIT", "OPEN HOLDS", "ADMISSIONS", "VERSION")
PATTERN = Option(
    "pattern",
    "the budget ids it makes: a budget id with one '/'-separated segment that is '*' alone "
    "(end-user/*, org/*/daily)",
    required=True,
)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`earmark templates` and its verbs."""
    templates = commands.add_parser(
        "templates",
        help="put, list and delete budget templates: the settings of budgets made on their "
        "first Reserve (Admin)",
    )
    verbs = templates.add_subparsers(dest="verb", required=True)
    put = verbs.add_parser(
        "put",
        help="create a template or replace its pattern and settings; a setting not given "
        "takes its default, as with `budgets put`",
    )
    put.add_argument("template_id", help="letters, digits, '.', '_' and '-', at most 64")
    settings = (*budgets.PUT_OPTIONS, *budgets.POLICY_OPTIONS, *budgets.RUN_OPTIONS)
    options.add_options(put, (PATTERN, *settings))
    put.set_defaults(run=put_template)
    listing = verbs.add_parser("list", help="every template, in id order")
    listing.set_defaults(run=list_templates)
    delete = verbs.add_parser(
        "delete", help="make no more budgets from a template; those it made stay"
    )
    delete.add_argument("template_id")
    delete.set_defaults(run=delete_template)
    for verb in (put, listing, delete):
        add_admin_arguments(verb)


def put_request(args: argparse.Namespace) -> pb.PutBudgetTemplateRequest:
    """The PutBudgetTemplateRequest of the put command's flags: the settings as `budgets
    put` reads its flags, for no budget id of their own."""
    settings = budgets.put_request(argparse.Namespace(**{**vars(args), "budget_id": ""}))
    return pb.PutBudgetTemplateRequest(
        template_id=args.template_id, pattern=args.pattern, budget=settings
    )


def put_template(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        template = admin.call("PutBudgetTemplate", put_request(args), pb.BudgetTemplate)
    return show([template], args.output, template)


def list_templates(args: argparse.Namespace) -> str:
    with Admin(access_from(args)) as admin:
        answer = admin.call(
            "ListBudgetTemplates", pb.ListBudgetTemplatesRequest(), pb.ListBudgetTemplatesResponse
        )
    return show(list(answer.templates), args.output, answer)


def delete_template(args: argparse.Namespace) -> str:
    request = pb.DeleteBudgetTemplateRequest(template_id=args.template_id)
    with Admin(access_from(args)) as admin:
        template = admin.call("DeleteBudgetTemplate", request, pb.BudgetTemplate)
    return show([template], args.output, template)


def show(templates: Sequence[pb.BudgetTemplate], output: str, answer: Message) -> str:
    """The answer as one JSON document, or its templates as a table."""
    if output == "json":
        return render.as_json(answer)
    return render.table(HEADERS, [row(t) for t in templates], right=AMOUNTS)


def row(template: pb.BudgetTemplate) -> list[str]:
    """A template's line of the table."""
    budget = template.budget
    unit = budget.unit

    def most(field: str) -> str:
        return f"{getattr(budget, field):,}" if budget.HasField(field) else render.NONE

    admissions_per_minute = (
        budget.admissions_per_minute if budget.HasField("admissions_per_minute") else None
    )
    units_per_minute = budget.units_per_minute if budget.HasField("units_per_minute") else None
    rate = policies.rate_parts(admissions_per_minute, units_per_minute, unit)
    return [
        template.template_id,
        template.pattern,
        unit,
        render.amount(budget.limit, unit) if budget.HasField("limit") else "unlimited",
        policy(budget),
        policies.mode_name(budget.mode),
        policies.period_text(budget.period, budget.timezone, budget.period_anchor),
        ",".join(policies.percents(budget.threshold_bps)) or render.NONE,
        ", ".join(rate) or render.NONE,
        most("max_open_holds"),
        most("max_admissions"),
        render.timestamp(budget.closes_at),
        f"{template.version:,}",
        render.timestamp(template.updated_at),
        render.timestamp(template.deleted_at),
    ]


def policy(budget: pb.PutBudgetRequest) -> str:
    """hard, or soft with how far past the limit it may go."""
    if budget.overage_policy != pb.OVERAGE_POLICY_SOFT:
        return "hard"
    if budget.HasField("overage_limit"):
        return f"soft +{render.amount(budget.overage_limit, budget.unit)}"
    return "soft"
