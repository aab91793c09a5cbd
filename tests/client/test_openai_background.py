"""Reading a background response's Response object (earmark.client.openai_background):
running, ended at its usage, or refused when it is not the response asked for or not in
OpenAI's published shape."""

from __future__ import annotations

from typing import Any

import pytest

from earmark.client.openai_background import Ended, InvalidResponseError, ending
from earmark.core.prices import Usage

USAGE = {
    "input_tokens": 40,
    "input_tokens_details": {"cached_tokens": 10, "cache_write_tokens": 5},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 70,
}


def response(status: str, usage: Any = None, **fields: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "usage": usage, **fields}


def test_a_running_response_has_not_ended() -> None:
    """Queued and in progress: still running."""
    assert [None, None] == [ending(response(s), "resp_1") for s in ("queued", "in_progress")]


def test_an_ended_response_ends_at_its_usage_and_tool_calls() -> None:
    """Completed, with its usage, the web searches its output items made and its tier."""
    found = response(
        "completed", USAGE, service_tier="default", output=[{"type": "web_search_call"}] * 2
    )
    expected = Ended(
        "completed",
        Usage(40, 30, 10, cache_write_input_tokens=5, service_tier="default",
              tool_calls=(("web_search", 2),)),
    )  # fmt: skip
    assert expected == ending(found, "resp_1")


def test_a_cancelled_one_without_usage_billed_nothing() -> None:
    """Cancelled before it reported usage: nothing billed; failed without usage is not."""
    ended = [ending(response(status), "resp_1") for status in ("cancelled", "failed")]
    assert [True, False] == [e is not None and e.billed_nothing for e in ended]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(response("completed", USAGE) | {"id": "resp_2"}, id="another id"),
        pytest.param(response("completed"), id="completed without usage"),
        pytest.param(response("incomplete"), id="incomplete without usage"),
        pytest.param(response("done", USAGE), id="unknown status"),
        pytest.param(response("completed", USAGE | {"input_tokens": -1}), id="negative"),
        pytest.param(response("completed", USAGE | {"output_tokens": 1.5}), id="not whole"),
        pytest.param(response("completed", USAGE | {"output_tokens": True}), id="a boolean"),
        pytest.param(response("completed", USAGE | {"input_tokens": 12}), id="cached past input"),
        pytest.param(response("completed", {"output_tokens": 3}), id="no input tokens"),
        pytest.param(response("completed", "many"), id="usage not an object"),
        pytest.param(["resp_1"], id="not an object"),
        pytest.param(response("completed", USAGE) | {"object": "list"}, id="not a response"),
    ],
)
def test_an_answer_out_of_shape_is_refused(answer: Any) -> None:
    """Anything but the response asked for, in its published shape, raises."""
    with pytest.raises(InvalidResponseError):
        ending(answer, "resp_1")
