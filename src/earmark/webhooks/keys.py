"""Kinde's signing keys (its JWKS), fetched with PyJWT's PyJWKClient and kept here.

PyJWKClient, asked for a key id it lacks, fetches the JWKS again every time: a stream of
tokens with made-up key ids would turn into a stream of requests to Kinde. Here a key id
not in the set fetches it again at most once per refetch interval, and the set is fetched
again anyway once it is older than its maximum age (a key Kinde withdrew stops verifying).
Fetches run in a thread, with a timeout, so that the event loop never waits on Kinde.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog
from jwt import PyJWK, PyJWKClient
from jwt.exceptions import PyJWKClientError, PyJWKSetError

from earmark import limits

log = structlog.get_logger("earmark.webhooks")

JWKS_PATH = "/.well-known/jwks"


class UnknownKey(Exception):
    """The token names a key id that Kinde's key set does not hold."""


class KeysUnavailable(Exception):
    """Kinde's key set could not be fetched, and no key set is at hand."""


def jwks_url(kinde_domain: str) -> str:
    return kinde_domain.rstrip("/") + JWKS_PATH


class KindeKeys:
    def __init__(
        self,
        kinde_domain: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        timeout_seconds: float = limits.webhook_jwks_timeout_seconds,
        refetch_seconds_min: float = limits.webhook_jwks_refetch_seconds_min,
        max_age_seconds: float = limits.webhook_jwks_max_age_seconds,
    ) -> None:
        assert 0 < refetch_seconds_min <= max_age_seconds
        self.url = jwks_url(kinde_domain)
        # The set is cached here, not in the client (see the module's docstring).
        self._client = PyJWKClient(self.url, cache_jwk_set=False, timeout=timeout_seconds)
        self._monotonic = monotonic
        self._refetch = refetch_seconds_min
        self._max_age = max_age_seconds
        self._keys: dict[str, PyJWK] = {}
        # When the last fetch was tried, successful or not; None before the first.
        self._tried_at: float | None = None
        self._fetched = False
        self._lock = asyncio.Lock()

    async def key(self, kid: str) -> PyJWK:
        """The key of id kid; UnknownKey when the set (fetched again if it may) lacks it,
        KeysUnavailable when no set could be fetched."""
        if self._due(kid):
            async with self._lock:
                # Another request may have fetched while this one waited for the lock.
                if self._due(kid):
                    await self._fetch()
        found = self._keys.get(kid)
        if found is not None:
            return found
        if not self._fetched:
            raise KeysUnavailable(f"kinde jwks: could not be fetched from {self.url}")
        raise UnknownKey(f"key id {kid!r} is not in Kinde's key set")

    def _due(self, kid: str) -> bool:
        if self._tried_at is None:
            return True
        age = self._monotonic() - self._tried_at
        return age >= self._max_age or (kid not in self._keys and age >= self._refetch)

    async def _fetch(self) -> None:
        self._tried_at = self._monotonic()
        try:
            found = await asyncio.to_thread(self._client.get_jwk_set, True)
        except (PyJWKClientError, PyJWKSetError, ValueError, OSError) as error:
            # The keys fetched before stay in use until a fetch succeeds. The error names
            # the URL and the cause; the JWKS is public, so neither is a secret.
            log.warning("jwks_fetch_failed", url=self.url, error=str(error))
            return
        self._keys = {k.key_id: k for k in found.keys if k.key_id}
        self._fetched = True
        log.info("jwks_fetched", url=self.url, keys=len(self._keys))
