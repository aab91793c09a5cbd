"""The wire contract under buf: lint, and no breaking change against the released baseline;
and the breaking check does catch a break."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUF = ROOT / "tools" / "buf" / "node_modules" / ".bin" / "buf"
BASELINE = ROOT / "tools" / "buf" / "baseline.binpb"


def buf(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    assert BUF.exists(), "buf is not installed: run `make buf-tools` (make test does)"
    return subprocess.run(
        [str(BUF), *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_contract_passes_buf_lint() -> None:
    """buf lint, with the exceptions buf.yaml gives its reasons for, finds nothing."""
    result = buf("lint")
    assert (0, "") == (result.returncode, result.stdout + result.stderr)


def test_the_contract_only_grew_since_the_baseline() -> None:
    """buf breaking (WIRE_JSON) against the released contract's image finds nothing."""
    result = buf("breaking", "--against", BASELINE)
    assert (0, "") == (result.returncode, result.stdout + result.stderr)


def test_a_renumbered_field_is_caught(tmp_path: Path) -> None:
    """The same check on a copy whose ReserveRequest.amount moved to another number fails,
    naming the field."""
    shutil.copytree(ROOT / "protos", tmp_path / "protos")
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    proto = tmp_path / "protos" / "earmark" / "v1" / "budget.proto"
    text = proto.read_text()
    assert 1 == text.count("  int64 amount = 2;\n  // Required. The same key")
    proto.write_text(
        text.replace("  int64 amount = 2;\n  // Required.", "  int64 amount = 99;\n  // Required.")
    )
    result = buf("breaking", "--against", BASELINE, cwd=tmp_path)
    assert (True, True) == (result.returncode != 0, '"amount"' in result.stdout)
