"""The sidecar's listeners: gRPC servers with the edge in front, bound to TCP (TLS when
configured) or to a Unix socket only its user may open, and the metrics endpoint.

Each failure to listen is one line naming the setting (Unavailable, LISTEN_FAILED), so that
`earmark serve` says why it cannot start rather than printing gRPC's own log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import CollectorRegistry, start_http_server

from earmark import files, limits
from earmark.disconnects import Disconnects, quiet_socketserver
from earmark.errors import Reason, Unavailable
from earmark.metrics import Metrics
from earmark.service import auth
from earmark.service.edge import EdgeInterceptor, StreamSlots
from earmark.service.errors import abort
from earmark.settings import UNIX_PREFIX, Settings, split_host_port, unix_socket_path


def tls_credentials(settings: Settings) -> grpc.ServerCredentials:
    """The TCP listeners' TLS; with a client CA, clients must present a certificate."""
    assert settings.tls_cert_file is not None
    assert settings.tls_key_file is not None
    cert = _pem(settings.tls_cert_file, "tls_cert_file")
    key = _pem(settings.tls_key_file, "tls_key_file")
    ca = _pem(settings.tls_client_ca_file, "tls_client_ca_file")
    assert cert is not None
    assert key is not None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def _pem(path: Path | None, setting: str) -> bytes | None:
    if path is None:
        return None
    data, _ = files.read_regular(path, setting, limits.pem_file_bytes_max)
    return data


def grpc_server(
    settings: Settings,
    *,
    service: str,
    tokens: auth.Tokens | None,
    protected: tuple[str, ...],
    health_servicer: Any,
    streams: StreamSlots,
    metrics: Metrics,
    tracer_provider: Any = None,
) -> grpc.aio.Server:
    """A server for one listener: the edge interceptor (tokens guard the methods under
    the protected prefixes), health and reflection; the caller adds its service."""
    interceptor = EdgeInterceptor(
        tokens=tokens,
        protected=protected,
        streams=streams,
        on_reject=lambda reason: metrics.rpc_rejected.labels(reason).inc(),
    )
    interceptors: list[Any] = [interceptor]
    if settings.tracing:
        from earmark.tracing import ServerTracing

        # Outermost, so that the span is current in every log line of the call.
        interceptors.insert(0, ServerTracing(tracer_provider))
    server = grpc.aio.server(
        interceptors=interceptors,
        # Streams have a cap of their own (StreamSlots), within this one, so that
        # unary calls always have rpc_concurrency_max slots.
        maximum_concurrent_rpcs=limits.rpc_concurrency_max + limits.streams_max,
        options=[
            # Two sidecars must never share a port by accident.
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", limits.rpc_message_bytes_max),
        ],
    )
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (service, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    return server


def health_server(settings: Settings, health_servicer: Any) -> tuple[grpc.aio.Server, int]:
    """The probes' listener: grpc.health.v1's Check and nothing else (no Watch, which could
    hold its slots open, no reflection, no service), plaintext on any address, since what it
    says (SERVING or not) is no secret and the kubelet's gRPC probe speaks no TLS; the port
    it got."""
    server = grpc.aio.server(
        maximum_concurrent_rpcs=limits.health_rpcs_max,
        options=[
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", limits.health_message_bytes_max),
        ],
    )

    def decode(data: bytes) -> object:
        try:
            return health_pb2.HealthCheckRequest.FromString(data)
        except Exception:
            return None

    async def check(request: object, context: Any) -> health_pb2.HealthCheckResponse:
        if not isinstance(request, health_pb2.HealthCheckRequest):
            await abort(context, grpc.StatusCode.INVALID_ARGUMENT,
                        "request: the body is not a valid HealthCheckRequest",
                        Reason.INVALID_FIELD, field="request")  # fmt: skip
        return await health_servicer.Check(request, context)

    checks = grpc.unary_unary_rpc_method_handler(
        check,
        request_deserializer=decode,
        response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
    )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(health.SERVICE_NAME, {"Check": checks}),)
    )
    bound = add_tcp_port(server, settings, settings.health_listen, "health_listen", tls=False)
    return server, bound


def add_tcp_port(
    server: grpc.aio.Server,
    settings: Settings,
    address: str,
    name: str,
    *,
    tls: bool | None = None,
) -> int:
    """Binds address, with TLS when tls says so (None: when the sidecar has TLS); the port
    it got."""
    host, port = split_host_port(address, name)
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if port:
        _require_free(host, port, name)
    try:
        if not (settings.tls if tls is None else tls):
            return server.add_insecure_port(target)
        return server.add_secure_port(target, tls_credentials(settings))
    except RuntimeError:
        # gRPC says only "Failed to bind"; the likely cause is worth naming.
        raise Unavailable(
            f"{name}: cannot listen on {target}: is another process (another sidecar?) "
            "on that port, or is the host not this machine's?",
            Reason.LISTEN_FAILED,
        ) from None


def bind_admin(server: grpc.aio.Server, settings: Settings) -> str:
    """Binds Admin's listener: a Unix socket created with mode 0600 (the default), or TCP;
    the address it got."""
    address = settings.admin_address
    if address.startswith(UNIX_PREFIX):
        path = unix_socket_path(address, "admin_listen")
        path.parent.mkdir(parents=True, exist_ok=True)
        # The socket is created with mode 0600 from the start: umask is process-wide,
        # and nothing else creates files while the sidecar starts.
        previous = os.umask(0o177)
        try:
            bound = server.add_insecure_port(f"{UNIX_PREFIX}{path}")
        finally:
            os.umask(previous)
        os.chmod(path, 0o600)
        address = f"{UNIX_PREFIX}{path}"
    else:
        host, _ = split_host_port(address, "admin_listen")
        bound = add_tcp_port(server, settings, address, "admin_listen")
        address = f"{host}:{bound}"
    if not bound:
        raise Unavailable(f"admin_listen: could not listen on {address}", Reason.LISTEN_FAILED)
    return address


def serve_metrics(settings: Settings, registry: CollectorRegistry) -> Any:
    """Prometheus text on --metrics-listen: TLS when the sidecar has it, like every other
    TCP listener (the gauges name budgets, their limits and their use). The HTTP server,
    to shut down; its server_port is the port it got."""
    host, port = split_host_port(settings.metrics_listen, "metrics_listen")
    tls: dict[str, Any] = {}
    if settings.tls:
        tls = {"certfile": str(settings.tls_cert_file), "keyfile": str(settings.tls_key_file)}
        if settings.tls_client_ca_file is not None:
            tls |= {"client_cafile": str(settings.tls_client_ca_file),
                    "client_auth_required": True}  # fmt: skip
    try:
        httpd, _ = start_http_server(port, host, registry=registry, **tls)
    except OSError as error:
        raise Unavailable(
            f"metrics_listen: cannot listen on {host}:{port}: {error.strerror}",
            Reason.LISTEN_FAILED,
        ) from None
    # A scraper that resets mid-request is counted and logged in a line, not a traceback.
    quiet_socketserver(httpd, Disconnects("metrics"))
    return httpd


async def stop_metrics(httpd: Any) -> None:
    """Stops the metrics server and closes its socket. Its thread looks for the stop only
    between polls (every 0.5 s in prometheus_client): a connection made while it waits
    wakes it at once, so a sidecar's stop does not wait out a poll."""
    stopping = asyncio.ensure_future(asyncio.to_thread(httpd.shutdown))
    host, port = httpd.server_address[:2]
    while not stopping.done():
        with (
            contextlib.suppress(OSError),
            socket.create_connection((host, port), timeout=limits.metrics_stop_poke_seconds),
        ):
            pass
        await asyncio.wait({stopping}, timeout=limits.metrics_stop_poke_seconds)
    await stopping
    httpd.server_close()


def _require_free(host: str, port: int, name: str) -> None:
    """Binds the address once and lets it go, so that a port in use is named in one line
    here rather than after gRPC's own error log."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As gRPC binds its own: the port's closed connections in TIME_WAIT (a sidecar
        # restarted on its fixed port) do not stop it, a listener on it does.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise Unavailable(
                f"{name}: cannot listen on {host}:{port}: {error.strerror}", Reason.LISTEN_FAILED
            ) from None
