"""How the operator's commands reach Admin: the target, the token, a deadline on every call,
and each failure told in one line that names the target (never the token)."""

from __future__ import annotations

import argparse
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import google.rpc.error_details_pb2 as error_details_pb2
import google.rpc.status_pb2 as status_pb2
import grpc
from google.protobuf.message import DecodeError, Message

from earmark import files, limits, options
from earmark import settings as earmark_settings
from earmark.options import Option
from earmark.v1 import budget_pb2_grpc as pb_grpc

M = TypeVar("M", bound=Message)

# The SDK's variable for Admin's address, then the one `earmark serve` listens on.
ADMIN_TARGET_ENV = "EARMARK_ADMIN_TARGET"
STATUS_DETAILS_KEY = "grpc-status-details-bin"
ERROR_DOMAIN = "earmark"


class OpsError(Exception):
    """A command that cannot go on: its message is the one line the operator sees."""


@dataclass(frozen=True, slots=True)
class AdminAccess:
    """Where Admin listens, the file holding its token, and each call's deadline."""

    target: str
    token_file: Path | None = None
    timeout_seconds: float = limits.admin_call_seconds_default
    # TLS to an Admin on TCP: the CA that signed its certificate (None: the system's), and
    # this client's certificate and key when the sidecar wants one (--tls-client-ca-file).
    tls: bool = False
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    # The flag that names key_file (`earmark reconcile` calls it --admin-tls-key-file).
    key_flag: str = "--admin-key-file"

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError(f"--admin-cert-file and {self.key_flag}: give both or neither")
        if not 0 < self.timeout_seconds <= limits.admin_call_seconds_max:
            raise ValueError(
                f"--timeout-seconds: {self.timeout_seconds:g} is not in "
                f"(0, {limits.admin_call_seconds_max:g}]"
            )


DATA_DIR = Option(
    "data_dir",
    "the sidecar's data dir, whose admin.sock is the default target",
    earmark_settings.ENV["data_dir"],
    shown=str(earmark_settings.DATA_DIR_DEFAULT),
    convert=Path,
)
# The SDK's variable, then the sidecar's (admin_target reads both).
ADMIN_TARGET = Option(
    "admin_target",
    "Admin's listener: unix:PATH or HOST:PORT",
    ADMIN_TARGET_ENV,
    shown=f"{earmark_settings.ENV['admin_listen']}, "
    f"unix:DATA_DIR/{earmark_settings.ADMIN_SOCKET_NAME}",
)
ADMIN_TOKEN_FILE = Option(
    "admin_token_file",
    "a file holding Admin's bearer token",
    earmark_settings.ENV["admin_token_file"],
    convert=Path,
)
TIMEOUT = Option(
    "timeout_seconds",
    "each call's deadline",
    default=limits.admin_call_seconds_default,
    shown=f"{limits.admin_call_seconds_default:g}",
    convert=float,
)
OUTPUT = Option(
    "output",
    "a table, or one JSON document with the proto's field names",
    default="table",
    shown="table",
    choices=("table", "json"),
    flags=("-o", "--output"),
)
ADMIN_TLS = (
    Option(
        "admin_tls",
        "TLS to an Admin on TCP (implied by the three files below)",
        default=False,
        action="store_true",
    ),
    Option("admin_ca_file", "PEM: the CA of Admin's certificate", convert=Path),
    Option("admin_cert_file", "PEM: this client's certificate", convert=Path),
)


def admin_options(*, output: bool = True, key_flag: str = "--admin-key-file") -> tuple[Option, ...]:
    """The flags of every command that reaches Admin (and -o and TLS, where the command
    itself makes the calls). `earmark reconcile` names the provider's admin key
    --admin-key-file, as its issue asks: there this client's TLS key is key_flag."""
    reach = (DATA_DIR, ADMIN_TARGET, ADMIN_TOKEN_FILE, TIMEOUT)
    if not output:
        return reach
    key = Option("admin_client_key_file", "PEM: this client's key", convert=Path, flags=(key_flag,))
    return (*ADMIN_TLS, key, OUTPUT, *reach)


def add_admin_arguments(
    command: argparse.ArgumentParser, *, output: bool = True, key_flag: str = "--admin-key-file"
) -> None:
    """admin_options on the command, and which flag names this client's TLS key."""
    options.add_options(command, admin_options(output=output, key_flag=key_flag))
    if output:
        command.set_defaults(admin_client_key_flag=key_flag)


def admin_target(
    flag: str | None, data_dir: Path | None, environ: Mapping[str, str] | None = None
) -> str:
    """Admin's address: the flag, the SDK's or the sidecar's variable, or the socket in the
    data dir, which --data-dir and EARMARK_DATA_DIR name as they do for `earmark serve`."""
    environ = os.environ if environ is None else environ
    if flag:
        return flag
    for variable in (ADMIN_TARGET.env, earmark_settings.ENV["admin_listen"]):
        if environ.get(variable):
            return environ[variable]
    folder = data_dir_of(data_dir, environ)
    return f"{earmark_settings.UNIX_PREFIX}{folder / earmark_settings.ADMIN_SOCKET_NAME}"


def data_dir_of(flag: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    """The data dir as `earmark serve` picks it: the flag, EARMARK_DATA_DIR, or .earmark."""
    environ = os.environ if environ is None else environ
    variable = environ.get(DATA_DIR.env)
    return flag or (Path(variable) if variable else earmark_settings.DATA_DIR_DEFAULT)


def access_from(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> AdminAccess:
    """The AdminAccess the command's flags (and the environment) describe."""
    environ = os.environ if environ is None else environ
    token_file = args.admin_token_file
    variable = environ.get(ADMIN_TOKEN_FILE.env)
    if token_file is None and variable:
        token_file = Path(variable)
    return AdminAccess(
        target=admin_target(args.admin_target, getattr(args, "data_dir", None), environ),
        token_file=token_file,
        timeout_seconds=args.timeout_seconds,
        tls=bool(getattr(args, "admin_tls", False)),
        ca_file=getattr(args, "admin_ca_file", None),
        cert_file=getattr(args, "admin_cert_file", None),
        key_file=getattr(args, "admin_client_key_file", None),
        key_flag=getattr(args, "admin_client_key_flag", "--admin-key-file"),
    )


def read_token(path: Path, flag: str = "--admin-token-file") -> str:
    """The token in path, surrounding white space ignored; errors name the flag and the
    file and say what is wrong (unreadable, empty, more than one word, too short or too
    long, with the bound), never what it holds."""
    try:
        token = files.read_text(path, flag, limits.token_file_bytes_max).strip()
    except files.FileProblem as error:
        raise OpsError(str(error)) from None
    low, high = limits.token_length_min, limits.token_length_max
    if not token:
        why = "is empty (or only white space): it holds no token"
    elif any(c.isspace() for c in token):
        why = "holds more than one word: a token is one word, without white space"
    elif len(token) < low:
        why = f"holds a token that is too short: a token is at least {low} characters"
    elif len(token) > high:
        why = f"holds a token that is too long: a token is at most {high} characters"
    else:
        return token
    raise OpsError(f"{flag}: {path}: {why}")


def check_socket(target: str) -> None:
    """Says at once, rather than at the deadline, that a unix: target has no socket."""
    if not target.startswith(earmark_settings.UNIX_PREFIX):
        return
    path = Path(target.removeprefix(earmark_settings.UNIX_PREFIX))
    try:
        is_socket = stat.S_ISSOCK(path.stat().st_mode)
    except OSError:
        raise OpsError(
            f"no Admin socket at {path} (is `earmark serve` running with that data dir? "
            "see --data-dir and --admin-target)"
        ) from None
    if not is_socket:
        raise OpsError(f"{path} is not a socket (--admin-target)")


def error_reason(error: grpc.Call) -> str:
    """The ErrorInfo reason in a failed call's google.rpc.Status, or empty."""
    trailers = cast("Iterable[tuple[str, str | bytes]]", error.trailing_metadata() or ())
    for key, value in trailers:
        if key != STATUS_DETAILS_KEY or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            return ""
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info) and info.domain == ERROR_DOMAIN:
                return info.reason
    return ""


def describe(error: grpc.Call, target: str, timeout_seconds: float) -> str:
    """One line for a failed call: the status code and Earmark's reason, or, when no
    Earmark answered, that the target could not be reached."""
    code = error.code()
    reason = error_reason(error)
    if reason:
        return f"{code.name} {reason}: {error.details()}"
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"cannot reach Admin at {target}: {error.details()}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"Admin at {target} did not answer within {timeout_seconds:g}s (--timeout-seconds)"
    return f"{code.name}: {error.details()} (Admin at {target})"


def _pem(path: Path | None, flag: str) -> bytes | None:
    if path is None:
        return None
    try:
        data, _ = files.read_regular(path, flag, limits.pem_file_bytes_max)
    except files.FileProblem as error:
        raise OpsError(str(error)) from None
    return data


def open_channel(access: AdminAccess) -> grpc.Channel:
    """A channel to Admin: TLS when asked for (never on a Unix socket), else plaintext."""
    files = (access.ca_file, access.cert_file, access.key_file)
    tls = access.tls or any(f is not None for f in files)
    if not tls or access.target.startswith(earmark_settings.UNIX_PREFIX):
        return grpc.insecure_channel(access.target)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_pem(access.ca_file, "--admin-ca-file"),
        private_key=_pem(access.key_file, access.key_flag),
        certificate_chain=_pem(access.cert_file, "--admin-cert-file"),
    )
    return grpc.secure_channel(access.target, credentials)


@dataclass(frozen=True)
class Answer:
    """What a command prints, and the exit status it ends with (a check that found
    something ends non-zero, having printed what it found)."""

    text: str
    status: int = 0


class Admin:
    """A channel to Admin for one command: every call has the deadline and the token."""

    def __init__(self, access: AdminAccess) -> None:
        self.access = access
        token = read_token(access.token_file) if access.token_file is not None else None
        self._metadata = (("authorization", f"Bearer {token}"),) if token else None
        check_socket(access.target)
        self._channel = open_channel(access)
        self.stub = pb_grpc.AdminStub(self._channel)

    def call(self, method: str, request: Message, reply: type[M]) -> M:
        """Admin.method(request), answered within the deadline or raised as an OpsError."""
        rpc = getattr(self.stub, method)
        try:
            answer = rpc(request, timeout=self.access.timeout_seconds, metadata=self._metadata)
        except grpc.RpcError as error:
            call = cast(grpc.Call, error)
            raise OpsError(
                describe(call, self.access.target, self.access.timeout_seconds)
            ) from None
        return cast(M, answer)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_reachable(target: str, timeout_seconds: float, what: str) -> None:
    """Raises an OpsError naming target unless a connection to it opens within the
    deadline: what a workload checks before it starts its jobs."""
    if what == "Admin":
        check_socket(target)
    channel = grpc.insecure_channel(target)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout_seconds)
    except grpc.FutureTimeoutError:
        raise OpsError(
            f"cannot reach {what} at {target} within {timeout_seconds:g}s (--timeout-seconds)"
        ) from None
    finally:
        channel.close()
