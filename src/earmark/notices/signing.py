"""Standard Webhooks' symmetric signatures (standard-webhooks/standard-webhooks,
spec/standard-webhooks.md): what a notice's POST carries so that its receiver can tell it
came from Earmark, unchanged, and once.

The signed content is `msg_id.timestamp.body`, HMAC-SHA256 under the secret's bytes (the
secret is serialized base64, prefixed `whsec_`), sent as `webhook-signature: v1,<base64>`
beside `webhook-id` (the same on every retry of one notice, so that a receiver drops
duplicates) and `webhook-timestamp` (Unix seconds of the attempt, which a receiver checks
against its clock to refuse replays). Several signatures, space separated, let a secret be
rotated.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Mapping
from datetime import datetime

from earmark import limits

PREFIX = "whsec_"
VERSION = "v1"
# What the spec lets an id be: no full stop, which would let one signed content pass for
# another.
_ID = re.compile(r"[A-Za-z0-9_\-]+")


class BadSecret(ValueError):
    """A secret that is not `whsec_` and base64 of at least limits.notify_secret_bytes_min
    bytes; the message never repeats the secret."""


class BadSignature(ValueError):
    """A notice whose headers do not prove it: missing, stale or signed otherwise."""


def secret_bytes(text: str) -> bytes:
    """The key a serialized secret (`whsec_` and base64, as the spec writes it) stands for."""
    raw = text.strip().removeprefix(PREFIX)
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise BadSecret("the secret is not base64 after its whsec_ prefix") from None
    if len(key) < limits.notify_secret_bytes_min:
        raise BadSecret(
            f"the secret is {len(key)} bytes; at least {limits.notify_secret_bytes_min}"
        )
    return key


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,<base64 HMAC-SHA256 of msg_id.timestamp.body>`."""
    if not _ID.fullmatch(msg_id):
        raise ValueError(f"msg_id {msg_id!r} is not letters, digits, _ and -")
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, content, hashlib.sha256).digest()
    return f"{VERSION},{base64.b64encode(digest).decode()}"


def headers(keys: list[bytes], msg_id: str, at: datetime, body: bytes) -> dict[str, str]:
    """The three headers of one attempt at `at`, signed with each key (the current one, and
    during a rotation the one before)."""
    timestamp = int(at.timestamp())
    signed = " ".join(signature(key, msg_id, timestamp, body) for key in keys)
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp), "webhook-signature": signed}


def verify(key: bytes, received: Mapping[str, str], body: bytes, now: datetime) -> str:
    """The notice's id when received's headers prove body was signed with key within
    limits.notify_tolerance_seconds of now; BadSignature otherwise (what a receiver does)."""
    found = {name.lower(): value for name, value in received.items()}
    msg_id, stamp = found.get("webhook-id", ""), found.get("webhook-timestamp", "")
    if not msg_id or not stamp.isdigit():
        raise BadSignature("webhook-id and webhook-timestamp are required")
    if abs(now.timestamp() - int(stamp)) > limits.notify_tolerance_seconds:
        raise BadSignature("webhook-timestamp is outside the tolerance")
    expected = signature(key, msg_id, int(stamp), body)
    for offered in found.get("webhook-signature", "").split(" "):
        if hmac.compare_digest(offered.encode(), expected.encode()):
            return msg_id
    raise BadSignature("no webhook-signature matches")
