"""The operator's commands against an Admin on TCP behind mutual TLS and a token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from earmark.server import Sidecar
from tests.conftest import Running, running, sidecar_settings
from tests.ops.test_commands import failure, rows, run
from tests.service.test_security import ADMIN_TOKEN, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1, a client certificate, and the token file."""
    files = make_pki(tmp_path)
    files["token"] = tmp_path / "token"
    files["token"].write_text(ADMIN_TOKEN + "\n")
    return files


@pytest.fixture
async def tls_admin(dsn: str, socket_dir: Path, pki: dict[str, Path]) -> AsyncIterator[Running]:
    """A sidecar whose Admin listens on TCP loopback with mutual TLS and a token."""
    settings = sidecar_settings(
        dsn, socket_dir, admin_listen="127.0.0.1:0", admin_token_file=pki["token"],
        tls_cert_file=pki["server"], tls_key_file=pki["server-key"],
        tls_client_ca_file=pki["ca"],
    )  # fmt: skip
    async with running(Sidecar(settings), dsn) as s:
        yield s


async def test_commands_speak_mutual_tls_with_the_token(
    tls_admin: Running, pki: dict[str, Path]
) -> None:
    """With the CA, the client's certificate and key and the token a put answers; without
    the client's certificate the command ends with one line naming the target."""
    token = ("--admin-token-file", str(pki["token"]))
    tls = ("--admin-ca-file", str(pki["ca"]))
    client = ("--admin-cert-file", str(pki["client"]), "--admin-key-file", str(pki["client-key"]))
    put = await run(tls_admin, "budgets", "put", "b", "--unit", "tokens", *token, *tls, *client)
    assert ["b", "tokens", "unlimited"] == rows(put)[1][:3]
    deadline = ("--timeout-seconds", "2")
    refused = await failure(tls_admin, "budgets", "get", "b", *token, *tls, *deadline)
    assert f"Admin at {tls_admin.admin_target}" in refused
    with pytest.raises(ValueError, match="--admin-cert-file and --admin-key-file: give both"):
        await run(tls_admin, "budgets", "get", "b", *token, "--admin-cert-file", "c.pem")
