"""What the fake providers share: a threaded HTTP server on 127.0.0.1 port 0 that carries
its fake's state, served until a block ends, also on failure; and a request handler that
reads JSON, answers JSON, and streams server-sent events as the providers send them."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar

State = TypeVar("State")


class StateServer(ThreadingHTTPServer, Generic[State]):
    daemon_threads = True
    # The listen backlog: socketserver's 5 would leave a burst of connections (220 at once
    # through a LiteLLM proxy) waiting out SYN retransmits, past a client's timeout.
    request_queue_size = 256

    def __init__(self, handler: type[BaseHTTPRequestHandler], state: State) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.state = state

    def get_request(self) -> tuple[socket.socket, Any]:
        """An accepted connection with Nagle's algorithm off, as a provider's server has
        it: the handler writes the headers and the body apart, and with it on, the body
        waits for the client's delayed ACK of the headers (some 40 ms a request)."""
        connection, address = super().get_request()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection, address


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


@dataclass(frozen=True)
class Received:
    """One request as a fake saw it: its method, path and JSON body, and the headers a test
    may ask about (never credentials)."""

    method: str
    path: str
    body: Any
    headers: dict[str, str]


class JsonHandler(BaseHTTPRequestHandler):
    """A quiet HTTP/1.1 handler that reads a JSON body, answers JSON, and streams
    server-sent events chunked, as both providers send them."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the state, not the server's log."""

    def read_json(self) -> Any:
        """The request's JSON body, or {} when it has none (a GET)."""
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        return json.loads(raw) if raw else {}

    def received(self, body: Any, names: Iterable[str]) -> Received:
        """This request, with the headers of names that it carries."""
        headers = {name: self.headers[name] for name in names if name in self.headers}
        return Received(self.command, self.path, body, headers)

    def send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The caller went away (it timed out, or a worker was killed): nobody to answer.
            pass

    def start_events(self) -> None:
        """Starts a 200 answer of server-sent events in chunked transfer encoding, as the
        providers send them; the connection closes after the last chunk."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("connection", "close")
        self.end_headers()

    def send_event(self, data: Any, name: str | None = None) -> None:
        """One event: an `event:` line when named (Anthropic's and the Responses API's
        streams name theirs, Chat Completions' do not), then its JSON data."""
        text = (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n"
        self.send_chunk(text.encode())

    def send_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def end_events(self) -> None:
        """The last, empty chunk: the body ends whole."""
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def cut_events(self) -> None:
        """Closes the connection without the last chunk: the client reads a body cut short,
        as when a connection drops in the middle of a stream."""
        self.wfile.flush()
        self.close_connection = True
