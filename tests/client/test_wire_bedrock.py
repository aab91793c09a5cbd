"""Bedrock's wire module (wire_bedrock.py) against what the real boto3 bedrock-runtime
client sends and parses: boto3 pointed at a fake Bedrock (fake_bedrock.py) with dummy
credentials, without metering; the readers given what botocore's hooks are given (a test
registers them as the held-call sequence will: before-parameter-build to read and cap,
after-call to read the usage or wrap the stream), and the fake's answers and streams read
into the exact Usage."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import unquote

import boto3  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import ClientError, EventStreamError  # type: ignore[import-untyped]

from earmark.client import wire_bedrock
from earmark.client.meter import Meter
from earmark.client.wire import EndpointNotMeteredError, ToolNotMeteredError, cap_to_send
from earmark.client.wire_bedrock import (
    PROVIDER,
    Converse,
    Held,
    InvokeAnthropic,
    InvokeNova,
    MeteredStream,
    answer_usage,
    bedrock_usage,
    header_usage,
    held,
    price_name,
    stream_key,
)
from earmark.core.prices import Usage
from tests.client.fake_bedrock import BedrockState, FakeBedrock, fake_bedrock

CLAUDE = "anthropic.claude-3-5-haiku-20241022-v1:0"
PRICED_CLAUDE = "regional." + CLAUDE
NOVA = "amazon.nova-lite-v1:0"
NOVA_2 = "us.amazon.nova-2-lite-v1:0"
METER = Meter("b1", provider=PROVIDER)
MESSAGES = [{"role": "user", "content": [{"text": "hi"}]}]
# The fake's Converse usage: inputTokens 12 excludes the 30 cache reads and 5 writes.
CONVERSE_SETTLED = Usage(47, 7, cached_input_tokens=30, cache_write_input_tokens=5)
# Anthropic's on InvokeModel, the same counts by Anthropic's names.
ANTHROPIC_SETTLED = CONVERSE_SETTLED
# Nova's: 42 fresh + 20 read from the cache.
NOVA_SETTLED = Usage(62, 128, cached_input_tokens=20)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeBedrock]:
    with fake_bedrock() as fake:
        yield fake


@pytest.fixture(scope="module")
def session() -> Any:
    return boto3.Session(
        aws_access_key_id="AKIDTEST", aws_secret_access_key="secret", region_name="us-east-1"
    )


@pytest.fixture
def fake(server: FakeBedrock) -> FakeBedrock:
    """The module's fake, its answers as they start and its record empty."""
    fresh = BedrockState()
    state = server.state
    with state.lock:
        for name in ("usage", "anthropic_usage", "nova_usage", "served_tier", "cut"):
            setattr(state, name, getattr(fresh, name))
        state.exception = state.error = None
        state.requests.clear()
    return server


@dataclass
class Hooked:
    """What a test's hooks saw: each call held, and each usage read (None: in doubt)."""

    cap: int | None = None
    held: list[Held] = field(default_factory=list)
    settled: list[Usage | None] = field(default_factory=list)


def client(session: Any, fake: FakeBedrock, hooked: Hooked | None = None) -> Any:
    """A bedrock-runtime client on the fake; with hooked, its hooks read every call as the
    held-call sequence will (the cap told in the parameters; no sidecar)."""
    made = session.client("bedrock-runtime", endpoint_url=fake.url)
    if hooked is None:
        return made

    def before(params: dict[str, Any], model: Any, **_: Any) -> None:
        found = held(model.name, params, METER)
        if found is None:
            return
        hooked.held.append(found)
        cap = hooked.cap if hooked.cap is not None else found.call.asked
        told = cap_to_send(found.call, cap or 0, degraded=False)
        sent = found.reader.sent(params, found.call, told)
        params.clear()
        params.update(sent)

    def after(http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        if not hooked.held or http_response.status_code >= 300:
            return
        found = hooked.held[-1]
        if found.call.stream:
            key = stream_key(found.operation)
            parsed[key] = MeteredStream(
                parsed[key], found.reader.tally(found.call), hooked.settled.append
            )
        else:
            hooked.settled.append(answer_usage(found, parsed, http_response.headers))

    made.meta.events.register("before-parameter-build.bedrock-runtime", before)
    made.meta.events.register("after-call.bedrock-runtime", after)
    return made


def seen(fake: FakeBedrock) -> tuple[str, str, dict[str, Any]]:
    """The model id (decoded), operation and body of the one request the fake saw."""
    [request] = fake.state.requests
    assert request.headers["signed"] == "True"
    _, _, model, operation = request.path.split("/")
    return unquote(model), operation, request.body


def test_converse_read_capped_and_settled(session: Any, fake: FakeBedrock) -> None:
    hooked = Hooked(cap=256)
    runtime = client(session, fake, hooked)
    answer = runtime.converse(
        modelId=CLAUDE, messages=MESSAGES, inferenceConfig={"maxTokens": 1000}
    )
    assert answer["output"]["message"]["content"] == [{"text": "Hello"}]
    assert answer["usage"]["cacheReadInputTokens"] == 30
    [request] = fake.state.requests
    assert request.path == "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse"
    model, operation, body = seen(fake)
    assert (model, operation) == (CLAUDE, "converse")
    # The cap the hold covers, told in the body sent.
    assert body == {"messages": MESSAGES, "inferenceConfig": {"maxTokens": 256}}
    [found] = hooked.held
    assert found.operation == "Converse"
    assert found.call.model == PRICED_CLAUDE
    assert found.call.asked == 1000
    assert not found.call.stream
    assert found.call.prompt_tokens > 0
    assert hooked.settled == [CONVERSE_SETTLED]


def test_converse_without_a_maximum_is_sent_the_ceiling(session: Any, fake: FakeBedrock) -> None:
    hooked = Hooked(cap=8192)
    client(session, fake, hooked).converse(modelId=f"global.{CLAUDE}", messages=MESSAGES)
    _, _, body = seen(fake)
    assert body["inferenceConfig"] == {"maxTokens": 8192}
    [found] = hooked.held
    assert found.call.asked is None
    assert found.call.model == f"global.{CLAUDE}"


def test_the_recorded_body_reads_as_the_parameters_do(fake: FakeBedrock, session: Any) -> None:
    """rest-json puts the parameters in the body and the model id in the path: the
    recorded request, read back into parameters, is the same Call."""
    client(session, fake).converse(
        modelId=CLAUDE,
        messages=MESSAGES,
        system=[{"text": "Be brief."}],
        inferenceConfig={"maxTokens": 100, "temperature": 0.5},
        serviceTier={"type": "priority"},
    )
    model, _, body = seen(fake)
    call = Converse().call({**body, "modelId": model}, METER)
    assert call.model == PRICED_CLAUDE
    assert call.asked == 100
    assert call.service_tier == "priority"
    sent = Converse().sent(body, call, 50)
    assert sent["inferenceConfig"] == {"maxTokens": 50, "temperature": 0.5}
    assert sent["system"] == body["system"]


def test_converse_stream_wrapped_and_settled_at_its_metadata(
    session: Any, fake: FakeBedrock
) -> None:
    fake.state.served_tier = "flex"
    hooked = Hooked(cap=64)
    answer = client(session, fake, hooked).converse_stream(
        modelId=f"us.{CLAUDE}", messages=MESSAGES
    )
    assert isinstance(answer["stream"], MeteredStream)
    events = list(answer["stream"])
    assert [next(iter(e)) for e in events] == [
        "messageStart",
        "contentBlockDelta",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    assert events[-1]["metadata"]["usage"]["inputTokens"] == 12
    _, operation, body = seen(fake)
    assert operation == "converse-stream"
    assert body["inferenceConfig"] == {"maxTokens": 64}
    [found] = hooked.held
    assert found.call.stream
    assert found.call.model == PRICED_CLAUDE
    assert hooked.settled == [replace(CONVERSE_SETTLED, service_tier="flex")]


@pytest.mark.parametrize("how", ["cut", "exception"])
def test_a_stream_that_ends_without_its_metadata_is_in_doubt(
    session: Any, fake: FakeBedrock, how: str
) -> None:
    if how == "cut":
        fake.state.cut = True
    else:
        fake.state.exception = "throttlingException"
    hooked = Hooked(cap=64)
    answer = client(session, fake, hooked).converse_stream(modelId=CLAUDE, messages=MESSAGES)
    got: list[Any] = []
    if how == "exception":
        with pytest.raises(EventStreamError):
            got.extend(answer["stream"])
    else:
        # botocore stops at a message cut short (or raises reading it): no metadata either way.
        with contextlib.suppress(Exception):
            got.extend(answer["stream"])
    assert "metadata" not in [next(iter(e)) for e in got]
    assert hooked.settled == [None]


def test_a_stream_closed_early_is_in_doubt(session: Any, fake: FakeBedrock) -> None:
    hooked = Hooked(cap=64)
    answer = client(session, fake, hooked).converse_stream(modelId=CLAUDE, messages=MESSAGES)
    stream = answer["stream"]
    first = next(iter(stream))
    assert "messageStart" in first
    stream.close()
    assert hooked.settled == [None]


def invoke_body(max_tokens: int) -> str:
    return json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )


def test_invoke_model_anthropic(session: Any, fake: FakeBedrock) -> None:
    hooked = Hooked(cap=300)
    answer = client(session, fake, hooked).invoke_model(modelId=CLAUDE, body=invoke_body(1000))
    # The body was read for its usage and put back whole for the caller.
    got = json.loads(answer["body"].read())
    assert got["content"] == [{"type": "text", "text": "Hi"}]
    headers = answer["ResponseMetadata"]["HTTPHeaders"]
    assert headers["x-amzn-bedrock-input-token-count"] == "12"
    _, operation, body = seen(fake)
    assert operation == "invoke"
    assert body["max_tokens"] == 300
    assert body["anthropic_version"] == "bedrock-2023-05-31"
    [found] = hooked.held
    assert isinstance(found.reader, InvokeAnthropic)
    assert found.call.model == PRICED_CLAUDE
    assert found.call.asked == 1000
    assert hooked.settled == [ANTHROPIC_SETTLED]
    # Without a usage in the body, the token-count headers are read.
    assert found.reader.usage({}, headers) == Usage(12, 7)


def test_invoke_model_anthropic_stream(session: Any, fake: FakeBedrock) -> None:
    hooked = Hooked(cap=300)
    answer = client(session, fake, hooked).invoke_model_with_response_stream(
        modelId=CLAUDE, body=invoke_body(100)
    )
    kinds = [json.loads(e["chunk"]["bytes"])["type"] for e in answer["body"]]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    _, operation, body = seen(fake)
    assert operation == "invoke-with-response-stream"
    # The caller's own maximum is below the hold's: sent as it is.
    assert body["max_tokens"] == 100
    assert hooked.settled == [ANTHROPIC_SETTLED]


def test_invoke_stream_falls_back_to_the_invocation_metrics() -> None:
    tally = InvokeAnthropic(stream=True).tally(held_call(CLAUDE))
    metrics = {"inputTokenCount": 12, "outputTokenCount": 7, "cacheReadInputTokenCount": 3}
    last = {"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics}
    tally.keep({"chunk": {"bytes": json.dumps(last).encode()}})
    assert tally.usage() == Usage(15, 7, cached_input_tokens=3)
    tally.keep({"chunk": {"bytes": b"not json"}})
    tally.keep({"other": {}})
    assert tally.usage() == Usage(15, 7, cached_input_tokens=3)


def held_call(model_id: str) -> Any:
    return InvokeAnthropic().call({"modelId": model_id, "body": invoke_body(10)}, METER)


@pytest.mark.parametrize(
    ("model", "given", "field_sent"),
    [
        (NOVA, {"max_new_tokens": 1000}, {"max_new_tokens": 200}),
        (NOVA, {}, {"max_new_tokens": 200}),
        (NOVA_2, {}, {"maxTokens": 200}),
        (
            NOVA_2,
            {"maxTokens": 900, "max_new_tokens": 800},
            {"maxTokens": 200, "max_new_tokens": 200},
        ),
    ],
)
def test_invoke_model_nova(
    session: Any, fake: FakeBedrock, model: str, given: dict[str, Any], field_sent: dict[str, int]
) -> None:
    hooked = Hooked(cap=200)
    request = {
        "schemaVersion": "messages-v1",
        "system": [{"text": "Be brief."}],
        "messages": MESSAGES,
        "inferenceConfig": {"temperature": 0.7, **given},
    }
    answer = client(session, fake, hooked).invoke_model(modelId=model, body=json.dumps(request))
    assert json.loads(answer["body"].read())["stopReason"] == "end_turn"
    _, _, body = seen(fake)
    assert body["inferenceConfig"] == {"temperature": 0.7, **field_sent}
    [found] = hooked.held
    assert isinstance(found.reader, InvokeNova)
    assert found.call.asked == (min(given.values()) if given else None)
    assert hooked.settled == [NOVA_SETTLED]


def test_invoke_model_nova_stream(session: Any, fake: FakeBedrock) -> None:
    hooked = Hooked(cap=200)
    request = {"schemaVersion": "messages-v1", "messages": MESSAGES}
    answer = client(session, fake, hooked).invoke_model_with_response_stream(
        modelId=NOVA, body=json.dumps(request)
    )
    events = [json.loads(e["chunk"]["bytes"]) for e in answer["body"]]
    assert "metadata" in events[-1]
    assert hooked.settled == [NOVA_SETTLED]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (
            {"guardrailConfig": {"guardrailIdentifier": "g", "guardrailVersion": "1"}},
            ToolNotMeteredError,
        ),
        ({"performanceConfig": {"latency": "optimized"}}, ToolNotMeteredError),
        (
            {"toolConfig": {"tools": [{"systemTool": {"name": "nova_grounding"}}]}},
            ToolNotMeteredError,
        ),
    ],
)
def test_what_earmark_cannot_price_is_refused_unsent(
    session: Any, fake: FakeBedrock, call: dict[str, Any], error: type[Exception]
) -> None:
    runtime = client(session, fake, Hooked(cap=10))
    with pytest.raises(error):
        runtime.converse(modelId=CLAUDE, messages=MESSAGES, **call)
    assert fake.state.requests == []


def test_other_families_and_operations_are_refused_unsent(session: Any, fake: FakeBedrock) -> None:
    runtime = client(session, fake, Hooked(cap=10))
    with pytest.raises(EndpointNotMeteredError):
        runtime.invoke_model(modelId="meta.llama3-8b-instruct-v1:0", body=b'{"prompt": "hi"}')
    with pytest.raises(EndpointNotMeteredError):
        runtime.start_async_invoke(
            modelId="amazon.nova-reel-v1:0",
            modelInput={},
            outputDataConfig={"s3OutputDataConfig": {"s3Uri": "s3://b/k"}},
        )
    assert fake.state.requests == []
    # Counting is free: sent, and nothing held.
    hooked = Hooked()
    counted = client(session, fake, hooked).count_tokens(
        modelId=CLAUDE, input={"converse": {"messages": MESSAGES}}
    )
    assert counted["inputTokens"] == 10
    assert hooked.held == []


def test_errors_pass_as_aws_sends_them(session: Any, fake: FakeBedrock) -> None:
    fake.state.error = 400
    hooked = Hooked(cap=10)
    with pytest.raises(ClientError) as refused:
        client(session, fake, hooked).converse(modelId=CLAUDE, messages=MESSAGES)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert len(hooked.held) == 1
    assert hooked.settled == []


def test_every_operation_is_classified() -> None:
    import botocore.session  # type: ignore[import-untyped]

    model = botocore.session.get_session().get_service_model("bedrock-runtime")
    assert sorted(model.operation_names) == sorted(wire_bedrock.OPERATIONS)


def test_bedrock_usage_bounds_and_cache_ttls() -> None:
    details = [{"ttl": "1h", "inputTokens": 4}, {"ttl": "5m", "inputTokens": 1}]
    usage = {**dict(CONVERSE_USAGE), "cacheDetails": details}
    assert bedrock_usage(usage, "cacheReadInputTokens", "cacheWriteInputTokens") == Usage(
        47, 7, cached_input_tokens=30, cache_write_input_tokens=5, cache_write_long_input_tokens=4
    )
    for bad in (-1, 10**13):
        wild = {**CONVERSE_USAGE, "outputTokens": bad}
        assert bedrock_usage(wild, "cacheReadInputTokens", "cacheWriteInputTokens") is None
    assert header_usage({"x-amzn-bedrock-input-token-count": "12"}) is None
    assert (
        header_usage(
            {"x-amzn-bedrock-input-token-count": "12", "x-amzn-bedrock-output-token-count": "x"}
        )
        is None
    )
    assert Converse().usage({"output": {}}, {}) is None


CONVERSE_USAGE = {
    "inputTokens": 12,
    "outputTokens": 7,
    "totalTokens": 54,
    "cacheReadInputTokens": 30,
    "cacheWriteInputTokens": 5,
}


@pytest.mark.parametrize(
    ("wire", "name"),
    [
        (CLAUDE, PRICED_CLAUDE),
        ("anthropic.claude-3-5-haiku-20241022-v1%3A0", PRICED_CLAUDE),
        (f"us.{CLAUDE}", PRICED_CLAUDE),
        (f"eu.{CLAUDE}", PRICED_CLAUDE),
        (f"us-gov.{CLAUDE}", PRICED_CLAUDE),
        (f"global.{CLAUDE}", f"global.{CLAUDE}"),
        (NOVA, NOVA),
        (f"us.{NOVA}", NOVA),
        (NOVA_2, "regional.amazon.nova-2-lite-v1:0"),
        ("global.amazon.nova-2-lite-v1:0", "global.amazon.nova-2-lite-v1:0"),
        ("meta.llama3-8b-instruct-v1:0", "meta.llama3-8b-instruct-v1:0"),
        (f"arn:aws:bedrock:us-east-1::foundation-model/{CLAUDE}", PRICED_CLAUDE),
        (f"arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.{CLAUDE}", PRICED_CLAUDE),
        (
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123",
            "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/abc123",
        ),
    ],
)
def test_price_names(wire: str, name: str) -> None:
    assert price_name(wire) == name


def test_price_names_agree_with_genai_prices() -> None:
    """Every Bedrock model genai-prices prices, called in-region, through a geographic
    profile or a global one, is named as genai-prices' own matching names it."""
    from genai_prices import data_snapshot

    provider = {p.id: p for p in data_snapshot.get_snapshot().providers}[PROVIDER]
    checked = 0
    for model in provider.models:
        if model.id.startswith("regional."):
            base = model.id.removeprefix("regional.")
            forms = [base, f"us.{base}", f"eu.{base}", f"apac.{base}"]
        elif model.id.startswith("global."):
            forms = [model.id]
        else:
            forms = [model.id, f"us.{model.id}"]
        for form in forms:
            found = provider.find_model(form)
            if found is None or found.id != model.id:
                continue  # genai-prices itself names this form otherwise
            assert price_name(form) == model.id, form
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("flavor", ["default", "anthropic"])
def test_the_usage_agrees_with_genai_prices(flavor: str) -> None:
    """genai-prices' own aws extractors (Converse's and Anthropic's bodies) read the fake's
    usage into the same counts, cache writes for an hour included."""
    import genai_prices

    from tests.client.fake_bedrock import ANTHROPIC_USAGE, USAGE

    if flavor == "default":
        usage: dict[str, Any] = {**USAGE, "cacheDetails": [{"ttl": "1h", "inputTokens": 4}]}
        ours = Converse().usage({"usage": usage}, {})
    else:
        usage = dict(ANTHROPIC_USAGE)
        ours = InvokeAnthropic().usage({"usage": usage}, {})
    theirs = genai_prices.extract_usage(
        {"usage": usage, "model": CLAUDE}, provider_id=PROVIDER, api_flavor=flavor
    ).usage
    assert ours is not None
    assert (
        theirs.input_tokens,
        theirs.cache_read_tokens,
        theirs.cache_write_tokens,
        theirs.cache_write_1h_tokens or 0,
        theirs.output_tokens,
    ) == (
        ours.input_tokens,
        ours.cached_input_tokens,
        ours.cache_write_input_tokens,
        ours.cache_write_long_input_tokens,
        ours.output_tokens,
    )
