"""Signing keys for tests of Kinde's webhooks: RSA keys made in the test, their public
halves as a JWKS (which the fake Kinde serves), and webhook tokens signed with them."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
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
