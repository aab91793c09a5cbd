"""SQL with named parameters: `$name` in the text, bound by name, sent as `$1..$n`."""

from __future__ import annotations

import re

# A `$` followed by a letter: positional `$1` and casts like `::uuid[]` do not match.
_NAMED = re.compile(r"\$([a-z_][a-z0-9_]*)")


class NamedQuery:
    """Compiled once at import; args() checks that every name is given exactly once."""

    def __init__(self, text: str) -> None:
        self.names = list(dict.fromkeys(_NAMED.findall(text)))
        index = {name: i + 1 for i, name in enumerate(self.names)}
        self.sql = _NAMED.sub(lambda m: f"${index[m[1]]}", text)

    def args(self, **values: object) -> list[object]:
        """The positional arguments, in the order of the names' first appearance."""
        assert set(values) == set(self.names), f"given {sorted(values)}, named {self.names}"
        return [values[name] for name in self.names]
