"""A webhook receiver as an operator would write one, on 127.0.0.1 port 0 in a thread of
its own: it verifies every request's Standard Webhooks signature (refusing with 400 what
does not verify), takes each notice once by its webhook-id, and answers what the test
scripted; a repeat of an id it took is dropped and answered 200."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from earmark.notices import signing
from tests.http_fake import StateServer, serving

# A scripted answer: an HTTP status; "wait": answer 200 once the test releases it; "drop":
# take the notice, then never answer (the connection closes when the test ends).
Answer = int | Literal["wait", "drop"]
# How long a held request waits for the test at most: a test that fails never hangs on it.
HELD_SECONDS_MAX = 60.0


@dataclass(frozen=True)
class Request:
    """One request as the receiver got it."""

    webhook_id: str
    timestamp: str
    body: bytes
    headers: dict[str, str]
    # Why it did not verify (None: it did).
    refused: str | None


@dataclass
class Inbox:
    """What the receiver saw and took; guarded by lock, since requests come on threads."""

    key: bytes
    clock: Callable[[], datetime]
    script: list[Answer]
    then: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)
    requests: list[Request] = field(default_factory=list)
    # The bodies taken, once per webhook-id, and the repeats dropped.
    taken: dict[str, bytes] = field(default_factory=dict)
    duplicates: int = 0
    in_flight: int = 0
    in_flight_max: int = 0

    def snapshot(self) -> tuple[list[Request], dict[str, bytes], int]:
        with self.lock:
            return list(self.requests), dict(self.taken), self.duplicates


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StateServer[Inbox]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the inbox, not the server's log."""

    def do_POST(self) -> None:
        inbox = self.server.state
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            signing.verify(inbox.key, headers, body, inbox.clock())
            refused = None
        except signing.BadSignature as error:
            refused = str(error)
        msg_id = headers.get("webhook-id", "")
        with inbox.lock:
            inbox.requests.append(
                Request(msg_id, headers.get("webhook-timestamp", ""), body, headers, refused)
            )
            inbox.in_flight += 1
            inbox.in_flight_max = max(inbox.in_flight_max, inbox.in_flight)
            answer: Answer = inbox.script.pop(0) if inbox.script else inbox.then
        try:
            self._answer(inbox, msg_id, body, 400 if refused else answer)
        finally:
            with inbox.lock:
                inbox.in_flight -= 1

    def _answer(self, inbox: Inbox, msg_id: str, body: bytes, answer: Answer) -> None:
        with inbox.lock:
            repeat = msg_id in inbox.taken
            if repeat:
                inbox.duplicates += 1
            elif answer == "drop" or (isinstance(answer, int) and 200 <= answer < 300):
                inbox.taken[msg_id] = body
        if repeat:
            answer = 200
        elif answer == "drop":
            inbox.release.wait(HELD_SECONDS_MAX)
            self.close_connection = True
            return
        elif answer == "wait":
            inbox.release.wait(HELD_SECONDS_MAX)
            with inbox.lock:
                inbox.taken[msg_id] = body
            answer = 200
        self.send_response(answer)
        self.send_header("content-length", "0")
        self.end_headers()


@contextmanager
def receiving(
    key: bytes, clock: Callable[[], datetime], script: list[Answer] | None = None, then: int = 200
) -> Iterator[tuple[str, Inbox]]:
    """A receiver until the block ends, also on failure (held requests are released
    first); yields its URL and its inbox."""
    inbox = Inbox(key, clock, list(script or []), then)
    server = StateServer(Handler, inbox)
    with serving(server, "notice-receiver", before_stop=inbox.release.set) as port:
        yield f"http://127.0.0.1:{port}/hooks/earmark", inbox
