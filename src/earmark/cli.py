"""The earmark command: `earmark serve`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from earmark import logging as earmark_logging
from earmark import settings as earmark_settings
from earmark.errors import EarmarkError
from earmark.server import serve


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="earmark", description="Earmark budget sidecar.")
    commands = root.add_subparsers(dest="command", required=True)
    s = commands.add_parser("serve", help="serve the Budget and Admin gRPC services")
    env = earmark_settings.ENV
    s.add_argument("--listen", help=f"gRPC HOST:PORT [{env['listen']}, 127.0.0.1:50051]")
    s.add_argument(
        "--metrics-listen",
        help=f"Prometheus HOST:PORT, empty to disable [{env['metrics_listen']}, 127.0.0.1:9464]",
    )
    s.add_argument(
        "--database-url",
        help=f"PostgreSQL URL; unset starts the embedded one [{env['database_url']}]",
    )
    s.add_argument(
        "--data-dir", type=Path, help=f"embedded PostgreSQL's home [{env['data_dir']}, .earmark]"
    )
    s.add_argument("--lease-seconds-max", type=float, help=f"[{env['lease_seconds_max']}, 3600]")
    s.add_argument(
        "--sweep-interval-seconds", type=float, help=f"[{env['sweep_interval_seconds']}, 1]"
    )
    s.add_argument(
        "--shutdown-grace-seconds", type=float, help=f"[{env['shutdown_grace_seconds']}, 10]"
    )
    s.add_argument("--pool-size-max", type=int, help=f"[{env['pool_size_max']}, 10]")
    s.add_argument(
        "--metrics-budgets-max",
        type=int,
        help=f"budgets with gauges, most used first [{env['metrics_budgets_max']}, 100]",
    )
    s.add_argument(
        "--metrics-refresh-seconds",
        type=float,
        help=f"how often database gauges refresh [{env['metrics_refresh_seconds']}, 10]",
    )
    s.add_argument("--log-level", help=f"debug, info, warning, error [{env['log_level']}, info]")
    s.add_argument("--log-format", help=f"auto, json, console [{env['log_format']}, auto]")
    return root


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    flags = {k: v for k, v in vars(args).items() if k != "command"}
    try:
        settings = earmark_settings.load(flags)
    except ValueError as error:
        sys.exit(f"earmark: {error}")
    earmark_logging.configure(settings.log_level, settings.log_format)
    try:
        asyncio.run(serve(settings))
    except EarmarkError as error:
        sys.exit(f"earmark: {error.message}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
