"""Budget templates in PostgreSQL (issue 47; the rules are core.templates'): put, list and
delete them, and make the budgets a batch's Reserves name that do not exist yet but match
one, inside the batch's own serializable transaction.

A put locks the table (SHARE ROW EXCLUSIVE: puts and deletes wait for one another, the
batches' reads do not) and checks its pattern against every template, so that two puts
racing can never leave two overlapping patterns. A batch makes a budget under its stripe
lock (store/stripes.py): a second sidecar's batch naming the same budget waits, then finds
the budget made, so concurrent first Reserves see one budget."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from datetime import datetime
from typing import Any

import asyncpg
import structlog

from earmark.core import resets, specs, templates
from earmark.core.model import Budget
from earmark.core.templates import Template, TemplateInput
from earmark.store import queries
from earmark.store.tx import Conn

_COLUMNS = "template_id, pattern, spec, version, updated_at"
# The template's count of budgets made, one more (the first statement of a make, so that
# two batches making budgets of one template wait for each other on its row).
_COUNT_MADE = "UPDATE budget_templates SET made = made + 1 WHERE template_id = $1 RETURNING made"
_UNCOUNT_MADE = "UPDATE budget_templates SET made = made - 1 WHERE template_id = $1"

log = structlog.get_logger("earmark.templates")


def _spec_json(fields: specs.Fields) -> str:
    data: dict[str, Any] = asdict(fields)
    data.pop("budget_id")
    data["threshold_bps"] = list(fields.threshold_bps)
    data["closes_at"] = None if fields.closes_at is None else fields.closes_at.isoformat()
    return json.dumps(data, sort_keys=True)


def _fields_of(spec: str) -> specs.Fields:
    data: dict[str, Any] = json.loads(spec)
    data["threshold_bps"] = tuple(data["threshold_bps"])
    if data.get("closes_at") is not None:
        data["closes_at"] = datetime.fromisoformat(data["closes_at"])
    # A field a later release added and this one does not know is not a setting here.
    known = {name for name in specs.Fields.__dataclass_fields__ if name != "budget_id"}
    return specs.Fields(budget_id="", **{k: v for k, v in data.items() if k in known})


def _template_of(row: asyncpg.Record) -> Template:
    return Template(
        template_id=row["template_id"],
        pattern=row["pattern"],
        fields=_fields_of(row["spec"]),
        version=row["version"],
        updated_at=row["updated_at"],
    )


async def list_all(conn: Conn) -> list[Template]:
    """Every template, in template id order (at most limits.templates_max)."""
    rows = await conn.fetch(f"SELECT {_COLUMNS} FROM budget_templates ORDER BY template_id")
    return [_template_of(row) for row in rows]


async def put(conn: Conn, given: TemplateInput, now: datetime) -> Template:
    """Creates or replaces the template, checked against every other (core.templates)."""
    await conn.execute("LOCK TABLE budget_templates IN SHARE ROW EXCLUSIVE MODE")
    existing = await list_all(conn)
    spec = templates.check_put(existing, given)
    # Its unit is admitted now (limits.units_max), so that making a budget from it inside a
    # batch never fails on the unit, which would fail the batch's other operations.
    await queries.admit_unit(conn, spec.budget.unit)
    version = await conn.fetchval("SELECT nextval('budget_template_versions')")
    template = templates.put(given, version, now)
    await conn.execute(
        """
        INSERT INTO budget_templates (template_id, pattern, spec, version, updated_at)
        VALUES ($1, $2, $3::jsonb, $4, $5)
        ON CONFLICT (template_id) DO UPDATE SET pattern = EXCLUDED.pattern,
            spec = EXCLUDED.spec, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at
        """,
        template.template_id,
        template.pattern,
        _spec_json(template.fields),
        template.version,
        template.updated_at,
    )
    return template


async def delete(conn: Conn, template_id: str) -> Template:
    """Removes the template (the budgets made from it stay); NOT_FOUND when there is none."""
    await conn.execute("LOCK TABLE budget_templates IN SHARE ROW EXCLUSIVE MODE")
    row = await conn.fetchrow(
        f"DELETE FROM budget_templates WHERE template_id = $1 RETURNING {_COLUMNS}", template_id
    )
    if row is None:
        raise templates.not_found(template_id)
    return _template_of(row)


async def of_budgets(conn: Conn, template_ids: Iterable[str]) -> dict[str, Template]:
    """The templates of these ids that exist, by id."""
    ids = sorted(set(template_ids))
    if not ids:
        return {}
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM budget_templates WHERE template_id = ANY($1::text[])", ids
    )
    return {row["template_id"]: _template_of(row) for row in rows}


async def for_rolls(conn: Conn, budgets: Iterable[Budget], now: datetime) -> dict[str, Template]:
    """The templates of the budgets that follow one and whose period rolls at now (core.
    templates.refresh gives them its newer settings as the new period begins); read only
    then, by the batches and the sweeper alike."""
    rolling = [
        b.template_id
        for b in budgets
        if b.template_id is not None and templates.due_for_refresh(b) and resets.due(b, now)
    ]
    return await of_budgets(conn, rolling) if rolling else {}


async def write_refreshed(conn: Conn, refreshed: Iterable[Budget]) -> None:
    """Writes the settings of the budgets a roll gave their template's newer ones, after the
    decisions' rows: the period the roll closed has taken its ceiling (the audit's) from the
    limit it had, and the new limit raises the budget's from then on."""
    for budget in sorted(refreshed, key=lambda b: b.budget_id):
        await queries.update_budget(conn, budget)


async def make_missing(conn: Conn, budget_ids: Iterable[str], now: datetime) -> dict[str, Budget]:
    """Makes each of the ids that a template matches (the caller found them missing, under
    their stripe locks), as PutBudget would make it from the template; the budgets made, by
    id. An id no template matches stays missing: its Reserve is told BUDGET_NOT_FOUND."""
    wanted = sorted(set(budget_ids))
    patterns = sorted({pattern for each in wanted for pattern in templates.candidates(each)})
    if not patterns:
        return {}
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM budget_templates WHERE pattern = ANY($1::text[])", patterns
    )
    found = [_template_of(row) for row in rows]
    made: dict[str, Budget] = {}
    for budget_id in wanted:
        template = templates.matching(found, budget_id)
        if template is None:
            continue
        counted = await conn.fetchval(_COUNT_MADE, template.template_id)
        if counted is None or not templates.may_make(counted - 1):
            # Full: the Reserve is BUDGET_NOT_FOUND, as without the template.
            await conn.execute(_UNCOUNT_MADE, template.template_id)
            log.warning("template_full", template_id=template.template_id, made=counted)
            continue
        budget = templates.budget_from(template, budget_id, now)
        await queries.admit_unit(conn, budget.unit)
        created = await queries.insert_budget(conn, budget)
        # Under the stripe lock nobody else inserts it; a budget made by PutBudget since
        # the batch's lock is read instead (ON CONFLICT answered nothing) and not counted.
        if created is None:
            await conn.execute(_UNCOUNT_MADE, template.template_id)
            created = await queries.lock_budget_for_update(conn, budget_id)
            assert created is not None
        made[budget_id] = created
    return made
