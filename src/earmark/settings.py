"""Settings from flags, then EARMARK_* environment variables, then defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from earmark import limits


def split_host_port(value: str, name: str) -> tuple[str, int]:
    """Parses HOST:PORT (port 0 picks a free port); raises ValueError naming the setting."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{name}: {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = "127.0.0.1:50051"
    # Empty disables the metrics endpoint.
    metrics_listen: str = "127.0.0.1:9464"
    # None starts the embedded PostgreSQL under data_dir.
    database_url: str | None = None
    data_dir: Path = field(default_factory=lambda: Path(".earmark"))
    lease_seconds_max: float = limits.lease_seconds_max_default
    sweep_interval_seconds: float = limits.sweep_interval_seconds_default
    shutdown_grace_seconds: float = limits.shutdown_grace_seconds_default
    pool_size_max: int = limits.pool_size_max_default
    metrics_budgets_max: int = limits.metrics_budgets_max_default
    metrics_refresh_seconds: float = limits.metrics_refresh_interval_seconds
    # grouped (the default) or naive: see Store; naive is kept for benchmarks and tests.
    admission: str = "grouped"
    log_level: str = "info"
    log_format: str = "auto"

    def __post_init__(self) -> None:
        split_host_port(self.listen, "listen")
        if self.metrics_listen:
            split_host_port(self.metrics_listen, "metrics_listen")
        if (
            not limits.lease_seconds_min
            <= self.lease_seconds_max
            <= limits.lease_seconds_max_ceiling
        ):
            raise ValueError(
                f"lease_seconds_max: {self.lease_seconds_max} is outside "
                f"[{limits.lease_seconds_min}, {limits.lease_seconds_max_ceiling}]"
            )
        if not 0 < self.sweep_interval_seconds <= 3600:
            raise ValueError(
                f"sweep_interval_seconds: {self.sweep_interval_seconds} is not in (0, 3600]"
            )
        if not 0 <= self.shutdown_grace_seconds <= 600:
            raise ValueError(
                f"shutdown_grace_seconds: {self.shutdown_grace_seconds} is not in [0, 600]"
            )
        if not limits.pool_size_min <= self.pool_size_max <= 100:
            raise ValueError(
                f"pool_size_max: {self.pool_size_max} is not in [{limits.pool_size_min}, 100]"
            )
        if not 0 <= self.metrics_budgets_max <= limits.metrics_budgets_max_ceiling:
            raise ValueError(
                f"metrics_budgets_max: {self.metrics_budgets_max} is not in "
                f"[0, {limits.metrics_budgets_max_ceiling}]"
            )
        if not 0 < self.metrics_refresh_seconds <= 3600:
            raise ValueError(
                f"metrics_refresh_seconds: {self.metrics_refresh_seconds} is not in (0, 3600]"
            )
        if self.admission not in {"grouped", "naive"}:
            raise ValueError(f"admission: {self.admission!r} is not grouped or naive")
        if self.log_level.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError(f"log_level: {self.log_level!r} is not debug, info, warning or error")
        if self.log_format not in {"auto", "json", "console"}:
            raise ValueError(f"log_format: {self.log_format!r} is not auto, json or console")


# Each setting's environment variable; flags win over these.
ENV = {
    "listen": "EARMARK_LISTEN",
    "metrics_listen": "EARMARK_METRICS_LISTEN",
    "database_url": "EARMARK_DATABASE_URL",
    "data_dir": "EARMARK_DATA_DIR",
    "lease_seconds_max": "EARMARK_LEASE_SECONDS_MAX",
    "sweep_interval_seconds": "EARMARK_SWEEP_INTERVAL_SECONDS",
    "shutdown_grace_seconds": "EARMARK_SHUTDOWN_GRACE_SECONDS",
    "pool_size_max": "EARMARK_POOL_SIZE_MAX",
    "metrics_budgets_max": "EARMARK_METRICS_BUDGETS_MAX",
    "metrics_refresh_seconds": "EARMARK_METRICS_REFRESH_SECONDS",
    "admission": "EARMARK_ADMISSION",
    "log_level": "EARMARK_LOG_LEVEL",
    "log_format": "EARMARK_LOG_FORMAT",
}

_TYPES = {
    "data_dir": Path,
    "lease_seconds_max": float,
    "sweep_interval_seconds": float,
    "shutdown_grace_seconds": float,
    "pool_size_max": int,
    "metrics_budgets_max": int,
    "metrics_refresh_seconds": float,
}


def load(flags: dict[str, object], environ: dict[str, str] | None = None) -> Settings:
    """Builds Settings: a flag that is not None wins, then the environment, then defaults."""
    environ = dict(os.environ) if environ is None else environ
    values: dict[str, object] = {}
    for name, variable in ENV.items():
        raw = flags.get(name)
        if raw is None and environ.get(variable):
            raw = environ[variable]
        if raw is None:
            continue
        convert = _TYPES.get(name, str)
        try:
            values[name] = convert(raw)
        except ValueError:
            raise ValueError(f"{name}: {raw!r} is not a {convert.__name__}") from None
    return Settings(**values)  # type: ignore[arg-type]
