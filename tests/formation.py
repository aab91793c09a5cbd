"""A pg_auto_failover formation on this machine: a monitor, a primary and a synchronous
secondary (the Debian packages postgresql-15 and postgresql-15-auto-failover), all on
127.0.0.1, under one folder of its own.

pg_autoctl refuses to run as root, so every process runs as the `postgres` OS user (the
Debian server package makes it), with its configuration and state kept in the folder.
Whoever enters formation() gets every process it started stopped at the end, and the
folder removed, also on failure.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.helpers import free_port

# How much of each pg_autoctl's log a failed formation's message shows.
LOG_TAIL_LINES = 40
PG_BIN = Path("/usr/lib/postgresql/15/bin")
USER = "postgres"
COMMAND_SECONDS_MAX = 30.0
STOP_SECONDS_MAX = 20.0

# The monitor's health checks, shortened from their defaults (a check every 5 s, a node
# unhealthy after 20 s) so that a failover takes seconds in a test; the values are what
# deploy/failover.md suggests for production too, where they trade false alarms for time.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": 1000,
    "pgautofailover.health_check_timeout": 1000,
    "pgautofailover.health_check_max_retries": 1,
    "pgautofailover.health_check_retry_delay": 500,
    "pgautofailover.node_considered_unhealthy_timeout": 4000,
    # How long the monitor waits for a lost primary to have demoted itself before it
    # promotes the secondary: it must stay above the keepers' network_partition_timeout
    # (NODE_SETTINGS), after which a primary cut off from the monitor and the secondary
    # stops accepting writes, so that two primaries never both take them.
    "pgautofailover.primary_demote_timeout": 8000,
}
# Each data node's pg_autoctl settings (pg_autoctl config set).
NODE_SETTINGS = {"timeout.network_partition_timeout": "5"}


def available() -> bool:
    """True where the packages are installed (CI installs them; .ci/run)."""
    return shutil.which("pg_autoctl") is not None and (PG_BIN / "postgres").exists()


@dataclass
class Node:
    name: str
    port: int
    pgdata: Path
    process: subprocess.Popen[bytes] | None = None


@dataclass
class Formation:
    folder: Path
    monitor: Node
    nodes: list[Node] = field(default_factory=list)
    # Processes left behind by a node killed on purpose, stopped at the end.
    orphans: list[int] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {
            # Only system folders: the postgres user may not look into root's.
            "PATH": f"{PG_BIN}:/usr/bin:/bin",
            "HOME": str(self.folder),
            "XDG_CONFIG_HOME": str(self.folder / "config"),
            "XDG_DATA_HOME": str(self.folder / "data"),
        }

    def run(self, *args: str) -> str:
        """pg_autoctl args as the postgres user; its standard output."""
        done = subprocess.run(
            ["pg_autoctl", *args],
            env=self.env(),
            user=USER if os.geteuid() == 0 else None,
            capture_output=True,
            timeout=COMMAND_SECONDS_MAX,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)}: {done.stderr.decode()[-2000:]}")
        return done.stdout.decode()

    def spawn(self, node: Node, *args: str) -> None:
        log = (self.folder / f"{node.name}.log").open("ab")
        node.process = subprocess.Popen(
            ["pg_autoctl", *args],
            env=self.env(),
            user=USER if os.geteuid() == 0 else None,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def log_tails(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of each pg_autoctl's log, for a failure's message: the formation's
        folder is removed when the test ends."""
        tails = []
        for node in [self.monitor, *self.nodes]:
            try:
                text = (self.folder / f"{node.name}.log").read_text(errors="replace")
            except OSError as error:
                text = f"(no log: {error})"
            tails.append(f"--- {node.name} (port {node.port}) ---\n" + "\n".join(
                text.splitlines()[-lines:]))  # fmt: skip
        return "\n".join(tails)

    def monitor_uri(self) -> str:
        return self.run("show", "uri", "--pgdata", str(self.monitor.pgdata), "--formation",
                        "monitor").strip()  # fmt: skip

    def uri(self) -> str:
        """The formation's multi-host URL, with target_session_attrs=read-write, for the
        postgres role (pg_autoctl's names no user)."""
        shown = self.run("show", "uri", "--pgdata", str(self.monitor.pgdata), "--formation",
                         "default").strip()  # fmt: skip
        assert shown.startswith("postgres://"), shown
        return "postgresql://postgres@" + shown.removeprefix("postgres://")

    def states(self) -> dict[int, str]:
        """Each node's port and its current state, as the monitor sees it."""
        shown = json.loads(self.run("show", "state", "--pgdata", str(self.monitor.pgdata),
                                    "--json"))  # fmt: skip
        return {int(n["nodeport"]): str(n["current_group_state"]) for n in shown}

    def kill(self, node: Node) -> None:
        """SIGKILL of the node's pg_autoctl and of its PostgreSQL: the machine is gone."""
        assert node.process is not None
        tree = psutil.Process(node.process.pid).children(recursive=True)
        postmaster = self._postmaster(node)
        for victim in [node.process.pid, *(p.pid for p in tree), *postmaster]:
            with suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        node.process.wait(timeout=STOP_SECONDS_MAX)
        self.orphans += [p.pid for p in tree]

    def _postmaster(self, node: Node) -> list[int]:
        try:
            return [int((node.pgdata / "postmaster.pid").read_text().split()[0])]
        except (OSError, ValueError, IndexError):
            return []

    def stop(self) -> None:
        """Stops every pg_autoctl this formation started (it stops its PostgreSQL), then
        whatever of theirs is left."""
        for node in [*self.nodes, self.monitor]:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        leftovers: list[psutil.Process] = []
        for node in [*self.nodes, self.monitor]:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=STOP_SECONDS_MAX)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=STOP_SECONDS_MAX)
        for pid in self.orphans + [p for n in [*self.nodes, self.monitor] for p in
                                   self._postmaster(n)]:  # fmt: skip
            try:
                leftovers.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                continue
        for process in leftovers:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(leftovers, timeout=STOP_SECONDS_MAX)


@contextmanager
def formation() -> Iterator[Formation]:
    """A monitor and two data nodes, created and running, their ports free ones; the
    caller waits for primary and secondary (see states())."""
    folder = Path(tempfile.mkdtemp(prefix="formation-"))
    # Made here, before any pg_autoctl runs: two of them making it at once fail.
    for made_dir in (folder, folder / "config", folder / "data"):
        made_dir.mkdir(exist_ok=True)
        made_dir.chmod(0o755)
        if os.geteuid() == 0:
            os.chown(made_dir, pwd.getpwnam(USER).pw_uid, pwd.getpwnam(USER).pw_gid)
    made = Formation(folder, Node("monitor", free_port(), folder / "monitor"))
    try:
        yield made
    finally:
        made.stop()
        shutil.rmtree(folder, ignore_errors=True)


def create_monitor(made: Formation) -> None:
    made.spawn(made.monitor, "create", "monitor", "--pgdata", str(made.monitor.pgdata),
               "--pgport", str(made.monitor.port), "--hostname", "127.0.0.1", "--auth",
               "trust", "--ssl-self-signed", "--run")  # fmt: skip


def config_set(made: Formation, node: Node, setting: str, text: str) -> bool:
    """pg_autoctl config set of the running node, then whether the node's file says so.
    The node's keeper rewrites that file in place while it runs: a set that reads it
    halfway is refused, and a rewrite from the keeper's memory can undo one, so the
    caller repeats this until it holds."""
    pgdata = str(node.pgdata)
    try:
        made.run("config", "set", "--pgdata", pgdata, setting, text)
        return text == made.run("config", "get", "--pgdata", pgdata, setting).strip()
    except RuntimeError as error:
        if "configuration file" in str(error):
            return False
        raise


def create_node(made: Formation, monitor_uri: str) -> Node:
    index = len(made.nodes) + 1
    node = Node(f"node{index}", free_port(), made.folder / f"node{index}")
    made.nodes.append(node)
    made.spawn(node, "create", "postgres", "--pgdata", str(node.pgdata), "--pgport",
               str(node.port), "--hostname", "127.0.0.1", "--auth", "trust",
               "--ssl-self-signed", "--monitor", monitor_uri, "--run")  # fmt: skip
    return node
