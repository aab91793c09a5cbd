"""Kinde as the limits provider, through its management API.

Every Kinde name Earmark depends on is in this module, as Kinde's published document
gives it (the management API's OpenAPI description, v0.19.0, and docs.kinde.com):
- an M2M token by the OAuth2 client-credentials grant: POST {token domain}/oauth2/token
  with audience {token domain}/api; with a custom domain, the token URL and audience
  still use <subdomain>.kinde.com, so the token domain may differ from the API's. Each
  token counts against the Kinde plan: it is kept until token_renew_margin_seconds before
  it expires;
- limits: GET /api/v1/billing/entitlements?customer_id=ID, pages of provider_page_size
  followed with starting_after while has_more; each entitlement's feature_code and
  entitlement_limit_max (null: no maximum); scope read:billing_entitlements;
- the agreement of an (account, feature): GET /api/v1/billing/agreements?customer_id=ID
  &feature_code=F, the live one (not expired, its current period containing now, or
  ended: Kinde's document says current_period_end "may be in the past if cycle roll or
  provider sync has lagged"), with its billing period current_period_start/
  current_period_end; scope read:billing_agreements;
- usage: POST /api/v1/billing/meter_usage with customer_agreement_id,
  billing_feature_code, meter_value (a string), meter_usage_timestamp (UTC, whole
  seconds, Z) and meter_type_code "absolute"; scope create:meter_usage;
- errors: 400, 403 and 429 with a body {"errors": [{"code", "message"}]}; no 401: a bad
  token and a missing scope both answer 403; 429 carries RateLimit-Reset.

The client secret and tokens go into request bodies and headers only: errors and logs
name the call, the HTTP status and Kinde's error code, never a credential.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import structlog

from earmark import limits
from earmark.core.bounds import limit_problem, shown
from earmark.metrics import Metrics
from earmark.plans.provider import Limits, Period, ProviderRejected, ProviderUnavailable

TOKEN_PATH = "/oauth2/token"
ENTITLEMENTS_PATH = "/api/v1/billing/entitlements"
AGREEMENTS_PATH = "/api/v1/billing/agreements"
METER_USAGE_PATH = "/api/v1/billing/meter_usage"
# The scope each call needs, named in the error a missing one causes.
SCOPES = {
    "entitlements": "read:billing_entitlements",
    "agreements": "read:billing_agreements",
    "meter_usage": "create:meter_usage",
}

log = structlog.get_logger("earmark.kinde")


def parse_time(value: object) -> datetime | None:
    """An ISO 8601 time from Kinde in UTC, whatever its offset; None when it is not one.
    A time without an offset is taken as UTC."""
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def kinde_time(at: datetime) -> str:
    """A time as sent to Kinde: UTC, whole seconds, Z (the document's only example has
    whole seconds)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reset_seconds(header: str | None) -> int:
    """A 429's RateLimit-Reset, whole seconds to wait, bounded; a missing or garbled one
    is the default. Digits are checked as ASCII and counted before int() so that neither
    a non-ASCII digit nor a huge number can raise."""
    text = (header or "").strip()
    if not (text.isascii() and text.isdigit()):
        return limits.provider_rate_limit_reset_seconds_default
    if len(text) > len(str(limits.provider_rate_limit_reset_seconds_max)):
        return limits.provider_rate_limit_reset_seconds_max
    return min(int(text), limits.provider_rate_limit_reset_seconds_max)


def _error_code(response: httpx.Response) -> str | None:
    """The code of the first error in Kinde's errors body, cut to a bounded length (it
    came from outside); None when the body has none."""
    try:
        body = response.json()
    except ValueError:
        return None
    found = body.get("errors") if isinstance(body, dict) else None
    first = found[0] if isinstance(found, list) and found else None
    code = first.get("code") if isinstance(first, dict) else None
    if not isinstance(code, str) or not code:
        return None
    return code[: limits.provider_value_shown_chars_max]


@dataclass(frozen=True, slots=True)
class _Agreement:
    id: str
    period: Period | None
    # Read again from then on: the period's end, or a bound when there is no period.
    until: datetime


def _live(items: list[Any], feature: str, now: datetime) -> _Agreement | None:
    """The agreement of feature that holds now: not expired, carrying feature (when it
    lists its entitlements), its current period containing now or already ended when it
    gives one; of several, one whose period contains now (or that gives none) before one
    whose period has ended, then the one whose period started last.

    An ended period is Kinde's roll or sync lagging, as its document allows: the agreement
    is still the customer's, so it is kept (dropping it made a new account fail closed and
    its meter reports back off), the gate rolls its period forward as it rolls any stale
    one (PlanGate.cycle_of), and it is read again after agreement_lagging_recheck_seconds.
    A period that has not begun is another agreement's future (a scheduled change): not
    this one's now."""
    found: list[tuple[tuple[bool, datetime], _Agreement]] = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        carried = item.get("entitlements")
        if isinstance(carried, list) and carried:
            codes = {e.get("feature_code") for e in carried if isinstance(e, dict)}
            if feature not in codes:
                continue
        # The document does not say whether a future expires_on is a scheduled
        # cancellation: the agreement is live until then, and read again at that moment.
        expires = None
        if item.get("expires_on") not in (None, ""):
            expires = parse_time(item["expires_on"])
            if expires is None or expires <= now:
                continue
        start = parse_time(item.get("current_period_start"))
        end = parse_time(item.get("current_period_end"))
        period = None
        if start is not None and end is not None and start < end:
            if now < start:
                continue
            period = Period(start, end)
        until = now + timedelta(seconds=limits.agreement_cache_seconds_max)
        lagging = period is not None and period.end <= now
        if lagging:
            until = now + timedelta(seconds=limits.agreement_lagging_recheck_seconds)
        elif period is not None:
            until = period.end
        if expires is not None:
            until = min(until, expires)
        started = period.start if period is not None else datetime.min.replace(tzinfo=UTC)
        found.append(((not lagging, started), _Agreement(item["id"], period, until)))
    if not found:
        return None
    return max(found, key=lambda pair: pair[0])[1]


class _Forbidden(ProviderUnavailable):
    """A 403 with a fresh token: the token lacks the call's scope."""


class KindeProvider:
    name = "kinde"

    def __init__(
        self,
        domain: str,
        client_id: str,
        client_secret: str,
        *,
        token_domain: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        timeout_seconds: float = limits.provider_timeout_seconds,
        metrics: Metrics | None = None,
    ) -> None:
        assert 0 < timeout_seconds <= limits.provider_timeout_seconds
        self.domain = domain.rstrip("/")
        self.token_domain = (token_domain or domain).rstrip("/")
        self._timeout_seconds = timeout_seconds
        self._client_id = client_id
        self._client_secret = client_secret
        self._http = httpx.AsyncClient(
            base_url=self.domain,
            timeout=timeout_seconds,
            transport=transport,
            follow_redirects=False,
        )
        self._monotonic = monotonic
        self._clock = clock
        self._metrics = metrics
        self._token: str | None = None
        self._token_fetched = 0.0
        self._token_expires = 0.0
        self._token_lock = asyncio.Lock()
        # account -> feature -> its agreement; _agreement_count keys in all, bounded.
        self._agreements: dict[str, dict[str, _Agreement]] = {}
        self._agreement_count = 0
        # Until then every call is refused without sending: Kinde's RateLimit-Reset.
        self._limited_until: datetime | None = None
        # Calls whose missing scope is logged already: once, until the call succeeds.
        self._forbidden_logged: set[str] = set()

    async def close(self) -> None:
        await self._http.aclose()

    def _count(self, call: str, status: str) -> None:
        if self._metrics is not None:
            self._metrics.provider_answers.labels(call, status).inc()

    async def _request(self, call: str, method: str, url: str, **kwargs: Any) -> httpx.Response:
        """One HTTP exchange; transport failures are ProviderUnavailable naming the call,
        without the exception's own text (which may carry a URL)."""
        if self._limited_until is not None and self._clock() < self._limited_until:
            raise ProviderUnavailable(
                f"kinde {call}: rate limited until {kinde_time(self._limited_until)}",
                retry_at=self._limited_until,
            )
        # A meter report that may have left is in doubt: Kinde may still apply it.
        sent = call == "meter_usage"
        try:
            # httpx's timeout is per step (connect, each read): a body that trickles in a
            # byte at a time never trips it. The whole call, body included, has this one.
            async with asyncio.timeout(self._timeout_seconds):
                response = await self._http.request(method, url, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            raise ProviderUnavailable(f"kinde {call}: {type(error).__name__}") from None
        except (httpx.TimeoutException, TimeoutError):
            raise ProviderUnavailable(f"kinde {call}: timed out", outcome_unknown=sent) from None
        except httpx.HTTPError as error:
            raise ProviderUnavailable(
                f"kinde {call}: {type(error).__name__}", outcome_unknown=sent
            ) from None
        return response

    def _answer(self, call: str, response: httpx.Response) -> dict[str, Any]:
        """A success's JSON object, or the documented error it is."""
        status = response.status_code
        if 200 <= status < 300:
            self._forbidden_logged.discard(call)
            return self._json(call, response)
        if status == 429:
            self._count(call, "rate_limited")
            reset = _reset_seconds(response.headers.get("ratelimit-reset"))
            retry_at = self._clock() + timedelta(seconds=reset)
            self._limited_until = max(retry_at, self._limited_until or retry_at)
            raise ProviderUnavailable(
                f"kinde {call}: HTTP 429, rate limited until {kinde_time(retry_at)}",
                retry_at=retry_at,
            )
        if status == 400:
            # Kinde documents an errors body on 400, 403 and 429 alone.
            self._count(call, "bad_request")
            code = _error_code(response)
            said = "" if code is None else f" {shown(code)}"
            if call == "meter_usage":
                raise ProviderRejected(f"kinde {call}: HTTP 400{said}", code=code or "")
            raise ProviderUnavailable(f"kinde {call}: HTTP 400{said}")
        self._count(call, "server_error" if status >= 500 else "other")
        raise ProviderUnavailable(f"kinde {call}: HTTP {status}")

    @staticmethod
    def _json(call: str, response: httpx.Response) -> dict[str, Any]:
        if len(response.content) > limits.provider_response_bytes_max:
            raise ProviderUnavailable(f"kinde {call}: the answer is too large")
        try:
            body = response.json()
        except ValueError:
            raise ProviderUnavailable(f"kinde {call}: the answer is not JSON") from None
        if not isinstance(body, dict):
            raise ProviderUnavailable(f"kinde {call}: the answer is not a JSON object")
        return body

    async def _bearer(self) -> tuple[str, float]:
        """The token and when (monotonic) it was fetched."""
        async with self._token_lock:
            if self._token is None or self._monotonic() >= self._token_expires:
                response = await self._request(
                    "token",
                    "POST",
                    f"{self.token_domain}{TOKEN_PATH}",
                    data={
                        "grant_type": "client_credentials",
                        "client_id": self._client_id,
                        "client_secret": self._client_secret,
                        "audience": f"{self.token_domain}/api",
                    },
                )
                body = self._answer("token", response)
                token, expires_in = body.get("access_token"), body.get("expires_in", 0)
                if not isinstance(token, str) or not isinstance(expires_in, int):
                    raise ProviderUnavailable("kinde token: the answer has no access_token")
                self._token = token
                self._token_fetched = self._monotonic()
                margin = min(limits.token_renew_margin_seconds, expires_in / 2)
                self._token_expires = self._token_fetched + expires_in - margin
            return self._token, self._token_fetched

    async def _call(self, call: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        """An API call with the token. A 403 may be a token revoked or expired early (one
        new token, at most once per provider_token_refetch_seconds_min, since each counts
        against the Kinde plan) or a missing scope (what a 403 with a younger token is)."""
        for attempt in range(2):
            token, fetched = await self._bearer()
            headers = {"authorization": f"Bearer {token}"}
            response = await self._request(call, method, path, headers=headers, **kwargs)
            if response.status_code != 403:
                return self._answer(call, response)
            self._count(call, "forbidden")
            young = self._monotonic() - fetched < limits.provider_token_refetch_seconds_min
            if young or attempt == 1:
                raise self._forbidden(call, response)
            async with self._token_lock:
                if self._token == token:
                    self._token = None
        raise AssertionError("unreachable: the second attempt's token is young")

    def _forbidden(self, call: str, response: httpx.Response) -> _Forbidden:
        scope = SCOPES[call]
        code = _error_code(response)
        if call not in self._forbidden_logged:
            self._forbidden_logged.add(call)
            log.warning("kinde_forbidden", call=call, scope=scope, code=code)
        said = "" if code is None else f" {shown(code)}"
        return _Forbidden(
            f"kinde {call}: HTTP 403{said}: a scope is missing; the M2M application needs {scope}"
        )

    async def _pages(self, call: str, path: str, key: str, params: dict[str, str]) -> list[Any]:
        """Every item of a listing, following starting_after while has_more."""
        items: list[Any] = []
        after: str | None = None
        for _ in range(limits.provider_pages_max):
            query = dict(params, page_size=str(limits.provider_page_size))
            if after is not None:
                query["starting_after"] = after
            body = await self._call(call, "GET", path, params=query)
            page = body.get(key) or []
            if not isinstance(page, list):
                raise ProviderUnavailable(f"kinde {call}: {key} is not a list")
            items += page
            if not body.get("has_more") or not page:
                return items
            last = page[-1]
            after = last.get("id") if isinstance(last, dict) else None
            if not isinstance(after, str):
                raise ProviderUnavailable(f"kinde {call}: a page's last item has no id")
        raise ProviderUnavailable(f"kinde {call}: more than {limits.provider_pages_max} pages")

    async def read_limits(self, account: str) -> Limits:
        entitlements = await self._pages(
            "entitlements", ENTITLEMENTS_PATH, "entitlements", {"customer_id": account}
        )
        found: dict[str, int | None] = {}
        for item in entitlements:
            code = item.get("feature_code") if isinstance(item, dict) else None
            if not isinstance(code, str) or not code:
                # Not a feature Earmark can hold budget for (a fixed charge, say): the
                # account's other features are still good.
                entitlement = item.get("id") if isinstance(item, dict) else None
                log.warning(
                    "kinde_entitlement_skipped",
                    account=account,
                    entitlement=shown(entitlement),
                    why="no feature_code",
                )
                continue
            maximum = item.get("entitlement_limit_max")
            # The bound PutBudget keeps: a maximum past it (2^63 would not even fit the
            # row) or not a whole number makes the whole read fail, so that the cache keeps
            # the last good read and then fails closed, and the value is in the message.
            problem = None if maximum is None else limit_problem(maximum)
            if problem is not None:
                raise ProviderUnavailable(
                    f"kinde entitlements: feature {shown(code)}: entitlement_limit_max {problem}"
                )
            found[code] = maximum
        return found

    async def _agreement(self, account: str, feature: str) -> _Agreement:
        now = self._clock()
        cached = self._agreements.get(account, {}).get(feature)
        if cached is not None and now < cached.until:
            return cached
        items = await self._pages(
            "agreements",
            AGREEMENTS_PATH,
            "agreements",
            {"customer_id": account, "feature_code": feature},
        )
        chosen = _live(items, feature, now)
        if chosen is None:
            raise ProviderUnavailable(
                f"kinde agreements: no live agreement carries feature {shown(feature)}"
            )
        self._keep(account, feature, chosen)
        return chosen

    def _keep(self, account: str, feature: str, agreement: _Agreement) -> None:
        if feature not in self._agreements.get(account, {}):
            # Full: the account cached first goes, all its features at once.
            while self._agreement_count >= limits.agreement_cache_keys_max:
                oldest = next(iter(self._agreements))
                self._agreement_count -= len(self._agreements.pop(oldest))
            self._agreement_count += 1
        self._agreements.setdefault(account, {})[feature] = agreement

    def _drop(self, account: str, feature: str) -> None:
        features = self._agreements.get(account, {})
        if features.pop(feature, None) is not None:
            self._agreement_count -= 1
            if not features:
                del self._agreements[account]

    async def read_period(self, account: str, feature: str) -> Period | None:
        return (await self._agreement(account, feature)).period

    def forget(self, account: str) -> None:
        self._agreement_count -= len(self._agreements.pop(account, {}))

    async def report_usage(self, account: str, feature: str, total: int, at: datetime) -> None:
        agreement = await self._agreement(account, feature)
        try:
            await self._call(
                "meter_usage",
                "POST",
                METER_USAGE_PATH,
                json={
                    "customer_agreement_id": agreement.id,
                    "billing_feature_code": feature,
                    "meter_value": str(total),
                    "meter_type_code": "absolute",
                    "meter_usage_timestamp": kinde_time(at),
                },
            )
        except (ProviderRejected, _Forbidden):
            # Kinde may have refused the agreement itself (cancelled, or not this
            # feature's): the next report reads it again.
            self._drop(account, feature)
            raise
