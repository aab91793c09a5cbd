"""A one-line progress display on stderr, drawn only when stderr is a terminal."""

from __future__ import annotations

import sys
from typing import TextIO

bar_width = 30


class Progress:
    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = max(1, total)
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()

    def step(self, count: int = 1) -> None:
        self.done += count
        if self.enabled:
            filled = bar_width * self.done // self.total
            bar = "#" * filled + "." * (bar_width - filled)
            self.stream.write(f"\r{self.label:<14} [{bar}] {self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
