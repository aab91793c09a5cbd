"""The wire metering's own rules, without a server: which requests bill, what a call is
held and capped for, how a stream's events are split and its usage read, and whether a
failed exchange left the machine."""

from __future__ import annotations

import json

import httpx2
import openai

from earmark.client import wire_anthropic, wire_openai
from earmark.client.meter import Meter, never_sent
from earmark.client.wire import FREE, Call, Events, cap_to_send, shape_of
from earmark.core.prices import Shape, Usage

REQUEST = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")


def failed(cause: Exception, kind: type[openai.APIConnectionError]) -> BaseException:
    """The openai package's error for cause, raised from it as the package raises it."""
    try:
        try:
            raise cause
        except Exception as error:
            raise kind(request=REQUEST) from error
    except openai.APIConnectionError as wrapped:
        return wrapped


def test_a_refused_connection_never_left_and_a_timeout_did() -> None:
    """A refused connection is nothing sent; a read timeout or a dropped connection after
    sending may have run."""
    refused = failed(httpx2.ConnectError("refused"), openai.APIConnectionError)
    timed_out = failed(httpx2.ReadTimeout("late"), openai.APITimeoutError)
    dropped = failed(httpx2.RemoteProtocolError("cut"), openai.APIConnectionError)
    assert [True, False, False] == [never_sent(e) for e in (refused, timed_out, dropped)]


def test_which_posts_bill_pass_or_are_refused() -> None:
    """Chat, Responses and embeddings are metered; counting tokens, cancelling, files and
    moderations pass; images and batches, which bill and are not priced, are refused."""
    routes = {
        path: wire_openai.routing(path)
        for path in (
            "/v1/chat/completions", "/v1/responses", "/v1/embeddings",
            "/v1/responses/input_tokens", "/v1/responses/resp_1/cancel", "/v1/files",
            "/v1/moderations", "/v1/images/generations", "/v1/batches",
        )
    }  # fmt: skip
    kinds = {path: type(found).__name__ if found not in (FREE, None) else found
             for path, found in routes.items()}  # fmt: skip
    assert {
        "/v1/chat/completions": "Chat", "/v1/responses": "Responses",
        "/v1/embeddings": "Embeddings", "/v1/responses/input_tokens": FREE,
        "/v1/responses/resp_1/cancel": FREE, "/v1/files": FREE, "/v1/moderations": FREE,
        "/v1/images/generations": None, "/v1/batches": None,
    } == kinds  # fmt: skip
    assert [FREE, None, "Messages"] == [
        wire_anthropic.routing("/v1/messages/count_tokens"),
        wire_anthropic.routing("/v1/messages/batches"),
        type(wire_anthropic.routing("/v1/messages")).__name__,
    ]


def test_a_call_is_held_for_its_own_cap_or_the_ceiling() -> None:
    """The caller's maximum times its choices is the shape's output; without one the
    shape asks for the model's ceiling; the meter's output_tokens_max lowers both."""
    asked = Call("m", 100, asked=500, choices=2)
    open_call = Call("m", 100)
    lowered = Meter("b", output_tokens_max=300)
    assert (1_000, False) == _output(shape_of("p", asked, Meter("b"))[0])
    assert (0, True) == _output(shape_of("p", open_call, Meter("b"))[0])
    assert [(600, False), (300, False)] == [
        _output(shape_of("p", call, lowered)[0]) for call in (asked, open_call)
    ]
    assert Usage(100, 0, provider="p", model="m") == shape_of("p", asked, Meter("b"))[1]


def _output(shape: Shape) -> tuple[int, bool]:
    return shape.max_output_tokens, shape.output_ceiling


def test_the_cap_sent_is_what_the_hold_covers() -> None:
    """Without a caller's maximum the cap is what the sidecar told, shared by the choices;
    a caller's maximum is sent as it is unless degrade lowered it."""
    assert [2_048, None, 100, None] == [
        cap_to_send(Call("m", 1, choices=2), 4_096, False),
        cap_to_send(Call("m", 1, asked=500), 500, False),
        cap_to_send(Call("m", 1, asked=500), 100, True),
        cap_to_send(Call("m", 1, has_output=False), 0, False),
    ]


def sse(*events: dict[str, object]) -> bytes:
    return b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in events) + b"data: [DONE]\n\n"


def test_a_chat_stream_is_split_across_chunks_and_its_hidden_usage_dropped() -> None:
    """Events split at any byte are passed on whole; the usage chunk Earmark asked for is
    read and not shown; the usage read is the provider's, with its cache and tier."""
    usage = {"prompt_tokens": 10, "completion_tokens": 290,
             "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 2}}  # fmt: skip
    raw = sse(
        {"choices": [{"delta": {"content": "hi"}}], "service_tier": "priority"},
        {"choices": [], "usage": usage, "service_tier": "priority"},
    )
    tally = wire_openai.Chat().tally(Call("gpt", 10, stream=True), True)
    events = Events(tally)
    passed = b"".join(events.feed(raw[i : i + 7]) for i in range(0, len(raw), 7)) + events.rest()
    assert sse({"choices": [{"delta": {"content": "hi"}}], "service_tier": "priority"}) == passed
    assert Usage(10, 290, cached_input_tokens=4, cache_write_input_tokens=2,
                 service_tier="priority") == tally.usage()  # fmt: skip


def test_a_responses_answer_bills_its_tool_calls() -> None:
    """A Response's usage, with one web search call and one file search in its output."""
    answer = {
        "usage": {"input_tokens": 50, "output_tokens": 20,
                  "input_tokens_details": {"cached_tokens": 10}},
        "output": [{"type": "web_search_call"}, {"type": "file_search_call"},
                   {"type": "message"}],
    }  # fmt: skip
    found = wire_openai.Responses().usage(answer, Call("gpt", 1))
    assert Usage(50, 20, cached_input_tokens=10,
                 tool_calls=(("file_search", 1), ("web_search", 1))) == found  # fmt: skip


def test_an_anthropic_stream_merges_its_two_usages() -> None:
    """message_start's input counts and message_delta's cumulative ones make the bill:
    every input token counted, the 1-hour writes apart, the searches by kind."""
    start = {"type": "message_start", "message": {"usage": {
        "input_tokens": 100, "cache_creation_input_tokens": 40, "cache_read_input_tokens": 10,
        "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 30},
        "output_tokens": 1}}}  # fmt: skip
    delta = {"type": "message_delta", "usage": {"output_tokens": 80, "input_tokens": 600,
             "server_tool_use": {"web_search_requests": 2}}}  # fmt: skip
    tally = wire_anthropic.Messages().tally(Call("claude", 1), False)
    assert None is (tally.keep("message_start", start) and tally.usage())
    tally.keep("message_delta", delta)
    assert Usage(650, 80, cached_input_tokens=10, cache_write_input_tokens=40,
                 cache_write_long_input_tokens=30,
                 tool_calls=(("web_search", 2),)) == tally.usage()  # fmt: skip


def test_every_maximum_a_chat_request_set_is_lowered() -> None:
    """A cap lowers both of a request's maximums when it set both, sets
    max_completion_tokens when it set none, and asks a stream for its usage (hidden)."""
    chat = wire_openai.Chat()
    both = {"max_tokens": 900, "max_completion_tokens": 900, "stream": True}
    sent, hidden = chat.sent(both, Call("m", 1, asked=900, stream=True), 100)
    none, _ = chat.sent({}, Call("m", 1), 4_096)
    assert ({"max_tokens": 100, "max_completion_tokens": 100, "stream": True,
             "stream_options": {"include_usage": True}}, True) == (sent, hidden)  # fmt: skip
    assert {"max_completion_tokens": 4_096} == none
