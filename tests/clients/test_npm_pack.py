"""The TypeScript SDK as a user gets it from a release: `npm pack` of @earmark/client ships
what a worker needs and nothing else, says the version pyproject.toml states, and installed
into a fresh project (`npm init -y`, `npm install` of the tarball alone) runs a worker
against a live sidecar. `make test` builds the package first (`make typescript`)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from earmark.client import AsyncClient
from tests.conftest import Running
from tests.helpers import assert_invariants, child
from tests.typescript_dist import dist_ready

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "typescript"
NODE = shutil.which("node")
NPM = shutil.which("npm")

VERSION: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# What the tarball may hold at its top: the two builds, the sources their source maps
# point into, and the package's own files. Tests, build scripts,
# tsconfig files and the lock file stay in the repository.
SHIPPED = {"dist", "src", "package.json", "README.md", "LICENSE"}
# A worker as a user writes one in a fresh CommonJS project (what `npm init -y` makes):
# a budget through Admin, a hold, its settle, and the budget read back.
WORKER = """\
const { EarmarkClient } = require('@earmark/client');
const { version } = require('@earmark/client/package.json');

async function main() {
  const earmark = new EarmarkClient(); // EARMARK_TARGET and EARMARK_ADMIN_TARGET
  try {
    await earmark.putBudget('packed', 1000, 'tokens');
    const hold = await earmark.reserve('packed', 400);
    if (!hold.admitted) throw new Error(`refused: ${hold.message}`);
    const settled = await earmark.settle(hold.reservationId, 300);
    const state = await earmark.getBudget('packed');
    console.log(version, settled.charged, settled.released, state.used, state.held);
  } finally {
    earmark.close();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
"""

pytestmark = [
    pytest.mark.skipif(NODE is None or NPM is None, reason="node is not on this machine"),
    pytest.mark.slow,
]


def npm(*args: str, cwd: Path) -> str:
    """Runs npm with args, failing the test with its output unless it exits 0; answers its
    stdout."""
    assert NPM is not None
    done = subprocess.run(
        [NPM, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert 0 == done.returncode, f"npm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, set[str]]:
    """`npm pack` of the built package: the tarball and the paths npm says it holds."""
    out = tmp_path_factory.mktemp("pack")
    with dist_ready():
        packed = npm("pack", "--json", "--pack-destination", str(out), cwd=PACKAGE)
    (report,) = json.loads(packed)
    return out / report["filename"], {f["path"] for f in report["files"]}


def export_paths(exports: Any) -> set[str]:
    """Every file path an `exports` map of package.json names, however deeply nested."""
    if isinstance(exports, str):
        return {exports.removeprefix("./")}
    return {path for value in exports.values() for path in export_paths(value)}


def test_the_tarball_ships_the_builds_types_readme_and_license(
    packed: tuple[Path, set[str]],
) -> None:
    """The packed tarball is named for pyproject.toml's version and its package.json says it;
    it holds both builds, each module with its types, every file package.json's main,
    module, types and exports name, the README and the LICENSE, and no tests, build
    scripts, tsconfig or lock file."""
    tarball, files = packed
    with tarfile.open(tarball) as packed_tar:
        member = packed_tar.extractfile("package/package.json")
        assert member is not None
        manifest = json.loads(member.read())
    assert (f"earmark-client-{VERSION}.tgz", VERSION) == (tarball.name, manifest["version"])
    assert set() == {path.split("/", 1)[0] for path in files} - SHIPPED
    assert {"package.json", "README.md", "LICENSE"} <= files
    named = {manifest["main"], manifest["module"], manifest["types"]}
    named |= export_paths(manifest["exports"])
    assert set() == named - files
    builds = {
        f"dist/{form}/{name}.{kind}"
        for form in ("esm", "cjs")
        for name in ("index", "client", "hold", "openai", "metered")
        for kind in ("js", "d.ts")
    }
    assert set() == builds - files
    untyped = {
        p for p in files if p.endswith(".js") and p.removesuffix(".js") + ".d.ts" not in files
    }
    assert set() == untyped
    assert [] == sorted(path for path in files if ".test." in path or "/test/" in f"/{path}")


async def test_a_fresh_project_installs_the_tarball_and_its_worker_runs(
    packed: tuple[Path, set[str]], sidecar: Running, tmp_path: Path
) -> None:
    """A fresh project (`npm init -y`) installs the tarball alone: its two dependencies come
    with it, the optional provider SDKs do not; a CommonJS worker there puts a budget,
    reserves 400, settles 300 and reads the budget back from a live sidecar, and the
    installed package says pyproject.toml's version."""
    assert NODE is not None
    tarball, _ = packed
    app = tmp_path / "app"
    app.mkdir()
    await asyncio.to_thread(npm, "init", "-y", cwd=app)
    await asyncio.to_thread(
        npm, "install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error",
        str(tarball), cwd=app,
    )  # fmt: skip
    modules = app / "node_modules"
    assert {"@earmark/client", "@grpc/grpc-js", "@bufbuild/protobuf"} <= {
        f"{scope.name}/{p.name}" for scope in modules.glob("@*") for p in scope.iterdir()
    }
    assert (False, False) == ((modules / "openai").exists(), (modules / "@anthropic-ai").exists())
    (app / "worker.js").write_text(WORKER)
    env = {
        **os.environ,
        "EARMARK_TARGET": sidecar.target,
        "EARMARK_ADMIN_TARGET": sidecar.admin_target,
    }
    async with child(
        NODE, "worker.js", cwd=app, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert (0, f"{VERSION} 300 100 300 0", "") == (
        process.returncode,
        out.decode().strip(),
        err.decode(),
    )
    async with AsyncClient(sidecar.target, admin_target=sidecar.admin_target) as client:
        state = await client.get_budget("packed")
    assert (1_000, 300, 0, 0) == (state.limit, state.used, state.held, state.open_reservations)
    await assert_invariants(sidecar.dsn)
