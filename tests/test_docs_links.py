"""Every link between the README and the pages of docs/ leads somewhere: the file exists,
and the heading an anchor names is in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([\w./\-]+\.md)(?:#([\w\-]+))?\)")
HEADING = re.compile(r"^#+ (.+)$", re.M)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as
    hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_link_between_pages_resolves() -> None:
    """No page links to a missing page or to a heading its target does not have."""
    broken = []
    for page in PAGES:
        for target, fragment in LINK.findall(page.read_text()):
            path = (page.parent / target).resolve()
            if not path.exists():
                broken.append(f"{page.name}: {target}")
                continue
            if fragment and fragment not in {anchor(h) for h in HEADING.findall(path.read_text())}:
                broken.append(f"{page.name}: {target}#{fragment}")
    assert [] == broken
