"""Kinde as the limits provider, through its management API.

Every Kinde name Earmark depends on is in this module, because the article this follows
took them from the API reference without a live check:
- an M2M token by the OAuth2 client-credentials grant: POST {domain}/oauth2/token with
  audience {domain}/api; cached until token_renew_margin_seconds before it expires;
- limits: GET {domain}/api/v1/billing/entitlements?customer_id=ID, pages followed with
  starting_after while has_more; each entitlement's feature_code and
  entitlement_limit_max (null: no maximum); scope read:billing_entitlements;
- usage: POST {domain}/api/v1/billing/meter_usage with customer_agreement_id,
  billing_feature_code, meter_value and meter_type_code "absolute"; the agreement id comes
  from GET {domain}/api/v1/billing/agreements?customer_id=ID once per account.

The client secret and tokens go into request bodies and headers only: errors name the
call and the HTTP status, never a credential, and nothing here logs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import httpx

from earmark import limits
from earmark.core.bounds import limit_problem, shown
from earmark.plans.provider import Limits, Period, ProviderUnavailable

TOKEN_PATH = "/oauth2/token"
ENTITLEMENTS_PATH = "/api/v1/billing/entitlements"
AGREEMENTS_PATH = "/api/v1/billing/agreements"
METER_USAGE_PATH = "/api/v1/billing/meter_usage"


@contextmanager
def _mapped(call: str) -> Iterator[None]:
    """httpx's failures, mapped once to ProviderUnavailable naming the call; the
    exception's own text (which may carry a URL) stays out of the message."""
    try:
        yield
    except (httpx.TimeoutException, TimeoutError):
        raise ProviderUnavailable(f"kinde {call}: timed out") from None
    except httpx.HTTPError as error:
        raise ProviderUnavailable(f"kinde {call}: {type(error).__name__}") from None


class KindeProvider:
    name = "kinde"

    def __init__(
        self,
        domain: str,
        client_id: str,
        client_secret: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        timeout_seconds: float = limits.provider_timeout_seconds,
    ) -> None:
        assert 0 < timeout_seconds <= limits.provider_timeout_seconds
        self.domain = domain.rstrip("/")
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
        self._token: str | None = None
        self._token_expires = 0.0
        self._token_lock = asyncio.Lock()
        self._agreements: dict[str, str] = {}

    async def close(self) -> None:
        await self._http.aclose()

    async def _bearer(self) -> dict[str, str]:
        async with self._token_lock:
            if self._token is None or self._monotonic() >= self._token_expires:
                body = await self._send(
                    "token",
                    "POST",
                    TOKEN_PATH,
                    data={
                        "grant_type": "client_credentials",
                        "client_id": self._client_id,
                        "client_secret": self._client_secret,
                        "audience": f"{self.domain}/api",
                    },
                )
                token, expires_in = body.get("access_token"), body.get("expires_in", 0)
                if not isinstance(token, str) or not isinstance(expires_in, int):
                    raise ProviderUnavailable("kinde token: the answer has no access_token")
                self._token = token
                margin = min(limits.token_renew_margin_seconds, expires_in / 2)
                self._token_expires = self._monotonic() + expires_in - margin
            return {"authorization": f"Bearer {self._token}"}

    async def _send(self, call: str, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        # httpx's timeout is per step (connect, each read): a body that trickles in a byte
        # at a time never trips it. The whole call, body included, has this deadline.
        with _mapped(call):
            async with asyncio.timeout(self._timeout_seconds):
                response = await self._http.request(method, path, **kwargs)
        if response.status_code in (401, 403) and call != "token":
            # A token revoked early: the next call fetches another.
            self._token = None
        if not 200 <= response.status_code < 300:
            raise ProviderUnavailable(f"kinde {call}: HTTP {response.status_code}")
        if len(response.content) > limits.provider_response_bytes_max:
            raise ProviderUnavailable(f"kinde {call}: the answer is too large")
        try:
            body = response.json()
        except ValueError:
            raise ProviderUnavailable(f"kinde {call}: the answer is not JSON") from None
        if not isinstance(body, dict):
            raise ProviderUnavailable(f"kinde {call}: the answer is not a JSON object")
        return body

    async def _pages(self, call: str, path: str, key: str, params: dict[str, str]) -> list[Any]:
        """Every item of a listing, following starting_after while has_more."""
        items: list[Any] = []
        after: str | None = None
        for _ in range(limits.provider_pages_max):
            query = dict(params, page_size=str(limits.provider_page_size))
            if after is not None:
                query["starting_after"] = after
            body = await self._send(call, "GET", path, params=query, headers=await self._bearer())
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
            if not isinstance(code, str):
                raise ProviderUnavailable("kinde entitlements: an entitlement is malformed")
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

    async def _agreement(self, account: str) -> str:
        cached = self._agreements.get(account)
        if cached is not None:
            return cached
        agreements = await self._pages(
            "agreements", AGREEMENTS_PATH, "agreements", {"customer_id": account}
        )
        # The current agreement is the one that has not expired.
        live = [a for a in agreements if isinstance(a, dict) and not a.get("expires_on")]
        if not live or not isinstance(live[0].get("id"), str):
            raise ProviderUnavailable("kinde agreements: the account has no current agreement")
        if len(self._agreements) >= limits.limit_cache_accounts_max:
            self._agreements.pop(next(iter(self._agreements)))
        self._agreements[account] = live[0]["id"]
        return self._agreements[account]

    async def read_period(self, account: str, feature: str) -> Period | None:
        # Until the agreement per feature is read: the sidecar's anchor day applies.
        return None

    def forget(self, account: str) -> None:
        self._agreements.pop(account, None)

    async def report_usage(self, account: str, feature: str, total: int, at: datetime) -> None:
        agreement = await self._agreement(account)
        await self._send(
            "meter_usage",
            "POST",
            METER_USAGE_PATH,
            headers=await self._bearer(),
            json={
                "customer_agreement_id": agreement,
                "billing_feature_code": feature,
                "meter_value": str(total),
                "meter_type_code": "absolute",
                "meter_usage_timestamp": at.isoformat(),
            },
        )
