"""What deploy/ ships, run as shipped: the Dockerfile's environment and entrypoint under
the Kubernetes manifests' env and args as `kubectl kustomize` renders the example overlay,
with only its paths mapped into a temp dir, its ports mapped to free ones and its Secret to
the test database. The sidecar reaches SERVING on the manifest's probes once its database
answers, and not before, and a worker with the manifest's worker env reserves."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import grpc
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc
from tests.chaos.test_start import forwarder, refusing_port, unix_socket_of
from tests.conftest import TEST_DATABASE
from tests.deploy.rendered import DEPLOY, OVERLAY, both, needs_kubectl, rendered, resource
from tests.helpers import child, eventually, free_port

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_ADDRESS = re.compile(r"^(?P<host>[\w.\-]+|\[[0-9a-f:]+\]):(?P<port>\d+)$")


def dockerfile() -> tuple[dict[str, str], list[str]]:
    """The final stage's ENV and its ENTRYPOINT followed by CMD."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    final = text.split("\nFROM ")[-1]
    env: dict[str, str] = {}
    command: list[str] = []
    for line in final.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ENV":
            for pair in shlex.split(rest):
                name, _, value = pair.partition("=")
                env[name] = value
        elif word in ("ENTRYPOINT", "CMD"):
            command += yaml.safe_load(rest)
    return env, command


def pod(directory: Path = OVERLAY) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The rendered worker Deployment's Earmark container, its worker container and its pod
    spec."""
    spec = resource(rendered(directory), "Deployment", "ai-worker")["spec"]["template"]["spec"]
    (earmark,) = [c for c in spec["initContainers"] if c["name"] == "earmark"]
    (worker,) = [c for c in spec["containers"] if c["name"] == "worker"]
    return earmark, worker, spec


class Mapping:
    """Maps what names the pod's world to this machine: volume paths into a temp dir and
    every HOST:PORT to a free port on the same host (one free port per pod port)."""

    def __init__(self, root: Path, database_url: str) -> None:
        self.root = root
        self.database_url = database_url
        self.ports: dict[int, int] = {}

    def port(self, port: int) -> int:
        return self.ports.setdefault(port, free_port())

    def value(self, value: str) -> str:
        if value.startswith("/var/"):
            return str(self.root / value.lstrip("/"))
        address = _ADDRESS.match(value)
        if address:
            return f"{address['host']}:{self.port(int(address['port']))}"
        return value

    def env(self, container: dict[str, Any]) -> dict[str, str]:
        found = {}
        for item in container.get("env", []):
            if "valueFrom" in item:
                # The only Secret the pod reads is the database URL.
                assert "secretKeyRef" in item["valueFrom"], item
                found[item["name"]] = self.database_url
            else:
                found[item["name"]] = self.value(str(item["value"]))
        return found


async def check(target: str, service: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=2
            )
        except grpc.aio.AioRpcError:
            return -1
    return int(reply.status)


def sidecar_env(earmark: dict[str, Any], mapping: Mapping) -> dict[str, str]:
    """The sidecar's environment: the image's, then the container's, mapped; the image's
    PATH leads to its venv, here this one's."""
    image_env, _ = dockerfile()
    env = {name: mapping.value(value) for name, value in image_env.items()}
    env.update(mapping.env(earmark))
    env["PATH"] = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return env


def sidecar_command(earmark: dict[str, Any]) -> list[str]:
    """The image's entrypoint with the container's args (or the image's CMD)."""
    _, entrypoint = dockerfile()
    return [entrypoint[0], *earmark.get("args", entrypoint[1:])]


@needs_kubectl
@both
def test_the_data_dir_is_a_volume_under_a_read_only_root(directory: Path) -> None:
    """The root is read-only, so EARMARK_DATA_DIR (the admin socket, the lock) is a
    mounted emptyDir."""
    earmark, _, spec = pod(directory)
    image_env, _ = dockerfile()
    data_dir = (
        Mapping(Path("/"), "").env(earmark).get("EARMARK_DATA_DIR", image_env["EARMARK_DATA_DIR"])
    )
    assert earmark["securityContext"]["readOnlyRootFilesystem"]
    (mount,) = [m for m in earmark["volumeMounts"] if m["mountPath"] == data_dir]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert {} == volume["emptyDir"]


@needs_kubectl
async def test_the_shipped_pod_serves_a_worker(database_url: str, tmp_path: Path) -> None:
    """`earmark serve` with exactly the image's and the manifest's command and environment
    reaches SERVING on the readiness probe's port, and a worker with the manifest's
    worker environment reserves through it; SIGTERM stops it cleanly."""
    earmark, worker, _ = pod()
    mapping = Mapping(tmp_path, database_url)
    env = sidecar_env(earmark, mapping)
    probe = earmark["readinessProbe"]["grpc"]
    probe_target = f"127.0.0.1:{mapping.port(probe['port'])}"
    command = sidecar_command(earmark)
    async with child(*command, env=env, stdout=asyncio.subprocess.DEVNULL) as served:

        async def ready() -> bool:
            return SERVING == await check(probe_target, probe["service"])

        await eventually(ready, within_seconds=60, what="the readiness probe passes")
        assert SERVING == await check(
            f"127.0.0.1:{mapping.port(earmark['livenessProbe']['grpc']['port'])}", ""
        )
        # The probes' port answers health alone: no worker's call is served there.
        async with grpc.aio.insecure_channel(probe_target) as channel:
            try:
                await budget_pb2_grpc.BudgetStub(channel).Reserve(
                    pb.ReserveRequest(budget_id="pod/tokens", amount=1, idempotency_key="k"),
                    timeout=5,
                )
                code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as error:
                code = error.code()
        assert grpc.StatusCode.UNIMPLEMENTED == code
        # Only Check: a Watch (which could hold the listener's slots open) is refused, and
        # bytes that are not a request are INVALID_ARGUMENT.
        async with grpc.aio.insecure_channel(probe_target) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(
                health_pb2.HealthCheckRequest(service=""), timeout=5
            )
            try:
                await watch.read()
                watched = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as error:
                watched = error.code()
            # The stubs make the (optional) serializers required: the bytes go as they are.
            untyped: Any = channel
            raw = untyped.unary_unary("/grpc.health.v1.Health/Check")
            try:
                await raw(b"\xff\xff", timeout=5)
                garbage = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as error:
                garbage = error.code()
        assert (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INVALID_ARGUMENT) == (
            watched,
            garbage,
        )
        admin = f"unix:{env['EARMARK_DATA_DIR']}/admin.sock"
        async with grpc.aio.insecure_channel(admin) as channel:
            await budget_pb2_grpc.AdminStub(channel).PutBudget(
                pb.PutBudgetRequest(budget_id="pod/tokens", limit=1000, unit="tokens"), timeout=10
            )
        worker_env = dict(os.environ) | mapping.env(worker)
        script = (
            "from earmark.client import Client\n"
            "with Client() as c:\n"
            "    held = c.reserve('pod/tokens', 400)\n"
            "    c.settle(held.reservation_id, 300)\n"
            "    print(held.reservation_id)\n"
        )
        async with child(
            sys.executable, "-c", script, env=worker_env, stdout=asyncio.subprocess.PIPE
        ) as reserving:
            out, _ = await asyncio.wait_for(reserving.communicate(), 60)
        assert (0, 36) == (reserving.returncode, len(out.decode().strip()))
        served.send_signal(signal.SIGTERM)
        assert 0 == await asyncio.wait_for(served.wait(), 60)


@needs_kubectl
async def test_the_shipped_probes_wait_for_the_database(database_url: str, tmp_path: Path) -> None:
    """With its database not answering yet, the shipped sidecar's startup and readiness
    probes fail (NOT_SERVING), so the kubelet starts no worker and sends it no traffic,
    while its liveness probe passes, so nothing restarts it; once the database answers,
    both probes pass."""
    earmark, _, _ = pod()
    with refusing_port() as bound:
        # Ports chosen free may be taken before the sidecar binds them (another test's
        # server, an outgoing connection): a sidecar that exits at once for that is started
        # again on new ones, at most PORT_ATTEMPTS times.
        for attempt in range(PORT_ATTEMPTS):
            try:
                await _probes_wait_for_the_database(earmark, bound, database_url, tmp_path)
                return
            except PortTaken:
                if attempt + 1 == PORT_ATTEMPTS:
                    raise


PORT_ATTEMPTS = 3


class PortTaken(Exception):
    """The sidecar exited before it listened: a port chosen for it was taken."""


async def _probes_wait_for_the_database(
    earmark: dict[str, Any], bound: socket.socket, database_url: str, tmp_path: Path
) -> None:
    """The probes' test, on ports chosen anew; PortTaken when the sidecar could not bind."""
    port = bound.getsockname()[1]
    # The Secret's URL names a database that is not there yet: the forwarder below
    # starts it, on the port the URL names.
    mapping = Mapping(tmp_path, f"postgresql://postgres@127.0.0.1:{port}/{TEST_DATABASE}")
    env = sidecar_env(earmark, mapping)
    probes = {
        name: earmark[name]["grpc"] for name in ("startupProbe", "readinessProbe", "livenessProbe")
    }

    async def answers() -> dict[str, int]:
        return {
            name: await check(f"127.0.0.1:{mapping.port(p['port'])}", p.get("service", ""))
            for name, p in probes.items()
        }

    async with child(
        *sidecar_command(earmark), env=env, stdout=asyncio.subprocess.DEVNULL
    ) as served:

        async def listening() -> bool:
            if served.returncode is not None:
                raise PortTaken
            return -1 not in (await answers()).values()

        await eventually(listening, within_seconds=60, what="the probes' listener answers")
        waiting = {"startupProbe": NOT_SERVING, "readinessProbe": NOT_SERVING}
        assert waiting | {"livenessProbe": SERVING} == await answers()
        async with forwarder(bound, unix_socket_of(database_url)):

            async def started() -> bool:
                return {name: SERVING for name in probes} == await answers()

            await eventually(started, within_seconds=60, what="the startup probe passes")
            served.send_signal(signal.SIGTERM)
            assert 0 == await asyncio.wait_for(served.wait(), 60)
