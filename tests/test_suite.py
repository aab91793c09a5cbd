"""The suite's own machinery: what `make test` relies on to run on several workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GROUPED = """
import os

import pytest

pytestmark = pytest.mark.xdist_group("shared")


@pytest.mark.parametrize("case", range(4))
def test_case(case: int) -> None:
    print("worker", os.environ["PYTEST_XDIST_WORKER"])
"""


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    """Tests of one xdist_group, in two modules, all run on one worker under `--dist
    loadgroup`: the tests that build the TypeScript package or a release rely on it."""
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    # xdist alone: the other plugins this environment has take seconds to load per worker.
    # Its own basetemp: a pytest that makes its own under /tmp/pytest-of-USER takes that
    # folder back to mode 0700, and the embedded PostgreSQL of every other test running
    # under it (its user needs to pass through the folder) then fails with EACCES.
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", "2", "--dist", "loadgroup",
         "-v", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "basetemp"),
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )  # fmt: skip
    assert 0 == ran.returncode, ran.stdout + ran.stderr
    workers = sorted({line.split()[0] for line in ran.stdout.splitlines() if " PASSED " in line})
    assert (1, True) == (len(workers), workers[0].startswith("[gw")), ran.stdout
