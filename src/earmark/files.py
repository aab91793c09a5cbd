"""Files a setting names (a plans file, token files, TLS certificates and keys), read only
when they are regular files.

A FIFO, a device or a socket in place of such a file would block a plain open() or read()
for good (a FIFO's open waits for a writer), and a blocked read holds whatever waits on
it: the sidecar's start, a reload thread, and in the end SIGTERM. So each file is opened
without blocking, checked on the descriptor it was opened as (a swap between a check and
the open cannot slip a FIFO through), and read to a bound. Every problem is one
FileProblem naming the setting and the path, never what the file holds.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

# What a file that is not regular is, in the words `ls -l` and `find -type` use.
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileProblem(ValueError):
    """A file a setting names cannot be used; the message names the setting and path."""


def kind_of(mode: int) -> str:
    """What a file of this mode is, for a message."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def require_regular(path: Path, setting: str) -> None:
    """Raises FileProblem unless path is a regular file (a symbolic link to one is one:
    a Kubernetes ConfigMap or Secret is mounted as links). stat() never blocks on what
    it looks at."""
    try:
        found = os.stat(path)
    except OSError as error:
        raise _problem(setting, path, f"cannot read it ({type(error).__name__})") from None
    if not stat.S_ISREG(found.st_mode):
        raise _problem(setting, path, f"is {kind_of(found.st_mode)}, not a regular file")


def read_regular(path: Path, setting: str, bytes_max: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file at path, at most bytes_max, and its stat as opened;
    FileProblem if it is anything else, larger, or cannot be read."""
    assert bytes_max >= 1
    try:
        # O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a
        # writer; on a regular file it changes nothing.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as error:
        raise _problem(setting, path, f"cannot read it ({type(error).__name__})") from None
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            raise _problem(setting, path, f"is {kind_of(found.st_mode)}, not a regular file")
        if found.st_size > bytes_max:
            raise _problem(setting, path, f"is larger than {bytes_max} bytes")
        chunks: list[bytes] = []
        size = 0
        # A file that grows while it is read is still read only to the bound.
        while size <= bytes_max:
            chunk = os.read(fd, bytes_max + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise _problem(setting, path, f"cannot read it ({type(error).__name__})") from None
    finally:
        os.close(fd)
    if size > bytes_max:
        raise _problem(setting, path, f"is larger than {bytes_max} bytes")
    return b"".join(chunks), found


def read_text(path: Path, setting: str, bytes_max: int) -> str:
    """read_regular's bytes as UTF-8 text."""
    data, _ = read_regular(path, setting, bytes_max)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _problem(setting, path, "is not UTF-8") from None


def require_setting_files(settings: object) -> None:
    """require_regular for every setting of a settings dataclass that names a file (its
    name ends in _file) and is set: checked at start, so that a FIFO or a directory given
    for a token, a certificate or a plans file is one line, not a start that hangs."""
    assert dataclasses.is_dataclass(settings)
    for field in dataclasses.fields(settings):
        value = getattr(settings, field.name)
        if field.name.endswith("_file") and value is not None:
            require_regular(Path(value), field.name)


def _problem(setting: str, path: Path, problem: str) -> FileProblem:
    """The one shape of every message: the setting, the path, what is wrong. An OSError is
    named by its type, not its text, which may quote the path again."""
    return FileProblem(f"{setting}: {path}: {problem}")
