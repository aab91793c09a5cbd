"""The earmark command: `earmark serve`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from earmark import logging as earmark_logging
from earmark import settings as earmark_settings
from earmark.client import ClientError
from earmark.errors import EarmarkError
from earmark.server import serve
from earmark.spawn import SpawnError
from earmark.workloads import lab, load


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="earmark", description="Earmark budget sidecar.")
    commands = root.add_subparsers(dest="command", required=True)
    _serve_arguments(commands.add_parser("serve", help="serve the Budget and Admin services"))
    _lab_arguments(
        commands.add_parser(
            "lab", help="why a check is not a limit: the same jobs with a plain check and holds"
        )
    )
    _load_arguments(
        commands.add_parser("load", help="many jobs racing on one budget, with latencies")
    )
    return root


def _serve_arguments(s: argparse.ArgumentParser) -> None:
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
    s.add_argument(
        "--admission",
        choices=["grouped", "naive"],
        help=f"grouped, or naive for comparison [{env['admission']}, grouped]",
    )
    s.add_argument("--log-level", help=f"debug, info, warning, error [{env['log_level']}, info]")
    s.add_argument("--log-format", help=f"auto, json, console [{env['log_format']}, auto]")


def _lab_arguments(lab_command: argparse.ArgumentParser) -> None:
    _target(lab_command)
    lab_command.add_argument("--jobs", type=int, default=5)
    lab_command.add_argument("--estimate", type=int, default=40_000, help="what each job reserves")
    lab_command.add_argument("--limit", type=int, default=100_000, help="the plan")
    lab_command.add_argument("--concurrency", type=int, default=0, help="jobs in flight (0: all)")
    lab_command.add_argument(
        "--actual", type=int, default=0, help="what each job costs (0: estimate)"
    )
    lab_command.add_argument("--steps", type=int, default=4, help="charged steps per job")
    lab_command.add_argument(
        "--step-seconds", type=float, default=0.05, help="each step's duration"
    )
    lab_command.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _load_arguments(load_command: argparse.ArgumentParser) -> None:
    _target(load_command)
    load_command.add_argument("--jobs", type=int, default=120)
    load_command.add_argument("--estimate", type=int, default=1_000)
    load_command.add_argument("--limit", type=int, default=100_000)
    load_command.add_argument("--concurrency", type=int, default=50)
    load_command.add_argument(
        "--actual", type=int, default=0, help="what each job uses (0: estimate)"
    )
    load_command.add_argument(
        "--budget", default="", help="an existing budget (default: a fresh one)"
    )
    load_command.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _target(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--target",
        help="a running sidecar's HOST:PORT (default: start one with an embedded database)",
    )


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        if args.command == "lab":
            print(run_lab(args))
            return
        if args.command == "load":
            print(run_load(args))
            return
    except (ValueError, ClientError, SpawnError) as error:
        sys.exit(f"earmark {args.command}: {error}")
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


def run_lab(args: argparse.Namespace) -> str:
    params = lab.LabParams(
        jobs=args.jobs,
        estimate=args.estimate,
        limit=args.limit,
        concurrency=args.concurrency,
        actual=args.actual,
        steps=args.steps,
        step_seconds=args.step_seconds,
    )
    return lab.main(args.target, params, args.json)


def run_load(args: argparse.Namespace) -> str:
    params = load.LoadParams(
        jobs=args.jobs,
        estimate=args.estimate,
        limit=args.limit,
        concurrency=args.concurrency,
        actual=args.actual,
        budget_id=args.budget,
    )
    return load.main(args.target, params, args.json)


if __name__ == "__main__":
    main()
