"""A listening TCP socket for the commands that serve HTTP (`earmark kinde-webhooks`,
`earmark console`), bound before their server starts so that a port in use is one line
naming the setting."""

from __future__ import annotations

import socket

from earmark.errors import Reason, Unavailable
from earmark.settings import split_host_port


def bind_tcp(listen: str, name: str = "listen") -> socket.socket:
    """A socket bound to listen (HOST:PORT; port 0 picks a free one), not yet listening."""
    host, port = split_host_port(listen, name)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise Unavailable(
            f"{name}: cannot listen on {listen}: {error.strerror}", Reason.LISTEN_FAILED
        ) from None
    return sock
