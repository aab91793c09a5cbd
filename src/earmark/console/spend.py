"""The console's spend page: what a budget spent, from its ledger, by model, by job or by
UTC day, over a range of days. One GetSpend: the sidecar sums in SQL the budget's entries
in the range (by an index on budget and time) and sends only the groups, so the page reads
what the range holds, not the budget's whole ledger."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from earmark import limits
from earmark.client.admin import Spend
from earmark.console import fields, present

GROUPS = ("model", "job", "day")
# What a group's key is called, and what an empty key means.
NAMES = {"model": ("Model", "(no model)"), "job": ("Job", "(no job)"), "day": ("Day (UTC)", "")}
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)


@dataclass(frozen=True, slots=True)
class SpendAsk:
    """What the page's query asks for: a budget's spend by group over the UTC days first
    to last (both included; None: no bound)."""

    budget_id: str
    group: str
    first: date | None
    last: date | None

    def window(self) -> tuple[datetime | None, datetime | None]:
        """[since, until) in UTC: from the first day's start to the end of the last."""
        since = None if self.first is None else datetime.combine(self.first, time(), UTC)
        until = None
        if self.last is not None and self.last < date.max:
            until = datetime.combine(self.last + timedelta(days=1), time(), UTC)
        return since, until


def day(raw: str | None, name: str) -> date | None:
    """A UTC day as YYYY-MM-DD (what a date field sends); empty is no bound."""
    text = fields.text(raw, name, len("YYYY-MM-DD"), False)
    if not text:
        return None
    try:
        if _DAY.fullmatch(text) is None:
            raise ValueError(text)
        return date.fromisoformat(text)
    except ValueError:
        raise fields.BadInput(f"{name}: {text!r} is not a day (YYYY-MM-DD)") from None


def ask_of(query: Mapping[str, str]) -> SpendAsk:
    """The page's query, every field checked: id, by (model, job or day), from and to."""
    budget_id = fields.text(query.get("id"), "id", limits.budget_id_length_max)
    group = fields.text(query.get("by"), "by", max(map(len, GROUPS)), False) or "model"
    if group not in GROUPS:
        raise fields.BadInput(f"by: {group!r} is not one of {', '.join(GROUPS)}")
    first, last = day(query.get("from"), "from"), day(query.get("to"), "to")
    if first is not None and last is not None and last < first:
        raise fields.BadInput(f"to: {last} is before from ({first})")
    return SpendAsk(budget_id, group, first, last)


def spend_view(ask: SpendAsk, spend: Spend) -> dict[str, Any]:
    """The page's rows as a person reads them: each group's key (empty ones named), what
    it used in the budget's unit with its share of the total as a bar, and its holds."""
    unit = spend.unit
    key_name, empty = NAMES[ask.group]
    rows = [
        {
            "key": row.key or empty,
            "used": present.amount(row.used, unit),
            "holds": f"{row.holds:,}",
            "pct": round(present.percent(row.used, spend.used), 2),
        }
        for row in spend.rows
    ]
    return {
        "id": ask.budget_id,
        "by": ask.group,
        "first": "" if ask.first is None else ask.first.isoformat(),
        "last": "" if ask.last is None else ask.last.isoformat(),
        "key_name": key_name,
        "rows": rows,
        "total": present.amount(spend.used, unit),
        "groups": spend.groups,
        "unit_name": present.unit_name(unit),
    }
