"""docs/notices.md as a receiver's author reads it: the example request verifies, the
by-hand verification verifies it too and refuses a changed body, and the listing's
states are the command's."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from earmark.core import notices
from earmark.core.model import Budget, OveragePolicy
from earmark.notices import signing
from earmark.notices.deliver import body_of
from earmark.ops import events

DOC = Path(__file__).resolve().parents[2] / "docs" / "notices.md"
# The spec's example secret, which the doc's example is signed with.
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def block(language: str, containing: str) -> str:
    """The doc's one fenced block of language that contains the text."""
    found = [
        text
        for text in re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)
        if containing in text
    ]
    assert 1 == len(found), f"{len(found)} ```{language} blocks with {containing!r}"
    return found[0]


def example() -> tuple[dict[str, str], bytes]:
    """The example request's headers and body."""
    head, _, body = block("http", "POST").partition("\n\n")
    headers = dict(line.split(": ", 1) for line in head.splitlines()[1:])
    return headers, body.strip().encode()


def test_the_example_request_verifies_as_sent() -> None:
    """Its signature is the example secret's over its id, timestamp and body, and its body
    is its payload as the deliverer serializes it, the threshold payload shown below it."""
    headers, body = example()
    at = datetime.fromtimestamp(int(headers["webhook-timestamp"]), tz=UTC)
    assert headers["webhook-id"] == signing.verify(signing.secret_bytes(SECRET), headers, body, at)
    assert body == body_of(body.decode())
    assert json.loads(block("json", '"budget.threshold_crossed"')) == json.loads(body)


@pytest.mark.parametrize("kind", events.KINDS)
def test_each_payload_has_the_envelope_and_its_budget(kind: str) -> None:
    """Every example payload is {type, timestamp, data} with the budget it is about (a
    price's, with the model it is about)."""
    payload = json.loads(block("json", f'"type": "{kind}"'))
    assert (["data", "timestamp", "type"], kind) == (sorted(payload), payload["type"])
    if kind in events.UNBUDGETED_KINDS:
        assert all((payload["data"]["provider"], payload["data"]["model"]))
    else:
        assert payload["data"]["budget_id"]


def test_the_verification_by_hand_verifies_the_example_and_refuses_a_changed_body() -> None:
    """The doc's verify() returns the example's id at the example's time, and refuses the
    same headers over another body."""
    headers, body = example()
    namespace: dict[str, Any] = {}
    exec(block("python", "def verify("), namespace)

    class Frozen:
        @staticmethod
        def time() -> float:
            return float(headers["webhook-timestamp"])

    namespace["time"] = Frozen
    assert headers["webhook-id"] == namespace["verify"](SECRET, headers, body)
    with pytest.raises(ValueError, match="no signature matches"):
        namespace["verify"](SECRET, headers, body.replace(b"8000", b"9000"))


def test_the_listed_states_are_the_commands() -> None:
    """Every state the doc offers to --state is one the command takes."""
    assert all(f"`{state}`" in DOC.read_text() for state in events.STATES)


def test_each_budget_payload_has_the_keys_the_sidecar_writes() -> None:
    """The doc's threshold, exceeded and refusing examples carry exactly the data keys
    core.notices writes for them."""
    at = datetime(2026, 12, 1, tzinfo=UTC)
    budget = Budget("acme", 1_000, "tokens", held=900, threshold_bps=(5_000,))
    (crossed,) = notices.budget_events(budget, (0, 0), at)
    soft = Budget("soft", 100, "tokens", used=150, overage_policy=OveragePolicy.SOFT)
    (exceeded,) = notices.budget_events(soft, (0, 0), at)
    refusing = notices.refusing_event(budget, 300, 100, at)
    for event in (crossed, exceeded, refusing):
        documented = json.loads(block("json", f'"type": "{event.kind}"'))["data"]
        assert sorted(event.payload["data"]) == sorted(documented)
