"""The data dir belongs to one sidecar at a time: an exclusive lock on a file in it.

Two sidecars on one data dir would share the embedded PostgreSQL's home and the admin
socket: the second took the socket over and removed it when it exited, leaving the first
without Admin. The lock (flock, so the kernel drops it when its holder dies, even by
SIGKILL) is taken before anything else; the file keeps the holder's pid, to name it. The
descriptor is not inherited (Python opens it close-on-exec), so a PostgreSQL started by
the sidecar does not keep the lock after the sidecar is gone.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from earmark import limits
from earmark.errors import Reason, Unavailable

LOCK_FILE = "earmark.lock"


class DataDirLock:
    """Held from take() until release() (or the process's end)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def take(cls, data_dir: Path) -> DataDirLock:
        """Locks data_dir (creating it); Unavailable naming the holder's pid if another
        process holds it, or naming the path and the cause if it cannot be made or
        written (a read-only or full disk, no permission)."""
        path = data_dir / LOCK_FILE
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise _cannot(path, error) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _read_pid(fd)
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise _cannot(path, error) from None
            raise Unavailable(
                f"data_dir: {data_dir} is in use by another earmark (pid {holder or 'unknown'});"
                " give each sidecar a data dir of its own",
                Reason.DATA_DIR_IN_USE,
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as error:
            os.close(fd)
            raise _cannot(path, error) from None
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)


def _cannot(path: Path, error: OSError) -> Unavailable:
    return Unavailable(
        f"data_dir: cannot lock {path}: {error.strerror or error}", Reason.DATA_DIR_IN_USE
    )


def _read_pid(fd: int) -> str:
    try:
        text = os.pread(fd, limits.lock_file_bytes_max, 0).decode(errors="replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
