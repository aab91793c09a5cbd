"""Gemini's wire module (wire_gemini.py) against what the real google-genai SDK sends and
parses: the SDK, sync and client.aio (over aiohttp, its default when installed, and over
httpx2, which a metered client will use), pointed at a fake Gemini (fake_gemini.py) without
metering; the requests the fake recorded read into Calls and capped; the fake's answers and
streams read into the exact Usage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from google import genai
from google.auth import credentials as auth_credentials
from google.genai import errors, types

from earmark.client import wire_gemini
from earmark.client.meter import Meter
from earmark.client.wire import FREE, Call, Events, ToolNotMeteredError, cap_to_send, shape_of
from earmark.client.wire_gemini import (
    PROVIDER,
    TOOLS,
    Embed,
    GenerateContent,
    GenerateTally,
    ModalityNotMeteredError,
    routing,
)
from earmark.core.prices import Usage
from tests.client.fake_gemini import (
    PARTIAL_USAGE,
    USAGE,
    FakeGemini,
    GeminiState,
    chunks,
    fake_gemini,
    sse,
)
from tests.client.fake_gemini import answer as fake_answer

MODEL = "gemini-2.5-flash"
METER = Meter("b1", provider=PROVIDER)
# USAGE read as Earmark prices it: input 10 + 2 (tool-use prompt), 4 of it cached; output
# 5 + 7 (thinking).
SETTLED = Usage(input_tokens=12, output_tokens=12, cached_input_tokens=4)
CONFIG = types.GenerateContentConfig(
    max_output_tokens=100,
    temperature=0.1,
    thinking_config=types.ThinkingConfig(thinking_budget=50, include_thoughts=False),
)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeGemini]:
    with fake_gemini() as fake:
        yield fake


@pytest.fixture
def fake(server: FakeGemini) -> FakeGemini:
    """The module's fake, its answers as they start and its record empty."""
    fresh = GeminiState()
    state = server.state
    with state.lock:
        for name in ("usage", "partial_usage", "texts", "line_end", "cut", "error", "embed_usage"):
            setattr(state, name, getattr(fresh, name))
        state.requests.clear()
    return server


def client(fake: FakeGemini, **options: Any) -> genai.Client:
    return genai.Client(api_key="k", http_options=types.HttpOptions(base_url=fake.url, **options))


class _Token(auth_credentials.Credentials):
    """Credentials that hold a token and never refresh (Vertex with a project)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.token = "tok"

    def refresh(self, request: Any) -> None:
        self.token = "tok"

    @property
    def expired(self) -> bool:
        return False

    @property
    def valid(self) -> bool:
        return True


def only(fake: FakeGemini) -> tuple[str, dict[str, Any]]:
    """The path and body of the one request the fake saw."""
    [seen] = fake.state.requests
    assert seen.headers["auth"]
    return seen.path, seen.body


def read(path: str) -> Any:
    """The route of a POST to path (its query apart)."""
    return routing(path.partition("?")[0])


def test_generate_content_read_into_its_call_cap_and_usage(fake: FakeGemini) -> None:
    gemini = client(fake)
    answer = gemini.models.generate_content(model=MODEL, contents="hi", config=CONFIG)
    assert answer.text == "Hello\u2028there"
    assert answer.usage_metadata is not None
    assert answer.usage_metadata.thoughts_token_count == 7

    path, body = only(fake)
    assert path == f"/v1/models/{MODEL}:generateContent"
    # The SDK's own spelling: generationConfig camelCase, thinkingConfig's keys snake_case.
    assert body["generationConfig"]["maxOutputTokens"] == 100
    assert body["generationConfig"]["thinkingConfig"] == {
        "include_thoughts": False,
        "thinking_budget": 50,
    }
    route = read(path)
    assert route == GenerateContent(MODEL, stream=False)
    call = route.call(body, METER)
    assert call.model == MODEL
    assert call.asked == 100
    assert call.choices == 1
    assert not call.stream
    assert call.has_output
    assert call.prompt_tokens > len("hi")

    # A hold covering 64 tokens is told to Gemini in the body sent.
    cap = cap_to_send(call, 64, degraded=False)
    assert cap == 64
    sent, hidden = route.sent(body, call, cap)
    assert sent["generationConfig"]["maxOutputTokens"] == 64
    assert not hidden
    assert sent["generationConfig"]["thinkingConfig"] == body["generationConfig"]["thinkingConfig"]
    assert route.sent(body, call, None)[0] is body

    # The answer the fake sent (and the SDK parsed above), read.
    assert route.usage(fake_answer(fake.state, MODEL), call) == SETTLED
    assert route.usage({"candidates": []}, call) is None


def test_without_a_maximum_the_ceiling_is_held_and_sent(fake: FakeGemini) -> None:
    gemini = client(fake)
    gemini.models.generate_content(model=MODEL, contents="hi")
    path, body = only(fake)
    assert "generationConfig" not in body
    route = read(path)
    call = route.call(body, METER)
    assert call.asked is None
    shape, charged = shape_of(PROVIDER, call, METER)
    assert shape.output_ceiling
    assert shape.model == MODEL
    assert shape.provider == "google"
    assert charged.input_tokens == call.prompt_tokens
    sent, _ = route.sent(body, call, cap_to_send(call, 65_536, degraded=False))
    assert sent["generationConfig"] == {"maxOutputTokens": 65_536}
    # The capped body is one Gemini takes: the fake answers it through the SDK.
    again = gemini.models.generate_content(
        model=MODEL,
        contents="hi",
        config=types.GenerateContentConfig(
            http_options=types.HttpOptions(extra_body={"generationConfig": {"maxOutputTokens": 9}})
        ),
    )
    assert again.text
    assert fake.state.requests[-1].body["generationConfig"] == {"maxOutputTokens": 9}


def test_snake_case_names_are_read_and_the_cap_replaces_them() -> None:
    """protobuf's JSON reader takes both spellings; a caller's extra_body may send either."""
    route = GenerateContent(MODEL)
    body = {
        "contents": [{"parts": [{"text": "hi"}], "role": "user"}],
        "generation_config": {"max_output_tokens": 300, "candidate_count": 2},
    }
    call = route.call(body, METER)
    assert call.asked == 300
    assert call.choices == 2
    sent, _ = route.sent(body, call, 100)
    assert sent["generation_config"] == {"candidate_count": 2, "maxOutputTokens": 100}
    assert "generationConfig" not in sent
    # Candidates multiply the output the hold covers.
    shape, _ = shape_of(PROVIDER, call, METER)
    assert shape.max_output_tokens == 600
    assert cap_to_send(call, 600, degraded=False) is None
    assert cap_to_send(call, 120, degraded=False) == 60


def test_the_prompt_estimate_counts_system_tools_and_function_parts() -> None:
    route = GenerateContent(MODEL)
    bare = route.call({"contents": [{"parts": [{"text": "x" * 300}]}]}, METER)
    body = {
        "contents": [
            {"parts": [{"text": "x" * 300}], "role": "user"},
            {"parts": [{"functionCall": {"name": "f", "args": {"q": "y" * 200}}}], "role": "model"},
            {"parts": [{"function_response": {"name": "f", "response": {"r": "z" * 200}}}]},
        ],
        "systemInstruction": {"parts": [{"text": "s" * 400}]},
        "tools": [{"functionDeclarations": [{"name": "f", "description": "d" * 100}]}],
    }
    full = route.call(body, METER)
    # At least one token per three characters, above the bare prompt by the other parts.
    assert full.prompt_tokens - bare.prompt_tokens >= (200 + 200 + 400 + 100) // 3


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"tools": [{"googleSearch": {}}]}, ToolNotMeteredError),
        ({"tools": [{"google_search_retrieval": {}}]}, ToolNotMeteredError),
        ({"tools": [{"googleMaps": {}}]}, ToolNotMeteredError),
        ({"tools": [{"someNewTool": {}}]}, ToolNotMeteredError),
        ({"generationConfig": {"responseModalities": ["TEXT", "IMAGE"]}}, ModalityNotMeteredError),
        ({"generationConfig": {"speechConfig": {"voiceConfig": {}}}}, ModalityNotMeteredError),
        (
            {"contents": [{"parts": [{"inlineData": {"mimeType": "audio/wav", "data": "AA=="}}]}]},
            ModalityNotMeteredError,
        ),
        (
            {"contents": [{"parts": [{"file_data": {"mime_type": "audio/mp3", "file_uri": "u"}}]}]},
            ModalityNotMeteredError,
        ),
        # A file that names no type may be audio: Google reads the file's own.
        ({"contents": [{"parts": [{"fileData": {"fileUri": "u"}}]}]}, ModalityNotMeteredError),
        ({"tools": [{"exaAiSearch": {}}]}, ToolNotMeteredError),
    ],
)
def test_what_earmark_cannot_price_is_refused_before_its_hold(
    body: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        GenerateContent(MODEL).call(body, METER)


def test_tools_that_bill_tokens_only_pass() -> None:
    tools = [{"functionDeclarations": []}, {"codeExecution": {}}, {"urlContext": {}}]
    body = {"contents": "hi", "tools": tools, "generationConfig": {"responseModalities": ["TEXT"]}}
    assert GenerateContent(MODEL).call(body, METER).model == MODEL


def tally_of(data: bytes, split: int = 7) -> tuple[GenerateTally, bytes]:
    """The stream's bytes through wire.Events in pieces of split bytes: the tally, and what
    the caller would have been given."""
    tally = GenerateTally()
    events = Events(tally)
    out = b"".join(events.feed(data[at : at + split]) for at in range(0, len(data), split))
    return tally, out + events.rest()


@pytest.mark.parametrize("line_end", ["\r\n", "\n"])
def test_a_stream_parsed_by_the_sdk_and_read_into_its_usage(
    fake: FakeGemini, line_end: str
) -> None:
    fake.state.line_end = line_end
    gemini = client(fake)
    got = list(gemini.models.generate_content_stream(model=MODEL, contents="hi"))
    assert "".join(chunk.text or "" for chunk in got) == "Hel" + "lo\u2028there"
    assert got[-1].usage_metadata is not None
    assert got[-1].usage_metadata.candidates_token_count == 5
    path, body = only(fake)
    assert path == f"/v1/models/{MODEL}:streamGenerateContent?alt=sse"
    route = read(path)
    assert route == GenerateContent(MODEL, stream=True)
    assert route.call(body, METER).stream

    data = sse(chunks(fake.state, MODEL), line_end)
    tally, passed = tally_of(data)
    assert tally.usage() == SETTLED
    # Events joins each kept event with LF: the same events, the SDK's parse unchanged.
    assert passed.replace(b"\r\n", b"\n") == data.replace(b"\r\n", b"\n")
    assert "\u2028".encode() in passed


def test_a_stream_cut_before_its_last_chunk_is_in_doubt(fake: FakeGemini) -> None:
    fake.state.cut = True
    gemini = client(fake)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK's read error, whatever its type
        list(gemini.models.generate_content_stream(model=MODEL, contents="hi"))
    tally, _ = tally_of(sse(chunks(fake.state, MODEL)[:-1], "\r\n"))
    # The partial usage came, the end did not: no bill to settle at.
    assert tally.usage() is None


def test_the_last_usage_wins_once_the_answer_ended() -> None:
    tally = GenerateTally()
    tally.keep("", {"usageMetadata": PARTIAL_USAGE, "candidates": [{"index": 0}]})
    assert tally.usage() is None
    tally.keep("", {"usageMetadata": USAGE, "candidates": [{"finishReason": "MAX_TOKENS"}]})
    assert tally.usage() == SETTLED
    # A prompt blocked ends the stream with no candidates.
    blocked = GenerateTally()
    blocked.keep("", {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": PARTIAL_USAGE})
    assert blocked.usage() == Usage(10, 0)
    # A stream that reports no usage at all leaves nothing to settle at.
    silent = GenerateTally()
    silent.keep("", {"candidates": [{"finishReason": "STOP"}]})
    assert silent.usage() is None


def test_a_usage_that_billed_audio_leaves_the_call_in_doubt() -> None:
    """Audio tokens in the prompt's or the cached content's modality details (a cached
    content or a file the request did not say was audio) bill above the text rate the
    hold was made for: no usage, the call in doubt; text and images settle."""
    audio = [{"modality": "TEXT", "tokenCount": 8}, {"modality": "AUDIO", "tokenCount": 2}]
    images = [{"modality": "TEXT", "tokenCount": 8}, {"modality": "IMAGE", "tokenCount": 2}]
    route, call = GenerateContent(MODEL), Call(MODEL, 10)
    found = [
        route.usage({"usageMetadata": {**USAGE, name: details}}, call)
        for name, details in (
            ("promptTokensDetails", audio),
            ("cacheTokensDetails", audio),
            ("promptTokensDetails", images),
        )
    ]
    assert [None, None, route.usage({"usageMetadata": USAGE}, call)] == found


def test_every_tool_of_the_installed_google_genai_is_classified() -> None:
    """Every field of google-genai's Tool, under its JSON name and its Python one, is in
    wire_gemini.TOOLS (tokens only, or refused with why): an upgrade that adds a tool fails
    here until it is classified."""
    from google.genai import types

    fields = types.Tool.model_fields
    names = {name for field, info in fields.items() for name in (field, info.alias or field)}
    camel = {
        "".join(p.capitalize() if i else p for i, p in enumerate(f.split("_"))) for f in fields
    }
    assert set() == (names | camel) - set(TOOLS)


def test_a_stream_of_two_candidates_ends_when_both_have() -> None:
    """With candidateCount 2, a chunk that finishes candidate 0 while candidate 1 still
    runs ends nothing: a stream cut there has no bill to settle at (in doubt)."""
    tally = GenerateTally(2)
    tally.keep("", {"usageMetadata": USAGE, "candidates": [{"index": 0, "finishReason": "STOP"}]})
    cut = tally.usage()
    tally.keep("", {"usageMetadata": USAGE, "candidates": [{"index": 1, "finishReason": "STOP"}]})
    assert (None, SETTLED) == (cut, tally.usage())


def test_reported_counts_out_of_shape_are_bounded() -> None:
    route = GenerateContent(MODEL)
    call = Call(MODEL, 10)
    # Cache reads beyond the prompt count as plain input.
    wild = {"promptTokenCount": 10, "cachedContentTokenCount": 50, "candidatesTokenCount": 3}
    assert route.usage({"usageMetadata": wild}, call) == Usage(10, 3, cached_input_tokens=0)
    # A count no call can have leaves the hold in doubt rather than settle it low.
    for bad in (-3, 10**13):
        assert route.usage({"usageMetadata": {**USAGE, "candidatesTokenCount": bad}}, call) is None
    assert Embed(MODEL).usage({"usageMetadata": {"promptTokenCount": -1}}, call) is None
    # So does one that is no whole number: it is not read as 0.
    odd = {"promptTokenCount": "10", "thoughtsTokenCount": True, "candidatesTokenCount": 4}
    assert route.usage({"usageMetadata": odd}, call) is None


# google-genai subclasses aiohttp's ClientSession, which aiohttp warns against.
@pytest.mark.filterwarnings("ignore:Inheritance class AiohttpClientSession:DeprecationWarning")
async def test_the_aio_client_over_aiohttp_and_over_httpx2(fake: FakeGemini) -> None:
    plain = client(fake)
    assert plain._api_client._use_aiohttp()
    over_httpx2 = client(fake, httpx_async_client=httpx2.AsyncClient())
    assert not over_httpx2._api_client._use_aiohttp()
    for each in (plain, over_httpx2):
        answer = await each.aio.models.generate_content(model=MODEL, contents="hi", config=CONFIG)
        assert answer.usage_metadata is not None
        assert answer.usage_metadata.prompt_token_count == 10
        texts = [
            c.text
            async for c in await each.aio.models.generate_content_stream(model=MODEL, contents="hi")
        ]
        assert "".join(t or "" for t in texts) == "Hello\u2028there"
    paths = [r.path for r in fake.state.requests]
    assert (
        paths
        == [
            f"/v1/models/{MODEL}:generateContent",
            f"/v1/models/{MODEL}:streamGenerateContent?alt=sse",
        ]
        * 2
    )
    for seen in fake.state.requests:
        assert read(seen.path).call(seen.body, METER).model == MODEL


def test_vertex_paths_route_by_their_method(fake: FakeGemini) -> None:
    express = genai.Client(vertexai=True, api_key="k", http_options={"base_url": fake.url})
    express.models.generate_content(model=MODEL, contents="hi", config=CONFIG)
    project = genai.Client(
        vertexai=True,
        project="p1",
        location="us-central1",
        credentials=_Token(),
        http_options={"base_url": fake.url},
    )
    project.models.generate_content(model=MODEL, contents="hi", config=CONFIG)
    list(project.models.generate_content_stream(model=MODEL, contents="hi"))
    project.models.count_tokens(model=MODEL, contents="hi")
    project.models.embed_content(model="text-embedding-005", contents="hi")
    paths = [r.path for r in fake.state.requests]
    resource = "/v1beta1/projects/p1/locations/us-central1/publishers/google/models"
    assert paths == [
        f"/v1beta1/publishers/google/models/{MODEL}:generateContent",
        f"{resource}/{MODEL}:generateContent",
        f"{resource}/{MODEL}:streamGenerateContent?alt=sse",
        f"{resource}/{MODEL}:countTokens",
        f"{resource}/text-embedding-005:predict",
    ]
    assert [r.headers["auth"] for r in fake.state.requests] == ["api-key"] + ["bearer"] * 4
    routes = [read(p) for p in paths]
    assert routes[:3] == [
        GenerateContent(MODEL),
        GenerateContent(MODEL),
        GenerateContent(MODEL, stream=True),
    ]
    # Counting is free; :predict embeddings (models genai-prices does not price) refused.
    assert routes[3] == FREE
    assert routes[4] is None
    body = fake.state.requests[1].body
    assert routes[1].call(body, METER).asked == 100


def test_embeddings_are_held_for_their_input(fake: FakeGemini) -> None:
    fake.state.embed_usage = {"promptTokenCount": 3}
    gemini = client(fake)
    reply = gemini.models.embed_content(model="gemini-embedding-001", contents=["hi", "there"])
    assert reply.embeddings is not None
    assert len(reply.embeddings) == 2
    gemini.models.count_tokens(model=MODEL, contents="hi")
    [embed, count] = fake.state.requests
    assert embed.path == "/v1/models/gemini-embedding-001:batchEmbedContents"
    assert count.path == f"/v1/models/{MODEL}:countTokens"
    assert read(count.path) == FREE
    route = read(embed.path)
    assert route == Embed("gemini-embedding-001")
    call = route.call(embed.body, METER)
    assert call == Call("gemini-embedding-001", call.prompt_tokens, has_output=False)
    assert call.prompt_tokens >= 2
    assert route.sent(embed.body, call, None) == (embed.body, False)
    assert cap_to_send(call, 100, degraded=False) is None
    assert route.usage({"embeddings": [], "usageMetadata": {"promptTokenCount": 3}}, call) == Usage(
        3, 0
    )
    # An answer without its usage leaves the hold in doubt, the estimate charged.
    assert route.usage({"embeddings": []}, call) is None
    # One content, as Vertex's Gemini embedding models take it.
    one = Embed("gemini-embedding-001").call({"content": {"parts": [{"text": "x" * 30}]}}, METER)
    assert one.prompt_tokens >= 10


@pytest.mark.parametrize(
    ("path", "routed"),
    [
        ("/v1beta/models/gemini-2.5-pro:generateContent", GenerateContent("gemini-2.5-pro")),
        ("/v1alpha/models/m:streamGenerateContent", GenerateContent("m", stream=True)),
        ("/v1/models/gemini-embedding-001:embedContent", Embed("gemini-embedding-001")),
        ("/v1beta1/projects/p/locations/global/publishers/google/models/m:computeTokens", FREE),
        ("/upload/v1beta/files", FREE),
        ("/v1beta/files:register", FREE),
        ("/v1/models/m:batchGenerateContent", None),
        ("/v1/models/imagen-4.0:predict", None),
        ("/v1/models/veo-3:predictLongRunning", None),
        ("/v1/tunedModels/t:generateContent", None),
        ("/v1beta1/projects/p/locations/l/endpoints/e:generateContent", None),
        ("/v1beta1/projects/p/locations/l/publishers/anthropic/models/c:rawPredict", None),
        ("/v1beta/cachedContents", None),
        ("/v1/batches", None),
        ("/v1/models/..:generateContent", None),
        ("/models/m:generateContent", None),
    ],
)
def test_routing(path: str, routed: object) -> None:
    assert routing(path) == routed


def test_routing_under_a_base_path() -> None:
    assert routing("/gemini/v1/models/m:generateContent", "/gemini") == GenerateContent("m")
    assert routing("/v1/models/m:generateContent", "/gemini") is None


def test_errors_pass_as_google_sends_them(fake: FakeGemini) -> None:
    gemini = client(fake)
    fake.state.error = 429
    with pytest.raises(errors.ClientError) as refused:
        gemini.models.generate_content(model=MODEL, contents="hi")
    assert refused.value.code == 429
    assert refused.value.status == "RESOURCE_EXHAUSTED"
    fake.state.error = 503
    with pytest.raises(errors.ServerError):
        gemini.models.generate_content(model=MODEL, contents="hi")


def test_the_provider_names_the_sdks_base_error() -> None:
    named = wire_gemini.provider()
    assert named.name == "google"
    assert named.sdk_error is errors.APIError
    assert named.routing(f"/v1/models/{MODEL}:generateContent") == GenerateContent(MODEL)


def test_the_usage_agrees_with_genai_prices() -> None:
    """genai-prices' own google extractor reads the fake's answer into the same counts."""
    import genai_prices

    sent = fake_answer(GeminiState(), MODEL)
    theirs = genai_prices.extract_usage(sent, provider_id=PROVIDER).usage
    ours = GenerateContent(MODEL).usage(sent, Call(MODEL, 1))
    assert ours is not None
    assert (theirs.input_tokens, theirs.cache_read_tokens, theirs.output_tokens) == (
        ours.input_tokens,
        ours.cached_input_tokens,
        ours.output_tokens,
    )
