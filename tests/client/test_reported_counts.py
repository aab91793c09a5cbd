"""Token counts as providers report them are believed only as whole numbers in range: a
count that is a string, a fraction, a boolean, negative or past the bound leaves the call
in doubt (no usage), whichever provider's report it is in, rather than count as 0."""

from __future__ import annotations

from typing import Any

import pytest

from earmark import limits
from earmark.client.wire import Call
from earmark.client.wire_anthropic import messages_usage
from earmark.client.wire_bedrock import bedrock_usage
from earmark.client.wire_gemini import gemini_usage
from earmark.client.wire_openai import chat_usage, responses_usage
from earmark.client.wire_usage import reported_count
from earmark.core.prices import Usage

# Bedrock's cache count names in a Converse usage.
CACHE = ("cacheReadInputTokens", "cacheWriteInputTokens")
NOT_BELIEVED = ["5000", 7000.0, True, -1, limits.tokens_per_request_max + 1, [3], {"n": 1}]


@pytest.mark.parametrize("value", NOT_BELIEVED)
def test_a_count_out_of_shape_is_not_believed(value: Any) -> None:
    """Each provider's usage with one count out of shape is no usage."""
    response = {"usage": {"input_tokens": value, "output_tokens": 10}, "output": []}
    assert [None] * 6 == [
        reported_count(value),
        responses_usage(response, Call("m", 1)),
        chat_usage({"prompt_tokens": value, "completion_tokens": 10}, {}),
        messages_usage({"input_tokens": 10, "output_tokens": value}),
        gemini_usage({"promptTokenCount": value, "candidatesTokenCount": 10}),
        bedrock_usage({"inputTokens": 10, "outputTokens": value}, *CACHE),
    ]


def test_an_absent_count_is_0_and_a_whole_one_itself() -> None:
    """An absent or null count is 0; a whole number in range is itself."""
    assert (0, 0, 12) == (reported_count(None), reported_count(0), reported_count(12))
    assert Usage(10, 0) == chat_usage({"prompt_tokens": 10, "completion_tokens": None}, {})
    assert Usage(10, 5) == messages_usage({"input_tokens": 10, "output_tokens": 5})
