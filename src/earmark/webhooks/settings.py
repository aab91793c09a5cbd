"""`earmark kinde-webhooks`'s settings: each declared once (its flag, environment variable,
default and help come from one declaration), flags winning over the environment."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from earmark import options
from earmark.options import Option, check_logging
from earmark.settings import ENV, INSECURE_LISTEN, LOGGING, is_loopback, split_host_port

LISTEN_DEFAULT = "127.0.0.1:8788"
# The path Kinde posts to: register https://HOST/kinde/webhooks.
WEBHOOK_PATH = "/kinde/webhooks"


# The database and the Kinde domain are the sidecar's own variables, so that one
# deployment's environment serves both commands.
OPTIONS = (
    Option("listen", "HOST:PORT to serve on", "EARMARK_WEBHOOKS_LISTEN", shown=LISTEN_DEFAULT),
    Option(
        "kinde_domain",
        "https://YOURS.kinde.com: the webhooks' issuer, and where its keys are (/.well-known/jwks)",
        ENV["kinde_domain"],
    ),
    Option(
        "database_url",
        "the sidecars' PostgreSQL URL",
        ENV["database_url"],
        shown="the embedded database running on --data-dir",
    ),
    Option("data_dir", "a sidecar's data dir", ENV["data_dir"], shown=".earmark", convert=Path),
    Option("tls_cert_file", "PEM: serve HTTPS", ENV["tls_cert_file"], convert=Path),
    Option("tls_key_file", "PEM", ENV["tls_key_file"], convert=Path),
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


def load(flags: dict[str, object], environ: dict[str, str]) -> WebhookSettings:
    """WebhookSettings from flags (None: not given), then the environment, then defaults."""
    return options.load(OPTIONS, WebhookSettings, flags, environ)
