"""The TypeScript SDK's dist/ as the tests read it: built from its src/ as it is now, and
never rebuilt while a test on another worker runs Node against it.

`make test` builds dist/ before pytest starts, so on a fresh clone no test builds it. A
test that finds a source newer than the build (someone edited src/ and ran pytest alone)
rebuilds it under an exclusive lock; every test holds the lock shared while it reads
dist/, so a rebuild waits for the readers and the readers wait for a rebuild. That is what
lets these tests run on several workers instead of sharing one."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "clients" / "typescript"
# One lock per checkout, outside it: the tree stays clean and clones do not share one.
LOCK = Path(tempfile.gettempdir()) / (
    "earmark-ts-dist-" + hashlib.sha256(str(PACKAGE).encode()).hexdigest()[:16] + ".lock"
)
BUILD_SECONDS_MAX = 300
# What the build reads: a change to any of them makes dist/ stale.
INPUTS = (
    "src", "scripts/build.mjs", "package.json", "tsconfig.json", "tsconfig.esm.json",
)  # fmt: skip


def stale() -> bool:
    """Whether dist/ is missing either form or older than a file the build reads."""
    built = [PACKAGE / "dist" / form / "index.js" for form in ("esm", "cjs")]
    if not all(path.exists() for path in built):
        return True
    oldest = min(path.stat().st_mtime_ns for path in built)
    inputs = [PACKAGE / name for name in INPUTS]
    files = [f for p in inputs if p.is_dir() for f in p.rglob("*") if f.is_file()]
    files += [p for p in inputs if p.is_file()]
    return any(f.stat().st_mtime_ns > oldest for f in files)


def build() -> None:
    """`npm run build`'s own script: dist/esm and dist/cjs from src/."""
    node = shutil.which("node")
    assert node is not None, "node is not on this machine"
    done = subprocess.run(
        [node, "scripts/build.mjs"], cwd=PACKAGE, capture_output=True, text=True,
        timeout=BUILD_SECONDS_MAX, check=False,
    )  # fmt: skip
    assert 0 == done.returncode, f"the TypeScript build failed:\n{done.stdout}{done.stderr}"


@contextlib.contextmanager
def dist_ready() -> Iterator[None]:
    """Holds dist/ current and unchanged for the block (see the module's docstring)."""
    installed = (PACKAGE / "node_modules" / ".bin" / "tsc").exists()
    assert installed, "run `make test` (it installs the TypeScript SDK's packages and builds it)"
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        # Shared first, so that readers never wait for each other; exclusive only to
        # rebuild, which waits for the readers of the old build to finish.
        fcntl.flock(fd, fcntl.LOCK_SH)
        if stale():
            fcntl.flock(fd, fcntl.LOCK_EX)
            if stale():
                build()
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
