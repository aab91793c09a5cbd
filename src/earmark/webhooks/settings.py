"""`earmark kinde-webhooks`'s settings: each declared once (its flag, environment variable,
default and help come from one declaration), flags winning over the environment."""

from __future__ import annotations

import argparse
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from earmark import options
from earmark.options import INSECURE_LISTEN, LOGGING, Option, check_logging
from earmark.settings import ENV as SIDECAR_ENV
from earmark.settings import is_loopback, split_host_port

LISTEN_DEFAULT = "127.0.0.1:8788"
# The path Kinde posts to: register https://HOST/kinde/webhooks.
WEBHOOK_PATH = "/kinde/webhooks"


# The database and the Kinde domain are the sidecar's own variables, so that one
# deployment's environment serves both commands.
OPTIONS = (
    Option("listen", "EARMARK_WEBHOOKS_LISTEN", "HOST:PORT to serve on", LISTEN_DEFAULT),
    Option(
        "kinde_domain",
        SIDECAR_ENV["kinde_domain"],
        "https://YOURS.kinde.com: the webhooks' issuer, and where its keys are (/.well-known/jwks)",
    ),
    Option(
        "database_url",
        SIDECAR_ENV["database_url"],
        "the sidecars' PostgreSQL URL",
        "the embedded database running on --data-dir",
    ),
    Option("data_dir", SIDECAR_ENV["data_dir"], "a sidecar's data dir", ".earmark", Path),
    Option("tls_cert_file", SIDECAR_ENV["tls_cert_file"], "PEM: serve HTTPS", convert=Path),
    Option("tls_key_file", SIDECAR_ENV["tls_key_file"], "PEM", convert=Path),
    INSECURE_LISTEN,
    *LOGGING,
)


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    kinde_domain: str = ""
    listen: str = LISTEN_DEFAULT
    database_url: str = ""
    data_dir: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    insecure_listen: bool = False
    log_level: str = "info"
    log_format: str = "auto"

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None

    def __post_init__(self) -> None:
        domain = urllib.parse.urlsplit(self.kinde_domain)
        plain_ok = domain.scheme == "http" and is_loopback(domain.hostname or "")
        if not domain.hostname or not (domain.scheme == "https" or plain_ok):
            raise ValueError(
                "kinde_domain: needs Kinde's https:// URL, e.g. https://yours.kinde.com "
                "(plain http only on a loopback address)"
            )
        host, _ = split_host_port(self.listen, "listen")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file: give both or neither")
        # The rule of the sidecar's listeners: off loopback, TLS or plaintext asked for.
        if not (is_loopback(host) or self.tls or self.insecure_listen):
            raise ValueError(
                f"listen: {host} is not a loopback address; configure --tls-cert-file and "
                "--tls-key-file, or pass --insecure-listen when TLS ends in front of it"
            )
        check_logging(self.log_level, self.log_format)


def add_arguments(command: argparse.ArgumentParser) -> None:
    options.add_arguments(command, OPTIONS)


def load(flags: dict[str, object], environ: dict[str, str]) -> WebhookSettings:
    """WebhookSettings from flags (None: not given), then the environment, then defaults."""
    return options.load(OPTIONS, WebhookSettings, flags, environ)
