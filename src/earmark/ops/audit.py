"""`earmark audit`: the invariant audit of a database, by default the embedded one that a
sidecar runs on --data-dir."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from earmark import options
from earmark import settings as earmark_settings
from earmark.ops.connect import OpsError, data_dir_of
from earmark.options import Option


def add_database_arguments(command: argparse.ArgumentParser, what: str = "the sidecar's") -> None:
    """--database-url and --data-dir, for the commands that read the database directly
    (`audit`, `usage`, `events list`); audit_url resolves them. The URL's variable is read
    here, as the flag's default."""
    env = earmark_settings.ENV
    database_url = Option(
        "database_url",
        f"{what} PostgreSQL URL",
        env["database_url"],
        default=os.environ.get(env["database_url"], ""),
        shown="unset: the embedded database running on --data-dir",
    )
    data_dir = Option(
        "data_dir",
        "a sidecar's data dir",
        env["data_dir"],
        shown=str(earmark_settings.DATA_DIR_DEFAULT),
        convert=Path,
    )
    options.add_options(command, (database_url, data_dir))


def audit_url(database_url: str, data_dir: Path | None) -> str:
    """database_url, else the URL of the embedded PostgreSQL running on the data dir
    (--data-dir, EARMARK_DATA_DIR, .earmark), read from its postmaster.pid."""
    from earmark.store.embedded import EMBEDDED_DATABASE, running_uri

    if database_url:
        return database_url
    folder = data_dir_of(data_dir)
    url = running_uri(folder, EMBEDDED_DATABASE)
    if url is None:
        raise OpsError(
            f"no embedded PostgreSQL runs in {folder / 'pgdata'} (start `earmark serve "
            f"--data-dir {folder}`, or give --database-url)"
        )
    return url


def run_audit(database_url: str, data_dir: Path | None) -> tuple[str, bool]:
    """The audit's report and whether the database is clean."""
    from earmark.store.audit import audit_database

    problems, budgets = asyncio.run(audit_database(audit_url(database_url, data_dir)))
    if problems:
        return "\n".join([f"audit: {len(problems)} violations", *problems]), False
    return f"audit: clean ({budgets} budgets)", True
