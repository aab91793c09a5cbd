"""A durable settlement journal: the Settle a worker is about to send, on disk first, so
that a worker that dies after the provider answered and before the Settle landed loses
no usage. The next client with the same journal directory sends it again.

A record is the Settle request itself (its protobuf bytes): a replay sends exactly what
the first attempt sent, and the sidecar answers a repeated Settle of the same usage with
the same answer, changing nothing, so a record replayed twice is charged once. A record is
written atomically (a temporary file, fsynced, renamed, the directory fsynced) with mode
0600 before the request leaves, and removed only on a settled answer or a final refusal
(the hold is not there, or was settled otherwise: sending it again cannot help); on a
failure that may pass (the sidecar unreachable) it stays for the next recover(). A record
that cannot be read is moved to quarantine/, named in a warning, never replayed.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from google.protobuf.message import DecodeError

from earmark import limits
from earmark.v1 import budget_pb2 as pb

log = logging.getLogger("earmark.client")

SUFFIX = ".settle"
QUARANTINE = "quarantine"


class Journal:
    """Settle requests not yet answered, one file each, in directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, reservation_id: str) -> Path:
        # A name of the id's digest: the id comes from outside and names no file itself.
        name = hashlib.sha256(reservation_id.encode()).hexdigest()[:32]
        return self.directory / f"{name}{SUFFIX}"

    def write(self, request: pb.SettleRequest) -> Path:
        """Writes request durably; the record's path."""
        path = self._path(request.reservation_id)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        data = request.SerializeToString()
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        self._sync_directory()
        return path

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self._sync_directory()

    def pending(self) -> list[tuple[Path, pb.SettleRequest]]:
        """Every record, oldest first, at most limits.journal_replay_records_max; those
        that cannot be read are quarantined."""
        records = sorted(self.directory.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime_ns)
        found = []
        for path in records[: limits.journal_replay_records_max]:
            try:
                data = path.read_bytes()
                if len(data) > limits.journal_record_bytes_max:
                    raise ValueError("larger than a Settle request can be")
                request = pb.SettleRequest.FromString(data)
                if not request.reservation_id:
                    raise ValueError("names no reservation")
            except (OSError, ValueError, DecodeError) as error:
                self._quarantine(path, error)
                continue
            found.append((path, request))
        return found

    def _quarantine(self, path: Path, error: Exception) -> None:
        folder = self.directory / QUARANTINE
        folder.mkdir(mode=0o700, exist_ok=True)
        kind = type(error).__name__
        log.warning("earmark journal: %s cannot be read (%s); moved to %s", path, kind, folder)
        os.replace(path, folder / path.name)

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
