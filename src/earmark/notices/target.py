"""Where notices go: --notify-url (checked with the other settings, settings.py) and the
keys of --notify-secret-file, read at start so that a secret that will not do is one line
before anything is served.

The URL's userinfo, path and query may carry credentials of the receiver's own (many
webhook URLs hold a token in their path): they are sent, and never shown. What logs and
errors name is `shown`, the URL's scheme, host and port.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from earmark import files, limits
from earmark.notices import signing

SECRET_SETTING = "notify_secret_file"


@dataclass(frozen=True, slots=True)
class Target:
    """The receiver's URL and the keys each attempt is signed with (the current one first;
    during a rotation, the others too). Neither is in its repr."""

    url: str = field(repr=False)
    keys: tuple[bytes, ...] = field(repr=False)
    shown: str


def shown_url(url: str) -> str:
    """url's scheme, host and port, with `/...` for a path: what may be logged."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port is None else f"{host}:{port}"
    path = "/..." if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{netloc}{path}"


def read_keys(path: Path) -> tuple[bytes, ...]:
    """The keys of a secret file: one whsec_ secret a line (blank lines and lines starting
    with # passed over), the current one first. ValueError naming the setting, the path and
    the line, never the secret."""
    text = files.read_text(path, SECRET_SETTING, limits.token_file_bytes_max)
    keys: list[bytes] = []
    for number, line in enumerate(text.splitlines(), 1):
        secret = line.strip()
        if not secret or secret.startswith("#"):
            continue
        where = f"{SECRET_SETTING}: {path}, line {number}"
        if not secret.startswith(signing.PREFIX):
            raise ValueError(f"{where}: a secret starts with {signing.PREFIX}")
        try:
            keys.append(signing.secret_bytes(secret))
        except signing.BadSecret as error:
            raise ValueError(f"{where}: {error}") from None
    if not keys:
        raise ValueError(f"{SECRET_SETTING}: {path}: holds no secret")
    if len(keys) > limits.notify_secrets_max:
        raise ValueError(
            f"{SECRET_SETTING}: {path}: holds {len(keys)} secrets; at most "
            f"{limits.notify_secrets_max}"
        )
    return tuple(keys)


def load_target(url: str, secret_file: Path | None) -> Target | None:
    """The target the settings name (None without --notify-url), its keys read now."""
    if not url:
        return None
    assert secret_file is not None, "Settings requires it with notify_url"
    return Target(url=url, keys=read_keys(secret_file), shown=shown_url(url))
