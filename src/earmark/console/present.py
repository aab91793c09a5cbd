"""What the console's pages show, from what Admin answers: amounts as a person reads them,
a budget's bar and states, its spend over time from the ledger, its nesting from its holds,
and what a shape costs now. Pure: plain data in, plain data out; `now` is an argument."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from earmark.client.admin import HoldRecord, LedgerEntry
from earmark.client.types import BudgetState, BudgetTemplate
from earmark.core import refusing
from earmark.core.model import OPEN_STATES, BudgetMode, HoldState, OveragePolicy
from earmark.core.periods import Period
from earmark.core.prices import USD_MICROS, Price, PriceBook, Shape, shape_cost
from earmark.ops import money, policies, render
from earmark.ops.prices import window as daily_window

T = TypeVar("T")


async def at_most(items: AsyncIterator[T], most: int) -> AsyncIterator[T]:
    """The first `most` items of a listing (which fetches its next page only when read)."""
    if most <= 0:
        return
    count = 0
    async for item in items:
        yield item
        count += 1
        if count >= most:
            return


def amount(value: int | None, unit: str) -> str:
    """An amount in its unit as the operator's commands print it (dollars for usd_micros,
    grouped digits otherwise); None is no limit."""
    return "no limit" if value is None else render.amount(value, unit)


def unit_name(unit: str) -> str:
    return money.unit_words(unit)


def hold_state(hold: HoldRecord) -> str:
    """The hold's state in words: "released" for one an operator released (the wire's
    state is EXPIRED for it, as for a lapsed lease; Hold.released tells them apart)."""
    if hold.released:
        return "released"
    return hold.state.name.lower().replace("_", " ")


def percent(part: int, whole: int | None) -> float:
    """part of whole in percent, within 0 and 100 (a bar's width); no limit is 0."""
    if not whole or whole <= 0:
        return 0.0
    return max(0.0, min(100.0, 100.0 * part / whole))


def states(state: BudgetState, now: datetime) -> list[str]:
    """The words a budget's badges say at now: archived, closed (its closes_at has come),
    exceeded, in overage, refusing (core.refusing, the rule `earmark budgets get` says it
    by)."""
    words = []
    if state.archived_at is not None:
        words.append("archived")
    if state.closes_at is not None and state.closes_at <= now:
        words.append("closed")
    if state.exceeded:
        words.append("exceeded")
    if state.overage_since is not None:
        words.append("in overage")
    soft = state.overage_policy == OveragePolicy.SOFT
    if refusing.refusing(state.refusals, state.remaining, state.last_refused_at, now, soft=soft):
        words.append("refusing")
    return words


def refusals(state: BudgetState) -> str:
    """The Reserves refused for want of room this period, and when the latest was."""
    if not state.refusals:
        return "none"
    times = "once" if state.refusals == 1 else f"{state.refusals:,} times"
    return f"{times}, last {stamp(state.last_refused_at)}"


def overage(state: BudgetState) -> str:
    """The overage policy as a person reads it, with its allowance."""
    if state.overage_policy == OveragePolicy.HARD:
        return "hard"
    if state.overage_limit is None:
        return "soft, unbounded"
    allowance = amount(state.overage_limit, state.unit)
    return f"soft, up to {allowance} over"


def local_stamp(at: datetime | None, timezone: str) -> str:
    """A moment in UTC, and first as the budget's timezone reads it when that is not UTC:
    "2026-04-01 00:00 Europe/Berlin (2026-03-31 22:00:00 UTC)"."""
    if at is None:
        return ""
    if not timezone or timezone == "UTC":
        return stamp(at)
    try:
        local = at.astimezone(ZoneInfo(timezone))
    except (ZoneInfoNotFoundError, ValueError):
        return stamp(at)
    return f"{local:%Y-%m-%d %H:%M} {timezone} ({stamp(at)})"


def local_short(at: datetime | None, timezone: str) -> str:
    """A moment as the budget's timezone reads it, to the minute ("" for none)."""
    if at is None:
        return ""
    try:
        zone = ZoneInfo(timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        zone = ZoneInfo("UTC")
    return f"{at.astimezone(zone):%Y-%m-%d %H:%M}"


def policies_view(state: BudgetState) -> dict[str, Any]:
    """A budget's policies (issue 34) as a page shows them, and as its form starts from."""
    unit, zone = state.unit, state.timezone
    thresholds = policies.percents(state.threshold_bps)
    rate = policies.rate_parts(state.admissions_per_minute, state.units_per_minute, unit)
    return {
        "mode": policies.mode_name(state.mode),
        "observing": state.mode == BudgetMode.OBSERVE,
        "period": policies.period_text(state.period, zone, state.period_anchor),
        "resets": state.period != Period.NEVER or state.resets_at is not None,
        "period_start": local_stamp(state.period_start, zone),
        "resets_at": local_stamp(state.resets_at, zone),
        # The same, short, for a row of the list (whose period names the timezone).
        "starts_local": local_short(state.period_start, zone),
        "resets_local": local_short(state.resets_at, zone),
        "thresholds": ", ".join(thresholds) or "none",
        "threshold_basis": policies.basis_name(state.threshold_basis),
        "rate": ", ".join(rate) or "no bound",
        # What the policies form starts from: the settings as a person would type them.
        "typed": {
            "period": state.period.name.lower(),
            "timezone": zone,
            "period_anchor": str(state.period_anchor),
            "thresholds": ", ".join(t.removesuffix("%") for t in thresholds),
            "mode": policies.mode_name(state.mode),
            "threshold_basis": policies.basis_name(state.threshold_basis),
            "admissions_per_minute": (
                "" if state.admissions_per_minute is None else str(state.admissions_per_minute)
            ),
            "units_per_minute": (
                "" if state.units_per_minute is None else money.typed(state.units_per_minute, unit)
            ),
        },
    }


def of_most(count: int, most: int | None) -> str:
    """A count, and of how many at most when there is a bound: "1 of 2", "3"."""
    return f"{count:,}" if most is None else f"{count:,} of {most:,}"


def run_limits_view(state: BudgetState, now: datetime) -> dict[str, Any]:
    """A budget's run limits (issue 47) as a page shows them: the holds open now and the
    Reserves admitted this period, each of its most; when it closes; its temporary raise
    (the limit until when, what it becomes then, and why), and the template it was made
    from."""
    closes = state.closes_at
    until = state.limit_until
    raised = None
    if until is not None:
        raised = {
            "until": stamp(until),
            "after": amount(state.limit_after, state.unit),
            "reason": state.limit_reason,
        }
    return {
        "open_of": of_most(state.open_reservations, state.max_open_holds),
        "admissions": of_most(state.admissions, state.max_admissions),
        "run_limited": state.max_open_holds is not None or state.max_admissions is not None,
        "closes_at": stamp(closes),
        "closed": closes is not None and closes <= now,
        "raise": raised,
        "template_id": state.template_id,
        "changed_by_hand": state.changed_by_hand,
    }


def template_view(template: BudgetTemplate) -> dict[str, Any]:
    """A budget template as the templates page lists it."""
    unit = template.unit
    return {
        "id": template.template_id,
        "pattern": template.pattern,
        "limit": amount(template.limit, unit),
        "unit_name": unit_name(unit),
        "period": policies.period_text(template.period, template.timezone, template.period_anchor),
        "open_most": "no bound"
        if template.max_open_holds is None
        else f"{template.max_open_holds:,}",
        "admissions_most": (
            "no bound" if template.max_admissions is None else f"{template.max_admissions:,}"
        ),
        "closes_at": stamp(template.closes_at) or "never",
        "version": template.version,
        "updated_at": stamp(template.updated_at),
        "deleted": template.deleted_at is not None,
        "deleted_at": stamp(template.deleted_at),
    }


def budget_view(state: BudgetState, now: datetime) -> dict[str, Any]:
    """One budget as a page row and as the JSON a page polls at now: strings to show, and
    the bar's widths in percent (amounts themselves go out as strings: past 2^53 a
    browser's numbers are not exact)."""
    unit = state.unit
    return {
        "id": state.budget_id,
        "unit": unit,
        "unit_name": unit_name(unit),
        "limit": amount(state.limit, unit),
        "used": amount(state.used, unit),
        "held": amount(state.held, unit),
        "remaining": amount(state.remaining, unit) if state.limit is not None else "no limit",
        "used_pct": round(percent(state.used, state.limit), 2),
        "held_pct": round(percent(state.held, state.limit), 2),
        "escrow": f"{state.escrow_bps / 100:g}%" if state.escrow_bps else "none",
        "overage": overage(state),
        "states": states(state, now),
        "refusals": refusals(state),
        "refusals_count": f"{state.refusals:,}",
        "open": state.open_reservations,
        "account": state.account,
        "feature": state.feature,
        "cycle_start": stamp(state.cycle_start),
        "cycle_end": stamp(state.cycle_end),
        "archived": state.archived_at is not None,
        **policies_view(state),
        **run_limits_view(state, now),
    }


def stamp(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at is not None else ""


def age(since: datetime, now: datetime) -> str:
    """How long ago, in the largest whole unit that fits."""
    seconds = max(0, int((now - since).total_seconds()))
    for size, name in ((86_400, "d"), (3_600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{name}"
    return f"{seconds}s"


def hold_view(hold: HoldRecord, unit: str, now: datetime) -> dict[str, Any]:
    return {
        "id": hold.reservation_id,
        "budget_id": hold.budget_id,
        "state": hold_state(hold),
        "open": hold.state in OPEN_STATES,
        "in_doubt": hold.state == HoldState.IN_DOUBT,
        "owner": hold.owner or "-",
        "key": hold.idempotency_key,
        "job": hold.job,
        "amount": amount(hold.amount, unit),
        "charged": amount(hold.charged, unit),
        # What the resolve form starts from: the charge, as a person would type it.
        "charged_typed": money.typed(hold.charged, unit),
        "unit_name": unit_name(unit),
        "decimal": unit == USD_MICROS,
        "lease": stamp(hold.expires_at),
        "age": age(hold.created_at, now),
        "also": list(hold.also_budget_ids),
    }


def ledger_view(entry: LedgerEntry, unit: str) -> dict[str, Any]:
    return {
        "id": entry.entry_id,
        "at": stamp(entry.at),
        "kind": entry.kind.value.replace("_", " "),
        "reservation_id": entry.reservation_id,
        "used_delta": amount(entry.used_delta, unit),
        "held_delta": amount(entry.held_delta, unit),
    }


@dataclass(frozen=True, slots=True)
class Series:
    """A budget's used and held after each ledger entry, against its limit: what the chart
    draws, with the times in seconds since the epoch."""

    times: list[float]
    used: list[int]
    held: list[int]
    limit: int | None
    # The ledger had more entries than the chart reads.
    truncated: bool
    # Settles that charged past their hold (overage), and by how much in all.
    overshoots: int
    overshoot: int
    # The budget's unit: the chart draws usd_micros in dollars, as the cards show them.
    unit: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "times": self.times,
            "used": self.used,
            "held": self.held,
            "limit": self.limit,
            "truncated": self.truncated,
            "overshoots": self.overshoots,
            "overshoot": self.overshoot,
            "unit": self.unit,
            # What one of the unit's amounts is divided by to draw it in the cards' unit.
            "scale": render.MICROS_PER_DOLLAR if self.unit == USD_MICROS else 1,
        }


def series(
    entries: Sequence[LedgerEntry],
    limit: int | None,
    holds: Iterable[HoldRecord],
    cap: int,
    unit: str = "",
) -> Series:
    """The running totals of the ledger's first entries (at most cap are passed in; one
    more says there were more), and the overshoot its settled holds show."""
    used = held = 0
    times: list[float] = []
    used_line: list[int] = []
    held_line: list[int] = []
    for entry in entries[:cap]:
        used += entry.used_delta
        held += entry.held_delta
        at = entry.at.timestamp()
        if times and times[-1] == at:
            # Entries of one transaction share its time: the chart shows where they end.
            used_line[-1], held_line[-1] = used, held
            continue
        times.append(at)
        used_line.append(used)
        held_line.append(held)
    over = [
        hold.settled_used - hold.amount
        for hold in holds
        if hold.settled_used is not None and hold.settled_used > hold.amount
    ]
    truncated = len(entries) > cap
    return Series(times, used_line, held_line, limit, truncated, len(over), sum(over), unit)


def nesting(budget_id: str, holds: Iterable[HoldRecord]) -> tuple[list[str], list[str]]:
    """The budgets nested with this one, as its holds show: parents (named in also_budget_ids
    of its own holds) and children (holds of other budgets that name it)."""
    parents: set[str] = set()
    children: set[str] = set()
    for hold in holds:
        if hold.budget_id == budget_id:
            parents.update(hold.also_budget_ids)
        elif budget_id in hold.also_budget_ids:
            children.add(hold.budget_id)
    return sorted(parents), sorted(children)


def models(prices: Iterable[Price]) -> list[dict[str, Any]]:
    """The price book by provider and model, every version oldest first, with its window
    and rates as a person reads them."""
    grouped: dict[tuple[str, str], list[Price]] = {}
    for price in prices:
        grouped.setdefault((price.provider, price.model), []).append(price)
    return [
        {
            "provider": provider,
            "model": model,
            "versions": [price_view(p) for p in sorted(versions, key=lambda p: p.version)],
        }
        for (provider, model), versions in sorted(grouped.items())
    ]


def price_view(price: Price) -> dict[str, Any]:
    per_mtok = "usd_micros"
    return {
        "version": price.version,
        "from": stamp(price.effective_from),
        "to": stamp(price.effective_to) or "open",
        "tier": price.service_tier or "default",
        "prompts": (
            f"over {price.input_tokens_above:,} tokens" if price.input_tokens_above else "all"
        ),
        "window": (
            daily
            if (daily := daily_window(price)) == "all day"
            else f"{daily} {price.window_timezone or 'UTC'}"
        ),
        "ceiling": f"{price.max_output_tokens:,}" if price.max_output_tokens else "none",
        "input": amount(price.input_per_mtok, per_mtok),
        "cached": amount(price.cached_rate(), per_mtok),
        "cache_write": amount(price.cache_write_rate(), per_mtok),
        "output": amount(price.output_per_mtok, per_mtok),
        "request": amount(price.request_fee, per_mtok),
        "source": price.source,
    }


def cost_now(prices: Iterable[Price], shape: Shape, now: datetime) -> tuple[Price, int] | None:
    """The price in effect now for the shape's model and what the shape costs at it, as a
    Reserve by that shape would hold it (None: no price in effect)."""
    price = PriceBook(prices).at(shape.provider, shape.model, now, input_tokens=shape.input_tokens)
    return None if price is None else (price, shape_cost(price, shape))
