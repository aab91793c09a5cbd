"""Who is calling: bearer tokens read from files at start, and the caller of the call
being served.

A worker token file has one token a line: `NAME TOKEN PREFIX [PREFIX ...]`, where NAME
is what logs and the database record (never the token), and each PREFIX is a budget id
prefix the token may reserve on (`*` for any budget). Blank lines and lines starting
with `#` are skipped. An admin token file holds the admin token alone.

Tokens are looked up by their SHA-256 digest and the digests compared in constant time,
so neither the lookup nor the comparison times reveal a token; no token is ever part of
an error message or a log line.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from earmark import files, limits

ANY_BUDGET = "*"
ADMIN_NAME = "admin"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
_TOKEN = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True, slots=True)
class Caller:
    """A token's holder: its name and the budget id prefixes it may use."""

    name: str
    prefixes: tuple[str, ...]

    def may_use(self, budget_id: str) -> bool:
        return any(budget_id.startswith(prefix) for prefix in self.prefixes)


# The caller of the RPC being served, set by the edge interceptor; None without tokens.
CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "earmark_caller", default=None
)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Tokens:
    """Bearer tokens and their callers."""

    def __init__(self, entries: Sequence[tuple[str, Caller]]) -> None:
        assert len(entries) <= limits.worker_tokens_max
        digests = [(_digest(token), caller) for token, caller in entries]
        self._by_digest = {digest: (digest, caller) for digest, caller in digests}
        assert len(self._by_digest) == len(entries), "tokens must differ"

    def find(self, presented: str) -> Caller | None:
        """The presented token's caller. The dict finds a digest, which says nothing about
        how close a wrong token came; the final comparison is constant-time as well."""
        digest = _digest(presented)
        found = self._by_digest.get(digest)
        if found is None or not hmac.compare_digest(found[0], digest):
            return None
        return found[1]

    def __len__(self) -> int:
        return len(self._by_digest)


def bearer(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of an `authorization: Bearer TOKEN` metadata entry, if there is one."""
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token:
                return token.strip()
            return None
    return None


def _read(path: Path, setting: str) -> str:
    return files.read_text(path, setting, limits.token_file_bytes_max)


def _check_token(token: str, where: str) -> None:
    if not limits.token_length_min <= len(token) <= limits.token_length_max:
        raise ValueError(
            f"{where}: a token must be {limits.token_length_min} to "
            f"{limits.token_length_max} characters"
        )
    if not _TOKEN.fullmatch(token):
        raise ValueError(f"{where}: a token may hold only printable ASCII without spaces")


def load_admin_token(path: Path) -> Tokens:
    """The admin token file: one token, surrounding white space ignored."""
    token = _read(path, "admin_token_file").strip()
    _check_token(token, f"admin_token_file: {path}")
    return Tokens([(token, Caller(ADMIN_NAME, ("",)))])


def read_token(path: Path, setting: str) -> str:
    """A file of one token (as the admin token file), surrounding white space ignored."""
    token = _read(path, setting).strip()
    _check_token(token, f"{setting}: {path}")
    return token


def load_worker_tokens(path: Path, setting: str = "worker_token_file") -> Tokens:
    """The worker token file (or the region token file, in its format: a region's name,
    token and the budget id prefixes it may hold shares of); raises ValueError naming the
    line, never the token."""
    entries: list[tuple[str, Caller]] = []
    names: set[str] = set()
    for number, line in enumerate(_read(path, setting).splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        where = f"{setting}: {path}, line {number}"
        if len(fields) < 3:
            raise ValueError(f"{where}: expected NAME TOKEN PREFIX [PREFIX ...]")
        name, token, prefixes = fields[0], fields[1], fields[2:]
        if len(name) > limits.token_name_length_max or not _NAME.fullmatch(name):
            raise ValueError(f"{where}: the name must be 1 to {limits.token_name_length_max} "
                             "letters, digits, _ . -")  # fmt: skip
        if name in names:
            raise ValueError(f"{where}: the name {name!r} is used twice")
        _check_token(token, where)
        if len(prefixes) > limits.token_prefixes_max:
            raise ValueError(f"{where}: at most {limits.token_prefixes_max} prefixes")
        names.add(name)
        allowed = tuple("" if p == ANY_BUDGET else p for p in prefixes)
        entries.append((token, Caller(name, allowed)))
        if len(entries) > limits.worker_tokens_max:
            raise ValueError(f"{where}: at most {limits.worker_tokens_max} tokens")
    if not entries:
        raise ValueError(f"{setting}: {path} holds no token")
    if len({_digest(t) for t, _ in entries}) != len(entries):
        raise ValueError(f"{setting}: {path} gives one token to two names")
    return Tokens(entries)
