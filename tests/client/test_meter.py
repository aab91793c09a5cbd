"""What the metered wrappers share: the maximum answer a hold covers, and how a failed
call's error is read (billed, unknown or nothing)."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx2
import openai
import pytest

from earmark.client.meter import HoldCappedError, covered_tokens, lowered, unbilled, unknown
from earmark.client.openai_streams import ERRORS as OPENAI_ERRORS
from earmark.client.types import Charged

NOW = datetime(2026, 12, 1, tzinfo=UTC)
REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def charged(remaining: int, version: int, output_rate: int = 0) -> Charged:
    return Charged(0, False, 0, remaining, NOW, price_version=version, output_per_mtok=output_rate)


def failed(cause: Exception, kind: type[openai.APIConnectionError]) -> BaseException:
    """The openai package's error for cause, raised from it as the package raises it."""
    try:
        try:
            raise cause
        except Exception as error:
            raise kind(request=REQUEST) from error
    except openai.APIConnectionError as wrapped:
        return wrapped


def test_what_a_hold_covers_after_the_prompt() -> None:
    """A tokens budget's rest buys as many tokens; a usd_micros budget's, tokens at the
    output rate the Charge answered with (rounded down); a free output rate sets no
    maximum."""
    assert 1_234 == covered_tokens(charged(1_234, 0))
    assert 12 == covered_tokens(charged(1_299, 3, 100_000_000))
    assert None is covered_tokens(charged(9, 3, 0))


def test_the_maximum_sent_is_lowered_only_when_it_asks_more() -> None:
    """A request asking no more than the hold covers is sent as it is; one asking more, or
    naming none, is lowered to the cover shared by its choices; no cover at all refuses."""
    assert None is lowered("r", 100, 500)
    assert 500 == lowered("r", None, 500)
    assert 125 == lowered("r", 4_096, 500, choices=4)
    with pytest.raises(HoldCappedError):
        lowered("r", None, 0)


def test_errors_read_as_billed_unknown_or_nothing() -> None:
    """A refused connection is nothing; a read timeout or a dropped connection after
    sending is unknown (raised bare mid-stream too); a 4xx is nothing and a 5xx unknown."""
    refused = failed(httpx2.ConnectError("refused"), openai.APIConnectionError)
    timed_out = failed(httpx2.ReadTimeout("late"), openai.APITimeoutError)
    dropped = failed(httpx2.RemoteProtocolError("cut"), openai.APIConnectionError)
    response = httpx2.Response(503, request=REQUEST)
    overloaded = openai.InternalServerError("busy", response=response, body=None)
    missing = openai.NotFoundError("no", response=httpx2.Response(404, request=REQUEST), body=None)
    assert (True, False) == (unbilled(refused, OPENAI_ERRORS), unknown(refused, OPENAI_ERRORS))
    assert [True, True, True] == [
        unknown(e, OPENAI_ERRORS) for e in (timed_out, dropped, overloaded)
    ]
    assert (True, False) == (unbilled(missing, OPENAI_ERRORS), unknown(missing, OPENAI_ERRORS))
    assert (False, True) == (
        unbilled(httpx2.ReadError("cut"), OPENAI_ERRORS),
        unknown(httpx2.ReadError("cut"), OPENAI_ERRORS),
    )
