"""A fake Kinde: a real HTTP server on 127.0.0.1 with canned answers for the endpoints
Earmark calls (token, entitlements, agreements, meter_usage). It counts requests, checks
credentials and tokens, and can be switched to fail (503), stall, change a limit or
return a null maximum."""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.http_fake import StateServer, serving

CLIENT_ID = "fake-client-id"
# Long and unusual, so that a test can search logs and errors for it.
CLIENT_SECRET = "s3cr3t-" + "x" * 24 + "-do-not-log"
TOKEN_SECONDS = 3600
TRICKLE_SECONDS = 0.2


@dataclass
class KindeState:
    """What the fake answers. Change it between requests; the lock guards it."""

    # account -> feature -> maximum (None: no maximum); any JSON value, so that a test can
    # send a maximum Kinde should never send (a string, a float, 10^30).
    limits: dict[str, dict[str, object]] = field(default_factory=dict)
    # (agreement id, feature) -> the meter's value, as last set
    meters: dict[tuple[str, str], int] = field(default_factory=dict)
    meter_reports: list[dict[str, Any]] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    tokens: set[str] = field(default_factory=set)
    page_size: int = 2
    # True: every account's plan has one feature, "tokens", with no maximum.
    unlimited: bool = False
    failing: bool = False
    stall: threading.Event | None = None
    # Set: every answer's body trickles in, a byte every TRICKLE_SECONDS, until it is set.
    trickle: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # What /.well-known/jwks answers: the keys webhooks are signed with.
    jwks: dict[str, Any] = field(default_factory=lambda: {"keys": []})

    def agreement(self, account: str) -> str:
        return f"agreement_{account}"


class _Handler(BaseHTTPRequestHandler):
    server: StateServer[KindeState]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the state, not the server's log."""

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        trickle = self.server.state.trickle
        # A client that gave up on a trickled answer has closed its end: nothing to send.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            while trickle is not None and data and not trickle.wait(TRICKLE_SECONDS):
                self.wfile.write(data[:1])
                self.wfile.flush()
                data = data[1:]
            self.wfile.write(data)

    def _gate(self, name: str) -> bool:
        state = self.server.state
        with state.lock:
            state.requests[name] += 1
            failing, stall = state.failing, state.stall
        if stall is not None:
            stall.wait(timeout=30)
        if failing:
            self._reply(503, {"errors": [{"code": "UNAVAILABLE", "message": "down"}]})
            return False
        return True

    def _authorized(self) -> bool:
        header = self.headers.get("authorization", "")
        token = header.removeprefix("Bearer ")
        with self.server.state.lock:
            ok = token in self.server.state.tokens
        if not ok:
            self._reply(401, {"errors": [{"code": "UNAUTHORIZED", "message": "bad token"}]})
        return ok

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length", "0")))

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/oauth2/token":
            form = urllib.parse.parse_qs(self._body().decode())
            if not self._gate("token"):
                return
            good = (
                form.get("grant_type") == ["client_credentials"]
                and form.get("client_id") == [CLIENT_ID]
                and form.get("client_secret") == [CLIENT_SECRET]
                and form.get("audience") == [f"http://127.0.0.1:{self.server.server_port}/api"]
            )
            if not good:
                self._reply(401, {"error": "invalid_client"})
                return
            token = secrets.token_hex(16)
            with self.server.state.lock:
                self.server.state.tokens.add(token)
            self._reply(
                200, {"access_token": token, "expires_in": TOKEN_SECONDS, "token_type": "bearer"}
            )
            return
        if url.path == "/api/v1/billing/meter_usage":
            body = json.loads(self._body() or b"{}")
            if not self._gate("meter_usage") or not self._authorized():
                return
            state = self.server.state
            with state.lock:
                state.meter_reports.append(body)
                key = (body["customer_agreement_id"], body["billing_feature_code"])
                state.meters[key] = int(body["meter_value"])
            self._reply(200, {"code": "OK", "message": "Success"})
            return
        self._reply(404, {"errors": [{"code": "NOT_FOUND"}]})

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        state = self.server.state
        if url.path == "/.well-known/jwks":
            if self._gate("jwks"):
                with state.lock:
                    jwks = dict(state.jwks)
                self._reply(200, jwks)
            return
        if url.path == "/api/v1/billing/entitlements":
            if not self._gate("entitlements") or not self._authorized():
                return
            with state.lock:
                features = dict(state.limits.get(query["customer_id"], {}))
                if state.unlimited:
                    features.setdefault("tokens", None)
                size = state.page_size
            items = [
                {"id": f"entitlement_{code}", "feature_code": code, "entitlement_limit_max": limit}
                for code, limit in sorted(features.items())
            ]
            self._reply(200, self._page(items, "entitlements", query, size))
            return
        if url.path == "/api/v1/billing/agreements":
            if not self._gate("agreements") or not self._authorized():
                return
            account = query["customer_id"]
            items = [
                {"id": f"agreement_{account}_old", "expires_on": "2025-01-01T00:00:00+00"},
                {"id": state.agreement(account), "plan_code": "pro"},
            ]
            self._reply(200, self._page(items, "agreements", query, state.page_size))
            return
        self._reply(404, {"errors": [{"code": "NOT_FOUND"}]})

    @staticmethod
    def _page(
        items: list[dict[str, Any]], key: str, query: dict[str, str], size: int
    ) -> dict[str, Any]:
        start = 0
        if "starting_after" in query:
            ids = [item["id"] for item in items]
            start = ids.index(query["starting_after"]) + 1
        page = items[start : start + size]
        return {"code": "OK", key: page, "has_more": start + size < len(items)}


@dataclass
class FakeKinde:
    state: KindeState
    url: str


@contextmanager
def fake_kinde() -> Iterator[FakeKinde]:
    """Serves a fake Kinde on 127.0.0.1 port 0 until the block ends, also on failure."""
    state = KindeState()

    def release_stalled() -> None:
        for held in (state.stall, state.trickle):
            if held is not None:
                held.set()

    with serving(StateServer(_Handler, state), "fake-kinde", release_stalled) as port:
        yield FakeKinde(state=state, url=f"http://127.0.0.1:{port}")
