"""Amounts typed as people write them, read into a budget's unit: the one parser of money
for whatever an operator types (the console's forms), the inverse of render.amount, which
prints every amount the commands and the console show.

A usd_micros amount is written in dollars, with cents or down to the micro-dollar
("10.00", "$1,234.5", "0.000001"); every other unit is a whole number ("200,000").
"""

from __future__ import annotations

import re

from earmark import limits
from earmark.core.prices import USD_MICROS
from earmark.ops.render import MICROS_PER_DOLLAR

# Digits of a micro-dollar after the point: 6, as MICROS_PER_DOLLAR says.
DOLLAR_DECIMALS = len(str(MICROS_PER_DOLLAR)) - 1
# Digits, with the whole part's groups of three marked by , or _ (never the fraction's:
# "0,50" is no fifty dollars), and a fraction after a point. ASCII only: \d would also
# take other scripts' digits and superscripts, which int() reads differently.
_NUMBER = re.compile(
    r"(?P<whole>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]{1,3}(?:_[0-9]{3})+|[0-9]*)"
    r"(?:\.(?P<fraction>[0-9]*))?",
    re.ASCII,
)


class BadAmount(ValueError):
    """Text that is no amount of the unit; the message says why, without the field's name
    (the caller adds it)."""


def unit_words(unit: str) -> str:
    """What the unit's amounts are typed in: dollars for usd_micros, else the unit."""
    return "dollars" if unit == USD_MICROS else unit


def parse(text: str, unit: str) -> int:
    """The amount text names, in unit's integer units: dollars (at most 6 decimals, a
    leading $ allowed) for usd_micros, a whole number for any other unit. Negative,
    non-numeric, empty or too long text raises BadAmount."""
    raw = text.strip()
    if not raw:
        raise BadAmount("an amount is required")
    if len(raw) > limits.amount_text_length_max:
        raise BadAmount(f"is longer than {limits.amount_text_length_max} characters")
    dollars = unit == USD_MICROS
    plain = raw
    if plain.startswith("-"):
        raise BadAmount(f"{raw!r} is negative")
    if dollars:
        plain = plain.removeprefix("$")
    found = _NUMBER.fullmatch(plain)
    if found is None or not (found["whole"] or found["fraction"]):
        kind = "an amount of dollars" if dollars else "a whole number"
        hint = " (digit groups are of three, before the point; use . for cents)"
        raise BadAmount(f"{raw!r} is not {kind}{hint if ',' in raw or '_' in raw else ''}")
    whole = (found["whole"] or "0").replace(",", "").replace("_", "")
    fraction = found["fraction"]
    if not dollars:
        if fraction is not None:
            raise BadAmount(f"{raw!r} is not a whole number: {unit} has no fractions")
        return int(whole)
    fraction = fraction or ""
    if len(fraction) > DOLLAR_DECIMALS:
        raise BadAmount(
            f"{raw!r} has {len(fraction)} decimals; at most {DOLLAR_DECIMALS} "
            "(a micro-dollar is the smallest amount)"
        )
    return int(whole) * MICROS_PER_DOLLAR + int(fraction.ljust(DOLLAR_DECIMALS, "0"))


def typed(value: int, unit: str) -> str:
    """value as a person would type it back into a form: what parse reads as value, without
    the $ and digit groups render.amount adds ("2.50", "0.000001", "3500")."""
    if unit != USD_MICROS:
        return str(value)
    sign = "-" if value < 0 else ""
    whole, fraction = divmod(abs(value), MICROS_PER_DOLLAR)
    digits = f"{fraction:0{DOLLAR_DECIMALS}d}".rstrip("0").ljust(2, "0")
    return f"{sign}{whole}.{digits}"
