"""The console's edge, in one ASGI middleware: every visitor has a session (a random id in
an HttpOnly, SameSite=Strict cookie); with a login token, every page but the login page
needs a session that typed it; every POST carries the session's CSRF token in its form
(checked before the application sees the request, so a forged or stale form changes
nothing); and every answer carries headers that keep the pages to themselves (a CSP with
no inline script, no framing, no referrer)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from earmark import limits

COOKIE = "earmark_console"
CSRF_FIELD = "csrf"
# What a visitor who has not logged in may still fetch.
OPEN_PATHS = ("/login", "/static/", "/healthz")
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        b"frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


@dataclass(slots=True)
class Session:
    sid: str
    csrf: str
    expires: float
    logged_in: bool = False


class Sessions:
    """At most limits.console_sessions_max sessions, the oldest dropped first, each good
    for limits.console_session_seconds; CSRF tokens are HMACs of the session id under a
    key that lives as long as the process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._key = secrets.token_bytes(32)
        self._by_id: OrderedDict[str, Session] = OrderedDict()
        self._clock = clock

    def get(self, sid: str | None) -> Session | None:
        session = self._by_id.get(sid or "")
        if session is None or session.expires <= self._clock():
            return None
        return session

    def new(self) -> Session:
        sid = secrets.token_urlsafe(32)
        csrf = hmac.new(self._key, sid.encode(), hashlib.sha256).hexdigest()
        session = Session(sid, csrf, self._clock() + limits.console_session_seconds)
        self._by_id[sid] = session
        while len(self._by_id) > limits.console_sessions_max:
            self._by_id.popitem(last=False)
        return session

    def end(self, sid: str) -> None:
        self._by_id.pop(sid, None)


def _cookie_of(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # a malformed Cookie header is no session
                return None
            morsel = jar.get(COOKIE)
            return morsel.value if morsel is not None else None
    return None


class Guard:
    """Sessions, the login, CSRF and the security headers for the console's ASGI app."""

    def __init__(
        self, app: ASGIApp, sessions: Sessions, login_token: str | None, secure: bool
    ) -> None:
        self.app = app
        self.sessions = sessions
        self.login_token = login_token
        self.secure = secure

    def logged_in(self, session: Session, typed: str) -> bool:
        """Whether typed is the login token (compared in constant time); marks the session."""
        if self.login_token is None:
            return True
        ok = hmac.compare_digest(typed.encode(), self.login_token.encode())
        session.logged_in = session.logged_in or ok
        return ok

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        session = self.sessions.get(_cookie_of(scope))
        fresh = session is None
        if session is None:
            session = self.sessions.new()
        scope.setdefault("state", {})["session"] = session
        send = self._headers(send, session if fresh else None)
        path: str = scope["path"]
        needs_login = self.login_token is not None and not session.logged_in
        if needs_login and not path.startswith(OPEN_PATHS):
            await self._refuse_login(scope, send)
            return
        if scope["method"] == "POST":
            body = await _read_body(receive)
            if body is None:
                await _plain(send, 413, "the form is too large; nothing was changed")
                return
            form = urllib.parse.parse_qs(body.decode("utf-8", "replace"))
            typed = (form.get(CSRF_FIELD) or [""])[0]
            if not hmac.compare_digest(typed.encode(), session.csrf.encode()):
                await _plain(
                    send, 403, "refused: the form's CSRF token is missing or wrong; nothing "
                    "was changed (reload the page and try again)",
                )  # fmt: skip
                return
            scope["state"]["form"] = {key: values[0] for key, values in form.items()}
        await self.app(scope, receive, send)

    async def _refuse_login(self, scope: Scope, send: Send) -> None:
        if scope["method"] == "GET" and not scope["path"].startswith("/api/"):
            target = urllib.parse.quote(scope["path"] + _query(scope), safe="")
            await send(
                {
                    "type": "http.response.start",
                    "status": 303,
                    "headers": [(b"location", f"/login?next={target}".encode())],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        await _plain(send, 401, "log in first (/login); nothing was changed")

    def _headers(self, send: Send, fresh: Session | None) -> Send:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.extend(SECURITY_HEADERS)
                if fresh is not None:
                    flags = "; Secure" if self.secure else ""
                    cookie = (
                        f"{COOKIE}={fresh.sid}; Path=/; HttpOnly; SameSite=Strict; "
                        f"Max-Age={int(limits.console_session_seconds)}{flags}"
                    )
                    headers.append((b"set-cookie", cookie.encode()))
                message = {**message, "headers": headers}
            await send(message)

        return sending


def _query(scope: Scope) -> str:
    raw: bytes = scope.get("query_string", b"")
    return f"?{raw.decode('latin-1')}" if raw else ""


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body, or None past limits.console_form_bytes_max."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message: Any = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limits.console_form_bytes_max:
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _plain(send: Send, status: int, text: str) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": (text + "\n").encode()})
