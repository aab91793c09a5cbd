"""The console's edge, in one ASGI middleware: every visitor has a session (a random id in
an HttpOnly, SameSite=Strict cookie); with a login token, every page but the login page
needs a session that typed it (wrong tokens are throttled per client address and overall,
in throttle.py); every POST carries the session's CSRF token in its form (checked before
the application sees the request, so a forged or stale form changes nothing); and every
answer carries headers that keep the pages to themselves (a CSP with no inline script, no
framing, no referrer)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from earmark import limits
from earmark.console.throttle import LoginThrottle

COOKIE = "earmark_console"
# Over TLS the cookie is __Host- prefixed: the browser then takes it only with Secure, for
# the whole site and from this host alone.
SECURE_COOKIE = "__Host-earmark_console"
SID = re.compile(r"[A-Za-z0-9_-]{43}")
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


@dataclass(frozen=True, slots=True)
class Session:
    sid: str
    csrf: str
    logged_in: bool = False


class Sessions:
    """A visitor's session is a random id in a cookie, and its CSRF token an HMAC of that
    id under a key that lives as long as the process, so anonymous visitors take no room.
    Only logged-in sessions are kept: at most limits.console_sessions_max (the one used
    least recently dropped first), each for limits.console_session_seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._key = secrets.token_bytes(32)
        self._logged_in: OrderedDict[str, float] = OrderedDict()
        self._clock = clock

    def _session(self, sid: str) -> Session:
        csrf = hmac.new(self._key, sid.encode(), hashlib.sha256).hexdigest()
        expires = self._logged_in.get(sid)
        logged_in = expires is not None and expires > self._clock()
        if logged_in:
            self._logged_in.move_to_end(sid)
        return Session(sid, csrf, logged_in)

    def of(self, sid: str | None) -> Session | None:
        """The session of a cookie's id; None for a missing or malformed one."""
        if sid is None or SID.fullmatch(sid) is None:
            return None
        return self._session(sid)

    def new(self) -> Session:
        return self._session(secrets.token_urlsafe(32))

    def log_in(self) -> Session:
        """A new logged-in session: a visitor who logs in gets a new id, so an id planted
        in its browser before (by another site on the same host) never becomes one."""
        session = self.new()
        self._logged_in[session.sid] = self._clock() + limits.console_session_seconds
        while len(self._logged_in) > limits.console_sessions_max:
            self._logged_in.popitem(last=False)
        return Session(session.sid, session.csrf, True)

    def end(self, sid: str) -> None:
        self._logged_in.pop(sid, None)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _cookie_of(scope: Scope, name: str) -> str | None:
    raw = _header(scope, b"cookie")
    if raw is None:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except CookieError:
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


def host_name(host: str) -> str:
    """The name in a Host header or an origin's authority, without its port or brackets."""
    if host.startswith("["):
        return host[1 : host.find("]")].lower() if "]" in host else host.lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


class Guard:
    """Sessions, the login, CSRF, the names the console answers to, and the security
    headers, for the console's ASGI app.

    A page is answered only under a host name it serves (allowed_hosts; None: any, for a
    wildcard listener, which needs a login anyway): a site that rebinds its own name to
    127.0.0.1 gets a 421 and never a page with a CSRF token in it. A POST must also come
    from the console's own pages: a cross-site Sec-Fetch-Site or another Origin is 403."""

    def __init__(
        self,
        app: ASGIApp,
        sessions: Sessions,
        login_token: str | None,
        secure: bool,
        allowed_hosts: frozenset[str] | None,
        throttle: LoginThrottle | None = None,
    ) -> None:
        self.app = app
        self.sessions = sessions
        self.login_token = login_token
        self.throttle = throttle if throttle is not None else LoginThrottle()
        self.secure = secure
        self.allowed_hosts = allowed_hosts
        self.cookie_name = SECURE_COOKIE if secure else COOKIE

    def log_in(self, typed: str, address: str) -> Session | None:
        """A new logged-in session if typed, sent from the client address, is the login
        token (compared in constant time), else None. Raises throttle.Throttled, without
        looking at typed, while address or every address together has sent too many wrong
        tokens lately."""
        login_token = self.login_token
        if login_token is None:
            return None
        right = self.throttle.attempt(
            address, lambda: hmac.compare_digest(typed.encode(), login_token.encode())
        )
        return self.sessions.log_in() if right else None

    def cookie(self, session: Session) -> str:
        """The Set-Cookie value that gives the browser session's id."""
        flags = "; Secure" if self.secure else ""
        return (
            f"{self.cookie_name}={session.sid}; Path=/; HttpOnly; SameSite=Strict; "
            f"Max-Age={int(limits.console_session_seconds)}{flags}"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = _header(scope, b"host") or ""
        if self.allowed_hosts is not None and host_name(host) not in self.allowed_hosts:
            await _plain(send, 421, "this console does not answer to that host name")
            return
        session = self.sessions.of(_cookie_of(scope, self.cookie_name))
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
            refused = self._cross_site(scope, host)
            if refused:
                await _plain(send, 403, f"refused: {refused}; nothing was changed")
                return
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

    @staticmethod
    def _cross_site(scope: Scope, host: str) -> str:
        """Why a POST did not come from the console's own pages ("" when it did)."""
        if _header(scope, b"sec-fetch-site") == "cross-site":
            return "the form was posted from another site"
        origin = _header(scope, b"origin")
        if origin is not None and origin != "null":
            authority = urllib.parse.urlsplit(origin).netloc.lower()
            if authority != host.lower():
                return f"the form was posted from {origin}, not from this console"
        return ""

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
                already = any(key == b"set-cookie" for key, _ in headers)
                if fresh is not None and not already:
                    headers.append((b"set-cookie", self.cookie(fresh).encode()))
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
