"""A durable settlement journal: the Settle a worker is about to send, on disk first, so
that a worker that dies after the provider answered and before the Settle landed loses
no usage. The next client with the same journal directory sends it again.

A record holds the Settle request itself (its protobuf bytes, base64 in a small JSON
object that also names its reservation and the record's version): a replay sends exactly
what the first attempt sent, and the sidecar answers a repeated Settle of the same usage
with the same answer, changing nothing, so a record replayed twice is charged once. Its
file is named `v2-<SHA-256 of the reservation id's exact UTF-8 bytes, lower-case hex>.json`,
the standard name of the Cycles SDK Recovery Conformance Profile (docs/recovery-conformance.md),
so that distinct ids never share a file and the TypeScript SDK finds the same name. A
record is written atomically (a temporary file, fsynced, renamed, the directory fsynced)
with mode 0600 before the request leaves, and removed only on a settled answer or a final
refusal (the hold is not there, or was settled otherwise: sending it again cannot help); on
a failure that may pass (the sidecar unreachable) it stays for the next recover(). A record
that cannot be read, or of a version this SDK does not know, is moved to quarantine/, named
in a warning, never replayed.

The directory must be private: at start (Journal()) one that, after any symlink to it is
followed, is not owned by the process's user or is writable by its group or by others is
refused with UnsafeJournalError naming it, because any record found there is replayed, and
another user's record would settle a hold that is not theirs. Each record is opened without
following a symlink and without blocking (a FIFO named as a record must not hold the client
forever), checked on its descriptor to be a regular file owned by the user and read to
limits.journal_record_bytes_max and no further; anything else is quarantined unread.
Journal.quarantined counts the files this journal set aside, and each warning says it.

Records of the first format (the bare protobuf bytes, named by the first 32 hex digits of
the digest with `.settle` after them) are still read: pending() moves each to the standard
name of the reservation it holds, so an upgrade loses none.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import logging
import os
import re
import stat
import time
from pathlib import Path

from google.protobuf.message import DecodeError

from earmark import limits
from earmark.v1 import budget_pb2 as pb

log = logging.getLogger("earmark.client")

# The record format this SDK writes and reads, in the record and in its file's name.
VERSION = 2
PREFIX = f"v{VERSION}-"
SUFFIX = ".json"
# The first format's records: read, moved to the standard name, never written.
LEGACY_SUFFIX = ".settle"
QUARANTINE = "quarantine"
_STANDARD_NAME = re.compile(rf"{re.escape(PREFIX)}[0-9a-f]{{64}}{re.escape(SUFFIX)}")


def record_name(reservation_id: str) -> str:
    """A record's file name: the digest of the id's exact UTF-8 bytes, because the id
    comes from outside and must not name a file itself."""
    return f"{PREFIX}{hashlib.sha256(reservation_id.encode()).hexdigest()}{SUFFIX}"


def legacy_record_name(reservation_id: str) -> str:
    """The name the first format gave the id's record."""
    return f"{hashlib.sha256(reservation_id.encode()).hexdigest()[:32]}{LEGACY_SUFFIX}"


def encode_record(request: pb.SettleRequest) -> bytes:
    """A record's bytes: compact JSON, UTF-8, the same bytes the TypeScript SDK writes."""
    record = {
        "version": VERSION,
        "reservation_id": request.reservation_id,
        "settle": base64.b64encode(request.SerializeToString()).decode("ascii"),
    }
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode()


def decode_record(data: bytes) -> pb.SettleRequest:
    """The request a record holds; ValueError (or DecodeError) saying why it holds none."""
    if len(data) > limits.journal_record_bytes_max:
        raise ValueError("larger than a Settle record can be")
    record = json.loads(data.decode())
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    version = record.get("version")
    if type(version) is not int or version != VERSION:
        raise ValueError(f"unsupported record version {version!r}")
    reservation_id, settle = record.get("reservation_id"), record.get("settle")
    if not isinstance(reservation_id, str) or not reservation_id:
        raise ValueError("names no reservation")
    if not isinstance(settle, str):
        raise ValueError("holds no settle request")
    request = pb.SettleRequest.FromString(base64.b64decode(settle, validate=True))
    if request.reservation_id != reservation_id:
        raise ValueError("its settle request is for another reservation")
    return request


class UnsafeJournalError(PermissionError):
    """A journal directory another user could write, refused at start."""


def _read_record(path: Path) -> bytes:
    """The bytes of the record at path, if it is a regular file of this process's user no
    larger than a record can be; else OSError or ValueError saying why it is none."""
    # O_NOFOLLOW: a symlink is never followed to a file it names; O_NONBLOCK: opening a FIFO
    # returns at once instead of waiting for a writer.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError("a symlink, not a record") from error
        raise
    try:
        # Checked on the descriptor, not the name: the file read is the file checked.
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_uid != os.geteuid():
            raise ValueError(f"owned by uid {info.st_uid}, not this process's {os.geteuid()}")
        if info.st_size > limits.journal_record_bytes_max:
            raise ValueError("larger than a Settle record can be")
        # One byte past the bound tells a file that grew since fstat from one that did not.
        chunks = []
        left = limits.journal_record_bytes_max + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_directory(directory: Path) -> None:
    """Raises UnsafeJournalError unless directory (its symlinks followed) is a directory of
    this process's user that neither its group nor others can write."""
    info = directory.stat()
    uid = os.geteuid()
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeJournalError(f"earmark journal: {directory} is not a directory")
    if info.st_uid != uid:
        raise UnsafeJournalError(
            f"earmark journal: {directory} is owned by uid {info.st_uid}, not this process's "
            f"{uid}; a journal directory must be private (mode 0700, owned by its worker's user)"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeJournalError(
            f"earmark journal: {directory} has mode {stat.S_IMODE(info.st_mode):04o}, writable "
            "by others; a journal directory must be private (mode 0700, owned by its worker's "
            "user)"
        )


def _decode_legacy(data: bytes) -> pb.SettleRequest:
    if len(data) > limits.journal_record_bytes_max:
        raise ValueError("larger than a Settle request can be")
    request = pb.SettleRequest.FromString(data)
    if not request.reservation_id:
        raise ValueError("names no reservation")
    return request


class Journal:
    """Settle requests not yet answered, one file each, in directory."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_directory(directory)
        # The directory checked, not a symlink that could be pointed elsewhere later.
        self.directory = directory.resolve()
        # Files this journal quarantined (unreadable, foreign, not regular, too large).
        self.quarantined = 0

    def path_of(self, reservation_id: str) -> Path:
        return self.directory / record_name(reservation_id)

    def write(self, request: pb.SettleRequest, *, mtime_ns: int | None = None) -> Path:
        """Writes request durably; the record's path. mtime_ns dates the record (a migrated
        one keeps its first date, so that replay stays oldest first)."""
        path = self.path_of(request.reservation_id)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        data = encode_record(request)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temporary, flags, 0o600)
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        if mtime_ns is not None:
            os.utime(temporary, ns=(mtime_ns, mtime_ns))
        os.replace(temporary, path)
        self._sync_directory()
        return path

    def remove(self, path: Path, reservation_id: str) -> None:
        """Removes the record of reservation_id at path, and a first-format record of the
        same id if one is left; never a first-format file that holds another id (a name
        two ids shared)."""
        path.unlink(missing_ok=True)
        legacy = self.directory / legacy_record_name(reservation_id)
        try:
            holds = _decode_legacy(_read_record(legacy)).reservation_id
        except (OSError, ValueError, DecodeError):
            holds = None
        if holds == reservation_id:
            legacy.unlink(missing_ok=True)
        self._sync_directory()

    def pending(self) -> list[tuple[Path, pb.SettleRequest]]:
        """Every record, oldest first, at most limits.journal_replay_records_max, after
        moving first-format records to their standard names; those that cannot be read are
        quarantined."""
        self._migrate()
        records = []
        for path in self.directory.glob(f"*{SUFFIX}"):
            try:
                # lstat: a symlink is dated itself, and quarantined below, never followed.
                records.append((path.lstat().st_mtime_ns, path))
            except FileNotFoundError:
                continue  # removed since it was listed (another client answered it)
        records.sort()
        found = []
        for _, path in records[: limits.journal_replay_records_max]:
            try:
                if not _STANDARD_NAME.fullmatch(path.name):
                    raise ValueError("not a record name this SDK writes")
                request = decode_record(_read_record(path))
                if path.name != record_name(request.reservation_id):
                    raise ValueError("named for another reservation")
            except FileNotFoundError:
                continue
            except (OSError, ValueError, DecodeError) as error:
                self._quarantine(path, error)
                continue
            found.append((path, request))
        return found

    def _migrate(self) -> None:
        """Moves each first-format record to the standard name of the reservation it holds
        (keeping a standard record already there: it is as new or newer), then removes it;
        one that cannot be read is quarantined."""
        for legacy in sorted(self.directory.glob(f"*{LEGACY_SUFFIX}")):
            try:
                dated = legacy.lstat()
                request = _decode_legacy(_read_record(legacy))
            except FileNotFoundError:
                continue
            except (OSError, ValueError, DecodeError) as error:
                self._quarantine(legacy, error)
                continue
            if not self.path_of(request.reservation_id).exists():
                self.write(request, mtime_ns=dated.st_mtime_ns)
            # The file's own record is now under its standard name: removing it removes
            # nothing of another reservation.
            legacy.unlink(missing_ok=True)
            self._sync_directory()

    def _quarantine(self, path: Path, error: Exception) -> None:
        folder = self.directory / QUARANTINE
        folder.mkdir(mode=0o700, exist_ok=True)
        target = folder / path.name
        if target.exists():
            # An earlier file of the same name stays: both are evidence.
            target = folder / f"{path.name}.{time.time_ns()}"
        why = f"{type(error).__name__}: {error}"
        try:
            os.replace(path, target)
        except FileNotFoundError:
            return  # another client moved it first
        self.quarantined += 1
        log.warning("earmark journal: %s cannot be read (%s); moved to %s (%d quarantined "
                    "by this client)", path, why, folder, self.quarantined)  # fmt: skip
        self._sync_directory()

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
