"""The settings of a command other than `earmark serve` (`earmark kinde-webhooks`,
`earmark console`): each declared once as an Option, whose flag, environment variable,
default shown and help come from that one declaration; flags win over the environment."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from earmark.settings import ENV as SIDECAR_ENV
from earmark.settings import boolean

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Option:
    name: str
    env: str
    help: str
    # What an unset option means, for the help.
    default: str = ""
    convert: Callable[[str], object] = str
    flag_only_true: bool = False


def add_arguments(command: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    """A flag per option; one left out is None, so the environment and then the default
    apply."""
    for option in options:
        flag = "--" + option.name.replace("_", "-")
        shown = f"{option.env}, {option.default}" if option.default else option.env
        text = f"{option.help} [{shown}]"
        if option.flag_only_true:
            command.add_argument(flag, action="store_true", default=None, help=text)
        else:
            command.add_argument(flag, help=text)


def load(
    options: Sequence[Option],
    settings: Callable[..., T],
    flags: Mapping[str, object],
    environ: Mapping[str, str],
) -> T:
    """settings(...) from flags (None: not given), then the environment, then its defaults;
    a value that does not convert is a ValueError naming the option."""
    names = {f.name for f in fields(settings)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    for option in options:
        assert option.name in names, option.name
        raw = flags.get(option.name)
        if raw is None and environ.get(option.env):
            raw = environ[option.env]
        if raw is None:
            continue
        try:
            values[option.name] = raw if isinstance(raw, bool) else option.convert(str(raw))
        except ValueError:
            kind = getattr(option.convert, "__name__", "value")
            raise ValueError(f"{option.name}: {raw!r} is not a {kind}") from None
    return settings(**values)


# What every command that serves HTTP takes as the sidecar does, from the sidecar's
# variables, so that one deployment's environment serves them all.
INSECURE_LISTEN = Option(
    "insecure_listen",
    SIDECAR_ENV["insecure_listen"],
    "allow plain HTTP on a non-loopback address (TLS ends in front, at an ingress)",
    convert=boolean,
    flag_only_true=True,
)
LOGGING = (
    Option("log_level", SIDECAR_ENV["log_level"], "debug, info, warning, error", "info"),
    Option("log_format", SIDECAR_ENV["log_format"], "auto, json, console", "auto"),
)


def check_logging(level: str, fmt: str) -> None:
    """Raises ValueError naming log_level or log_format when it is not one they take."""
    if level.lower() not in {"debug", "info", "warning", "error"}:
        raise ValueError(f"log_level: {level!r} is not debug, info, warning or error")
    if fmt not in {"auto", "json", "console"}:
        raise ValueError(f"log_format: {fmt!r} is not auto, json or console")
