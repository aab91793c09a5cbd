"""The checked-in generated code is exactly what `make proto` makes from protos/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    """Regenerating into a temporary folder gives byte-identical code and .proto copies in
    src/earmark/v1."""
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "protogen.py"), "--out", str(tmp_path)],
        check=True,
        timeout=120,
    )
    generated = {p.name: p.read_bytes() for p in (tmp_path / "earmark" / "v1").iterdir()}
    checked_in = {
        p.name: p.read_bytes()
        for p in (ROOT / "src" / "earmark" / "v1").iterdir()
        if p.is_file() and p.suffix in {".py", ".pyi", ".proto"}
    }
    assert sorted(generated) == sorted(checked_in)
    for name, content in generated.items():
        assert content == checked_in[name], f"{name} drifted from protos/: run `make proto`"
