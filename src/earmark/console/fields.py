"""The console's form and query fields, read once and checked: a field a page cannot use is
BadInput, answered 400 with its name, before any Admin call."""

from __future__ import annotations

import re
import uuid

from earmark.ops import money, render

WHOLE = re.compile(r"-?[0-9]{1,19}", re.ASCII)


class BadInput(ValueError):
    """A form or query field a page cannot use: the message names it."""


def whole(raw: str | None, name: str, low: int, high: int, default: int | None = None) -> int:
    """A whole number (digit groups may be marked with , or _), within [low, high]."""
    text = (raw or "").strip().replace(",", "").replace("_", "")
    if not text:
        if default is None:
            raise BadInput(f"{name}: a whole number is required")
        return default
    if WHOLE.fullmatch(text) is None:
        raise BadInput(f"{name}: {raw!r} is not a whole number")
    value = int(text)
    if not low <= value <= high:
        raise BadInput(f"{name}: {value:,} is not between {low:,} and {high:,}")
    return value


def amount(raw: str | None, name: str, unit: str, low: int, high: int) -> int:
    """An amount of the budget's unit as people write it (money.parse: dollars with cents
    for usd_micros, "10.00" too; a whole number otherwise), within [low, high]."""
    try:
        value = money.parse(raw or "", unit)
    except money.BadAmount as bad:
        raise BadInput(f"{name}: {bad}") from None
    if not low <= value <= high:
        between = f"{render.amount(low, unit)} and {render.amount(high, unit)}"
        raise BadInput(f"{name}: {render.amount(value, unit)} is not between {between}")
    return value


def text(raw: str | None, name: str, most: int, required: bool = True) -> str:
    value = (raw or "").strip()
    if required and not value:
        raise BadInput(f"{name}: required")
    if len(value) > most:
        raise BadInput(f"{name}: longer than {most} characters")
    return value


def reservation_id(raw: str | None) -> str:
    """A hold's id: a UUID, as the sidecar writes it."""
    value = (raw or "").strip()
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise BadInput(f"reservation_id: {value[:64]!r} is not a hold's id (a UUID)") from None
