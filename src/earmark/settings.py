"""Settings from flags, then EARMARK_* environment variables, then defaults."""

from __future__ import annotations

import ipaddress
import os
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from earmark import limits, options
from earmark.options import Option, boolean

UNIX_PREFIX = "unix:"
# Where the embedded PostgreSQL and the admin socket live when --data-dir is not given.
DATA_DIR_DEFAULT = Path(".earmark")
ADMIN_SOCKET_NAME = "admin.sock"
# A region's name: as a token's name (service/auth.py), as long as limits allow.
_REGION = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{limits.region_name_chars_max - 1}}}")


def split_host_port(value: str, name: str) -> tuple[str, int]:
    """Parses HOST:PORT (port 0 picks a free port); raises ValueError naming the setting."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{name}: {value!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses; a name other than localhost is not
    resolved here, so it counts as reachable from elsewhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def unsendable(url: str) -> str | None:
    """Why httpx, which posts the notices, cannot send to url (None when it can), in words
    that never repeat the URL, which may carry the receiver's credentials."""
    if any(ord(char) < 32 or ord(char) == 127 for char in url):
        return "holds a control character (a tab or a newline, say); no request can be sent"
    if any(char.isspace() for char in url):
        return "holds whitespace; no request can be sent to it as given"
    import httpx  # the server's dependency; settings is read by client-only installs too

    try:
        parsed = httpx.URL(url)
        parsed.port  # noqa: B018 - read so that every part is checked
    except (httpx.InvalidURL, ValueError, TypeError):
        return "not a URL httpx can send a request to"
    if not parsed.host:
        return "names no host"
    if parsed.scheme not in ("http", "https"):
        return f"its scheme is {parsed.scheme!r}; notices are sent over https (or http)"
    return None


def unix_socket_path(value: str, name: str) -> Path:
    """The absolute path of a `unix:PATH` address, checked against the kernel's bound."""
    text = value.removeprefix(UNIX_PREFIX)
    if not text:
        raise ValueError(f"{name}: {value!r} names no path")
    path = Path(text).absolute()
    if len(os.fsencode(path)) > limits.unix_socket_path_bytes_max:
        raise ValueError(
            f"{name}: {str(path)!r} is longer than a Unix socket path may be "
            f"({limits.unix_socket_path_bytes_max} bytes); choose a shorter one"
        )
    return path


_NO_DEFAULT: Any = object()


def setting(
    default: Any = _NO_DEFAULT,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    convert: Callable[[Any], object] = str,
    choices: tuple[str, ...] | None = None,
    shown: str | None = None,
) -> Any:
    """One setting, declared once: its default, and the Option its flag comes from (what
    --help says of it, how a flag's or the environment's text becomes its value, and
    (shown) what --help shows as its default where that is not simply the default itself).
    Its flag is --NAME-WITH-DASHES and its environment variable EARMARK_NAME (OPTIONS)."""
    value = factory() if factory is not None else default
    assert value is not _NO_DEFAULT
    option = Option(
        "",
        help,
        shown=_shown(value) if shown is None else shown,
        convert=convert,
        choices=choices,
        action="store_true" if convert is boolean else "store",
    )
    if factory is not None:
        return field(default_factory=factory, metadata={"option": option})
    return field(default=default, metadata={"option": option})


def _shown(value: object) -> str:
    """A default as --help shows it: nothing for none, empty or off."""
    if value is None or value == "" or value is False:
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = setting("127.0.0.1:50051", "gRPC HOST:PORT")
    # Empty disables the metrics endpoint.
    metrics_listen: str = setting("127.0.0.1:9464", "Prometheus HOST:PORT, empty to disable")
    # A listener with grpc.health.v1 alone, for probes that cannot reach loopback (the
    # kubelet probes the pod's IP): always plaintext, since it says only SERVING or not,
    # and so allowed on any address. Empty: none.
    health_listen: str = setting(
        "",
        "HOST:PORT serving grpc.health.v1 alone, in plaintext, for probes that cannot reach "
        "loopback (the kubelet); empty for none",
    )
    # None starts the embedded PostgreSQL under data_dir.
    database_url: str | None = setting(None, "PostgreSQL URL; unset starts the embedded one")
    data_dir: Path = setting(
        help="embedded PostgreSQL's home", factory=lambda: DATA_DIR_DEFAULT, convert=Path
    )
    lease_seconds_max: float = setting(
        limits.lease_seconds_max_default,
        "the longest lease a Reserve or Renew may ask for",
        convert=float,
    )
    sweep_interval_seconds: float = setting(
        limits.sweep_interval_seconds_default,
        "how often the sweeper returns holds whose lease passed",
        convert=float,
    )
    shutdown_grace_seconds: float = setting(
        limits.shutdown_grace_seconds_default,
        "on SIGTERM, how long calls in flight may finish",
        convert=float,
    )
    # How long, within the grace, open holds' Charges and Settles are still served.
    drain_holds_seconds: float = setting(
        limits.drain_holds_seconds_default,
        "within the grace, how long holds admitted here may still be charged and settled",
        convert=float,
    )
    # Draining ends once no call has arrived for this long (calls queued inside gRPC).
    drain_quiet_seconds: float = setting(
        limits.drain_quiet_seconds,
        "on SIGTERM, draining ends once no call arrived for this long",
        convert=float,
    )
    pool_size_max: int = setting(
        limits.pool_size_max_default, "database connections for workers' calls", convert=int
    )
    metrics_budgets_max: int = setting(
        limits.metrics_budgets_max_default, "budgets with gauges, most used first", convert=int
    )
    metrics_refresh_seconds: float = setting(
        limits.metrics_refresh_interval_seconds, "how often database gauges refresh", convert=float
    )
    # grouped (the default) or naive: see Store; naive is kept for benchmarks and tests.
    admission: str = setting(
        "grouped", "grouped, or naive for comparison", choices=("grouped", "naive")
    )
    # none, or pgbouncer: the database URL is a PgBouncer in transaction pooling, where a
    # prepared statement must not outlive its transaction (PgBouncer < 1.21 cannot route it).
    database_pooler: str = setting(
        "none", "none, or pgbouncer when --database-url is a PgBouncer in transaction pooling"
    )
    log_level: str = setting("info", "debug, info, warning, error")
    log_format: str = setting("auto", "auto, json, console")
    # Admin's own listener: unix:PATH or HOST:PORT; empty is unix:DATA_DIR/admin.sock.
    admin_listen: str = setting(
        "", "Admin's listener: unix:PATH or HOST:PORT", shown="unix:DATA_DIR/admin.sock"
    )
    # Required when Admin listens on TCP: every Admin call carries this bearer token.
    admin_token_file: Path | None = setting(
        None, "the admin bearer token; required on TCP", convert=Path
    )
    # TLS for every TCP listener; a client CA makes it mutual.
    tls_cert_file: Path | None = setting(None, "PEM", convert=Path)
    tls_key_file: Path | None = setting(None, "PEM", convert=Path)
    tls_client_ca_file: Path | None = setting(
        None, "PEM; clients must present a certificate it signed", convert=Path
    )
    # Plaintext on a non-loopback address, on purpose.
    insecure_listen: bool = setting(
        False, "allow plaintext on a non-loopback address", convert=boolean
    )
    # Worker tokens, each with the budget id prefixes it may use (see service/auth.py).
    worker_token_file: Path | None = setting(
        None, "lines of NAME TOKEN PREFIX...; workers then need a token", convert=Path
    )
    # Budgets across regions (issue 48, docs/regions.md). A sidecar with --home admits from
    # shares of the budgets homed there; one with --region-listen is a home.
    region: str = setting("", "this sidecar's region: needed with --home or --region-listen")
    home: str = setting(
        "",
        "HOST:PORT of the region listener of the budgets' home: this sidecar's region admits "
        "from shares of them",
    )
    home_token_file: Path | None = setting(
        None, "the bearer token this region presents to --home", convert=Path
    )
    home_ca_file: Path | None = setting(
        None, "PEM: the CA of --home's certificate (unset: plaintext)", convert=Path
    )
    region_listen: str = setting(
        "", "HOST:PORT where this home answers regions' asks for shares; empty for none"
    )
    region_token_file: Path | None = setting(
        None,
        "lines of REGION TOKEN PREFIX...: each region's token and the budget id prefixes it "
        "may hold shares of; required off loopback",
        convert=Path,
    )
    # OpenTelemetry spans for every call, and trace ids in the log (the `otel` extra).
    tracing: bool = setting(
        False,
        "OpenTelemetry spans per call and trace ids in the log; needs `pip install "
        "'earmark[otel]'` and a tracer provider",
        convert=boolean,
    )
    # Where account limits come from: static (Admin.PutBudget only), kinde, or file (the
    # stand-in: plans and accounts from the TOML file at plans_file).
    limits_provider: str = setting(
        "static",
        "static, kinde or file; kinde reads plans and reports usage, file reads them from "
        "--plans-file (the stand-in)",
    )
    kinde_domain: str = setting(
        "",
        "https://YOURS.kinde.com; the M2M client's id and secret come from EARMARK_KINDE_CLIENT_ID"
        " and EARMARK_KINDE_CLIENT_SECRET",
    )
    # Where the M2M token is asked for, and its audience: with a custom domain, Kinde still
    # issues tokens at <subdomain>.kinde.com. Empty: kinde_domain.
    kinde_token_domain: str = setting(
        "",
        "https://YOURS.kinde.com where the M2M token is asked for, and its audience: with a custom"
        " --kinde-domain, Kinde still issues tokens at the kinde.com one",
        shown="--kinde-domain",
    )
    plans_file: Path | None = setting(
        None,
        "with --limits-provider file: the TOML file of plans and accounts, read again when it "
        "changes (docs/plans.md)",
        convert=Path,
    )
    # The feature a Reserve by account counts against when it names none, and the unit of
    # the cycle budgets it makes.
    default_feature: str = setting("tokens", "the feature of a Reserve by account that names none")
    plan_unit: str = setting("tokens", "the unit of cycle budgets")
    cycle_anchor_day: int = setting(1, "the day of the month cycles start, 1 to 28", convert=int)
    limit_fresh_seconds: float = setting(
        limits.limit_fresh_seconds_default, "a limit read is used as it is this long", convert=float
    )
    limit_stale_seconds: float = setting(
        limits.limit_stale_seconds_default,
        "and kept this long while the provider fails",
        convert=float,
    )
    limit_retry_seconds: float = setting(
        limits.limit_retry_seconds, "a failed read is tried again after this", convert=float
    )
    admissions_per_minute: int = setting(
        limits.admissions_per_minute_default, "new admissions per account per minute", convert=int
    )
    report_interval_seconds: float = setting(
        limits.report_interval_seconds_default, "how often usage goes to the meter", convert=float
    )
    # Budget notices (docs/notices.md): every event the batches record is posted here,
    # signed with the secret of notify_secret_file; empty: recorded, not posted.
    notify_url: str = setting(
        "",
        "post budget notices to this https:// URL (plain http only on loopback), signed as "
        "Standard Webhooks specifies; empty: recorded, not posted (docs/notices.md)",
    )
    notify_secret_file: Path | None = setting(
        None, "with --notify-url: the whsec_ secret notices are signed with", convert=Path
    )
    # How long the deliverer's lease lasts: a sidecar that dies mid-delivery is taken over
    # by another at most this long after.
    notify_lease_seconds: float = setting(
        limits.notify_lease_seconds_default,
        "one sidecar at a time posts notices, under a lease this long",
        convert=float,
    )
    # How long `earmark serve` waits at start for a database it cannot reach (0: not at all).
    database_wait_seconds: float = setting(
        limits.database_wait_seconds_default,
        "at start, how long to wait for a database that does not answer, health NOT_SERVING "
        "meanwhile; 0 fails at once",
        convert=float,
    )

    @property
    def admin_address(self) -> str:
        return self.admin_listen or f"{UNIX_PREFIX}{self.data_dir / ADMIN_SOCKET_NAME}"

    @property
    def tls(self) -> bool:
        return self.tls_cert_file is not None

    def __post_init__(self) -> None:
        self._check_listeners()
        self._check_regions()
        self._check_ranges()
        self._check_choices()
        self._check_plans()
        self._check_notify()

    def _check_listeners(self) -> None:
        host, _ = split_host_port(self.listen, "listen")
        self._check_exposure("listen", host)
        admin = self.admin_address
        if admin.startswith(UNIX_PREFIX):
            unix_socket_path(admin, "admin_listen")
        else:
            admin_host, _ = split_host_port(admin, "admin_listen")
            self._check_exposure("admin_listen", admin_host)
            if self.admin_token_file is None:
                raise ValueError(
                    f"admin_listen: {admin!r} is TCP; it needs --admin-token-file "
                    "(or listen on unix:PATH)"
                )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file: give both or neither")
        if self.tls_client_ca_file is not None and not self.tls:
            raise ValueError("tls_client_ca_file: needs tls_cert_file and tls_key_file")
        if self.health_listen:
            split_host_port(self.health_listen, "health_listen")
        if self.metrics_listen:
            metrics_host, _ = split_host_port(self.metrics_listen, "metrics_listen")
            # The gauges name budgets, their limits and their use: the same rule as --listen.
            self._check_exposure("metrics_listen", metrics_host)

    def _check_regions(self) -> None:
        """A sidecar is a region's (--home) or a home (--region-listen), and names its
        region either way; a home's region listener off loopback takes region tokens."""
        if self.home and self.region_listen:
            raise ValueError(
                "home and region_listen: a sidecar admits from a home's shares or is a home, "
                "not both"
            )
        if (self.home or self.region_listen) and not self.region:
            raise ValueError("region: name this sidecar's region (needed with --home or "
                             "--region-listen)")  # fmt: skip
        if self.region and not _REGION.fullmatch(self.region):
            raise ValueError(
                f"region: {self.region!r} must be 1 to {limits.region_name_chars_max} letters, "
                "digits, _ . -"
            )
        if self.home:
            split_host_port(self.home, "home")
        if self.region_listen:
            host, _ = split_host_port(self.region_listen, "region_listen")
            self._check_exposure("region_listen", host)
            if not is_loopback(host) and self.region_token_file is None:
                raise ValueError(
                    f"region_listen: {host} is not a loopback address; it needs --region-token-file"
                )

    def _check_ranges(self) -> None:
        """Each bounded number within its bounds; the message names the setting and the
        interval ("(" when the low end is excluded)."""
        bounded: tuple[tuple[str, float, float, bool], ...] = (
            ("database_wait_seconds", 0, limits.database_wait_seconds_max, False),
            (
                "lease_seconds_max",
                limits.lease_seconds_min,
                limits.lease_seconds_max_ceiling,
                False,
            ),
            ("sweep_interval_seconds", 0, 3600, True),
            ("shutdown_grace_seconds", 0, 600, False),
            ("drain_quiet_seconds", 0, limits.drain_quiet_seconds_max, False),
            ("drain_holds_seconds", 0, 600, False),
            ("pool_size_max", limits.pool_size_min, 100, False),
            ("metrics_budgets_max", 0, limits.metrics_budgets_max_ceiling, False),
            ("metrics_refresh_seconds", 0, 3600, True),
        )
        for name, low, high, low_open in bounded:
            value = getattr(self, name)
            if (value <= low if low_open else value < low) or value > high:
                opening = "(" if low_open else "["
                raise ValueError(f"{name}: {value} is not in {opening}{low:g}, {high:g}]")

    def _check_choices(self) -> None:
        if self.admission not in {"grouped", "naive"}:
            raise ValueError(f"admission: {self.admission!r} is not grouped or naive")
        if self.database_pooler not in {"none", "pgbouncer"}:
            raise ValueError(f"database_pooler: {self.database_pooler!r} is not none or pgbouncer")
        if self.log_level.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError(f"log_level: {self.log_level!r} is not debug, info, warning or error")
        if self.log_format not in {"auto", "json", "console"}:
            raise ValueError(f"log_format: {self.log_format!r} is not auto, json or console")

    def _check_plans(self) -> None:
        if self.limits_provider not in {"static", "kinde", "file"}:
            raise ValueError(
                f"limits_provider: {self.limits_provider!r} is not static, kinde or file"
            )
        if self.limits_provider == "file" and self.plans_file is None:
            raise ValueError(
                "plans_file: --limits-provider file needs --plans-file PATH (a TOML file of "
                "plans and accounts; see docs/plans.md)"
            )
        if self.plans_file is not None and self.limits_provider != "file":
            raise ValueError(
                f"plans_file: is read only with --limits-provider file, not {self.limits_provider}"
            )
        if self.limits_provider == "kinde":
            for name, value in (
                ("kinde_domain", self.kinde_domain),
                ("kinde_token_domain", self.kinde_token_domain or self.kinde_domain),
            ):
                domain = urllib.parse.urlsplit(value)
                plain_ok = domain.scheme == "http" and is_loopback(domain.hostname or "")
                if not domain.hostname or not (domain.scheme == "https" or plain_ok):
                    raise ValueError(
                        f"{name}: --limits-provider kinde needs its https:// URL "
                        "(plain http only on a loopback address)"
                    )
        if not 1 <= self.cycle_anchor_day <= limits.cycle_anchor_day_max:
            raise ValueError(
                f"cycle_anchor_day: {self.cycle_anchor_day} is not in "
                f"[1, {limits.cycle_anchor_day_max}]"
            )
        if not 0 < self.limit_fresh_seconds <= self.limit_stale_seconds <= 86_400:
            raise ValueError(
                "limit_fresh_seconds and limit_stale_seconds: need 0 < fresh <= stale <= 86400"
            )
        if not 0 < self.limit_retry_seconds <= self.limit_fresh_seconds:
            raise ValueError("limit_retry_seconds: needs 0 < retry <= limit_fresh_seconds")
        if not 1 <= self.admissions_per_minute <= limits.admissions_per_minute_max:
            raise ValueError(
                f"admissions_per_minute: {self.admissions_per_minute} is not in "
                f"[1, {limits.admissions_per_minute_max}]"
            )
        if not 0 < self.report_interval_seconds <= 3600:
            raise ValueError(
                f"report_interval_seconds: {self.report_interval_seconds} is not in (0, 3600]"
            )

    def _check_notify(self) -> None:
        """The notices' settings; a message never repeats the URL, which may carry the
        receiver's credentials."""
        low, high = limits.notify_lease_seconds_min, limits.notify_lease_seconds_max
        if not low <= self.notify_lease_seconds <= high:
            raise ValueError(
                f"notify_lease_seconds: {self.notify_lease_seconds:g} is not in [{low:g}, {high:g}]"
            )
        if not self.notify_url:
            if self.notify_secret_file is not None:
                raise ValueError("notify_secret_file: is read only with --notify-url")
            return
        cannot = unsendable(self.notify_url)
        if cannot:
            raise ValueError(f"notify_url: {cannot}")
        import httpx  # the server's dependency; settings is read by client-only installs too

        url = httpx.URL(self.notify_url)
        plain_ok = url.scheme == "http" and is_loopback(url.host)
        if (
            len(self.notify_url) > limits.notify_url_length_max
            or not url.host
            or not (url.scheme == "https" or plain_ok)
        ):
            raise ValueError(
                f"notify_url: needs an https:// URL of at most {limits.notify_url_length_max} "
                "characters (plain http only on a loopback address)"
            )
        if self.notify_secret_file is None:
            raise ValueError(
                "notify_secret_file: --notify-url needs --notify-secret-file PATH, a file "
                "holding the whsec_ secret notices are signed with (docs/notices.md)"
            )

    def _check_exposure(self, name: str, host: str) -> None:
        """A listener off loopback serves TLS, or plaintext only when asked for in so many
        words: a worker's traffic carries tokens and budgets."""
        if is_loopback(host) or self.tls or self.insecure_listen:
            return
        raise ValueError(
            f"{name}: {host} is not a loopback address; configure --tls-cert-file and "
            "--tls-key-file, or pass --insecure-listen to serve plaintext there"
        )


# Each setting's Option, its name and environment variable filled in: `earmark serve`'s
# flags; a flag wins over the variable, which wins over the default.
OPTIONS = tuple(
    replace(f.metadata["option"], name=f.name, env=f"EARMARK_{f.name.upper()}")
    for f in fields(Settings)
)
ENV = {option.name: option.env for option in OPTIONS}
_BY_NAME = {option.name: option for option in OPTIONS}

# What every command that serves HTTP takes as the sidecar does, from the sidecar's
# variables, so that one deployment's environment serves them all.
INSECURE_LISTEN = replace(
    _BY_NAME["insecure_listen"],
    help="allow plain HTTP on a non-loopback address (TLS ends in front, at an ingress)",
)
LOGGING = (_BY_NAME["log_level"], _BY_NAME["log_format"])

# The Kinde M2M application's credentials come from the environment only: never a flag
# (flags show in process listings), never logged.
KINDE_CLIENT_ID = "EARMARK_KINDE_CLIENT_ID"
KINDE_CLIENT_SECRET = "EARMARK_KINDE_CLIENT_SECRET"


def load(flags: dict[str, object], environ: dict[str, str] | None = None) -> Settings:
    """Builds Settings: a flag that is not None wins, then the environment, then defaults."""
    environ = dict(os.environ) if environ is None else environ
    return options.load(OPTIONS, Settings, flags, environ)
