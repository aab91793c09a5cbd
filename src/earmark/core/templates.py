"""Budget templates (issue 47): a budget made on first sight. A template has a pattern, a
budget id with one '/'-separated segment that is '*' alone ("end-user/*"), and what a
PutBudget of the budget would set (core.specs.Fields). A Reserve naming a budget that does
not exist but whose id the pattern matches makes the budget from the template, in the
transaction that decides the admission: concurrent first Reserves see one budget.

The rules, as plain data: what a pattern is, which ids it matches, that no two templates
match one id (their patterns may not overlap), how many templates there may be, the budget
a template makes, and the change a newer template version makes to a budget made from an
older one at its next period (unless an operator changed the budget by hand since). The
store (store/templates.py) and the model (store/model.py) both run them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime

from earmark import limits
from earmark.core import puts, resets, specs
from earmark.core.model import Budget
from earmark.errors import FailedPrecondition, InvalidArgument, NotFound, Reason

WILDCARD = "*"
SEPARATOR = "/"
_TEMPLATE_ID = re.compile(r"[A-Za-z0-9._-]+")
# A literal segment is an id's printable ASCII without spaces, '/' and '*'.
_SEGMENT = re.compile(r"[\x21-\x29\x2b-\x2e\x30-\x7e]+")


@dataclass(frozen=True, slots=True)
class Template:
    """One template: its pattern and the settings of the budgets it makes (budget_id "")."""

    template_id: str
    pattern: str
    fields: specs.Fields
    version: int
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class TemplateInput:
    """A PutBudgetTemplate, unchecked but for its budget settings (checked by check_put)."""

    template_id: str
    pattern: str
    fields: specs.Fields


def template_id(value: str) -> str:
    """A template id, or INVALID_ARGUMENT naming template_id."""
    if not value:
        raise InvalidArgument("template_id", "is required")
    if len(value) > limits.template_id_chars_max:
        raise InvalidArgument(
            "template_id",
            f"is {len(value)} characters; at most {limits.template_id_chars_max}",
        )
    if not _TEMPLATE_ID.fullmatch(value):
        raise InvalidArgument("template_id", "may hold only letters, digits, '.', '_' and '-'")
    return value


def pattern(value: str) -> str:
    """A pattern: a budget id of one '*' segment and literal others, or INVALID_ARGUMENT
    naming pattern."""
    if not value:
        raise InvalidArgument("pattern", "is required")
    if len(value) > limits.budget_id_length_max:
        raise InvalidArgument(
            "pattern", f"is {len(value)} characters; at most {limits.budget_id_length_max}"
        )
    segments = value.split(SEPARATOR)
    wild = [index for index, segment in enumerate(segments) if segment == WILDCARD]
    if len(wild) != 1:
        raise InvalidArgument(
            "pattern", "must have exactly one segment that is '*' alone (like end-user/*)"
        )
    for segment in segments:
        if segment != WILDCARD and not _SEGMENT.fullmatch(segment):
            raise InvalidArgument(
                "pattern",
                "has a segment that is empty, holds a '*' beside other characters, or holds "
                "a space or a character that is not printable ASCII",
            )
    return value


def matches(pattern_: str, budget_id: str) -> bool:
    """Whether the pattern matches the id: the same segments, and a non-empty one for '*'."""
    wanted = pattern_.split(SEPARATOR)
    given = budget_id.split(SEPARATOR)
    if len(wanted) != len(given):
        return False
    return all((w == WILDCARD and g != "") or w == g for w, g in zip(wanted, given, strict=True))


def overlap(a: str, b: str) -> bool:
    """Whether some id matches both patterns: the same number of segments, and at each
    place the same literal or a '*' on either side (against a '*', any literal matches)."""
    left, right = a.split(SEPARATOR), b.split(SEPARATOR)
    if len(left) != len(right):
        return False
    return all(x == y or WILDCARD in (x, y) for x, y in zip(left, right, strict=True))


def candidates(budget_id: str) -> list[str]:
    """Every pattern that could match the id (each segment in turn made '*'): a store looks
    these up by equality, and at most one exists since patterns never overlap."""
    segments = budget_id.split(SEPARATOR)
    found = []
    for index, segment in enumerate(segments):
        if segment:
            found.append(SEPARATOR.join([*segments[:index], WILDCARD, *segments[index + 1 :]]))
    return found


def check_put(existing: Sequence[Template], given: TemplateInput) -> specs.Spec:
    """The checked settings of a put template, or the error naming why it is refused:
    a bad id or pattern (INVALID_ARGUMENT), a bad setting (INVALID_ARGUMENT naming
    budget.<field>), a pattern matching what another template's matches, or one template
    more than limits.templates_max (FAILED_PRECONDITION). existing: every template."""
    template_id(given.template_id)
    pattern(given.pattern)
    try:
        spec = specs.checked(replace(given.fields, budget_id=""))
    except InvalidArgument as bad:
        raise InvalidArgument(f"budget.{bad.field}", str(bad).split(": ", 1)[1]) from None
    if not spec.budget.unit:
        raise InvalidArgument("budget.unit", "is required: a template makes new budgets")
    others = [t for t in existing if t.template_id != given.template_id]
    for other in others:
        if overlap(other.pattern, given.pattern):
            raise FailedPrecondition(
                f"pattern: {given.pattern!r} matches ids that template {other.template_id!r}'s "
                f"pattern {other.pattern!r} matches; one id has one template",
                Reason.TEMPLATES_OVERLAP,
                field="pattern",
                template_id=other.template_id,
            )
    if len(others) >= limits.templates_max:
        raise FailedPrecondition(
            f"template_id: {given.template_id!r} would be template number {len(others) + 1}; "
            f"at most {limits.templates_max}",
            Reason.TEMPLATES_FULL,
            field="template_id",
        )
    return spec


def put(given: TemplateInput, version: int, now: datetime) -> Template:
    """The template a put of given leaves, once check_put admitted it (version: the store's
    next; it only grows)."""
    return Template(
        template_id=given.template_id,
        pattern=given.pattern,
        fields=replace(given.fields, budget_id=""),
        version=version,
        updated_at=now,
    )


def not_found(template_id_: str) -> NotFound:
    return NotFound(
        f"template {template_id_!r} not found",
        Reason.TEMPLATE_NOT_FOUND,
        template_id=template_id_,
        field="template_id",
    )


def matching(templates: Iterable[Template], budget_id: str) -> Template | None:
    """The template whose pattern matches the id, if any (at most one does)."""
    found = [t for t in templates if matches(t.pattern, budget_id)]
    assert len(found) <= 1, "two templates match one id: their patterns overlap"
    return found[0] if found else None


def may_make(made: int) -> bool:
    """Whether a template that made made budgets may make one more."""
    return made < limits.template_budgets_max


def budget_from(template: Template, budget_id: str, now: datetime) -> Budget:
    """The budget the template makes under budget_id, as PutBudget would make it (core.puts),
    marked with the template and its version."""
    spec = specs.checked(replace(template.fields, budget_id=budget_id)).budget
    made = puts.put(puts.PutInput(None, spec, now))
    return replace(made, template_id=template.template_id, template_version=template.version)


def refreshed(budget: Budget, template: Template, now: datetime) -> Budget | None:
    """The budget with a newer version of its template's settings, at the start of a new
    period (the caller calls this once the budget rolled), or None when it keeps its own:
    another template, changed by hand, already of this version, or archived."""
    if (
        budget.template_id != template.template_id
        # A template put again under its id with another pattern (or removed and put
        # again) is another template for the budgets its pattern no longer matches.
        or not matches(template.pattern, budget.budget_id)
        or budget.changed_by_hand
        or budget.template_version >= template.version
        or budget.archived_at is not None
    ):
        return None
    spec = specs.checked(replace(template.fields, budget_id=budget.budget_id)).budget
    if spec.unit != budget.unit:
        # A budget keeps its unit (its ledger counts in it): the template's new unit is for
        # the budgets it makes from now on.
        spec = replace(spec, unit=budget.unit)
    made = puts.put(puts.PutInput(budget, spec, now, by_hand=False))
    if made.calendar() != budget.calendar() and budget.period_start is not None:
        # The period the roll just began follows the old calendar: it starts where the old
        # one ended, and ends at the new calendar's boundary, so the new limit is a limit of
        # the new period's length.
        window = resets.next_window(made.calendar(), budget.period_start, now)
        made = replace(made, period_start=window.start, period_end=window.end)
    return replace(made, template_version=template.version)


def refresh(budget: Budget, template: Template, now: datetime) -> bool:
    """Gives budget, which has just started a new period, its template's newer settings
    (refreshed), in place: the budget object is the one the batch moves and writes. True
    when it changed."""
    made = refreshed(budget, template, now)
    if made is None:
        return False
    for each in fields(Budget):
        setattr(budget, each.name, getattr(made, each.name))
    return True


def due_for_refresh(budget: Budget) -> bool:
    """Whether a budget follows its template's changes (made from one, not changed by hand
    since): the store loads its template when its period is due to roll."""
    return budget.template_id is not None and not budget.changed_by_hand
