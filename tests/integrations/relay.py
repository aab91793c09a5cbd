"""A TCP port on 127.0.0.1 that stays the same while the sidecar behind it changes: a
LiteLLM proxy started once for several tests is told this port (EARMARK_TARGET), and each
test's own sidecar takes it over for the test (tests/integrations/conftest.py). Bytes pass
as they are, both ways; a connection made while no sidecar is behind the port waits for
the next one."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

# How long a connection made between two tests waits for the next test's sidecar.
WAIT_SECONDS = 30.0


class Relay:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._target: int | None = None
        self._closed = False
        self._changed = threading.Condition()
        self._open: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._accept, name="relay", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def to(self, port: int) -> Iterator[None]:
        """Passes the connections made until the block ends to 127.0.0.1:port; then cuts
        every connection, as the sidecar behind it stopping would."""
        with self._changed:
            self._target = port
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._target = None
                cut, self._open = self._open, set()
            for sock in cut:
                _close(sock)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        # shutdown() wakes the accept() the thread waits in; close() alone would not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=10)
        with self._changed:
            cut, self._open = self._open, set()
        for sock in cut:
            _close(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self._target is not None or self._closed, WAIT_SECONDS)
            target = self._target
        if target is None or self._closed:
            _close(client)
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", target), timeout=10)
        except OSError:
            _close(client)
            return
        upstream.settimeout(None)
        # gRPC writes a frame's parts apart: with Nagle's algorithm on, a part would wait
        # for the peer's delayed ACK, as the fakes' servers note.
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._changed:
            if self._target != target:
                # The test ended while this connection was being made.
                for sock in (client, upstream):
                    _close(sock)
                return
            self._open |= {client, upstream}
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copies source to sink until either end closes, then closes both."""
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        _close(source)
        _close(sink)


def _close(sock: socket.socket) -> None:
    # shutdown() wakes a recv() another thread waits in on this socket.
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
