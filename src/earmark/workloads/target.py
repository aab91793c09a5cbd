"""A sidecar to run a workload against: the one at --target, or one started for the run."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from earmark.ops.connect import AdminAccess, read_token, wait_reachable
from earmark.spawn import spawn_sidecar


@dataclass(frozen=True, slots=True)
class Target:
    """A sidecar's two listeners: the workers' HOST:PORT and Admin's address, with Admin's
    token when it needs one."""

    worker: str
    admin: str
    # Never in a repr (a traceback's locals, a debug print).
    admin_token: str | None = field(default=None, repr=False)


@contextlib.contextmanager
def sidecar_target(target: str | None, admin: AdminAccess) -> Iterator[Target]:
    """Yields the sidecar at target, once both its listeners accept a connection within
    admin's deadline (else an OpsError naming the one that did not), or starts one with its
    own embedded PostgreSQL in a temporary folder and stops it (and the database) when the
    run ends."""
    if target:
        token = read_token(admin.token_file) if admin.token_file is not None else None
        wait_reachable(target, admin.timeout_seconds, "the sidecar")
        wait_reachable(admin.target, admin.timeout_seconds, "Admin")
        yield Target(target, admin.target, token)
        return
    with tempfile.TemporaryDirectory(prefix="earmark-run-") as folder:
        sidecar = spawn_sidecar(Path(folder), "--metrics-listen", "")
        try:
            yield Target(sidecar.target, sidecar.admin)
        finally:
            sidecar.stop()
