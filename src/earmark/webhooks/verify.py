"""What a Kinde webhook says, once it is proven to come from Kinde.

A webhook's body is a JWT (content type application/jwt) signed with one of the Kinde
domain's keys. It is accepted only if its header asks for RS256, its key id is in Kinde's
key set, its signature verifies, and it is recent. Kinde's documented payload carries no
`iss`, `aud`, `iat` or `exp`, and Kinde's own decoder (@kinde/webhooks) checks the
signature alone: a claim is checked where it is present, never required.

- `iss`, when present, must be the Kinde domain;
- with `exp`, not expired (give or take webhook_clock_leeway_seconds), and not expiring
  more than webhook_token_lifetime_seconds_max ahead;
- without `exp`, issued at most webhook_delivery_age_seconds_max ago (Kinde's retry
  window and a margin: Kinde sends a delivery again for 36 hours) by its `iat`, else by
  the payload's `timestamp`, else its `event_timestamp` (ISO 8601; one without an offset
  is read as UTC); a token with none of them is refused, its age unknown.

Its event id is kept until the token's validity ends, so that a repeated delivery is
answered 200 and applied once while the token would verify, and refused as expired after.

The payload is read as Kinde's published webhook events have it: `type`, `event_id`,
`timestamp` and `data`. Kinde publishes no example of a billing event's `data`; the
billing customer (the account Earmark keeps plans for) is read from `data.customer_id`,
else from `data.customer.id` (as user events carry `data.user.id`). Every event type
Kinde publishes is acknowledged; those that change a customer's limits mark the account,
and a type Kinde does not publish is acknowledged too (Kinde disables an endpoint that
keeps failing) and left to the caller to log. Refusals name the cause and never carry the
token.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt

from earmark import limits, validate
from earmark.core.bounds import shown
from earmark.errors import InvalidArgument
from earmark.webhooks.keys import KeysUnavailable, KindeKeys, UnknownKey

ALGORITHM = "RS256"

# The events that change an account's limits or agreement: each marks the account. A plan
# assigned to a customer (its first plan, or one an admin sets) changes its limits as a
# plan change does.
MARKING = frozenset(
    {
        "customer.plan_assigned",
        "customer.plan_changed",
        "customer.agreement_created",
        "customer.agreement_cancelled",
    }
)
# Kinde's other published events (the triggers docs.kinde.com lists under Settings >
# Webhooks, and @kinde/webhooks' event types): acknowledged, and nothing changes. A type
# outside both sets is acknowledged as well, since Kinde sends any non-200 again for 36
# hours and then disables the endpoint; the caller logs it, so that a new billing event
# Earmark should act on is noticed, not swallowed.
IGNORED = frozenset(
    {
        "customer.meter_usage_updated",
        "customer.invoice_overdue",
        "customer.payment_failed",
        "customer.payment_succeeded",
        "customer.plan_created",
        "passkey.added",
        "passkey.removed",
        "organization.created",
        "organization.updated",
        "organization.deleted",
        "user.created",
        "user.updated",
        "user.deleted",
        "user.authenticated",
        "user.authentication_failed",
        "role.created",
        "role.updated",
        "role.deleted",
        "permission.created",
        "permission.updated",
        "permission.deleted",
        "subscriber.created",
        "access_request.created",
    }
)


class Refusal(Exception):
    """A webhook refused: the HTTP status, the metric's result label, and why."""

    def __init__(self, status: int, result: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.result = result
        self.message = message


def malformed(message: str) -> Refusal:
    return Refusal(400, "malformed", message)


def unauthorized(message: str) -> Refusal:
    return Refusal(401, "unauthorized", message)


def expired(message: str) -> Refusal:
    return Refusal(401, "expired", message)


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    # Empty for an event that does not mark: nothing is kept of it.
    event_id: str
    account: str
    # Until when the event's id must be kept to refuse a replay.
    keep_until: datetime

    @property
    def marks(self) -> bool:
        return self.type in MARKING

    @property
    def known(self) -> bool:
        """Whether Kinde publishes the event's type."""
        return self.type in MARKING or self.type in IGNORED


class Verifier:
    def __init__(
        self,
        kinde_domain: str,
        keys: KindeKeys,
        clock: Callable[[], datetime],
    ) -> None:
        # The issuer a token may name: the Kinde domain, without a trailing slash.
        self.issuer = kinde_domain.rstrip("/")
        self._keys = keys
        self._clock = clock

    async def verify(self, body: bytes) -> Event:
        """The event body carries; Refusal when it cannot be accepted."""
        token = _token(body)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise malformed("the body is not a JWT") from None
        if header.get("alg") != ALGORITHM:
            raise unauthorized(f"the token's algorithm {shown(header.get('alg'))} is not RS256")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise unauthorized("the token names no key id (kid)")
        try:
            key = await self._keys.key(kid)
        except UnknownKey as error:
            raise unauthorized(str(error)) from None
        except KeysUnavailable as error:
            raise Refusal(503, "keys_unavailable", str(error)) from None
        claims = self._decode(token, key.key)
        keep_until = self._check_times(claims)
        return _event(claims, keep_until)

    def _decode(self, token: str, key: Any) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[ALGORITHM],
                # Times are checked against the injected clock (_check_times), and `iss`
                # where it is present (_check_issuer): PyJWT, given an issuer, requires it.
                # Kinde documents no audience for webhooks; what tells a webhook from
                # Kinde's other tokens signed with the same keys (access and ID tokens) is
                # its payload: type, event_id and data, checked in _event.
                options={
                    "require": [],
                    "verify_iss": False,
                    "verify_aud": False,
                    "verify_exp": False,
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.InvalidSignatureError:
            raise unauthorized("the token's signature does not verify") from None
        except jwt.DecodeError:
            raise malformed("the token's payload is not a JSON object") from None
        except jwt.InvalidTokenError as error:
            raise unauthorized(f"the token is invalid: {type(error).__name__}") from None
        self._check_issuer(claims)
        return claims

    def _check_issuer(self, claims: dict[str, Any]) -> None:
        """A token that names an issuer names the Kinde domain (a trailing slash aside)."""
        if "iss" not in claims:
            return
        issuer = claims["iss"]
        if not isinstance(issuer, str) or issuer.rstrip("/") != self.issuer:
            raise unauthorized(f"the token's issuer is not {self.issuer}")

    def _check_times(self, claims: dict[str, Any]) -> datetime:
        """Until when the token is valid (plus the leeway), or a Refusal."""
        now = self._clock()
        leeway = timedelta(seconds=limits.webhook_clock_leeway_seconds)
        if "nbf" in claims and _instant(claims["nbf"], "nbf") > now + leeway:
            raise unauthorized("the token is not valid yet (nbf)")
        if "exp" in claims:
            until = _instant(claims["exp"], "exp")
            if until < now - leeway:
                raise expired("the token has expired (exp)")
            if until > now + timedelta(seconds=limits.webhook_token_lifetime_seconds_max):
                raise unauthorized(
                    "the token's exp is more than "
                    f"{limits.webhook_token_lifetime_seconds_max:g}s ahead"
                )
            return until + leeway
        issued = _issued(claims)
        age_max = timedelta(seconds=limits.webhook_delivery_age_seconds_max)
        if issued < now - age_max - leeway:
            raise expired(
                f"the token has no exp and was issued more than "
                f"{limits.webhook_delivery_age_seconds_max:g}s ago, past Kinde's retries"
            )
        if issued > now + leeway:
            raise unauthorized("the token was issued in the future")
        return issued + age_max + leeway


def _token(body: bytes) -> str:
    try:
        token = body.decode("ascii").strip()
    except UnicodeDecodeError:
        raise malformed("the body is not a JWT (not ASCII)") from None
    if not token:
        raise malformed("the body is empty; Kinde sends a JWT")
    return token


def _instant(value: object, claim: str) -> datetime:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise unauthorized(f"the token's {claim} is {shown(value)}, not a time in seconds")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        raise unauthorized(f"the token's {claim} is {shown(value)}, out of range") from None


def _issued(claims: dict[str, Any]) -> datetime:
    if "iat" in claims:
        return _instant(claims["iat"], "iat")
    # Kinde's documented payload has both; timestamp is the one its docs name against
    # replays.
    name = next((n for n in ("timestamp", "event_timestamp") if n in claims), None)
    if name is None:
        raise unauthorized(
            "the token has none of exp, iat, timestamp and event_timestamp: its age is unknown"
        )
    stamp = claims[name]
    if not isinstance(stamp, str):
        raise unauthorized(f"the token's {name} is {shown(stamp)}, not ISO 8601")
    try:
        at = datetime.fromisoformat(stamp)
    except ValueError:
        raise unauthorized(f"the token's {name} is {shown(stamp)}, not ISO 8601") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _event(claims: dict[str, Any], keep_until: datetime) -> Event:
    kind = claims.get("type")
    if not isinstance(kind, str) or not kind:
        raise malformed(f"the event's type is {shown(kind)}, not a name")
    if kind not in MARKING:
        # Acknowledged, published or not: nothing of it is kept.
        return Event(type=kind, event_id="", account="", keep_until=keep_until)
    event_id = claims.get("event_id")
    if (
        not isinstance(event_id, str)
        or not event_id
        or len(event_id) > limits.webhook_event_id_length_max
    ):
        raise malformed(
            f"the event's event_id is {shown(event_id)}, not an id of 1 to "
            f"{limits.webhook_event_id_length_max} characters"
        )
    return Event(type=kind, event_id=event_id, account=_account(claims), keep_until=keep_until)


def _account(claims: dict[str, Any]) -> str:
    data = claims.get("data")
    if not isinstance(data, dict):
        raise malformed("the event has no data object")
    found = data.get("customer_id")
    where = "data.customer_id"
    if found is None and isinstance(data.get("customer"), dict):
        found, where = data["customer"].get("id"), "data.customer.id"
    if not isinstance(found, str):
        raise malformed(
            f"the event names no billing customer (data.customer_id or data.customer.id); "
            f"found {shown(found)}"
        )
    try:
        return validate.account(found)
    except InvalidArgument as error:
        problem = error.message.removeprefix("account: ")
        raise malformed(f"{where} {shown(found)}: {problem}") from None
