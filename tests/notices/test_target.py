"""Where notices go, checked before anything is served: --notify-url, --notify-secret-file and
--notify-lease-seconds that will not do are one line, which never repeats the URL's
credentials or the secret."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest

from earmark import limits, settings
from earmark.notices.signing import secret_bytes
from earmark.notices.target import load_target, read_keys, shown_url
from tests.notices.recorded import SECRET

LOOPBACK = "http://127.0.0.1:8080/hooks"


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"notify_url": "ftp://hooks.example/x?t=s3cret"}, "notify_url: its scheme is 'ftp'"),
        ({"notify_url": "http://hooks.example/x?t=s3cret"}, "plain http only on a loopback"),
        ({"notify_url": "https://u:s3cret@hooks.example:99x/"}, "notify_url: not a URL"),
        ({"notify_url": "https://hooks.example/" + "s3cret" * 400}, "at most 2048 characters"),
        ({"notify_url": "https://hooks.example/s3cret"}, "--notify-url needs --notify-secret-file"),
        ({"notify_secret_file": "/etc/notify"}, "is read only with --notify-url"),
        ({"notify_lease_seconds": "1"}, "notify_lease_seconds: 1 is not in [2, 600]"),
    ],
)
def test_notice_settings_that_will_not_do_are_refused(flags: dict[str, object], why: str) -> None:
    """Each problem is named by its setting, without the URL's credentials."""
    with pytest.raises(ValueError, match=re.escape(why)) as refused:
        settings.load(flags, {})
    assert "s3cret" not in str(refused.value)


def test_the_notice_settings_come_from_flags_or_the_environment() -> None:
    """A loopback URL may be plain http; the lease comes from EARMARK_NOTIFY_LEASE_SECONDS."""
    loaded = settings.load(
        {"notify_url": LOOPBACK},
        {"EARMARK_NOTIFY_SECRET_FILE": "/etc/notify", "EARMARK_NOTIFY_LEASE_SECONDS": "3"},
    )
    assert (LOOPBACK, Path("/etc/notify"), 3.0) == (
        loaded.notify_url,
        loaded.notify_secret_file,
        loaded.notify_lease_seconds,
    )
    assert limits.notify_lease_seconds_default == settings.load({}, {}).notify_lease_seconds


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "holds no secret"),
        ("# the current one\n\n", "holds no secret"),
        ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n", "line 1: a secret starts with whsec_"),
        (f"{SECRET}\nwhsec_c2hvcnQ=\n", "line 2: the secret is 5 bytes; at least 24"),
        (f"{SECRET}\n" * 5, "holds 5 secrets; at most 4"),
    ],
)
def test_a_secret_file_that_will_not_do_is_refused(tmp_path: Path, text: str, why: str) -> None:
    """No secret, one without its prefix or too short, or too many: one line naming the
    file and the line, not the secret."""
    path = tmp_path / "notify.secret"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(why)) as refused:
        read_keys(path)
    assert str(refused.value).startswith(f"notify_secret_file: {path}")
    assert "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" not in str(refused.value)


def test_a_secret_file_holds_the_keys_of_a_rotation(tmp_path: Path) -> None:
    """The current secret and the next one, each a line: every attempt is signed with both;
    the target's repr shows neither, nor the URL's credentials."""
    other = "whsec_" + "A" * 44
    path = tmp_path / "notify.secret"
    path.write_text(f"# current, then next\n{SECRET}\n  {other}  \n")
    url = "https://user:pw@hooks.example:8443/T01/s3cret?token=s3cret"
    target = load_target(url, path)
    assert target is not None
    assert ((secret_bytes(SECRET), secret_bytes(other)), url) == (target.keys, target.url)
    assert "Target(shown='https://hooks.example:8443/...')" == repr(target)
    assert (None, "http://127.0.0.1:8080") == (
        load_target("", None),
        shown_url("http://127.0.0.1:8080/"),
    )


async def test_serve_with_a_secret_that_will_not_do_stops_in_one_line(
    database_url: str, tmp_path: Path
) -> None:
    """`earmark serve --notify-url ... --notify-secret-file F` with a short secret, or with
    no file there, exits 1 at start with one line naming the file; never the secret."""
    short = tmp_path / "short.secret"
    short.write_text("whsec_c2hvcnQ=\n")
    for path, why in ((short, "line 1: the secret is 5 bytes"), (tmp_path / "none", "read")):
        result = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "earmark", "serve", "--database-url", database_url,
             "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", str(tmp_path),
             "--notify-url", LOOPBACK, "--notify-secret-file", str(path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        lines = result.stderr.strip().splitlines()
        assert (1, 1) == (result.returncode, len(lines)), result.stderr
        assert lines[0].startswith(f"earmark: notify_secret_file: {path}")
        assert why in lines[0]
        assert "c2hvcnQ" not in result.stderr + result.stdout
