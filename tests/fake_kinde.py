"""A fake Kinde: a real HTTP server on 127.0.0.1 that answers the endpoints Earmark calls
(token, entitlements, agreements, meter_usage) as Kinde's published document says
(/work/shared/notes/kinde-billing-api.md): errors are {"errors": [{"code", "message"}]},
a bad token and a missing scope both answer 403 (there is no 401), 429 carries
RateLimit-Reset, page_size defaults to 10 and is refused past 500. It counts requests,
can fail (503), stall, trickle, rate limit, hold one meter report (the straggler), and
books each report to the period of its agreement that contains the time it came. The
state and its knobs are in tests/fake_kinde_state.py."""

from __future__ import annotations

import contextlib
import json
import secrets
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_kinde_state import SCOPES, Agreement, KindeState
from tests.http_fake import StateServer, serving

__all__ = ["CLIENT_ID", "CLIENT_SECRET", "Agreement", "FakeKinde", "KindeState", "fake_kinde"]

CLIENT_ID = "fake-client-id"
# Long and unusual, so that a test can search logs and errors for it.
CLIENT_SECRET = "s3cr3t-" + "x" * 24 + "-do-not-log"
TOKEN_SECONDS = 3600
TRICKLE_SECONDS = 0.2
HOLD_SECONDS = 30
PAGE_SIZE_DEFAULT = 10
PAGE_SIZE_MAX = 500
METER_REQUIRED = ("customer_agreement_id", "billing_feature_code", "meter_value")
METER_TYPES = ("absolute", "delta")


def errors(code: str, message: str) -> dict[str, Any]:
    return {"errors": [{"code": code, "message": message}]}


class _Handler(BaseHTTPRequestHandler):
    server: StateServer[KindeState]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the state, not the server's log."""

    def _reply(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        trickle = self.server.state.trickle
        # A client that gave up (on a trickled or held answer) has closed its end.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            while trickle is not None and data and not trickle.wait(TRICKLE_SECONDS):
                self.wfile.write(data[:1])
                self.wfile.flush()
                data = data[1:]
            self.wfile.write(data)

    def _gate(self, name: str) -> bool:
        """Counts the call; then the failing, stall and rate-limit knobs may answer it."""
        state = self.server.state
        with state.lock:
            state.requests[name] += 1
            state.hosts.append((name, self.headers.get("host", "")))
            failing, stall = state.failing, state.stall
            limited = name != "token" and state.rate_limited > 0
            if limited:
                state.rate_limited -= 1
            reset = state.rate_limit_reset
        if stall is not None:
            stall.wait(timeout=30)
        if failing:
            self._reply(503, errors("UNAVAILABLE", "down"))
            return False
        if limited:
            headers = {} if reset is None else {"RateLimit-Reset": reset}
            self._reply(429, errors("TOO_MANY_REQUESTS", "rate limited"), headers)
            return False
        return True

    def _authorized(self, name: str) -> bool:
        """A token the fake gave out, carrying the endpoint's scope; else 403."""
        token = self.headers.get("authorization", "").removeprefix("Bearer ")
        state = self.server.state
        with state.lock:
            known = token in state.tokens
            scoped = SCOPES[name] not in state.missing_scopes
        if not known:
            self._reply(403, errors("TOKEN_INVALID", "invalid or expired token"))
        elif not scoped:
            self._reply(403, errors("FORBIDDEN", "the token lacks a scope"))
        return known and scoped

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("content-length", "0")))

    def do_POST(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if path == "/oauth2/token":
            self._token(urllib.parse.parse_qs(self._body().decode()))
        elif path == "/api/v1/billing/meter_usage":
            self._meter_usage(self._body())
        else:
            self._reply(404, errors("ROUTE_NOT_FOUND", "no such route"))

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
            self._listing("entitlements", query, self._entitlements)
        elif url.path == "/api/v1/billing/agreements":
            self._listing("agreements", query, self._agreements)
        else:
            self._reply(404, errors("ROUTE_NOT_FOUND", "no such route"))

    def _token(self, form: dict[str, list[str]]) -> None:
        if not self._gate("token"):
            return
        good = (
            form.get("grant_type") == ["client_credentials"]
            and form.get("client_id") == [CLIENT_ID]
            and form.get("client_secret") == [CLIENT_SECRET]
            and form.get("audience") == [f"http://127.0.0.1:{self.server.server_port}/api"]
        )
        if not good:
            # The token endpoint is OAuth2's, not the management API's: RFC 6749's answer.
            self._reply(401, {"error": "invalid_client"})
            return
        token = secrets.token_hex(16)
        with self.server.state.lock:
            self.server.state.tokens.add(token)
        self._reply(
            200, {"access_token": token, "expires_in": TOKEN_SECONDS, "token_type": "bearer"}
        )

    def _meter_usage(self, raw: bytes) -> None:
        if not self._gate("meter_usage") or not self._authorized("meter_usage"):
            return
        state = self.server.state
        received = state.now()
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        problem = self._meter_problem(body)
        if problem is not None:
            self._reply(400, errors(*problem))
            return
        with state.lock:
            refused = state.refuse_reports.get(body["customer_agreement_id"])
        if refused is not None:
            self._reply(400, errors(refused, "the agreement takes no usage"))
            return
        with state.lock:
            held, state.hold_report = state.hold_report, None
        if held is not None:
            # The straggler: applied only once the test releases it, and answered to a
            # client that has given up by then.
            held.wait(timeout=HOLD_SECONDS)
        with state.lock:
            state.book(body, received)
        self._reply(200, {"code": "OK", "message": "Success"})

    @staticmethod
    def _meter_problem(body: object) -> tuple[str, str] | None:
        if not isinstance(body, dict):
            return "INVALID_BODY", "the body is not a JSON object"
        for name in METER_REQUIRED:
            if not body.get(name):
                return "MISSING_FIELD", f"{name} is required"
        if body.get("meter_type_code", "absolute") not in METER_TYPES:
            return "INVALID_METER_TYPE_CODE", "meter_type_code is absolute or delta"
        return None

    def _listing(self, name: str, query: dict[str, str], items_of: Any) -> None:
        state = self.server.state
        with state.lock:
            state.queries.append((name, query))
        if not self._gate(name) or not self._authorized(name):
            return
        size = query.get("page_size", str(PAGE_SIZE_DEFAULT))
        if not size.isdigit() or not 1 <= int(size) <= PAGE_SIZE_MAX:
            self._reply(400, errors("INVALID_PAGE_SIZE", f"page_size is 1 to {PAGE_SIZE_MAX}"))
            return
        if "customer_id" not in query:
            self._reply(400, errors("CUSTOMER_ID_REQUIRED", "customer_id is required"))
            return
        with state.lock:
            items: list[dict[str, Any]] = items_of(state, query)
            size_served = min(int(size), state.page_cap)
        self._reply(200, self._page(items, name, query, size_served))

    @staticmethod
    def _entitlements(state: KindeState, query: dict[str, str]) -> list[dict[str, Any]]:
        account = query["customer_id"]
        features = dict(state.limits.get(account, {}))
        if state.unlimited:
            features.setdefault("tokens", None)
        items = [
            {"id": f"entitlement_{code}", "feature_code": code, "entitlement_limit_max": limit}
            for code, limit in sorted(features.items())
        ]
        return items + list(state.extra_entitlements.get(account, []))

    @staticmethod
    def _agreements(state: KindeState, query: dict[str, str]) -> list[dict[str, Any]]:
        feature = query.get("feature_code")
        now = state.now()
        return [
            agreement.listed(now, feature)
            for agreement in state.agreements_of(query["customer_id"])
            if feature is None or agreement.carries(feature)
        ]

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
def fake_kinde(state: KindeState | None = None) -> Iterator[FakeKinde]:
    """Serves a fake Kinde on 127.0.0.1 port 0 until the block ends, also on failure. Two
    fakes given one state are one Kinde at two domains (a custom domain and the
    <subdomain>.kinde.com one); each takes only tokens asked for with its own audience."""
    state = state or KindeState()

    def release_stalled() -> None:
        for held in (state.stall, state.trickle, state.hold_report):
            if held is not None:
                held.set()

    with serving(StateServer(_Handler, state), "fake-kinde", release_stalled) as port:
        yield FakeKinde(state=state, url=f"http://127.0.0.1:{port}")
