"""Admission is a privilege: Admin apart from workers, tokens, TLS, and listeners that
refuse to serve plaintext beyond loopback unless told to."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.field_mask_pb2 import FieldMask
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from earmark import limits
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import assert_invariants, reason_of

ADMIN_TOKEN = "admin-token-0123456789abcdef"
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


async def test_admin_is_not_served_to_workers(sidecar: Running) -> None:
    """On the workers' port Admin methods are UNIMPLEMENTED, with a message and reason
    that name Admin's own listener: a worker cannot raise a limit."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="t"))
    workers_admin = budget_pb2_grpc.AdminStub(sidecar.channel)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await workers_admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=10**18))
    reason, about = reason_of(caught.value)
    listener = sidecar.sidecar.settings.admin_address
    assert grpc.StatusCode.UNIMPLEMENTED == caught.value.code()
    assert ("ADMIN_ON_ITS_OWN_LISTENER", "earmark.v1.Admin/PutBudget", listener) == (
        reason,
        about["method"],
        about["admin_listener"],
    )
    assert f"its own listener, {listener} (--admin-listen)" in (caught.value.details() or "")
    assert 100 == (await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="b"))).limit
    await assert_invariants(sidecar.dsn)


@pytest.fixture
async def tcp_admin(dsn: str, socket_dir: Path) -> AsyncIterator[Running]:
    """A sidecar whose Admin listens on TCP loopback behind a token file."""
    token_file = socket_dir / "admin-token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    settings = sidecar_settings(
        dsn, socket_dir, admin_listen="127.0.0.1:0", admin_token_file=token_file
    )
    async with running(Sidecar(settings), dsn) as s:
        yield s


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789abcdef", ADMIN_TOKEN[:-1]])
async def test_admin_over_tcp_needs_the_token(tcp_admin: Running, token: str | None) -> None:
    """Over TCP an Admin call without the token, or with another, is UNAUTHENTICATED and
    changes nothing; the message carries no token."""
    metadata = bearer(token) if token else None
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await tcp_admin.admin.PutBudget(
            pb.PutBudgetRequest(budget_id="b", limit=1, unit="t"), metadata=metadata
        )
    assert grpc.StatusCode.UNAUTHENTICATED == caught.value.code()
    assert ADMIN_TOKEN not in (caught.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await tcp_admin.admin.GetBudget(
            pb.GetBudgetRequest(budget_id="b"), metadata=bearer(ADMIN_TOKEN)
        )
    assert grpc.StatusCode.NOT_FOUND == missing.value.code()


async def test_update_budget_is_an_operators_call(tcp_admin: Running) -> None:
    """UpdateBudget is Admin's, as PutBudget: on the workers' port UNIMPLEMENTED naming
    Admin's listener, on Admin's without the token UNAUTHENTICATED; neither changes the
    budget, and with the token it answers."""
    token = bearer(ADMIN_TOKEN)
    await tcp_admin.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="b", limit=100, unit="t"), metadata=token
    )
    raise_it = pb.UpdateBudgetRequest(
        budget=pb.PutBudgetRequest(budget_id="b", limit=10**18),
        update_mask=FieldMask(paths=["limit"]),
    )
    with pytest.raises(grpc.aio.AioRpcError) as on_workers:
        await budget_pb2_grpc.AdminStub(tcp_admin.channel).UpdateBudget(raise_it, metadata=token)
    with pytest.raises(grpc.aio.AioRpcError) as without_token:
        await tcp_admin.admin.UpdateBudget(raise_it)
    unchanged = await tcp_admin.admin.GetBudget(pb.GetBudgetRequest(budget_id="b"), metadata=token)
    with_token = await tcp_admin.admin.UpdateBudget(raise_it, metadata=token)
    assert (
        (grpc.StatusCode.UNIMPLEMENTED, "earmark.v1.Admin/UpdateBudget"),
        grpc.StatusCode.UNAUTHENTICATED,
        100,
        10**18,
    ) == (
        (on_workers.value.code(), reason_of(on_workers.value)[1]["method"]),
        without_token.value.code(),
        unchanged.limit,
        with_token.limit,
    )
    await assert_invariants(tcp_admin.dsn)


async def test_admin_over_tcp_with_the_token(tcp_admin: Running) -> None:
    """With the token Admin answers; health answers without one (probes carry none)."""
    state = await tcp_admin.admin.PutBudget(
        pb.PutBudgetRequest(budget_id="b", limit=5, unit="t"), metadata=bearer(ADMIN_TOKEN)
    )
    assert 5 == state.limit
    async with grpc.aio.insecure_channel(tcp_admin.admin_target) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert health_pb2.HealthCheckResponse.SERVING == reply.status


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"listen": "0.0.0.0:50051"}, "listen"),
        ({"metrics_listen": "0.0.0.0:9464"}, "metrics_listen"),
        ({"admin_listen": "127.0.0.1:0"}, "admin_listen"),
        ({"tls_cert_file": Path("cert.pem")}, "tls_cert_file"),
        ({"admin_listen": "unix:/" + "x" * 200}, "admin_listen"),
    ],
)
def test_exposed_or_incomplete_listeners_are_refused(
    socket_dir: Path, overrides: dict[str, object], named: str
) -> None:
    """Plaintext off loopback, TCP admin without a token, half a TLS pair, and a socket path
    too long for the kernel are each refused, naming the setting."""
    with pytest.raises(ValueError, match=named):
        sidecar_settings("postgresql://unused", socket_dir, **overrides)


async def test_insecure_listen_is_explicit(dsn: str, socket_dir: Path) -> None:
    """--insecure-listen lets a sidecar serve plaintext on a non-loopback address."""
    settings = sidecar_settings(dsn, socket_dir, listen="0.0.0.0:0", insecure_listen=True)
    async with (
        running(Sidecar(settings), dsn) as s,
        grpc.aio.insecure_channel(f"127.0.0.1:{s.sidecar.port}") as channel,
    ):
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="earmark.v1.Budget"), timeout=10
        )
    assert health_pb2.HealthCheckResponse.SERVING == reply.status


@pytest.mark.parametrize("flag", ["--listen", "--metrics-listen"])
def test_serve_refuses_a_public_plaintext_listener(socket_dir: Path, flag: str) -> None:
    """`earmark serve --listen 0.0.0.0:PORT`, or the same for --metrics-listen (whose gauges
    name budgets, limits and use), exits non-zero with one line naming the setting."""
    result = subprocess.run(
        [sys.executable, "-m", "earmark", "serve", flag, "0.0.0.0:0",
         "--data-dir", str(socket_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert 0 != result.returncode
    lines = result.stderr.strip().splitlines()
    assert 1 == len(lines)
    assert flag.removeprefix("--").replace("-", "_") in lines[0]
    assert "--insecure-listen" in lines[0]
    assert not (socket_dir / "pgdata").exists()


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_pki(folder: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by
    the CA, made here with openssl."""
    files = {name: folder / f"{name}.pem" for name in
             ("ca", "ca-key", "server", "server-key", "client", "client-key")}  # fmt: skip
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
            "-keyout", str(files["ca-key"]), "-out", str(files["ca"]))  # fmt: skip
    extensions = folder / "ext.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for who in ("server", "client"):
        request = folder / f"{who}.csr"
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={who}",
                "-keyout", str(files[f"{who}-key"]), "-out", str(request))  # fmt: skip
        openssl("x509", "-req", "-in", str(request), "-CA", str(files["ca"]),
                "-CAkey", str(files["ca-key"]), "-CAcreateserial", "-days", "1",
                "-extfile", str(extensions), "-out", str(files[who]))  # fmt: skip
    return files


async def test_mutual_tls(dsn: str, socket_dir: Path, tmp_path: Path) -> None:
    """With a certificate, key and client CA the workers' port speaks TLS only to clients
    with a certificate the CA signed: plaintext and certificate-less clients get nothing."""
    pki = make_pki(tmp_path)
    settings = sidecar_settings(
        dsn, socket_dir, listen="127.0.0.1:0",
        tls_cert_file=pki["server"], tls_key_file=pki["server-key"],
        tls_client_ca_file=pki["ca"],
    )  # fmt: skip
    side = Sidecar(settings)
    async with running(side, dsn) as s:
        await s.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="t"))
        target = f"127.0.0.1:{side.port}"
        request = pb.ReserveRequest(budget_id="b", amount=10, idempotency_key="k")
        full = grpc.ssl_channel_credentials(
            root_certificates=pki["ca"].read_bytes(),
            private_key=pki["client-key"].read_bytes(),
            certificate_chain=pki["client"].read_bytes(),
        )
        async with grpc.aio.secure_channel(target, full) as channel:
            reply = await budget_pb2_grpc.BudgetStub(channel).Reserve(request, timeout=10)
        assert reply.admitted
        no_cert = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
        for channel in (
            grpc.aio.secure_channel(target, no_cert),
            grpc.aio.insecure_channel(target),
        ):
            async with channel:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await budget_pb2_grpc.BudgetStub(channel).Reserve(request, timeout=5)
                assert grpc.StatusCode.UNAVAILABLE == caught.value.code()
        state = await s.admin.GetBudget(pb.GetBudgetRequest(budget_id="b"))
        # The metrics listener speaks the same TLS: a scrape needs the client certificate.
        scraped = await asyncio.to_thread(scrape_tls, side.metrics_port, pki, with_cert=True)
        assert "earmark_reservations_total" in scraped
        for with_cert in (False, None):
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                await asyncio.to_thread(scrape_tls, side.metrics_port, pki, with_cert=with_cert)
    assert (10, 1) == (state.held, state.open_reservations)
    await assert_invariants(dsn)


def scrape_tls(port: int, pki: dict[str, Path], *, with_cert: bool | None) -> str:
    """GET /metrics over TLS with the client certificate (True), over TLS without one
    (False), or in plaintext (None)."""
    if with_cert is None:
        url, context = f"http://127.0.0.1:{port}/metrics", None
    else:
        url = f"https://127.0.0.1:{port}/metrics"
        context = ssl.create_default_context(cafile=str(pki["ca"]))
        if with_cert:
            context.load_cert_chain(str(pki["client"]), str(pki["client-key"]))
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        return str(response.read().decode())


@pytest.fixture
async def tokened(dsn: str, socket_dir: Path) -> AsyncIterator[Running]:
    """A sidecar with two worker tokens: alice may use acme/*, bob acme/* and beta/*."""
    tokens = socket_dir / "workers"
    tokens.write_text(f"# name token prefixes\nalice {ALICE} acme/\nbob {BOB} acme/ beta/\n")
    settings = sidecar_settings(dsn, socket_dir, worker_token_file=tokens)
    async with running(Sidecar(settings), dsn) as s:
        for budget_id in ("acme/t", "beta/t"):
            await s.admin.PutBudget(pb.PutBudgetRequest(budget_id=budget_id, limit=1000, unit="t"))
        yield s


async def test_worker_tokens_are_required_and_scoped(tokened: Running) -> None:
    """Without a known token Reserve is UNAUTHENTICATED; a token is PERMISSION_DENIED on a
    budget outside its prefixes; nothing is held for either."""
    reserve = pb.ReserveRequest(budget_id="beta/t", amount=10, idempotency_key="k")
    for metadata in (None, bearer("nobody-0123456789abcdef")):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await tokened.budget.Reserve(reserve, metadata=metadata)
        assert grpc.StatusCode.UNAUTHENTICATED == caught.value.code()
        assert ("TOKEN_UNKNOWN", {"field": "authorization"}) == reason_of(caught.value)
    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await tokened.budget.Reserve(reserve, metadata=bearer(ALICE))
    assert grpc.StatusCode.PERMISSION_DENIED == denied.value.code()
    assert ("BUDGET_NOT_PERMITTED", {"field": "budget_id", "budget_id": "beta/t"}) == reason_of(
        denied.value
    )
    assert (denied.value.details() or "").startswith("budget_id:")
    state = await tokened.admin.GetBudget(pb.GetBudgetRequest(budget_id="beta/t"))
    assert 0 == state.held
    admitted = await tokened.budget.Reserve(reserve, metadata=bearer(BOB))
    assert admitted.admitted


async def test_a_hold_belongs_to_its_token(tokened: Running) -> None:
    """Bob's Reserve with Alice's budget, key and amount makes a hold of his own, and Bob
    can neither charge, renew nor settle Alice's: her usage stays hers to report."""
    request = pb.ReserveRequest(budget_id="acme/t", amount=400, idempotency_key="job-1")
    alice = await tokened.budget.Reserve(request, metadata=bearer(ALICE))
    bob = await tokened.budget.Reserve(request, metadata=bearer(BOB))
    assert alice.admitted
    assert bob.admitted
    assert alice.reservation_id != bob.reservation_id
    rid = alice.reservation_id
    for call in (
        tokened.budget.Settle(pb.SettleRequest(reservation_id=rid, used=0), metadata=bearer(BOB)),
        tokened.budget.Charge(
            pb.ChargeRequest(reservation_id=rid, amount=1, idempotency_key="c"),
            metadata=bearer(BOB),
        ),
        tokened.budget.Renew(pb.RenewRequest(reservation_id=rid), metadata=bearer(BOB)),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert grpc.StatusCode.PERMISSION_DENIED == caught.value.code()
        assert ("HOLD_OF_ANOTHER_CALLER", {"reservation_id": rid}) == reason_of(caught.value)
    settled = await tokened.budget.Settle(
        pb.SettleRequest(reservation_id=rid, used=350), metadata=bearer(ALICE)
    )
    assert (350, 50) == (settled.charged, settled.released)
    state = await tokened.admin.GetBudget(pb.GetBudgetRequest(budget_id="acme/t"))
    assert (350, 400) == (state.used, state.held)
    await assert_invariants(tokened.dsn)


async def list_services(channel: grpc.aio.Channel, token: str | None) -> list[str]:
    """The services reflection lists on channel, asked with token (None: no token)."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
        metadata=None if token is None else bearer(token),
    )
    reply = await call.read()
    call.cancel()
    assert isinstance(reply, reflection_pb2.ServerReflectionResponse)
    return sorted(s.name for s in reply.list_services_response.service)


async def test_reflection_on_the_workers_port_needs_a_worker_token(tokened: Running) -> None:
    """With worker tokens, reflection on the workers' port is UNAUTHENTICATED without one
    and lists the services with one; health still answers without one."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await list_services(tokened.channel, None)
    assert grpc.StatusCode.UNAUTHENTICATED == caught.value.code()
    listed = await list_services(tokened.channel, ALICE)
    assert "earmark.v1.Budget" in listed
    health = health_pb2_grpc.HealthStub(tokened.channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert health_pb2.HealthCheckResponse.SERVING == answer.status


async def test_idle_streams_cannot_take_unary_slots(sidecar: Running) -> None:
    """Past the per-connection cap a health Watch is RESOURCE_EXHAUSTED, and a Reserve on
    the same connection is still served."""
    health = health_pb2_grpc.HealthStub(sidecar.channel)
    request = health_pb2.HealthCheckRequest(service="")
    streams = [health.Watch(request) for _ in range(limits.streams_per_connection_max)]
    try:
        for stream in streams:
            assert health_pb2.HealthCheckResponse.SERVING == (await stream.read()).status
        extra = health.Watch(request)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await extra.read()
        assert grpc.StatusCode.RESOURCE_EXHAUSTED == caught.value.code()
        await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=10, unit="t"))
        reply = await sidecar.budget.Reserve(
            pb.ReserveRequest(budget_id="b", amount=1, idempotency_key="k")
        )
        assert reply.admitted
    finally:
        for stream in streams:
            stream.cancel()
