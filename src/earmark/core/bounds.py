"""The bounds a stored value must keep, checked by one function each wherever the value
comes from: a caller's request (PutBudget), the billing provider's answer, or a row the
audit reads back.
"""

from __future__ import annotations

from earmark import limits


def shown(value: object) -> str:
    """value's repr, cut to limits.provider_value_shown_chars_max characters: a value that
    came from outside may be as long as the answer that carried it."""
    text = repr(value)
    cap = limits.provider_value_shown_chars_max
    return text if len(text) <= cap else f"{text[: cap - 3]}..."


def limit_problem(value: object) -> str | None:
    """Why value cannot be a budget's limit in units, starting "is ...", or None when it
    can. A limit is a whole number (a bool is not one) from 0 to limits.limit_units_max,
    which keeps limit + amount inside PostgreSQL's bigint; no limit at all (None) is the
    caller's business, not this check's."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"is {shown(value)}, not a whole number"
    if value < 0:
        return f"is {value}; it must be >= 0"
    if value > limits.limit_units_max:
        return f"is {shown(value)}; at most {limits.limit_units_max}"
    return None
