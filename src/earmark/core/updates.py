"""UpdateBudget's merge (issue 43, AIP-134): which of a budget's settings an update names,
and the settings it leaves: the named fields as the request gives them (a named field left
unset clears it: a named limit left unset is unlimited), every other field as stored.

The mask's paths are PutBudgetRequest's field names. No mask (absent, or no paths) names
the fields the request populates (an optional present, anything else not its default);
`*` alone names every field, as PutBudget sets them. The merge is plain data in and out;
the store runs it in the transaction that locked the budget's row, then checks the result
with PutBudget's rules (core.specs), so two updates of different fields never lose one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace

from earmark import limits
from earmark.core.model import Budget
from earmark.core.specs import Fields
from earmark.errors import InvalidArgument

# Every field an update may name, in PutBudgetRequest's order; budget_id names the budget.
PATHS = tuple(f.name for f in fields(Fields) if f.name != "budget_id")
EVERY = "*"


def mask(paths: Sequence[str], given: Fields) -> frozenset[str]:
    """The fields an update changes: paths checked (each a PATHS name, or `*` alone), or
    without paths those given populates; InvalidArgument naming update_mask otherwise."""
    if len(paths) > limits.update_mask_paths_max:
        raise InvalidArgument(
            "update_mask", f"has {len(paths)} paths; at most {limits.update_mask_paths_max}"
        )
    if not paths:
        return populated(given)
    if EVERY in paths:
        if len(paths) != 1:
            raise InvalidArgument("update_mask", "`*` names every field; give it alone")
        return frozenset(PATHS)
    for path in paths:
        if path == "budget_id":
            raise InvalidArgument(
                "update_mask", "path 'budget_id' names the budget; it cannot change"
            )
        if path not in PATHS:
            shown = path[: limits.update_mask_path_shown_chars_max]
            raise InvalidArgument(
                "update_mask",
                f"path {shown!r} is not a field of the budget; the fields are " + ", ".join(PATHS),
            )
    return frozenset(paths)


def populated(given: Fields) -> frozenset[str]:
    """The fields given sets: an optional present, anything else not its default."""
    empty = Fields(budget_id=given.budget_id)
    return frozenset(path for path in PATHS if getattr(given, path) != getattr(empty, path))


# What a SOFT budget's overage flag is about: an update naming one of these clears it, as
# PutBudget does; one that names none keeps it.
OVERAGE_PATHS = frozenset({"limit", "overage_policy", "overage_limit", "mode"})


def kept(budget: Budget, spec: Budget, named: frozenset[str]) -> Budget:
    """spec, merged from an update naming named, with the overage flag budget has unless
    the update named what it is about."""
    return replace(spec, overage_since=None if named & OVERAGE_PATHS else budget.overage_since)


def merged(current: Fields, given: Fields, named: frozenset[str]) -> Fields:
    """current with the fields named taken from given (unset in given: cleared)."""
    assert named <= frozenset(PATHS), named
    return replace(current, **{path: getattr(given, path) for path in sorted(named)})
