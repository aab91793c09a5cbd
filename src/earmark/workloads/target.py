"""A sidecar to run a workload against: the one at --target, or one started for the run."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from earmark.spawn import spawn_sidecar


@dataclass(frozen=True, slots=True)
class Target:
    """A sidecar's two listeners: the workers' HOST:PORT and Admin's address."""

    worker: str
    admin: str


@contextlib.contextmanager
def sidecar_target(target: str | None, admin_target: str) -> Iterator[Target]:
    """Yields the sidecar at target, or starts one with its own embedded PostgreSQL in a
    temporary folder and stops it (and the database) when the run ends."""
    if target:
        yield Target(target, admin_target)
        return
    with tempfile.TemporaryDirectory(prefix="earmark-run-") as folder:
        sidecar = spawn_sidecar(Path(folder), "--metrics-listen", "")
        try:
            yield Target(sidecar.target, sidecar.admin)
        finally:
            sidecar.stop()
