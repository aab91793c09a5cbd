"""Signing keys for tests of Kinde's webhooks: RSA keys made in the test, their public
halves as a JWKS (which the fake Kinde serves), and webhook tokens signed with them.

What Kinde sends is taken from its documents, not from Earmark's code: the triggers
docs.kinde.com lists ("Add and manage webhooks", "Respond to customer activity using
webhooks", and the passkey events in /work/shared/notes/kinde-billing-api.md), the decoded
payload "About webhooks" shows (data, event_id, event_timestamp, source, timestamp, type;
no iss, aud, iat or exp), and the `webhook-id` header it names each delivery with, the same
on every attempt."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private: rsa.RSAPrivateKey

    def jwk(self) -> dict[str, Any]:
        """The public half, as Kinde's /.well-known/jwks lists it."""
        public: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self.private.public_key()))
        return public | {"kid": self.kid, "use": "sig", "alg": "RS256"}

    def sign(self, claims: dict[str, Any], *, kid: str | None = None) -> str:
        return jwt.encode(claims, self.private, algorithm="RS256", headers={"kid": kid or self.kid})


# Every trigger Kinde publishes, by its documents' categories.
BILLING_TRIGGERS = (
    "customer.agreement_cancelled",
    "customer.agreement_created",
    "customer.invoice_overdue",
    "customer.meter_usage_updated",
    "customer.payment_failed",
    "customer.payment_succeeded",
    "customer.plan_created",
    "customer.plan_assigned",
    "customer.plan_changed",
)
AUTHENTICATION_TRIGGERS = (
    "organization.created",
    "user.created",
    "user.authentication_failed",
    "user.authenticated",
    "subscriber.created",
    "access_request.created",
)
# Named by the shared note (checked against Kinde's documents on 2026-12-02), not in the
# lists of the docs' pages above.
PASSKEY_TRIGGERS = ("passkey.added", "passkey.removed")
USER_MANAGEMENT_TRIGGERS = (
    "role.created",
    "role.updated",
    "role.deleted",
    "permission.created",
    "permission.updated",
    "permission.deleted",
    "organization.updated",
    "organization.deleted",
    "user.updated",
    "user.deleted",
)
TRIGGERS = BILLING_TRIGGERS + AUTHENTICATION_TRIGGERS + PASSKEY_TRIGGERS + USER_MANAGEMENT_TRIGGERS


def kinde_time(at: datetime) -> str:
    """A time as Kinde's example payload writes it: UTC, milliseconds, Z."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def kinde_event(
    kind: str, account: str, *, at: datetime | None = None, event_id: str = ""
) -> dict[str, Any]:
    """A webhook's claims exactly as Kinde documents them: no iss, aud, iat or exp, its
    time in timestamp and event_timestamp. A billing event names its customer in
    data.customer_id (Kinde publishes no billing payload); the others carry the object
    they are about, as @kinde/webhooks' types have them (data.user, data.organization,
    ...), with account as its id."""
    at = at or datetime.now(UTC)
    subject = kind.split(".", 1)[0]
    data: dict[str, Any] = (
        {"customer_id": account} if subject == "customer" else {subject: {"id": account}}
    )
    return {
        "data": data,
        "event_id": event_id or f"event_{uuid.uuid4().hex}",
        "event_timestamp": kinde_time(at),
        "source": "admin",
        "timestamp": kinde_time(at),
        "type": kind,
    }


def webhook_id() -> str:
    """A new delivery's id, for its webhook-id header."""
    return f"webhook_request_{uuid.uuid4().hex}"


def new_key(kid: str) -> SigningKey:
    return SigningKey(kid, rsa.generate_private_key(public_exponent=65537, key_size=2048))


def jwks(*keys: SigningKey) -> dict[str, Any]:
    return {"keys": [key.jwk() for key in keys]}


def event(
    issuer: str, kind: str, account: str, *, event_id: str = "", **extra: object
) -> dict[str, Any]:
    """A webhook's claims as Kinde's events have them: type, event_id, timestamp, data (the
    billing customer in data.customer_id); issued now, expiring in five minutes."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "iat": now,
        "exp": now + 300,
        "type": kind,
        "event_id": event_id or f"event_{uuid.uuid4().hex}",
        "source": "admin",
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "data": {"customer_id": account},
    }
    return claims | extra
