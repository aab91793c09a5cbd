"""Files a setting names are read only when they are regular files, without blocking, to
a bound; each problem is one line naming the setting and the path."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from earmark.files import FileProblem, read_regular, read_text, require_regular
from earmark.ops.connect import OpsError, read_token
from tests.workloads.test_commands import earmark


def test_a_regular_file_and_a_link_to_one_are_read(tmp_path: Path) -> None:
    """A regular file is read whole, and so is a symbolic link to one (a ConfigMap)."""
    target = tmp_path / "token"
    target.write_bytes(b"secret-0123456789abcdef\n")
    link = tmp_path / "link"
    link.symlink_to(target)
    require_regular(link, "token_file")
    assert ("secret-0123456789abcdef\n", b"secret-0123456789abcdef\n") == (
        read_text(link, "token_file", 1 << 10),
        read_regular(target, "token_file", 1 << 10)[0],
    )


def problem(path: Path, bytes_max: int = 1 << 10) -> str:
    with pytest.raises(FileProblem) as caught:
        read_regular(path, "plans_file", bytes_max)
    return str(caught.value)


def test_what_is_not_a_regular_file_is_named_at_once(tmp_path: Path) -> None:
    """A FIFO (no writer: a blocking open would wait for good), a directory, a device and a
    socket are each refused at once, naming what they are; so is what is absent."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    listening = socket.socket(socket.AF_UNIX)
    sock = tmp_path / "sock"
    listening.bind(str(sock))
    try:
        found = [problem(p) for p in (fifo, tmp_path, Path("/dev/zero"), tmp_path / "absent")]
        with pytest.raises(FileProblem) as refused:
            require_regular(sock, "plans_file")
    finally:
        listening.close()
    assert [
        f"plans_file: {fifo}: is a FIFO, not a regular file",
        f"plans_file: {tmp_path}: is a directory, not a regular file",
        "plans_file: /dev/zero: is a character device, not a regular file",
        f"plans_file: {tmp_path / 'absent'}: cannot read it (FileNotFoundError)",
    ] == found
    assert f"plans_file: {sock}: is a socket, not a regular file" == str(refused.value)


def test_a_file_past_the_bound_is_refused(tmp_path: Path) -> None:
    """A file one byte past the bound is refused naming the bound; one at it is read."""
    at, past = tmp_path / "at", tmp_path / "past"
    at.write_bytes(b"x" * 8)
    past.write_bytes(b"x" * 9)
    assert (8, f"plans_file: {past}: is larger than 8 bytes") == (
        len(read_regular(at, "plans_file", 8)[0]),
        problem(past, 8),
    )


@pytest.mark.parametrize("setting", ["--worker-token-file", "--admin-token-file"])
async def test_earmark_serve_refuses_a_fifo_for_a_file_setting(
    tmp_path: Path, setting: str
) -> None:
    """`earmark serve` given a FIFO for a token file exits 1 at once in one line naming
    the setting, before any database is reached."""
    fifo = tmp_path / "tokens"
    os.mkfifo(fifo)
    name = setting.removeprefix("--").replace("-", "_")
    code, out, err = await earmark(
        "serve", setting, str(fifo),
        "--database-url", "postgresql://127.0.0.1:1/unreachable", "--data-dir", str(tmp_path),
        "--listen", "127.0.0.1:0", "--metrics-listen", "",
    )  # fmt: skip
    assert (1, [f"earmark: {name}: {fifo}: is a FIFO, not a regular file"]) == (
        code,
        err.splitlines(),
    ), out


async def test_earmark_console_refuses_a_fifo_for_its_token_file(tmp_path: Path) -> None:
    """`earmark console` given a FIFO for its admin token file exits 1 in one line."""
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    code, out, err = await earmark(
        "console", "--admin-token-file", str(fifo), "--listen", "127.0.0.1:0"
    )
    assert (1, [f"earmark console: admin_token_file: {fifo}: is a FIFO, not a regular file"]) == (
        code,
        err.splitlines(),
    ), out


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (b"", "is empty (or only white space): it holds no token"),
        (b" \n\t\n", "is empty (or only white space): it holds no token"),
        (b"short-s3cret\n", "holds a token that is too short: a token is at least 16 characters"),
        (b"s3cret" * 100, "holds a token that is too long: a token is at most 512 characters"),
        (
            b"first-s3cret-0123456789 second-s3cret-0123456789\n",
            "holds more than one word: a token is one word, without white space",
        ),
        (b"\xffs3cret-0123456789abcdef", "is not UTF-8"),
    ],
)
def test_a_token_file_that_will_not_do_says_what_is_wrong(
    tmp_path: Path, text: bytes, why: str
) -> None:
    """Each token file that will not do is one line naming the flag, the file and what is
    wrong with it, never the token."""
    path = tmp_path / "token"
    path.write_bytes(text)
    with pytest.raises(OpsError) as refused:
        read_token(path)
    said = str(refused.value)
    assert (f"--admin-token-file: {path}: {why}", False) == (said, "s3cret" in said)


def test_a_token_file_that_cannot_be_read_says_so(tmp_path: Path) -> None:
    """A token file that is not there is said to be unreadable, naming the flag and path."""
    path = tmp_path / "absent"
    with pytest.raises(OpsError) as refused:
        read_token(path)
    assert f"--admin-token-file: {path}: cannot read it (FileNotFoundError)" == str(refused.value)


def test_a_token_file_of_one_word_is_read_without_its_white_space(tmp_path: Path) -> None:
    """A token of one word between the bounds is read without its surrounding white space."""
    path = tmp_path / "token"
    path.write_text("  admin-0123456789abcdef\n")
    assert "admin-0123456789abcdef" == read_token(path)
