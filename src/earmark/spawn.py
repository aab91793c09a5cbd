"""Starts `earmark serve` as a child process on loopback and waits until it serves.

For the tools that need a sidecar of their own (the benchmark, the tests of the command
itself): the child picks free ports, and its JSON log says which.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

start_seconds_max = 60.0
stop_seconds_max = 60.0


class SpawnError(RuntimeError):
    """The child exited or stayed silent instead of serving."""


@dataclass
class SpawnedSidecar:
    process: subprocess.Popen[bytes]
    port: int
    metrics_port: int
    # Admin's listener, as the sidecar reported it (unix:PATH by default).
    admin: str
    data_dir: Path
    log: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> int:
        """SIGTERM, wait for the drain, and kill only if it overstays; returns the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=stop_seconds_max)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(timeout=stop_seconds_max)


def log_events(log: Path) -> list[dict[str, Any]]:
    """The JSON lines of a sidecar's log; other lines (what it says on stderr, when that
    goes to the same file) are passed over."""
    found = []
    for line in log.read_bytes().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            found.append(event)
    return found


def spawn_sidecar(
    data_dir: Path, *extra_args: str, log: Path | None = None, stderr_to_log: bool = False
) -> SpawnedSidecar:
    """Runs `python -m earmark serve` with its database (embedded unless extra_args name
    one) under data_dir, on free loopback ports; returns once it serves. Its log goes to
    log (by default DATA_DIR/sidecar.log), and with stderr_to_log its stderr too."""
    log = log or data_dir / "sidecar.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "earmark", "serve",
                "--listen", "127.0.0.1:0",
                "--metrics-listen", "127.0.0.1:0",
                "--data-dir", str(data_dir),
                "--log-format", "json",
                *extra_args,
            ],
            stdout=sink,
            stderr=sink if stderr_to_log else None,
        )  # fmt: skip
    deadline = time.monotonic() + start_seconds_max
    while time.monotonic() < deadline and process.poll() is None:
        for event in log_events(log):
            if event.get("event") == "serving":
                return SpawnedSidecar(
                    process,
                    int(event["port"]),
                    int(event["metrics_port"]),
                    str(event["admin"]),
                    data_dir,
                    log,
                )
        time.sleep(0.1)
    if process.poll() is None:
        process.kill()
        process.wait(timeout=stop_seconds_max)
    raise SpawnError(f"the sidecar did not report serving:\n{log.read_text(errors='replace')}")
