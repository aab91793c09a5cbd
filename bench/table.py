"""Renders a `make bench` JSON result as the Markdown table the README shows.

python -m bench.table bench/results/bench-YYYYMMDDTHHMMSSZ.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def render(result: dict[str, object]) -> str:
    figures: dict[str, dict[str, float]] = result["figures"]  # type: ignore[assignment]
    lines = ["| figure | median | [min .. max] |", "| --- | --- | --- |"]
    for name, figure in figures.items():
        unit = figure["unit"]
        spread = f"{figure['min']:,.1f} .. {figure['max']:,.1f}"
        lines.append(f"| {name} ({unit}) | {figure['median']:,.1f} | {spread} |")
    lines.append("")
    for target in result["targets"]:  # type: ignore[attr-defined]
        mark = "met" if target["met"] else "**not met**"
        lines.append(f"- {mark}: {target['target']}")
    violations: list[str] = result["invariant_violations"]  # type: ignore[assignment]
    lines.append(f"- invariant violations: {len(violations)}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(json.loads(Path(sys.argv[1]).read_text())))
