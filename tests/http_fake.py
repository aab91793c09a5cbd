"""What the fake providers share: a threaded HTTP server on 127.0.0.1 port 0 that carries
its fake's state, served until a block ends, also on failure."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Generic, TypeVar

State = TypeVar("State")


class StateServer(ThreadingHTTPServer, Generic[State]):
    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], state: State) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.state = state


POLL_SECONDS = 0.02


@contextmanager
def serving(
    server: StateServer[State], name: str, before_stop: Callable[[], None] = lambda: None
) -> Iterator[int]:
    """Serves server on a thread until the block ends and yields its port; before_stop
    runs first on the way out (to release a stalled handler, say)."""
    # A short poll: shutdown() waits for the serving loop's next look (0.5 s by default).
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_SECONDS}, name=name, daemon=True
    )
    thread.start()
    try:
        yield server.server_port
    finally:
        before_stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
