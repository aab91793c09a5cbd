"""A budget's policies (issue 34) as the operator's commands and the console write and
read them: periods and modes by name, thresholds in percent of the limit, and a line each
for a budget's period and its rate windows.

Thresholds are written in percent, to at most two decimals (a basis point): `80`, `95.5`
and `100%` are 8000, 9550 and 10000 basis points, the wire's threshold_bps."""

from __future__ import annotations

import re
from collections.abc import Iterable

from earmark import limits
from earmark.core.model import BudgetMode, ThresholdBasis
from earmark.core.periods import Period
from earmark.ops import render

# By the names the commands and the console's form take, in the calendar's order.
PERIODS = {
    "never": Period.NEVER,
    "day": Period.DAY,
    "week": Period.WEEK,
    "month": Period.MONTH,
    "quarter": Period.QUARTER,
    "year": Period.YEAR,
}
MODES = {"enforce": BudgetMode.ENFORCE, "observe": BudgetMode.OBSERVE}
BASES = {"committed": ThresholdBasis.COMMITTED, "used": ThresholdBasis.USED}
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# A percent to at most two decimals, with or without its sign.
PERCENT = re.compile(r"([0-9]{1,7})(?:\.([0-9]{1,2}))?%?", re.ASCII)
BPS_PER_PERCENT = limits.bps_per_unit // 100


class BadPercent(ValueError):
    """A threshold that is not a percent of the limit a budget can take."""


def bps_of_percent(text: str) -> int:
    """A threshold written in percent of the limit ("80", "95.5", "100%"), in basis
    points; BadPercent for anything else, or past what a threshold may be."""
    found = PERCENT.fullmatch(text.strip())
    if found is None:
        raise BadPercent(f"{text.strip()[:32]!r} is not a percent with at most 2 decimals")
    bps = int(found[1]) * BPS_PER_PERCENT + int((found[2] or "").ljust(2, "0"))
    if not 1 <= bps <= limits.threshold_bps_max:
        most = percent_of_bps(limits.threshold_bps_max)
        raise BadPercent(f"{percent_of_bps(bps)} is not from 0.01% to {most}")
    return bps


def thresholds_of_text(text: str) -> tuple[int, ...]:
    """Thresholds in percent separated by commas or spaces ("80, 95.5, 100"), in basis
    points, in the order written; none for an empty text."""
    return tuple(bps_of_percent(part) for part in re.split(r"[,\s]+", text.strip()) if part)


def percent_of_bps(bps: int) -> str:
    """Basis points as a percent, with only the decimals that are there: 9550 is 95.5%."""
    whole, part = divmod(bps, BPS_PER_PERCENT)
    decimals = f"{part:02d}".rstrip("0")
    return f"{whole}.{decimals}%" if decimals else f"{whole}%"


def percents(bps: Iterable[int]) -> list[str]:
    """Each threshold as a percent, lowest first."""
    return [percent_of_bps(b) for b in sorted(bps)]


def ordinal(day: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, ..., 21st, ..., 31st."""
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def period_text(period: int, timezone: str, anchor: int) -> str:
    """How often a budget starts again at zero, and in which timezone's midnights: "never",
    "day in America/New_York", "week from Sunday in UTC", "month from the 15th in
    Europe/Berlin". An anchor of 0 or 1 is the first (Monday, the 1st) and goes unsaid."""
    kind = Period(period)
    if kind == Period.NEVER:
        return "never"
    words = kind.name.lower()
    if anchor > 1 and kind == Period.WEEK and anchor <= len(WEEKDAYS):
        words += f" from {WEEKDAYS[anchor - 1]}"
    elif anchor > 1 and kind != Period.WEEK:
        words += f" from the {ordinal(anchor)}"
    return f"{words} in {timezone or 'UTC'}"


def rate_parts(admissions: int | None, units: int | None, unit: str) -> list[str]:
    """A budget's rate windows, each as what it admits at most a minute: "120
    admissions/min", "$1.00/min", "5,000 tokens/min"."""
    parts = []
    if admissions is not None:
        parts.append(f"{admissions:,} admission{'' if admissions == 1 else 's'}/min")
    if units is not None:
        amount = render.amount(units, unit)
        parts.append(f"{amount}/min" if amount.startswith("$") else f"{amount} {unit}/min")
    return parts


def mode_name(mode: int) -> str:
    """enforce or observe (the wire's unspecified is enforce)."""
    return "observe" if mode == BudgetMode.OBSERVE else "enforce"


def basis_name(basis: int) -> str:
    """committed or used (the wire's unspecified is committed)."""
    return "used" if basis == ThresholdBasis.USED else "committed"
