"""Standard Webhooks' signatures as the spec and its reference library's tests write them:
the published test vector, a receiver's checks, and what it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from earmark.notices.signing import (
    BadSecret,
    BadSignature,
    headers,
    secret_bytes,
    signature,
    verify,
)

# standard-webhooks/standard-webhooks, libraries/python/tests/test_webhooks.py,
# test_sign_function.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
MSG_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
AT = datetime.fromtimestamp(1614265330, tz=UTC)
BODY = b'{"test": 2432232314}'


def test_the_specs_test_vector_signs_as_published() -> None:
    """The reference library's test signature, byte for byte."""
    expected = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    assert expected == signature(secret_bytes(SECRET), MSG_ID, 1614265330, BODY)


def test_a_receiver_proves_a_notice_signed_with_any_current_key() -> None:
    """Headers signed with the old and the new key during a rotation verify under either,
    and give the notice's id, the same on every retry."""
    old, new = secret_bytes(SECRET), secret_bytes("whsec_" + "A" * 44)
    sent = headers([new, old], MSG_ID, AT, BODY)
    assert (MSG_ID, MSG_ID) == (verify(old, sent, BODY, AT), verify(new, sent, BODY, AT))
    assert {"webhook-id", "webhook-timestamp", "webhook-signature"} == set(sent)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"body": b'{"test": 2432232315}'}, "no webhook-signature matches"),
        ({"now": AT + timedelta(minutes=6)}, "outside the tolerance"),
        ({"now": AT - timedelta(minutes=6)}, "outside the tolerance"),
        ({"drop": "webhook-id"}, "webhook-id and webhook-timestamp are required"),
        ({"drop": "webhook-signature"}, "no webhook-signature matches"),
    ],
)
def test_a_receiver_refuses_what_the_signature_does_not_prove(
    change: dict[str, object], why: str
) -> None:
    """Another body, a stale or future timestamp, a missing id or signature: refused."""
    key = secret_bytes(SECRET)
    sent = headers([key], MSG_ID, AT, BODY)
    if "drop" in change:
        sent.pop(str(change["drop"]))
    body = change.get("body", BODY)
    now = change.get("now", AT)
    assert isinstance(body, bytes)
    assert isinstance(now, datetime)
    with pytest.raises(BadSignature, match=why):
        verify(key, sent, body, now)


@pytest.mark.parametrize(
    ("secret", "why"),
    [("whsec_not base64!", "not base64"), ("whsec_c2hvcnQ=", "is 5 bytes; at least 24")],
)
def test_a_secret_that_is_no_key_is_refused_without_repeating_it(secret: str, why: str) -> None:
    """Text that is not base64, or too short a key, is refused; the message leaves the
    secret out."""
    with pytest.raises(BadSecret, match=why) as refused:
        secret_bytes(secret)
    assert secret.removeprefix("whsec_") not in str(refused.value)


def test_an_id_with_a_full_stop_is_not_signed() -> None:
    """A full stop in the id would let one signed content pass for another."""
    with pytest.raises(ValueError, match="msg_id"):
        signature(secret_bytes(SECRET), "msg.1", 1, BODY)
