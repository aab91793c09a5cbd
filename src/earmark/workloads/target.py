"""A sidecar to run a workload against: the one at --target, or one started for the run."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from earmark.spawn import spawn_sidecar


@contextlib.contextmanager
def sidecar_target(target: str | None) -> Iterator[str]:
    """Yields target, or starts a sidecar with its own embedded PostgreSQL in a temporary
    folder and stops it (and the database) when the run ends."""
    if target:
        yield target
        return
    with tempfile.TemporaryDirectory(prefix="earmark-run-") as folder:
        sidecar = spawn_sidecar(Path(folder), "--metrics-listen", "")
        try:
            yield sidecar.target
        finally:
            sidecar.stop()
