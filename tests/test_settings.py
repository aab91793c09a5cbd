"""Settings: a flag beats its EARMARK_* variable, which beats the default; bad values name
the setting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from earmark import settings


def test_flag_beats_environment_beats_default() -> None:
    """--listen wins over EARMARK_LISTEN; EARMARK_DATA_DIR fills in; the rest are defaults."""
    environ = {"EARMARK_LISTEN": "127.0.0.1:6000", "EARMARK_DATA_DIR": "/var/lib/earmark"}
    loaded = settings.load({"listen": "127.0.0.1:7000", "data_dir": None}, environ)
    assert ("127.0.0.1:7000", Path("/var/lib/earmark"), "127.0.0.1:9464") == (
        loaded.listen, loaded.data_dir, loaded.metrics_listen
    )  # fmt: skip


def test_the_pooler_comes_from_the_environment() -> None:
    """EARMARK_DATABASE_POOLER=pgbouncer is read; without it there is no pooler."""
    assert ("pgbouncer", "none") == (
        settings.load({}, {"EARMARK_DATABASE_POOLER": "pgbouncer"}).database_pooler,
        settings.load({}, {}).database_pooler,
    )


def test_environment_numbers_are_parsed() -> None:
    """Numeric variables become numbers."""
    loaded = settings.load({}, {"EARMARK_LEASE_SECONDS_MAX": "600", "EARMARK_POOL_SIZE_MAX": "4"})
    assert (600.0, 4) == (loaded.lease_seconds_max, loaded.pool_size_max)


@pytest.mark.parametrize(
    ("environ", "name"),
    [
        ({"EARMARK_LISTEN": "no-port"}, "listen"),
        ({"EARMARK_POOL_SIZE_MAX": "many"}, "pool_size_max"),
        ({"EARMARK_LEASE_SECONDS_MAX": "0"}, "lease_seconds_max"),
        ({"EARMARK_ADMISSION": "optimistic"}, "admission"),
        ({"EARMARK_DATABASE_POOLER": "pgpool"}, "database_pooler"),
        ({"EARMARK_METRICS_BUDGETS_MAX": "100000"}, "metrics_budgets_max"),
        (
            {
                "EARMARK_LIMITS_PROVIDER": "kinde",
                "EARMARK_KINDE_DOMAIN": "https://a.example",
                "EARMARK_KINDE_TOKEN_DOMAIN": "http://a.kinde.com",
            },
            "kinde_token_domain",
        ),
    ],
)
def test_bad_values_name_the_setting(environ: dict[str, str], name: str) -> None:
    """A value that can never work stops start-up with the setting's name."""
    with pytest.raises(ValueError, match=name):
        settings.load({}, environ)


def test_the_token_domain_defaults_to_the_kinde_domain() -> None:
    """EARMARK_KINDE_TOKEN_DOMAIN is read; without it the token domain is --kinde-domain's."""
    base = {"EARMARK_LIMITS_PROVIDER": "kinde", "EARMARK_KINDE_DOMAIN": "https://auth.example"}
    custom = dict(base, EARMARK_KINDE_TOKEN_DOMAIN="https://example.kinde.com")
    assert ("https://example.kinde.com", "") == (
        settings.load({}, custom).kinde_token_domain,
        settings.load({}, base).kinde_token_domain,
    )


def test_the_file_provider_needs_its_plans_file() -> None:
    """--limits-provider file without --plans-file is refused naming plans_file; with
    EARMARK_PLANS_FILE it loads; a plans file with another provider is refused too."""
    problems = []
    asked: list[dict[str, object]] = [{"limits_provider": "file"}, {"plans_file": "plans.toml"}]
    for flags in asked:
        with pytest.raises(ValueError, match="plans_file") as refused:
            settings.load(flags, {})
        problems.append(str(refused.value))
    loaded = settings.load({"limits_provider": "file"}, {"EARMARK_PLANS_FILE": "/etc/plans.toml"})
    assert [
        "plans_file: --limits-provider file needs --plans-file PATH (a TOML file of plans and "
        "accounts; see docs/plans.md)",
        "plans_file: is read only with --limits-provider file, not static",
    ] == problems
    assert ("file", Path("/etc/plans.toml")) == (loaded.limits_provider, loaded.plans_file)


def test_each_setting_is_declared_once_for_its_flag_env_and_help() -> None:
    """Every setting of Settings has its --flag, its EARMARK_ variable and its default in
    --help, all from its one declaration; a flag parsed sets that setting."""
    import argparse
    from dataclasses import MISSING, fields

    from earmark import options

    parser = argparse.ArgumentParser()
    options.add_options(parser, settings.OPTIONS)
    by_dest = {action.dest: action for action in parser._actions}
    # The defaults --help shows in words of their own; the rest show the default itself.
    worded = {"admin_listen": "unix:DATA_DIR/admin.sock", "kinde_token_domain": "--kinde-domain"}
    for declared in fields(settings.Settings):
        action = by_dest[declared.name]
        value = (
            declared.default if declared.default_factory is MISSING else declared.default_factory()
        )
        default = "" if value is None or value == "" or value is False else str(value)
        default = f"{value:g}" if isinstance(value, float) else default
        default = worded.get(declared.name, default)
        variable = f"EARMARK_{declared.name.upper()}"
        assert (["--" + declared.name.replace("_", "-")], variable) == (
            action.option_strings,
            settings.ENV[declared.name],
        )
        assert (action.help or "").endswith(f"[{variable}{', ' + default if default else ''}]")
    parsed = vars(parser.parse_args(["--lease-seconds-max", "90", "--insecure-listen"]))
    loaded = settings.load(parsed, {})
    assert (90.0, True) == (loaded.lease_seconds_max, loaded.insecure_listen)


def test_every_commands_flags_are_options() -> None:
    """No module but options.py adds a flag to a parser (the root's --version aside): every
    command's flags are Options, and only positional arguments are argparse's own."""
    import ast

    import earmark

    root = Path(earmark.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                continue
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and not str(first.value).startswith("-"):
                continue
            found.append(f"{path.relative_to(root)}:{ast.unparse(first) if first else ''}")
    assert ["cli.py:'--version'", "options.py:*names", "options.py:*names"] == found


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://hooks.example/a\tb", "notify_url: holds a control character"),
        ("https://hooks.example/a\nb", "notify_url: holds a control character"),
        ("https://hooks.example/a b", "notify_url: holds whitespace"),
        ("https:///hooks", "notify_url: names no host"),
        ("ftp://hooks.example/x", "notify_url: its scheme is 'ftp'"),
        ("https://hooks.example:99x/", "notify_url: not a URL httpx can send"),
    ],
)
def test_a_notify_url_httpx_cannot_send_is_refused_naming_what(url: str, why: str) -> None:
    """A notify URL httpx cannot send to is refused with one line saying why, never the URL."""
    with pytest.raises(ValueError, match=r"^notify_url: ") as refused:
        settings.load({"notify_url": url, "notify_secret_file": "/etc/notify"}, {})
    said = str(refused.value)
    assert (True, 1, False) == (said.startswith(why), len(said.splitlines()), "hooks" in said)


def test_a_notify_url_with_a_tab_stops_the_start_in_one_line(tmp_path: Path) -> None:
    """`earmark serve --notify-url` with a tab in it exits 1 at start, one line naming
    notify_url."""
    result = subprocess.run(
        [sys.executable, "-m", "earmark", "serve", "--database-url", "postgresql://127.0.0.1:1/x",
         "--listen", "127.0.0.1:0", "--metrics-listen", "", "--data-dir", str(tmp_path),
         "--notify-url", "http://127.0.0.1:8080/hooks\ttoken",
         "--notify-secret-file", str(tmp_path / "secret")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    lines = result.stderr.strip().splitlines()
    assert (1, 1) == (result.returncode, len(lines)), result.stderr
    assert lines[0].startswith("earmark: notify_url: holds a control character")
    assert "token" not in result.stderr
