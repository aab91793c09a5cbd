"""The fake providers speak each provider's published wire format: the real, unmetered
openai and anthropic clients parse every billable surface into their typed objects, and
each fake's bill is what the client reports."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import anthropic
import httpx2
import openai
import pydantic
import pytest
from anthropic.types import Message
from openai.lib.streaming.chat import FunctionToolCallArgumentsDeltaEvent
from openai.types import CompletionUsage
from openai.types.responses import Response

from tests.fake_anthropic import Bill, FakeAnthropic, Rates, fake_anthropic
from tests.fake_openai import Billed, FakeOpenAI, fake_openai
from tests.fake_openai_state import CHAT, EMBEDDINGS, RESPONSES

T = TypeVar("T")
CLAUDE = "claude-test"
RATES = Rates(input=3_000_000, output=15_000_000, cache_read=300_000, cache_write=3_750_000)


class Answer(pydantic.BaseModel):
    answer: str


class Weather(pydantic.BaseModel):
    city: str


def present(value: T | None) -> T:
    """value, which the provider must have sent."""
    if value is None:
        raise AssertionError("missing from the answer")
    return value


@contextmanager
def openai_fake() -> Iterator[tuple[FakeOpenAI, openai.OpenAI]]:
    with fake_openai() as fake, openai.OpenAI(api_key="k", base_url=fake.url) as client:
        yield fake, client


@contextmanager
def anthropic_fake() -> Iterator[tuple[FakeAnthropic, anthropic.Anthropic]]:
    with (
        fake_anthropic(RATES) as fake,
        anthropic.Anthropic(api_key="k", base_url=fake.url) as client,
    ):
        yield fake, client


def chat(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


def chat_bill(usage: CompletionUsage, model: str, tier: str | None) -> Billed:
    """The bill of a chat completion, from the usage the client parsed."""
    given = present(usage.prompt_tokens_details)
    made = present(usage.completion_tokens_details)
    return Billed(
        usage.prompt_tokens,
        usage.completion_tokens,
        present(given.cached_tokens),
        CHAT,
        model,
        present(tier),
        present(made.reasoning_tokens),
        given.cache_write_tokens or 0,
    )


def response_bill(response: Response) -> Billed:
    """The bill of a Responses API response, from the usage the client parsed."""
    usage = present(response.usage)
    details = usage.input_tokens_details
    return Billed(
        usage.input_tokens,
        usage.output_tokens,
        details.cached_tokens,
        RESPONSES,
        response.model,
        present(response.service_tier),
        usage.output_tokens_details.reasoning_tokens,
        details.cache_write_tokens,
    )


def message_bill(message: Message) -> Bill:
    """The bill of an Anthropic message, from the usage the client parsed."""
    usage = message.usage
    written = present(usage.cache_creation)
    tools = usage.server_tool_use
    return Bill(
        usage.input_tokens,
        usage.output_tokens,
        present(usage.cache_read_input_tokens),
        written.ephemeral_5m_input_tokens + written.ephemeral_1h_input_tokens,
        written.ephemeral_1h_input_tokens,
        tools.web_search_requests if tools else 0,
        message.model,
    )


def named_events(lines: Iterable[str]) -> list[tuple[str, str]]:
    """Each server-sent event's `event:` line and its JSON's type."""
    named, name = [], ""
    for line in lines:
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            named.append((name, json.loads(line.removeprefix("data: "))["type"]))
    return named


def test_a_chat_completion_bills_its_usage_with_cache_and_tier() -> None:
    """A chat completion's usage (cached and cache-written prompt tokens) and its served
    tier parse as the client's types and are what the fake billed."""
    with openai_fake() as (fake, client):
        fake.state.cached_tokens, fake.state.cache_write_tokens = 30, 20
        reply = client.chat.completions.create(
            model="gpt-4o", messages=chat("y" * 400), service_tier="fast"
        )
    billed = chat_bill(present(reply.usage), reply.model, reply.service_tier)
    assert Billed(101, 300, 30, CHAT, "gpt-4o", "priority", 0, 20) == billed
    assert ([billed], "stop", "tok " * 300) == (
        fake.state.billed,
        reply.choices[0].finish_reason,
        reply.choices[0].message.content,
    )


def test_a_chat_stream_of_several_tokens_a_chunk_ends_with_its_usage() -> None:
    """A stream of 290 tokens, four a chunk, whose characters a token are not four, ends
    with finish_reason stop and a usage chunk that the fake billed; counting a chunk's
    characters over four would have counted twice the tokens."""
    with openai_fake() as (fake, client):
        fake.state.completion_tokens = 290
        fake.state.tokens_per_chunk, fake.state.token_texts = 4, (" understanding", ",")
        stream = client.chat.completions.create(
            model="gpt-4o",
            messages=chat("hello"),
            max_tokens=300,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    *answer, last = chunks
    texts = [chunk.choices[0].delta.content or "" for chunk in answer]
    usage = present(last.usage)
    assert (73 + 1, "stop", []) == (len(answer), answer[-1].choices[0].finish_reason, last.choices)
    assert ([chat_bill(usage, "gpt-4o", last.service_tier)], 290) == (
        fake.state.billed,
        usage.completion_tokens,
    )
    assert 580 == sum(math.ceil(len(text) / 4) for text in texts)


def test_a_chat_stream_sends_its_usage_only_when_asked() -> None:
    """Without stream_options.include_usage no chunk carries usage and every chunk has a
    choice; the answer capped at max_completion_tokens finishes with "length"."""
    with openai_fake() as (fake, client):
        stream = client.chat.completions.create(
            model="gpt-4o", messages=chat("hello"), max_completion_tokens=10, stream=True
        )
        chunks = list(stream)
    assert ([None] * 11, [1] * 11) == (
        [chunk.usage for chunk in chunks],
        [len(chunk.choices) for chunk in chunks],
    )
    assert ("length", [Billed(2, 10, 0)]) == (
        chunks[-1].choices[0].finish_reason,
        fake.state.billed,
    )


def test_a_reasoning_stream_bills_hidden_tokens_in_its_completion() -> None:
    """A "think" answer's reasoning tokens are in completion_tokens and its details, not
    in the text streamed, and the fake billed them."""
    with openai_fake() as (fake, client):
        fake.state.completion_tokens = 20
        stream = client.chat.completions.create(
            model="o4-mini",
            messages=chat("think"),
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    usage = present(chunks[-1].usage)
    assert ("tok " * 20, 64 + 20) == (text, usage.completion_tokens)
    assert [Billed(2, 84, 0, CHAT, "o4-mini", "default", 64)] == fake.state.billed
    assert [chat_bill(usage, "o4-mini", chunks[-1].service_tier)] == fake.state.billed


def test_a_streamed_tool_call_through_the_stream_helper_bills_its_arguments() -> None:
    """chat.completions.stream with a strict function tool reads a streamed tool call,
    parses its arguments, and its usage counts the arguments' tokens as billed."""
    with (
        openai_fake() as (fake, client),
        client.chat.completions.stream(
            model="gpt-4o",
            messages=chat("tool"),
            tools=[openai.pydantic_function_tool(Weather)],
            stream_options={"include_usage": True},
        ) as stream,
    ):
        events = list(stream)
        final = stream.get_final_completion()
    (call,) = present(final.choices[0].message.tool_calls)
    usage = present(final.usage)
    arguments = [e for e in events if isinstance(e, FunctionToolCallArgumentsDeltaEvent)]
    deltas = [event.arguments_delta for event in arguments]
    assert ("tool_calls", Weather(city="fake")) == (
        final.choices[0].finish_reason,
        call.function.parsed_arguments,
    )
    # The first delta names the call with empty arguments; each other is one token.
    assert (["", '{"c', "ity", '": ', '"fa', 'ke"', "}"], 6) == (deltas, usage.completion_tokens)
    assert [chat_bill(usage, "gpt-4o", "default")] == fake.state.billed


def test_responses_create_is_completed_or_incomplete_at_its_limit() -> None:
    """responses.create answers a Response whose usage the fake billed: "incomplete" for
    max_output_tokens when capped there (at the flex tier asked), else "completed"."""
    with openai_fake() as (fake, client):
        capped = client.responses.create(
            model="gpt-4o", input="x" * 40, max_output_tokens=10, service_tier="flex"
        )
        whole = client.responses.create(model="gpt-4o", input="hello")
    reason = present(capped.incomplete_details).reason
    assert (("incomplete", "max_output_tokens"), "completed") == (
        (capped.status, reason),
        whole.status,
    )
    assert [Billed(11, 10, 0, RESPONSES, "gpt-4o", "flex"), Billed(2, 300, 0, RESPONSES)] == [
        response_bill(capped),
        response_bill(whole),
    ]
    assert [response_bill(capped), response_bill(whole)] == fake.state.billed


def test_responses_stream_sends_the_event_sequence_with_usage_last() -> None:
    """responses.stream reads the published event sequence, numbered from 0, and its final
    response's usage (reasoning included) is what the fake billed."""
    with openai_fake() as (fake, client):
        fake.state.completion_tokens = 5
        with client.responses.stream(model="o4-mini", input="think") as stream:
            events = list(stream)
            final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 5,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ] == kinds
    assert list(range(len(events))) == [event.sequence_number for event in events]
    assert ([Billed(2, 69, 0, RESPONSES, "o4-mini", "default", 64)], "tok " * 5) == (
        [response_bill(final)],
        final.output_text,
    )
    assert [response_bill(final)] == fake.state.billed


def test_a_responses_stream_names_each_event_by_its_type() -> None:
    """On the wire, each Responses event's `event:` line is its JSON's type."""
    with (
        openai_fake() as (_, client),
        client.responses.with_streaming_response.create(
            model="gpt-4o", input="hello", stream=True
        ) as raw,
    ):
        named = named_events(raw.iter_lines())
    assert [(kind, kind) for _, kind in named] == named
    assert ("response.created", "response.completed") == (named[0][1], named[-1][1])


def test_responses_parse_reads_a_json_schema_answer() -> None:
    """responses.parse with a pydantic model gets a JSON answer of its schema, parsed, and
    its usage is what the fake billed."""
    with openai_fake() as (fake, client):
        parsed = client.responses.parse(model="gpt-4o", input="Answer in JSON.", text_format=Answer)
    assert (Answer(answer="fake"), [response_bill(parsed)]) == (
        parsed.output_parsed,
        fake.state.billed,
    )


def test_embeddings_are_sent_as_base64_and_decode_to_the_vectors() -> None:
    """embeddings.create asks for base64 by default and decodes it to the fake's vectors;
    the usage is the inputs' tokens, as billed."""
    with openai_fake() as (fake, client):
        reply = client.embeddings.create(model="text-embedding-3-small", input=["hi", "x" * 40])
    (request,) = fake.state.requests
    assert "base64" == request["encoding_format"]
    assert [[(i + k + 1) / 8 for k in range(8)] for i in range(2)] == [
        data.embedding for data in reply.data
    ]
    assert (12, [Billed(12, 0, 0, EMBEDDINGS, "text-embedding-3-small")]) == (
        reply.usage.prompt_tokens,
        fake.state.billed,
    )


def test_openai_errors_have_openais_body() -> None:
    """A 429 and an unknown path answer OpenAI's error body."""
    with openai_fake() as (_, client):
        with pytest.raises(openai.RateLimitError) as limited:
            client.with_options(max_retries=0).chat.completions.create(
                model="gpt-4o", messages=chat("fail:429")
            )
        with pytest.raises(openai.NotFoundError) as unknown:
            client.models.list()
    limit = {"message": "canned 429", "type": "requests", "code": "rate_limit_exceeded"}
    invalid = {"message": "Invalid URL (GET /v1/models)", "type": "invalid_request_error"}
    assert [{**limit, "param": None}, {**invalid, "param": None, "code": None}] == [
        limited.value.body,
        unknown.value.body,
    ]


def web_search_ask(**request: Any) -> dict[str, Any]:
    """A message whose system asks a one-hour cache entry and whose tools search the web."""
    system = [
        {"type": "text", "text": "s" * 400, "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    ]
    tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}
    messages = [{"role": "user", "content": "What changed today?"}]
    return {"model": CLAUDE, "system": system, "messages": messages, "tools": [tool], **request}


def test_a_message_bills_its_cache_writes_by_ttl_and_its_web_search() -> None:
    """messages.create parses the search and its result, one-hour cache writes and one
    web search in usage, as the fake billed them."""
    with anthropic_fake() as (fake, client):
        fake.state.cache_read_tokens, fake.state.cache_write_tokens = 30, 20
        reply = client.messages.create(**web_search_ask(max_tokens=500))
    assert (["server_tool_use", "web_search_tool_result", "text"], "end_turn") == (
        [block.type for block in reply.content],
        reply.stop_reason,
    )
    assert Bill(105 - 30 - 20 + 500, 300 + 11, 30, 20, 20, 1, CLAUDE) == message_bill(reply)
    assert [message_bill(reply)] == fake.state.billed


def test_messages_stream_ends_with_the_cumulative_usage_billed() -> None:
    """messages.stream's final message has the usage billed, cache_creation and
    server_tool_use included; message_delta's cumulative input counts the search results
    that message_start did not."""
    with anthropic_fake() as (fake, client):
        fake.state.cache_write_tokens = 20
        fake.state.tokens_per_chunk = 3
        inputs: list[int | None] = []
        with client.messages.stream(**web_search_ask(max_tokens=100)) as stream:
            for event in stream:
                if event.type == "message_start":
                    inputs.append(event.message.usage.input_tokens)
                if event.type == "message_delta":
                    inputs.append(event.usage.input_tokens)
            final = stream.get_final_message()
    assert ([105 - 20, 105 - 20 + 500], "max_tokens") == (inputs, final.stop_reason)
    assert [Bill(585, 100, 0, 20, 20, 1, CLAUDE)] == fake.state.billed
    assert [message_bill(final)] == fake.state.billed


def test_count_tokens_counts_the_prompt_the_message_is_billed_for() -> None:
    """messages.count_tokens answers the prompt's tokens by the rule the fake bills by: the
    message's input, cache reads and writes together; counting bills nothing."""
    ask: dict[str, Any] = {"model": CLAUDE, "system": "Be brief.", "messages": chat("y" * 4_000)}
    with anthropic_fake() as (fake, client):
        fake.state.cache_read_tokens, fake.state.cache_write_tokens = 600, 200
        counted = client.messages.count_tokens(**ask)
        assert [] == fake.state.billed
        client.messages.create(**ask, max_tokens=500)
    (bill,) = fake.state.billed
    total = bill.input_tokens + bill.cache_read_input_tokens + bill.cache_creation_input_tokens
    assert (1_003, 1_003) == (counted.input_tokens, total)


def test_a_cut_chat_stream_raises_without_usage_and_is_billed() -> None:
    """A "cut" chat stream ends halfway, before its usage chunk, and the client raises
    APIConnectionError; the fake billed the whole answer all the same."""
    seen: list[Any] = []
    with openai_fake() as (fake, client):
        fake.state.tokens_per_chunk = 4
        stream = client.chat.completions.create(
            model="gpt-4o",
            messages=chat("cut"),
            stream=True,
            stream_options={"include_usage": True},
        )
        with pytest.raises(openai.APIConnectionError):
            seen.extend(stream)
    assert (37, [], [Billed(1, 300, 0)]) == (
        len(seen),
        [chunk.usage for chunk in seen if chunk.usage],
        fake.state.billed,
    )


def test_a_cut_responses_stream_raises_before_its_final_event() -> None:
    """A "cut" Responses stream ends before response.completed and the client raises; the
    fake billed the whole answer all the same."""
    kinds: list[str] = []
    with (
        openai_fake() as (fake, client),
        pytest.raises(openai.APIConnectionError),
        client.responses.stream(model="gpt-4o", input="cut") as stream,
    ):
        kinds.extend(event.type for event in stream)
    assert ("response.output_text.delta", 150) == (kinds[-1], kinds.count(kinds[-1]))
    assert [Billed(1, 300, 0, RESPONSES)] == fake.state.billed


def test_a_cut_message_stream_raises_before_message_delta() -> None:
    """A "cut" Anthropic stream ends before message_delta (the body cut short: raised as
    it is by anthropic 2.16, as an APIConnectionError from it by 2.17); the fake billed the
    whole message all the same."""
    kinds: list[str] = []
    with (
        anthropic_fake() as (fake, client),
        pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)) as raised,
        client.messages.stream(model=CLAUDE, max_tokens=50, messages=chat("cut")) as stream,
    ):
        kinds.extend(event.type for event in stream)
    error: BaseException = raised.value
    cut = error if isinstance(error, httpx2.RemoteProtocolError) else error.__cause__
    assert isinstance(cut, httpx2.RemoteProtocolError)
    assert (False, [Bill(1, 50, 0)]) == ("message_delta" in kinds, fake.state.billed)


def test_a_message_stream_names_each_event_by_its_type() -> None:
    """On the wire, each Anthropic event's `event:` line is its JSON's type, ping included."""
    with (
        anthropic_fake() as (_, client),
        client.messages.with_streaming_response.create(
            model=CLAUDE, max_tokens=5, messages=chat("hello"), stream=True
        ) as raw,
    ):
        named = named_events(raw.iter_lines())
    assert [(kind, kind) for _, kind in named] == named
    assert ["message_start", "content_block_start", "ping"] == [kind for _, kind in named[:3]]
