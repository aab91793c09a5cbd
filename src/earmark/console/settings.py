"""`earmark console`'s settings: each declared once (its flag, environment variable,
default and help), flags winning over the environment; the listener's rule is the
sidecar's, and off loopback a login token is required as well."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from earmark import limits
from earmark.ops.connect import ADMIN_TARGET_ENV
from earmark.options import Option, check_logging
from earmark.settings import ENV, INSECURE_LISTEN, LOGGING, is_loopback, split_host_port

LISTEN_DEFAULT = "127.0.0.1:8080"
TARGET_DEFAULT = "127.0.0.1:50051"
WILDCARDS = {"0.0.0.0", "::"}

OPTIONS = (
    Option(
        "listen", "HOST:PORT to serve the pages on", "EARMARK_CONSOLE_LISTEN", shown=LISTEN_DEFAULT
    ),
    Option("target", "the sidecar's workers' HOST:PORT", "EARMARK_TARGET", shown=TARGET_DEFAULT),
    Option(
        "admin_target",
        "Admin's listener: unix:PATH or HOST:PORT",
        ADMIN_TARGET_ENV,
        shown="unix:DATA_DIR/admin.sock",
    ),
    Option("data_dir", "the sidecar's data dir", ENV["data_dir"], shown=".earmark", convert=Path),
    Option(
        "admin_token_file",
        "a file holding Admin's bearer token (never shown on a page)",
        ENV["admin_token_file"],
        convert=Path,
    ),
    Option(
        "token_file",
        "a file holding a worker token, for the Lab's Reserves (a sidecar with worker tokens)",
        "EARMARK_CONSOLE_TOKEN_FILE",
        convert=Path,
    ),
    Option(
        "login_token_file",
        "a file holding the token a person types to log in (required off loopback)",
        "EARMARK_CONSOLE_LOGIN_TOKEN_FILE",
        convert=Path,
    ),
    Option(
        "allowed_hosts",
        "comma-separated host names the pages answer to besides the listen address (the "
        "name operators type; a wildcard listen with none answers to any, behind its login)",
        "EARMARK_CONSOLE_ALLOWED_HOSTS",
    ),
    Option("tls_cert_file", "PEM: serve HTTPS", "EARMARK_CONSOLE_TLS_CERT_FILE", convert=Path),
    Option("tls_key_file", "PEM", "EARMARK_CONSOLE_TLS_KEY_FILE", convert=Path),
    INSECURE_LISTEN,
    Option(
        "timeout_seconds",
        "each Admin call's deadline",
        "EARMARK_CONSOLE_TIMEOUT_SECONDS",
        shown=f"{limits.admin_call_seconds_default:g}",
        convert=float,
    ),
    *LOGGING,
)


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    listen: str = LISTEN_DEFAULT
    target: str = TARGET_DEFAULT
    admin_target: str = ""
    data_dir: Path | None = None
    admin_token_file: Path | None = None
    token_file: Path | None = None
    login_token_file: Path | None = None
    allowed_hosts: str = ""
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    insecure_listen: bool = False
    timeout_seconds: float = limits.admin_call_seconds_default
    log_level: str = "info"
    log_format: str = "auto"
    # Set by tests: how long a Lab job's step takes.
    lab_step_seconds: float = field(default=limits.console_lab_step_seconds)

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None

    def hosts(self) -> frozenset[str] | None:
        """The host names the pages answer to (None: any): the listen address, the names
        given, and on loopback localhost and the loopback addresses, so that a site whose
        name was rebound to 127.0.0.1 is never answered."""
        host, _ = split_host_port(self.listen, "listen")
        named = {h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip()}
        if host in WILDCARDS and not named:
            return None
        loopback = {"localhost", "127.0.0.1", "::1"} if is_loopback(host) else set()
        return frozenset({host.lower(), *named, *loopback})

    def __post_init__(self) -> None:
        host, _ = split_host_port(self.listen, "listen")
        split_host_port(self.target, "target")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file: give both or neither")
        if not is_loopback(host):
            # The sidecar's rule for its listeners, and a login: a page that can change
            # limits is for the operators who hold the token, not for the network.
            if not (self.tls or self.insecure_listen):
                raise ValueError(
                    f"listen: {host} is not a loopback address; configure --tls-cert-file "
                    "and --tls-key-file, or pass --insecure-listen when TLS ends in front"
                )
            if self.login_token_file is None:
                raise ValueError(
                    f"login_token_file: listening on {host}, off loopback, needs a login "
                    "token (--login-token-file)"
                )
        if len(self.allowed_hosts) > limits.console_allowed_hosts_length_max:
            raise ValueError("allowed_hosts: too long a list")
        if not 0 < self.timeout_seconds <= limits.admin_call_seconds_max:
            raise ValueError(
                f"timeout_seconds: {self.timeout_seconds:g} is not in "
                f"(0, {limits.admin_call_seconds_max:g}]"
            )
        check_logging(self.log_level, self.log_format)
