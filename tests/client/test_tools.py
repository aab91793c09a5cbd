"""The built-in tools a metered request may give the model: every tool type of the installed
openai and anthropic packages classified (a fee held and settled, tokens only, or refused),
and a request with a tool whose fee Earmark cannot hold refused before anything is held or
sent, naming the tool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing
from typing import Any

import openai
import pytest
from anthropic.types.beta.beta_tool_union_param import BetaToolUnionParam
from anthropic.types.tool_union_param import ToolUnionParam
from openai.types.chat.chat_completion_tool_union_param import ChatCompletionToolUnionParam
from openai.types.chat.completion_create_params import CompletionCreateParamsBase
from openai.types.responses import namespace_tool_param
from openai.types.responses.function_shell_tool_param import Environment
from openai.types.responses.response_create_params import ResponseCreateParamsBase
from openai.types.responses.tool_param import ToolParam

from earmark.client import AsyncClient
from earmark.client.llm import metered
from earmark.client.meter import Meter
from earmark.client.openai_background import TOOL_ITEMS
from earmark.client.wire import (
    TOKENS_ONLY,
    EndpointNotMeteredError,
    Tool,
    ToolNotMeteredError,
    Tools,
    held_tools,
)
from earmark.client.wire_anthropic import _TOOL_COUNTS, TOOLS, Messages, messages_usage
from earmark.client.wire_openai import (
    CHAT_TOOL_PARAMETERS,
    CHAT_TOOLS,
    NAMESPACE_TOOLS,
    RESPONSES_TOOLS,
    Chat,
    Responses,
)
from earmark.client.wire_openai import provider as openai_provider
from earmark.client.wire_transport import Metering
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import budget, holds
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants

METER = Meter("b", tool_calls_max=10)
FUNCTION = {"type": "function", "name": "look", "parameters": {}, "strict": True}
IMAGES = {"type": "image_generation"}


def type_literals(union: Any) -> dict[str, set[str]]:
    """The values of the Literal `type` field of each member of a typed-params union, by
    member name: what a request may name each tool's type."""
    found: dict[str, set[str]] = {}
    for member in typing.get_args(union):
        hint = typing.get_type_hints(member, include_extras=True).get("type")
        found[member.__name__] = set(_literals(hint))
    return found


def _literals(hint: Any) -> list[str]:
    if typing.get_origin(hint) is typing.Literal:
        return [value for value in typing.get_args(hint) if isinstance(value, str)]
    return [value for arg in typing.get_args(hint) for value in _literals(arg)]


def unclassified(unions: list[Any], table: Tools) -> list[str]:
    """The tool types the unions' members name that table does not list (a member with no
    type literal at all is listed by its name: it could not be classified)."""
    missing: set[str] = set()
    for union in unions:
        for member, values in type_literals(union).items():
            missing |= (values - set(table)) if values else {member}
    return sorted(missing)


def classify(table: Tools, tool: dict[str, Any]) -> Tool:
    what = table[str(tool["type"])]
    return what if isinstance(what, Tool) else what(tool)


def refusal(route: Chat | Responses | Messages, body: dict[str, Any]) -> ToolNotMeteredError:
    with pytest.raises(ToolNotMeteredError) as refused:
        route.call(body, METER)
    return refused.value


def responses(*tools: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "input": "hello", "tools": list(tools), **more}


def chat(*tools: dict[str, Any], **more: Any) -> dict[str, Any]:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}], **more}
    return {**body, "tools": list(tools)} if tools else body


def messages(*tools: dict[str, Any]) -> dict[str, Any]:
    ask = [{"role": "user", "content": "hello"}]
    return {"model": "claude-test", "max_tokens": 100, "messages": ask, "tools": list(tools)}


# Every tool type of the installed SDKs is classified.


def test_every_responses_tool_type_of_the_installed_openai_is_classified() -> None:
    """Each type literal of the openai package's Responses ToolParam union, and of the tools a
    namespace groups, is in the route's table, so an upgrade's new tool fails here."""
    assert [] == unclassified([ToolParam], RESPONSES_TOOLS)
    assert [] == unclassified([namespace_tool_param.Tool], NAMESPACE_TOOLS)


def test_every_chat_tool_type_and_search_parameter_of_the_installed_openai_is_classified() -> None:
    """Each type literal of Chat Completions' tool union is classified, and each request
    parameter that names a tool or a search is a known one or a refused built-in tool."""
    known = {"tools", "tool_choice", "parallel_tool_calls", "max_tool_calls"}
    named = {
        name
        for params in (CompletionCreateParamsBase, ResponseCreateParamsBase)
        for name in typing.get_type_hints(params)
        if "tool" in name or "search" in name
    }
    assert [] == unclassified([ChatCompletionToolUnionParam], CHAT_TOOLS)
    assert set() == named - known - set(CHAT_TOOL_PARAMETERS)


def test_every_tool_type_of_the_installed_anthropic_is_classified() -> None:
    """Each type literal of the anthropic package's ToolUnionParam and BetaToolUnionParam
    (beta.messages') is in the Messages route's table."""
    assert [] == unclassified([ToolUnionParam, BetaToolUnionParam], TOOLS)


def test_every_held_fee_is_settled_from_the_answer() -> None:
    """A fee a table holds is one the answer counts: Responses output items, Anthropic's
    server_tool_use, so no held fee settles at nothing."""
    openai_fees = {classify(RESPONSES_TOOLS, {"type": t}).fee for t in RESPONSES_TOOLS} - {""}
    anthropic_fees = {classify(TOOLS, {"type": t}).fee for t in TOOLS} - {""}
    assert (set(), set()) == (
        openai_fees - set(TOOL_ITEMS.values()),
        anthropic_fees - set(_TOOL_COUNTS.values()),
    )


# What each route holds, passes and refuses.


def test_responses_web_searches_of_every_version_are_held_as_web_search() -> None:
    """The dated web search types are the same tool, held for max_tool_calls as web_search
    beside the other priced tools."""
    tools = [{"type": t} for t in ("web_search_2025_08_26", "web_search_preview_2025_03_11")]
    call = Responses().call(responses(*tools, {"type": "file_search"}, max_tool_calls=3), METER)
    assert (("file_search", 3), ("web_search", 3)) == call.tool_calls_max


def test_responses_tools_that_bill_tokens_only_pass_with_no_fee_held() -> None:
    """The caller's own tools and the tools it runs, MCP and tool search are held as tokens,
    with no tool fee."""
    tools: list[dict[str, Any]] = [
        FUNCTION, {"type": "custom", "name": "c"}, {"type": "computer"}, {"type": "mcp",
        "server_label": "s", "server_url": "https://mcp.example"}, {"type": "tool_search"},
        {"type": "local_shell"}, {"type": "apply_patch"}, {"type": "shell"},
        {"type": "shell", "environment": {"type": "local"}},
        {"type": "namespace", "name": "n", "description": "d", "tools": [FUNCTION]},
    ]  # fmt: skip
    assert () == Responses().call(responses(*tools), METER).tool_calls_max


def test_an_image_generation_responses_request_is_refused_naming_the_tool() -> None:
    """image_generation bills each image at the image model's rates: refused, its type
    named in the message and in about, an EndpointNotMeteredError like other unsent calls."""
    refused = refusal(Responses(), responses(FUNCTION, {"type": "web_search"}, IMAGES))
    assert (
        "image_generation",
        {"tool": "image_generation"},
        "TOOL_NOT_METERED",
        True,
        True,
    ) == (
        refused.tool,
        refused.about,
        refused.reason,
        str(refused).startswith("the image_generation tool bills each image"),
        isinstance(refused, EndpointNotMeteredError),
    )


@pytest.mark.parametrize(
    ("tool", "named"),
    [
        ({"type": "programmatic_tool_calling"}, "programmatic_tool_calling"),
        ({"type": "shell", "environment": {"type": "container_auto"}}, "shell"),
        ({"type": "shell", "environment": {"type": "container_reference"}}, "shell"),
        ({"type": "shell", "environment": "somewhere"}, "shell"),
        ({"type": "namespace", "name": "n", "description": "d", "tools": [IMAGES]},
         "image_generation"),
        ({"type": "web_search_2027_01_01"}, "web_search_2027_01_01"),
        ({"name": "untyped"}, "untyped"),
        ({"type": None}, "untyped"),
    ],
)  # fmt: skip
def test_responses_tools_whose_fee_cannot_be_held_are_refused(
    tool: dict[str, Any], named: str
) -> None:
    """A hosted shell, programs run at OpenAI, an image tool in a namespace, a type Earmark
    has not classified and a tool with no type are refused, each naming its type."""
    assert named == refusal(Responses(), responses(FUNCTION, tool)).tool


def test_every_hosted_shell_environment_is_refused_and_a_local_one_passes() -> None:
    """Of the shell tool's environment types in the installed openai package, only the local
    one runs at the caller's: the others run in OpenAI's containers, billed by time."""
    environments = {value for values in type_literals(Environment).values() for value in values}
    passing = {
        environment
        for environment in environments
        if TOKENS_ONLY == classify(RESPONSES_TOOLS, {"type": "shell", "environment": {
            "type": environment}})
    }  # fmt: skip
    assert ({"local"}, True) == (passing, len(environments) > 1)


def test_chat_web_search_options_are_refused_and_function_tools_pass() -> None:
    """Chat Completions' web_search_options bills a search the answer does not count:
    refused, named; function and custom tools pass with no fee held."""
    custom = {"type": "custom", "custom": {"name": "c"}}
    function = {"type": "function", "function": {"name": "f", "parameters": {}}}
    refused = refusal(Chat(), chat(web_search_options={}))
    passed = Chat().call(chat(function, custom), METER)
    assert ("web_search_options", "bills a search fee per call", ()) == (
        refused.tool,
        refused.why[:27],
        passed.tool_calls_max,
    )


@pytest.mark.parametrize(
    ("tool", "named"),
    [
        ({"googleSearch": {}}, "untyped"),
        ({"type": "web_search_20250305", "name": "web_search"}, "web_search_20250305"),
        ({"type": "web_search_preview"}, "web_search_preview"),
    ],
)
def test_chat_tools_that_are_not_the_callers_own_are_refused(
    tool: dict[str, Any], named: str
) -> None:
    """A chat tool that is not a function or custom one (a provider's built-in tool passed
    through an OpenAI-compatible API, as LiteLLM does) is refused, named."""
    assert named == refusal(Chat(), chat(tool)).tool


def test_anthropic_web_search_is_held_for_its_max_uses_and_custom_tools_pass() -> None:
    """Anthropic's web search of each version is held for its max_uses (the meter's default
    without one); custom tools, with a type or without, and a web fetch hold no fee."""
    tools: list[dict[str, Any]] = [
        {"name": "mine", "input_schema": {}}, {"type": None, "name": "x", "input_schema": {}},
        {"type": "custom", "name": "y", "input_schema": {}},
        {"type": "web_fetch_20250910", "name": "web_fetch"},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "web_search_20260318", "name": "web_search"},
    ]  # fmt: skip
    call = Messages().call(messages(*tools), METER)
    assert (("web_search", 3), ("web_search", 10)) == call.tool_calls_max


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ({"type": "code_execution_20250825", "name": "code_execution"}, "bills its container"),
        ({"type": "code_execution_20260521", "name": "code_execution"}, "bills its container"),
        ({"type": "advisor_20260301", "name": "advisor", "model": "m"}, "bills another mode"),
        ({"type": "web_search_20270101", "name": "web_search"}, "is of a type Earmark"),
    ],
)
def test_anthropic_tools_whose_fee_cannot_be_held_are_refused(
    tool: dict[str, Any], why: str
) -> None:
    """Code execution (container time), the advisor (another model's tokens) and a type
    Earmark has not classified are refused, naming the type and what it bills."""
    refused = refusal(Messages(), messages({"name": "mine", "input_schema": {}}, tool))
    assert (tool["type"], why) == (refused.tool, refused.why[: len(why)])


def test_held_tools_passes_over_entries_that_are_not_tools() -> None:
    """A tools value that is not a list, and entries that are not objects, are no tool the
    provider runs (it answers 400): nothing is held or refused for them."""
    assert ([], []) == (
        held_tools({"type": "image_generation"}, RESPONSES_TOOLS),
        held_tools(["image_generation", 3], RESPONSES_TOOLS),
    )


def test_the_metering_raises_the_refusal_as_the_sdks_own_error() -> None:
    """The transport's reading of a request raises the route's refusal as a subclass of
    the openai package's base error too, so that the SDK raises it unwrapped, unretried."""
    # Reading a request calls no sidecar.
    metering = Metering(openai_provider(), typing.cast(AsyncClient, None), METER)
    with pytest.raises(ToolNotMeteredError) as refused:
        metering.call(Responses(), responses(IMAGES))
    assert (True, "image_generation") == (
        isinstance(refused.value, openai.OpenAIError),
        refused.value.tool,
    )


# Through the real openai package.


async def test_an_image_generation_request_is_refused_unsent_and_unheld(
    priced: Running, provider: FakeOpenAI
) -> None:
    """responses.create with the image_generation tool raises ToolNotMeteredError, the
    SDK's error unwrapped and unretried, before any hold: the provider saw nothing."""
    await budget(priced, "draw", 5_000_000)
    async with (
        AsyncClient(priced.target) as earmark,
        openai.AsyncOpenAI(api_key="k", base_url=provider.url) as client,
    ):
        llm = metered(client, earmark, "draw")
        tools: Any = [IMAGES]
        with pytest.raises(ToolNotMeteredError) as refused:
            await llm.responses.create(model="gpt-4o", input="a cat", tools=tools)
    state = await priced.admin.GetBudget(pb.GetBudgetRequest(budget_id="draw"))
    assert ("image_generation", [], [], 0, 0) == (
        refused.value.tool,
        provider.state.received,
        await holds(priced, "draw"),
        state.used,
        state.held,
    )
    await assert_invariants(priced.dsn)


# Through the LiteLLM gate.

# The gate's hook, run in a process of its own: importing LiteLLM into the tests' process
# would fetch its price map and change its logging. The pass-through to Anthropic's messages
# takes no model group lookup (which imports LiteLLM's whole proxy).
GATE_SCRIPT = """
import asyncio, json, sys
from types import SimpleNamespace
from fastapi import HTTPException
from earmark.integrations.litellm import EarmarkGate

async def main():
    key = SimpleNamespace(
        request_route="/anthropic/v1/messages", team_metadata={"earmark_budget_id": "b"}
    )
    data = json.loads(sys.argv[1])
    data["litellm_logging_obj"] = SimpleNamespace(litellm_call_id="c1")
    try:
        await EarmarkGate().async_pre_call_hook(key, None, data, "pass_through_endpoint")
    except HTTPException as answer:
        print(json.dumps([answer.status_code, answer.detail["error"]]))

asyncio.run(main())
"""


def test_the_litellm_gate_answers_a_refused_tool_403_naming_it() -> None:
    """A pass-through to Anthropic's messages with code execution is answered 403 by the
    gate's hook, naming the tool, before any hold is asked for (no sidecar runs)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    body = messages({"type": "code_execution_20250825", "name": "code_execution"})
    done = subprocess.run(
        [sys.executable, "-c", GATE_SCRIPT, json.dumps(body)],
        capture_output=True, env=env, timeout=120, check=True, text=True,
    )  # fmt: skip
    status, said = json.loads(done.stdout)
    assert (403, "the code_execution_20250825 tool bills its container") == (status, said[:52])


def test_web_fetches_settle_at_their_tokens_alone() -> None:
    """A message whose server tools fetched pages and searched the web settles the searches
    as a fee and the fetches at their tokens: no web_fetch fee the book has no price for."""
    usage = messages_usage(
        {
            "input_tokens": 10, "output_tokens": 5,
            "server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 3},
        }
    )  # fmt: skip
    assert usage is not None
    assert (("web_search", 2),) == usage.tool_calls
