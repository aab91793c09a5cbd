"""docs/regions.md and deploy/kubernetes-overlays/regions/README.md as written: their
token blocks make files the sidecar reads, and their `earmark serve` lines are ones the
command line takes and the settings accept."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from earmark import cli
from earmark import settings as earmark_settings
from earmark.service import auth

ROOT = Path(__file__).resolve().parents[2]
REGIONS_DOC = ROOT / "docs" / "regions.md"
OVERLAYS_README = ROOT / "deploy" / "kubernetes-overlays" / "regions" / "README.md"
BLOCK = re.compile(r"^```(?:sh)?\n(.*?)^```$", re.M | re.S)


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def run(block: str, cwd: Path) -> None:
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 0 == result.returncode, result.stderr


def test_the_token_blocks_make_files_the_sidecars_read(tmp_path: Path) -> None:
    """Each page's token block, run as written, makes a region token file the home loads
    (the region eu, with its token) and a home token file the region reads."""
    for page, tokens in ((REGIONS_DOC, "regions.tokens"), (OVERLAYS_README, "region-tokens")):
        (block,) = [b for b in blocks(page) if "token_hex" in b]
        where = tmp_path / page.stem
        where.mkdir()
        run(block, where)
        token = auth.read_token(where / "eu.token", "home_token_file")
        loaded = auth.load_worker_tokens(where / tokens, "region_token_file")
        caller = loaded.find(token)
        assert caller is not None
        assert ("eu", True) == (caller.name, caller.may_use("team-a/tokens"))


def test_the_serve_lines_are_ones_the_sidecar_accepts() -> None:
    """docs/regions.md's `earmark serve` lines, a home and a region, parse with the command
    line's flags and load as settings (a region listener off loopback with TLS)."""
    lines = [
        line
        for block in blocks(REGIONS_DOC)
        for line in block.replace("\\\n", " ").splitlines()
        if line.startswith("earmark serve ")
    ]
    loaded = []
    for line in lines:
        args = cli.parser().parse_args(shlex.split(line)[1:])
        flags = {k: v for k, v in vars(args).items() if k != "command"}
        loaded.append(earmark_settings.load(flags, {}))
    assert [("us", "", "0.0.0.0:50061"), ("eu", "us.earmark.internal:50061", "")] == [
        (s.region, s.home, s.region_listen) for s in loaded
    ]
    assert (True, True) == (loaded[0].tls, loaded[1].home_ca_file is not None)
