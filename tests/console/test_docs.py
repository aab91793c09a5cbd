"""docs/console.md shows a screenshot of each view, taken by tests/console/test_browser.py
(EARMARK_SCREENSHOTS=docs), checked in as small PNGs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VIEWS = {
    "budgets", "budget", "budget-phone", "budget-dollars", "confirm", "spend", "holds",
    "budget-holds", "prices", "lab-run", "login",
}  # fmt: skip


def test_every_view_has_a_small_screenshot_in_the_docs() -> None:
    """Each view's image is linked from docs/console.md, is a PNG, and is under 200 KB."""
    text = (ROOT / "docs" / "console.md").read_text()
    linked = set(re.findall(r"!\[[^\]]*\]\(console/([\w-]+)\.png\)", text))
    images = {name: ROOT / "docs" / "console" / f"{name}.png" for name in linked}
    assert VIEWS == linked
    assert {name: True for name in VIEWS} == {
        name: path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size < 200_000
        for name, path in images.items()
    }
