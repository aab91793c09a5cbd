"""The notices a batch writes with its changes (issue 34): a threshold crossed, a SOFT
budget gone past its limit, a budget's first refusal for want of room in a period (issue
43), a hold gone into doubt, a budget's limit changed or its temporary limit ended (issue
47). Every budget notice carries used, held, committed (used +
held) and the threshold basis, whatever the notice's kind. Each is an event of the Standard
Webhooks shape ({"type", "timestamp", "data"}) with an id the deliverer sends on every
attempt; the batch that caused it writes it in its own transaction, at most once per
budget, period and threshold (the row's noticed_bps, and the events table's unique key).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from earmark.core import thresholds
from earmark.core.model import (
    Budget,
    BudgetMode,
    Hold,
    OveragePolicy,
    PeriodTotals,
    ThresholdBasis,
)
from earmark.core.prices import Price

THRESHOLD_CROSSED = "budget.threshold_crossed"
EXCEEDED = "budget.exceeded"
REFUSING = "budget.refusing"
IN_DOUBT = "hold.in_doubt"
PRICE_CHANGED = "price.changed"
LIMIT_CHANGED = "budget.limit_changed"

# Event ids are derived from what makes an event one (its dedupe key), so that a batch
# retried after a conflict writes the same id, and the unique key drops it if it was.
_NAMESPACE = uuid.UUID("5d1b0f52-6a59-4c0e-9e44-3f2f8f0d6a34")


@dataclass(frozen=True, slots=True)
class Event:
    event_id: str
    kind: str
    budget_id: str
    dedupe_key: str
    payload: dict[str, Any]
    created_at: datetime


def _iso(at: datetime | None) -> str | None:
    if at is None:
        return None
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _event(kind: str, budget_id: str, key: str, data: dict[str, Any], now: datetime) -> Event:
    payload = {"type": kind, "timestamp": _iso(now), "data": data}
    event_id = "msg_" + uuid.uuid5(_NAMESPACE, key).hex
    return Event(event_id, kind, budget_id, key, payload, now)


BASIS_NAMES = {ThresholdBasis.COMMITTED: "committed", ThresholdBasis.USED: "used"}


def _budget_data(budget: Budget) -> dict[str, Any]:
    return {
        "budget_id": budget.budget_id,
        "unit": budget.unit,
        "limit": budget.limit,
        "used": budget.used,
        "held": budget.held,
        "committed": budget.used + budget.held,
        "threshold_basis": BASIS_NAMES[budget.threshold_basis],
        "period_start": _iso(budget.period_start),
        "resets_at": _iso(budget.period_end),
        "mode": "observe" if budget.mode is BudgetMode.OBSERVE else "enforce",
    }


def kept_by_put(budget: Budget, spec: Budget) -> Budget:
    """spec, put on budget, with what it keeps of budget's notices: the thresholds noticed
    this period while the basis stays (another basis measures another figure: noticed
    anew), and that budget.refusing was noticed while the limit stays (a new limit is a new
    promise: its first refusal is noticed)."""
    same_basis = spec.threshold_basis is budget.threshold_basis
    return replace(
        spec,
        noticed_bps=budget.noticed_bps if same_basis else (),
        refusing_noticed=budget.refusing_noticed and spec.limit == budget.limit,
    )


def _threshold_key(key: str, bps: int, basis: ThresholdBasis) -> str:
    """A threshold notice's dedupe key: once per budget, period, threshold and basis (a
    basis changed mid-period notices its thresholds anew, kept_by_put; COMMITTED's keys
    are those of before there were bases)."""
    return f"{key}/{bps}" if basis is ThresholdBasis.COMMITTED else f"{key}/{bps}/used"


def measure(budget: Budget) -> int:
    """The figure budget's thresholds are shares of (its basis's)."""
    return thresholds.measured(budget.threshold_basis, budget.used, budget.held)


def budget_events(budget: Budget, before: tuple[int, int], now: datetime) -> list[Event]:
    """The notices of a rise of the budget's spend from before's (measure, used + held) to
    now's: each threshold its basis's figure has reached and the period has not noticed
    yet (reached, not only crossed: a limit lowered past a threshold is noticed at the next
    rise), and a SOFT budget's first pass of its limit (used + held: what it admitted);
    marked noticed on the budget."""
    measured, committed = measure(budget), budget.used + budget.held
    if budget.limit is None or (measured <= before[0] and committed <= before[1]):
        return []
    events = []
    key = f"{budget.budget_id}/{budget.period_no}"
    rose = measured > before[0]
    for bps in thresholds.reached(budget.limit, measured, budget.threshold_bps) if rose else []:
        if bps in budget.noticed_bps:
            continue
        budget.noticed_bps = tuple(sorted((*budget.noticed_bps, bps)))
        data = {**_budget_data(budget), "threshold_bps": bps}
        threshold_key = _threshold_key(key, bps, budget.threshold_basis)
        events.append(_event(THRESHOLD_CROSSED, budget.budget_id, threshold_key, data, now))
    after = committed
    soft = budget.overage_policy is OveragePolicy.SOFT
    if soft and not budget.exceeded_noticed and after > budget.limit:
        budget.exceeded_noticed = True
        data = {**_budget_data(budget), "overage_limit": budget.overage_limit}
        events.append(_event(EXCEEDED, budget.budget_id, f"{key}/exceeded", data, now))
    return events


def closed_events(
    budget: Budget, closed: PeriodTotals, before: tuple[int, int], now: datetime
) -> list[Event]:
    """The notices of a rise of a closed period's spend (a hold of it settled past its
    hold): what its basis's figure reached, against the period's own limit. The period's
    row does not keep what it noticed; the events' unique key drops one it already had."""
    measured = thresholds.measured(budget.threshold_basis, closed.used, closed.held)
    after = closed.used + closed.held
    if closed.limit is None or (measured <= before[0] and after <= before[1]):
        return []
    data = {
        **_budget_data(budget),
        "limit": closed.limit,
        "used": closed.used,
        "held": closed.held,
        "committed": after,
        "period_start": _iso(closed.period_start),
        "resets_at": _iso(closed.period_end),
    }
    key = f"{budget.budget_id}/{closed.period_no}"
    events = [
        _event(
            THRESHOLD_CROSSED,
            budget.budget_id,
            _threshold_key(key, bps, budget.threshold_basis),
            {**data, "threshold_bps": bps},
            now,
        )
        for bps in thresholds.reached(closed.limit, measured, budget.threshold_bps)
        if measured > before[0]
    ]
    if budget.overage_policy is OveragePolicy.SOFT and after > closed.limit:
        exceeded = {**data, "overage_limit": budget.overage_limit}
        events.append(_event(EXCEEDED, budget.budget_id, f"{key}/exceeded", exceeded, now))
    return events


def refusing_event(budget: Budget, refused: int, remaining: int | None, now: datetime) -> Event:
    """The budget's first refusal for want of room in its period, or since its limit last
    changed (core.refusals): a Reserve of refused units found remaining; budget.refusals
    counts the rest on its row. Keyed by the period and the count it fired at, which only
    grows in a period."""
    data = {
        **_budget_data(budget),
        "refused_amount": refused,
        "remaining": remaining,
        "refusals": budget.refusals,
        "first_refused_at": _iso(budget.first_refused_at),
    }
    key = f"{budget.budget_id}/{budget.period_no}/refusing/{budget.refusals}"
    return _event(REFUSING, budget.budget_id, key, data, now)


def limit_changed_event(
    budget: Budget,
    before: int | None,
    until: datetime | None,
    reason: str,
    ended: bool,
    now: datetime,
) -> Event:
    """budget.limit_changed (core.raises): an operator changed the budget's limit from
    before (until until: a temporary limit, then limit_after), or its temporary limit ended
    (ended). Keyed by the budget, when and what: a raise ends once, at its limit_until."""
    data = {
        **_budget_data(budget),
        "limit_before": before,
        "limit_until": _iso(until),
        "limit_after": budget.limit_after if until is not None else None,
        "reason": reason,
        "ended": ended,
    }
    key = f"{budget.budget_id}/{budget.period_no}/limit/{_iso(now)}/{before}/{budget.limit}"
    if until is not None:
        key += f"/until/{_iso(until)}"
    return _event(LIMIT_CHANGED, budget.budget_id, key + ("/ended" if ended else ""), data, now)


def in_doubt_event(hold: Hold, now: datetime) -> Event:
    data = {
        "reservation_id": hold.reservation_id,
        "budget_id": hold.budget_id,
        "also_budget_ids": list(hold.also_budget_ids),
        "amount": hold.amount,
        "charged": hold.charged,
        "created_at": _iso(hold.created_at),
        "in_doubt_at": _iso(now),
    }
    key = f"hold/{hold.reservation_id}/in_doubt"
    return _event(IN_DOUBT, hold.budget_id, key, data, now)


# A price notice concerns every budget that prices its model, not one: its events row's
# budget_id is this (no budget's id is empty), so `earmark events list --budget` never
# shows it and --kind price.changed does.
PRICE_BUDGET_ID = ""


def price_selector(price: Price) -> tuple[object, ...]:
    """What a version replaces another's rates for: the same model, service tier,
    prompt-length tier and daily window in the same zone."""
    return (
        price.provider,
        price.model,
        price.service_tier,
        price.input_tokens_above,
        price.daily_from_minute,
        price.daily_to_minute,
        price.window_timezone,
    )


def replaced(versions: list[Price], price: Price) -> Price | None:
    """The version of price's selector that price follows: of the others, the latest by
    (effective_from, version), the order the price book picks by, before price's own."""
    before = [
        p
        for p in versions
        if price_selector(p) == price_selector(price)
        and p.version != price.version
        and (p.effective_from, p.version) < (price.effective_from, price.version)
    ]
    return max(before, key=lambda p: (p.effective_from, p.version), default=None)


def _rates(price: Price) -> dict[str, Any]:
    return {
        "input_per_mtok": price.input_per_mtok,
        "output_per_mtok": price.output_per_mtok,
        "cached_input_per_mtok": price.cached_input_per_mtok,
        "cache_write_per_mtok": price.cache_write_per_mtok,
        "cache_write_long_per_mtok": price.cache_write_long_per_mtok,
        "request_fee": price.request_fee,
        "tool_fees": dict(price.tool_fees),
        "max_output_tokens": price.max_output_tokens,
    }


def price_key(price: Price) -> str:
    """A version's dedupe key. Providers and models are printable ASCII without spaces
    (validate.identifier) but may hold '/': the space after the provider and the version
    read from the right tell them apart, and no budget's or hold's key has a space."""
    return f"price/{price.provider} {price.model}/{price.version}/changed"


def price_event(price: Price, before: Price | None, now: datetime) -> Event:
    """price.changed: price's version took effect (it was put in effect, or its
    effective_from passed), with the version of its selector it follows, if any."""
    data = {
        "provider": price.provider,
        "model": price.model,
        "service_tier": price.service_tier,
        "version": price.version,
        "effective_from": _iso(price.effective_from),
        "effective_to": _iso(price.effective_to),
        "daily_from_minute": price.daily_from_minute,
        "daily_to_minute": price.daily_to_minute,
        "window_timezone": price.window_timezone,
        "input_tokens_above": price.input_tokens_above,
        **_rates(price),
        "source": price.source,
        "captured_at": _iso(price.captured_at),
        "replaces": None if before is None else {"version": before.version, **_rates(before)},
    }
    return _event(PRICE_CHANGED, PRICE_BUDGET_ID, price_key(price), data, now)
