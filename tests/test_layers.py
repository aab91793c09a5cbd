"""The packages' imports flow one way (docs/architecture.md): no two packages import each
other, and core imports neither the store nor the service."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import earmark

ROOT = Path(earmark.__file__).parent


def package_of(path: Path) -> str:
    """A file's part of earmark: its package, or the module itself at the top level."""
    parts = path.relative_to(ROOT).parts
    return parts[0] if len(parts) > 1 else path.stem


def imports() -> dict[str, set[str]]:
    """Which parts of earmark each part imports (the generated v1 left out)."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        part = package_of(path)
        if part == "v1":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("earmark."):
                other = (node.module or "").split(".")[1]
                if other != part:
                    found[part].add(other)
    return found


def test_no_two_packages_import_each_other() -> None:
    """Every pair of earmark's parts imports one way at most."""
    graph = imports()
    both = sorted((a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, set()))
    assert [] == both


def test_core_imports_neither_the_store_nor_the_service() -> None:
    """The pure rules know nothing of SQL or gRPC."""
    assert set() == imports()["core"] & {"store", "service", "plans", "client", "ops"}
