"""Every flag of the earmark command is declared once, as an Option: its flag, its
environment variable where it has one, how its text becomes a value, its value when not
given, and its help, which ends with [VARIABLE, DEFAULT] from the same declaration.
add_options puts Options on a parser; load builds a command's settings from flags, then
the environment, then the settings' defaults (`earmark serve`, `kinde-webhooks`,
`console`). Positional arguments (a budget's id, a provider and model) stay argparse's."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Option:
    """One flag. Its flag is --NAME-WITH-DASHES unless flags names others, and what it
    parses to is args.NAME."""

    name: str
    help: str = ""
    # The environment variable that stands in for the flag: for load(), or read by the
    # command that takes the option (ops/connect.py); shown in the help either way.
    env: str = ""
    # The value when the flag is not given; None for settings that load() completes.
    default: Any = None
    # What the help shows as the default, after the variable.
    shown: str = ""
    convert: Callable[[str], Any] = str
    choices: Sequence[str] | None = None
    # argparse's action: store, store_true (a switch) or append (a repeatable flag).
    action: str = "store"
    required: bool = False
    metavar: str | None = None
    flags: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def help_text(self) -> str | None:
        """The help, then [VARIABLE, DEFAULT] where the option has either."""
        where = ", ".join(part for part in (self.env, self.shown) if part)
        if not where:
            return self.help or None
        return f"{self.help} [{where}]" if self.help else f"[{where}]"


def add_options(
    command: argparse._ActionsContainer, options: Iterable[Option], *, as_text: bool = False
) -> None:
    """A flag per option, in order. as_text: the flags stay text, for load() to convert
    and name the setting on a bad value (one line, exit 1) rather than argparse (exit 2)."""
    for option in options:
        names = option.flags or (option.flag,)
        common: dict[str, Any] = {"dest": option.name, "help": option.help_text()}
        if option.action == "store_true":
            command.add_argument(*names, action="store_true", default=option.default, **common)
            continue
        if option.convert is not str and not as_text:
            common["type"] = option.convert
        default = list(option.default) if option.action == "append" else option.default
        command.add_argument(
            *names,
            action=option.action,
            default=default,
            choices=option.choices,
            required=option.required,
            metavar=option.metavar,
            **common,
        )


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
        if raw is None and option.env and environ.get(option.env):
            raw = environ[option.env]
        if raw is None:
            continue
        try:
            values[option.name] = raw if isinstance(raw, bool) else option.convert(str(raw))
        except ValueError:
            kind = getattr(option.convert, "__name__", "value")
            raise ValueError(f"{option.name}: {raw!r} is not a {kind}") from None
    return settings(**values)


def boolean(raw: object) -> bool:
    """A yes or no from a flag or the environment: 1/true/yes/on or 0/false/no/off/empty."""
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(raw)


def check_logging(level: str, fmt: str) -> None:
    """Raises ValueError naming log_level or log_format when it is not one they take."""
    if level.lower() not in {"debug", "info", "warning", "error"}:
        raise ValueError(f"log_level: {level!r} is not debug, info, warning or error")
    if fmt not in {"auto", "json", "console"}:
        raise ValueError(f"log_format: {fmt!r} is not auto, json or console")
