"""The release's version, stated once: in pyproject.toml's [project] table.

`make version VERSION=X.Y.Z` (or `python3 tools/version.py X.Y.Z`) writes it there (whence
the wheel, the sdist and `earmark --version` take it) and copies it to the places that must
carry it literally: the TypeScript SDK's package.json and lock file (npm reads the version
from nowhere else), the Node example's lock entry for the SDK, and the tarball name in
docs/sdk-typescript.md. `--check` changes nothing and exits 1, naming each place, when one
of them says another version than pyproject.toml; the tests run it.

Standard library only, so that it runs before .venv exists.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# X.Y.Z only: PyPI (PEP 440) and npm (semver) spell a pre-release differently (1.2.0rc1
# against 1.2.0-rc.1), so no one string is both, and the two packages must say the same.
PLAIN = re.compile(r"\d+\.\d+\.\d+")
# The version line of pyproject.toml's [project] table (the first table, before any other).
PYPROJECT_VERSION = re.compile(r'^(\[project\]\n(?:(?!\[).*\n)*?version = )"[^"\n]*"', re.M)
TARBALL = re.compile(r"earmark-client-[0-9A-Za-z.+-]+?\.tgz")

Json = dict[str, Any]


def _json_file(path: Path, change: Callable[[Json, str], None]) -> Callable[[str], str]:
    """A writer for a JSON file npm keeps: two spaces, a final newline (as npm writes it)."""

    def write(version: str) -> str:
        document = json.loads(path.read_text())
        change(document, version)
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"

    return write


def _package(document: Json, version: str) -> None:
    document["version"] = version


def _lock(document: Json, version: str) -> None:
    document["version"] = version
    document["packages"][""]["version"] = version


def _linked(document: Json, version: str) -> None:
    document["packages"]["../../clients/typescript"]["version"] = version


def stated(root: Path) -> str:
    """The version pyproject.toml states."""
    return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])


def _pyproject(path: Path) -> Callable[[str], str]:
    """A writer for pyproject.toml that changes its version line alone, comments kept."""

    def write(version: str) -> str:
        text, found = PYPROJECT_VERSION.subn(rf'\g<1>"{version}"', path.read_text(), count=1)
        if not found:
            raise SystemExit(f"{path}: no version line in its [project] table")
        return text

    return write


def places(root: Path) -> dict[Path, Callable[[str], str]]:
    """Each file that states the version, with what it reads when it states `version`."""
    sdk = root / "clients" / "typescript"
    doc = root / "docs" / "sdk-typescript.md"
    return {
        root / "pyproject.toml": _pyproject(root / "pyproject.toml"),
        sdk / "package.json": _json_file(sdk / "package.json", _package),
        sdk / "package-lock.json": _json_file(sdk / "package-lock.json", _lock),
        root / "examples" / "node-worker" / "package-lock.json": _json_file(
            root / "examples" / "node-worker" / "package-lock.json", _linked
        ),
        doc: lambda version: TARBALL.sub(f"earmark-client-{version}.tgz", doc.read_text()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tools/version.py", description="States the release's version once."
    )
    parser.add_argument("version", nargs="?", help="the new version, X.Y.Z")
    parser.add_argument("--check", action="store_true", help="only check that all agree")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (for tests)")
    args = parser.parse_args(argv)
    root: Path = args.root
    if args.check == (args.version is not None):
        parser.error("give a version, or --check")
    version = stated(root) if args.check else args.version
    if not PLAIN.fullmatch(version):
        parser.error(f"{version!r} is not X.Y.Z")
    wanted = {path: write(version) for path, write in places(root).items()}
    if args.check:
        stale = [str(p.relative_to(root)) for p, text in wanted.items() if p.read_text() != text]
        for name in stale:
            print(f"{name} does not say {version} (run `make version VERSION={version}`)")
        return 1 if stale else 0
    for path, text in wanted.items():
        path.write_text(text)
    print(f"earmark {version}: " + ", ".join(str(p.relative_to(root)) for p in wanted))
    return 0


if __name__ == "__main__":
    sys.exit(main())
