"""The operator's command line over Admin, in the style of kubectl: `earmark budgets`,
`templates`, `regions`, `prices`, `holds` and `ledger`, each with a table or `-o json`; the
audit of a data dir's embedded database, `earmark usage` (an account's metered totals,
read from the database as the audit reads it) and `earmark events list` (budget notices
and their delivery, read the same way). cli.py wires these commands; each command's
function takes the parsed flags and returns what it prints, or raises OpsError with the
one line to print instead."""

from __future__ import annotations

import argparse

from earmark.ops import budgets, events, holds, prices, reconcile, regions, templates, usage
from earmark.ops.connect import OpsError

__all__ = ["OpsError", "add_commands"]


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds budgets, templates, prices, holds, ledger, usage and events to the earmark
    command."""
    budgets.add_commands(commands)
    templates.add_commands(commands)
    regions.add_commands(commands)
    prices.add_commands(commands)
    holds.add_commands(commands)
    usage.add_commands(commands)
    events.add_commands(commands)
    reconcile.add_commands(commands)
