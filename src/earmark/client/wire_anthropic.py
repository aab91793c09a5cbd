"""Anthropic at the wire: the Messages API held, capped and settled from the usage
Anthropic reports (the anthropic SDK's Usage and MessageDeltaUsage types: cache reads and
writes by TTL, server tool use, service tier).

Every POST is routed by ROUTES, its whole path after the base URL's own path (none:
Anthropic's paths start with /v1): metered, POST /v1/messages (create,
create(stream=True), stream, parse, and beta.messages'); free, passed through, counting a
message's tokens (/v1/messages/count_tokens), cancelling a message batch, and files (a
standing cost); every other POST (message batches, skills, managed agents and their
sessions, administration...) is refused before it is sent, naming it. A request that is
not a POST passes. The anthropic package opens no websocket.

A request's tools are read by their type (TOOLS): the web search is held for its max_uses
and settled at the searches the usage counts; tools that bill only tokens pass; code
execution (billed by container time), the advisor (another model's tokens), and a type
Earmark has not classified are refused before anything is held or sent
(ToolNotMeteredError).

Anthropic's input_tokens counts neither cache reads nor cache writes; Earmark's counts every
input token, so they are added. A stream reports its usage twice: message_start's message
(input counts) and message_delta's cumulative usage (output, and input again once a server
tool has run); the last value of each field is the bill.
"""

from __future__ import annotations

import json
from typing import Any

from earmark.client.meter import Meter
from earmark.client.wire import (
    FREE,
    REFUSED,
    TOKENS_ONLY,
    Call,
    Provider,
    Route,
    Routes,
    Tally,
    Tool,
    Tools,
    held_tools,
    number,
    prompt_estimate,
    reported,
    with_cap,
)
from earmark.client.wire_usage import reported_count, served_tier
from earmark.core.prices import Usage, counts

PROVIDER = "anthropic"

_WEB_SEARCH = Tool(fee="web_search")
_CODE_EXECUTION = Tool(
    refused="bills its container's running time, which Earmark cannot hold",
)
# Every tool type of the Messages API (the anthropic package's ToolUnionParam and
# BetaToolUnionParam), by what it bills beyond its tokens; a type not listed is refused. A
# type names its tool and version (web_search_20250305). tests/client/test_tools.py reads
# the installed package's types and fails on one not listed here.
TOOLS: Tools = {
    # Held: a fee per search, priced as web_search, held for each tool's max_uses and
    # settled at usage.server_tool_use.web_search_requests.
    "web_search_20250305": _WEB_SEARCH,
    "web_search_20260209": _WEB_SEARCH,
    "web_search_20260318": _WEB_SEARCH,
    # Tokens only, run at Anthropic for no fee: a web fetch bills the fetched content's
    # tokens (its count of calls is not settled as a fee: _TOOL_COUNTS); tool
    # search loads the caller's deferred tools; an MCP toolset's server is the caller's.
    "web_fetch_20250910": TOKENS_ONLY,
    "web_fetch_20260209": TOKENS_ONLY,
    "web_fetch_20260309": TOKENS_ONLY,
    "web_fetch_20260318": TOKENS_ONLY,
    "tool_search_tool_bm25": TOKENS_ONLY,
    "tool_search_tool_bm25_20251119": TOKENS_ONLY,
    "tool_search_tool_regex": TOKENS_ONLY,
    "tool_search_tool_regex_20251119": TOKENS_ONLY,
    "mcp_toolset": TOKENS_ONLY,
    # Tokens only: the caller's own tools (custom: a tool with no type), and the tools the
    # caller runs (bash, a text editor, a computer, a browser, memory).
    "custom": TOKENS_ONLY,
    "bash_20241022": TOKENS_ONLY,
    "bash_20250124": TOKENS_ONLY,
    "text_editor_20241022": TOKENS_ONLY,
    "text_editor_20250124": TOKENS_ONLY,
    "text_editor_20250429": TOKENS_ONLY,
    "text_editor_20250728": TOKENS_ONLY,
    "computer_20241022": TOKENS_ONLY,
    "computer_20250124": TOKENS_ONLY,
    "computer_20251124": TOKENS_ONLY,
    "computer_toolset_20260801": TOKENS_ONLY,
    "browser_toolset_20260801": TOKENS_ONLY,
    "memory_20250818": TOKENS_ONLY,
    # Refused: code execution bills container hours, and the advisor another model's
    # tokens, priced at that model's rates (the hold prices the request's model alone).
    "code_execution_20250522": _CODE_EXECUTION,
    "code_execution_20250825": _CODE_EXECUTION,
    "code_execution_20260120": _CODE_EXECUTION,
    "code_execution_20260521": _CODE_EXECUTION,
    "advisor_20260301": Tool(
        refused="bills another model's tokens at that model's rates, which Earmark cannot hold",
    ),
}
# What a request's service_tier asks that runs at the default tier.
_DEFAULT_TIERS = ("auto", "standard_only")
# How usage.server_tool_use names the calls of each kind that bills a fee. Web fetches
# (web_fetch_requests) bill their tokens alone, as Anthropic's pricing says: settled as a
# fee they would need a web_fetch price the book has no source for, and the Settle would be
# refused for it.
_TOOL_COUNTS = {"web_search_requests": "web_search"}
_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cache_creation",
    "server_tool_use",
    "service_tier",
)


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(
            len(str(part.get("text", ""))) + len(json.dumps(part.get("input", ""), default=str))
            for part in value
            if isinstance(part, dict)
        )
    return 0


def _server_tools(body: dict[str, Any], default: int) -> list[tuple[str, int]]:
    """The fees a request's tools may bill, each kind held for its tool's max_uses (default
    without one); raises ToolNotMeteredError for a tool whose fee cannot be held."""
    found: list[tuple[str, int]] = []
    for kind, tool in held_tools(body.get("tools"), TOOLS, untyped="custom"):
        uses = tool.get("max_uses")
        found.append((kind, uses if isinstance(uses, int) and uses > 0 else default))
    return found


def messages_usage(usage: dict[str, Any]) -> Usage | None:
    """An Anthropic usage as Earmark prices it: every input token counted, the 1-hour
    cache writes apart, and the server tools' calls by kind; None when a count is not
    believed (wire_usage.reported_count): the call is left in doubt."""
    found = [
        reported_count(usage.get(name))
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
        )
    ]
    if None in found:
        return None
    given, output, written, read = (n or 0 for n in found)
    by_ttl = usage.get("cache_creation") or {}
    long = min(written, number(by_ttl.get("ephemeral_1h_input_tokens")))
    tools = usage.get("server_tool_use") or {}
    return Usage(
        input_tokens=given + written + read,
        output_tokens=output,
        cached_input_tokens=read,
        cache_write_input_tokens=written,
        cache_write_long_input_tokens=long,
        service_tier=served_tier(usage.get("service_tier")),
        tool_calls=counts((kind, number(tools.get(name))) for name, kind in _TOOL_COUNTS.items()),
    )


class Messages:
    """POST .../v1/messages."""

    def call(self, body: dict[str, Any], meter: Meter) -> Call:
        # Read first: a tool whose fee cannot be held refuses the request before its hold.
        tool_calls = counts(_server_tools(body, meter.tool_calls_max))
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        chars = _chars(body.get("system"))
        if body.get("tools"):
            chars += len(json.dumps(body["tools"], default=str))
        for message in messages:
            chars += _chars(message.get("content"))
        most = body.get("max_tokens")
        tier = body.get("service_tier")
        return Call(
            model=str(body.get("model", "")),
            prompt_tokens=prompt_estimate(chars, len(messages)),
            asked=most if isinstance(most, int) and most > 0 else None,
            stream=bool(body.get("stream")),
            service_tier=tier if isinstance(tier, str) and tier not in _DEFAULT_TIERS else "",
            tool_calls_max=tool_calls,
        )

    def sent(
        self, body: dict[str, Any], call: Call, cap: int | None
    ) -> tuple[dict[str, Any], bool]:
        return with_cap(body, "max_tokens", cap), False

    def usage(self, answer: Any, call: Call) -> Usage | None:
        usage = reported(answer)
        return None if usage is None else messages_usage(usage)

    def tally(self, call: Call, hidden_usage: bool) -> Tally:
        return _MessagesTally()


class _MessagesTally:
    """message_start's usage, updated field by field by message_delta's cumulative one;
    the bill is known once message_delta has come."""

    def __init__(self) -> None:
        self._fields: dict[str, Any] = {}
        self._final = False

    def keep(self, event: str, data: Any) -> bool:
        if not isinstance(data, dict):
            return True
        kind = event or str(data.get("type", ""))
        if kind == "message_start" and isinstance(data.get("message"), dict):
            self._merge(data["message"].get("usage"))
        elif kind == "message_delta":
            self._merge(data.get("usage"))
            self._final = True
        return True

    def _merge(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._fields.update(
                {k: v for k, v in usage.items() if k in _USAGE_FIELDS and v is not None}
            )

    def usage(self) -> Usage | None:
        return messages_usage(self._fields) if self._final else None


# Every POST of Anthropic's API, by the path after the base URL's own path (none), with
# what Earmark does with it; a POST it does not list is refused too.
# tests/client/test_routes.py sends every method of the installed anthropic package and
# fails on a POST not listed here.
ROUTES = Routes(
    {
        # Metered: held, capped and settled at the provider's usage.
        "/v1/messages": Messages(),
        # Free: counting tokens and cancelling bill nothing; files are a standing cost.
        "/v1/messages/count_tokens": FREE,
        "/v1/messages/batches/{message_batch_id}/cancel": FREE,
        "/v1/files": FREE,
        # Refused: work that bills once started, out of the call that started it (message
        # batches; managed agents, their sessions, environments, deployments and dreams).
        "/v1/messages/batches": REFUSED,
        "/v1/skills/**": REFUSED,
        "/v1/agents/**": REFUSED,
        "/v1/sessions/**": REFUSED,
        "/v1/environments/**": REFUSED,
        "/v1/deployments/**": REFUSED,
        "/v1/dreams/**": REFUSED,
        "/v1/memory_stores/**": REFUSED,
        "/v1/vaults/**": REFUSED,
        "/v1/tunnels/**": REFUSED,
        "/v1/user_profiles/**": REFUSED,
        # Refused: administration, no metered worker's job; a metered client mints no key
        # and lifts no spend limit.
        "/v1/organizations/**": REFUSED,
        "/v1/compliance/**": REFUSED,
    }
)
# The anthropic package's websocket surfaces: none (tests/client/test_routes.py looks).
SOCKETS: tuple[str, ...] = ()


def routing(path: str, prefix: str = "") -> Route | str | None:
    """The route of a POST to path, under a base URL whose own path is prefix; FREE for one
    that bills nothing; None otherwise (refused)."""
    return ROUTES.routing(path, prefix)


def provider(name: str = PROVIDER, prefix: str = "") -> Provider:
    """Anthropic (or an Anthropic-compatible API, priced under name) under a base URL whose
    own path is prefix, and its SDK's base error."""
    import anthropic

    def routed(path: str) -> Route | str | None:
        return routing(path, prefix)

    return Provider(name, routed, anthropic.AnthropicError, SOCKETS)
