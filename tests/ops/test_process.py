"""The operator's commands as an operator runs them: real processes, `python -m earmark`,
against a live sidecar, a spawned one, and addresses where nothing answers."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from earmark.spawn import spawn_sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.conftest import Running
from tests.helpers import eventually_sync, free_port, stop_leftover_postgres
from tests.ops.test_commands import rows
from tests.service.test_security import ADMIN_TOKEN, tcp_admin
from tests.workloads.test_commands import earmark

__all__ = ["tcp_admin"]


async def test_a_walkthrough_through_the_data_dirs_socket(
    sidecar: Running, socket_dir: Path
) -> None:
    """With only --data-dir (the sidecar's), put, get, holds, ledger and delete answer as
    an operator reads them, and -o json parses."""
    data_dir = ("--data-dir", str(socket_dir))
    code, out, err = await earmark(
        "budgets", "put", "acme", "--unit", "usd_micros", "--limit", "500000", *data_dir
    )
    assert (0, "") == (code, err)
    assert ["acme", "usd_micros", "$0.50"] == rows(out)[1][:3]
    reply = await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="acme", amount=400_000, idempotency_key="k")
    )
    code, out, _ = await earmark("holds", "list", "acme", *data_dir)
    assert (0, reply.reservation_id, "$0.40") == (code, rows(out)[1][0], rows(out)[1][3])
    code, out, _ = await earmark("holds", "release", reply.reservation_id, *data_dir, "-o", "json")
    assert (0, "400000") == (code, json.loads(out)["released"])
    code, out, _ = await earmark("ledger", "acme", *data_dir)
    assert [["hold", "+$0.40"], ["release", "-$0.40"]] == [[r[2], r[4]] for r in rows(out)[1:]]
    code, out, _ = await earmark("budgets", "delete", "acme", *data_dir, "-o", "json")
    assert (0, "acme") == (code, json.loads(out)["budget_id"])
    code, out, err = await earmark("budgets", "get", "nope", *data_dir)
    assert (1, "") == (code, out)
    assert ["earmark budgets get: NOT_FOUND BUDGET_NOT_FOUND: budget 'nope' not found"] == (
        err.splitlines()
    )


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port whose listener never accepts: a connection opens, nothing answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


async def test_an_admin_that_does_not_answer_is_one_line(silent_port: int, tmp_path: Path) -> None:
    """Nothing listening, a listener that never answers, and no socket file each end the
    command with exit 1 and one line naming the target."""
    refused = f"127.0.0.1:{free_port()}"
    silent = f"127.0.0.1:{silent_port}"
    missing = tmp_path / "admin.sock"
    cases = [
        (("--admin-target", refused), f"cannot reach Admin at {refused}: "),
        (("--admin-target", silent, "--timeout-seconds", "1"),
         f"Admin at {silent} did not answer within 1s (--timeout-seconds)"),
        (("--data-dir", str(tmp_path)), f"no Admin socket at {missing} "),
    ]  # fmt: skip
    for flags, expected in cases:
        code, out, err = await earmark("budgets", "get", "b", *flags)
        assert (1, "", 1) == (code, out, len(err.splitlines())), err
        assert err.startswith(f"earmark budgets get: {expected}"), err


async def test_lab_names_the_missing_admin_socket(sidecar: Running, tmp_path: Path) -> None:
    """lab on a live sidecar whose Admin socket is not where the data dir says stops at once
    with one line naming the path."""
    code, _, err = await earmark("lab", "--target", sidecar.target, "--data-dir", str(tmp_path))
    assert (1, 1) == (code, len(err.splitlines())), err
    assert f"no Admin socket at {tmp_path / 'admin.sock'}" in err


async def test_lab_and_load_send_the_admin_token(tcp_admin: Running, tmp_path: Path) -> None:
    """With --admin-token-file, load and lab reach an Admin on TCP behind a token; with a
    wrong token they stop with UNAUTHENTICATED TOKEN_UNKNOWN, and no token is printed."""
    token_file, wrong_file = tmp_path / "token", tmp_path / "wrong"
    token_file.write_text(ADMIN_TOKEN + "\n")
    wrong_file.write_text("wrong-token-0123456789abcdef\n")
    target = ("--target", tcp_admin.target, "--admin-target", tcp_admin.admin_target)
    code, out, err = await earmark(
        "load", *target, "--admin-token-file", str(token_file), "--jobs", "5", "--json"
    )
    assert (0, 5) == (code, json.loads(out)["admitted"]), err
    code, out, err = await earmark(
        "lab", *target, "--admin-token-file", str(token_file), "--jobs", "2",
        "--step-seconds", "0", "--json",
    )  # fmt: skip
    assert (0, 2) == (code, json.loads(out)["hold"]["started"]), err
    for command in ("load", "lab", "budgets"):
        argv = ("budgets", "get", "b", "--admin-target", tcp_admin.admin_target)
        code, out, err = await earmark(
            *(argv if command == "budgets" else (command, *target)),
            "--admin-token-file", str(wrong_file),
        )  # fmt: skip
        assert (1, 1) == (code, len(err.splitlines())), err
        assert "UNAUTHENTICATED TOKEN_UNKNOWN: " in err
        assert "wrong-token" not in out + err
        assert ADMIN_TOKEN not in out + err


def test_audit_with_no_url_audits_the_data_dirs_database(socket_dir: Path) -> None:
    """`earmark audit --data-dir D` audits the embedded PostgreSQL a sidecar runs on D, and
    once that sidecar stopped says in one line that none runs there."""

    def audit() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "earmark", "audit", "--data-dir", str(socket_dir)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    sidecar = spawn_sidecar(socket_dir, "--metrics-listen", "")
    try:
        clean = audit()
        assert (0, "audit: clean (0 budgets)\n") == (clean.returncode, clean.stdout), clean.stderr
        assert 0 == sidecar.stop()
    finally:
        sidecar.stop()
        stop_leftover_postgres(socket_dir)
    stopped = audit()
    assert (1, "") == (stopped.returncode, stopped.stdout)
    assert [
        f"earmark audit: no embedded PostgreSQL runs in {socket_dir / 'pgdata'} "
        f"(start `earmark serve --data-dir {socket_dir}`, or give --database-url)"
    ] == stopped.stderr.splitlines()


def test_usage_with_no_url_reads_the_data_dirs_database(socket_dir: Path) -> None:
    """`earmark serve --limits-provider file` on an embedded database, as an operator starts
    it: a Reserve by account and its Settle, then `earmark usage ACCOUNT --data-dir D` shows
    the total reported; once the sidecar stopped, usage says in one line that none runs."""
    plans = socket_dir / "plans.toml"
    plans.write_text('[plans.trial.features]\ntokens = 1_000\n[accounts.acme]\nplan = "trial"\n')

    def usage(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "earmark", "usage", "acme", "--data-dir", str(socket_dir),
             *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    sidecar = spawn_sidecar(
        socket_dir, "--metrics-listen", "", "--limits-provider", "file", "--plans-file", str(plans)
    )
    try:
        with grpc.insecure_channel(sidecar.target) as channel:
            budget = budget_pb2_grpc.BudgetStub(channel)
            held = budget.Reserve(
                pb.ReserveRequest(account="acme", amount=600, idempotency_key="job"), timeout=10
            )
            budget.Settle(pb.SettleRequest(reservation_id=held.reservation_id, used=250))

        def reported() -> bool:
            found = usage("-o", "json")
            return (
                0 == found.returncode
                and "reported" == json.loads(found.stdout)["periods"][0]["state"]
            )

        eventually_sync(reported, within_seconds=30, what="the settled total reported")
        (period,) = json.loads(usage("-o", "json").stdout)["periods"]
        assert 0 == sidecar.stop()
    finally:
        sidecar.stop()
        stop_leftover_postgres(socket_dir)
    stopped = usage()
    assert (True, 1_000, 250, 250, 250) == (
        period["budget_id"].startswith("acme/tokens/"),
        period["limit"],
        period["used"],
        period["metered"],
        period["reported"],
    )
    assert (1, [
        f"earmark usage: no embedded PostgreSQL runs in {socket_dir / 'pgdata'} "
        f"(start `earmark serve --data-dir {socket_dir}`, or give --database-url)"
    ]) == (stopped.returncode, stopped.stderr.splitlines())  # fmt: skip
