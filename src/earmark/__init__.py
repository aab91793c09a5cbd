"""Earmark: a gRPC sidecar that turns a usage-limit check into a promise."""

from __future__ import annotations

from functools import cache
from pathlib import Path


def __getattr__(name: str) -> str:
    # __version__ is read when it is asked for, not at import: reading the installed
    # metadata would add about 15 ms to every worker's `import earmark.client`.
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@cache
def _version() -> str:
    """The version is stated once, in pyproject.toml, which puts it into the package's
    metadata: an installed earmark reads it there."""
    from importlib import metadata

    try:
        return metadata.version("earmark")
    except metadata.PackageNotFoundError:
        # Run from a checkout that was never installed (src/ on the path): its pyproject.toml.
        import tomllib

        checkout = Path(__file__).resolve().parents[2] / "pyproject.toml"
        if not checkout.is_file():
            return "0+unknown"
        return str(tomllib.loads(checkout.read_text())["project"]["version"])
