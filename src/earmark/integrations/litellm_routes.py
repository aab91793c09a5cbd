"""Every route of LiteLLM's proxy, classified by what it means for money, and the guard the
gate puts in front of the proxy for the routes no hook of LiteLLM's sees.

A route of the proxy is one of:
- GATED: its handler runs LiteLLM's request processing, which calls the gate's pre-call hook
  with a call type; the call type decides (litellm_rules: held, free or refused, and any
  call type the gate does not know is refused);
- PASS_THROUGH: one of LiteLLM's pass-through endpoints, whose hook the gate reads by route
  (litellm_rules.pass_through_of: OpenAI's and Anthropic's metered paths held, the rest
  refused);
- SOCKET: a websocket (realtime, live sessions, the Responses socket, the websocket
  pass-throughs), which runs no pre-call hook: the guard refuses it before it opens;
- REFUSED: an HTTP route that calls models with the proxy's own keys outside any hook
  (LiteLLM's model health checks, its shadow evaluations): the guard answers it 403;
- NO_PROVIDER: reaches no model (keys, teams, budgets, spend, settings, the UI, docs).

The classification is by LiteLLM's own route tags, with the untagged routes named by path:
tests/integrations/test_litellm_routes.py holds it against the installed LiteLLM's whole
route table (lazy features registered), so that a route or tag an upgrade adds fails the
test until it is classified here.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from earmark import limits
from earmark.integrations.litellm_rules import PASS_THROUGH


class RouteClass(enum.StrEnum):
    GATED = "gated"
    PASS_THROUGH = "pass-through"
    SOCKET = "socket"
    REFUSED = "refused"
    NO_PROVIDER = "no provider"


# LiteLLM's tags of the routes that call a model through its request processing (the
# pre-call hook runs with the route's call type).
GATED_TAGS = frozenset(
    {
        "chat/completions", "completions", "embeddings", "responses", "images", "audio",
        "moderations", "rerank", "ocr", "search", "batch", "files", "fine-tuning",
        "assistants", "containers", "videos", "interactions", "google genai endpoints",
        "rag", "skills", "realtime", "decisions", "mcp", "[beta] MCP",
        "[beta] Anthropic `/v1/messages`", "[beta] Anthropic Messages Token Counting",
        "[beta] Anthropic Skills API", "Claude Code gateway", "OpenAI Evals API",
        "OpenAI Evals API - Runs", "gemini managed agents", "[beta] A2A Agents", "Agents",
        "[beta] Agents", "vector store management", "vector_store_files", "Prompt Management",
    }
)  # fmt: skip
# LiteLLM's tags of the routes that reach no model: the proxy's own administration.
NO_PROVIDER_TAGS = frozenset(
    {
        "model management", "Budget & Spend Tracking", "team management",
        "Customer Management", "health", "Internal User management", "public",
        "tag management", "key management", "organization management", "experimental",
        "credential management", "agent tracing", "config.yaml", "auto router",
        "workflow management", "Cost Tracking", "budget management", "caching",
        "SSO Settings", "Settings", "user agent analytics", "Agent Management",
        "UI Settings", "memory management", "Telemetry", "project management", "llm utils",
        "Invite Links", "UI Theme Settings", "Lens", "plugins", "Fallback Management",
        "Cache Settings", "Coordination Redis Settings", "email management", "providers",
        "Logging Callbacks", "moyai", "Router Settings", "Audit Logging", "alerting",
        "adaptive_router", "Claude Code Marketplace", "UI Session", "rust control plane",
        "Cost Optimization", "Guardrails", "Policies", "utils", "policy management",
        "model insights", "Search Tools", "tool management", "Config Overrides",
        "[beta] Anthropic Event Logging", "✨ SCIM v2 (Enterprise Only)", "CloudZero",
        "Vantage", "prompts", "JWT Key Mapping", "compliance", "access group management",
    }
)  # fmt: skip
# A tag of LiteLLM's pass-through endpoints ends so ("OpenAI Pass-through", "pass-through").
PASS_THROUGH_TAG_SUFFIX = "pass-through"
# HTTP routes that call models with the proxy's own keys outside any hook, whatever their
# tag says: the model health checks (GET /health calls every model; test_connection the one
# it is given), the auto router's shadow evaluation, the admin's AI usage chat and policy
# suggestions, and RAG ingestion (its OCR and embedding models, chosen by the caller).
REFUSED_ROUTES = frozenset(
    {
        ("GET", "/health"),
        ("POST", "/health/test_connection"),
        ("POST", "/auto_router/shadow_eval/start"),
        ("POST", "/usage/ai/chat"),
        ("POST", "/policy/templates/suggest"),
        ("POST", "/policy/templates/enrich"),
        ("POST", "/policy/templates/enrich/stream"),
        ("POST", "/rag/ingest"),
        ("POST", "/v1/rag/ingest"),
    }
)
# LiteLLM's pass-through prefixes the gate reads itself (litellm_rules.PASS_THROUGH): every
# other pass-through prefix is refused by the guard, since some (/azure, /azure_ai,
# /nvidia_nim, /vllm) send a request to a model group without running any hook.
GATED_PASS_THROUGH_PREFIXES = frozenset(PASS_THROUGH)
# The routes LiteLLM leaves untagged, by path: none calls a model but the queued chat
# completion, which runs the same request processing as /chat/completions.
UNTAGGED = {
    "/queue/chat/completions": RouteClass.GATED,
    **{
        path: RouteClass.NO_PROVIDER
        for path in (
            "/", "/routes", "/login", "/v2/login", "/v3/login", "/v3/login/exchange",
            "/onboarding/get_token", "/onboarding/claim_token", "/get_logo_url", "/get_image",
            "/get_favicon", "/public/complexity_router/fuse_presets",
            "/config/pass_through_endpoint/team/{team_id}", "/config/pass_through_endpoint",
            "/config/pass_through_endpoint/{endpoint_id}", "/team/available",
            "/management/v1/users/me", "/provider/budgets", "/debug/asyncio-tasks",
            "/memory-usage-in-mem-cache", "/memory-usage-in-mem-cache-items",
            "/debug/memory/summary", "/debug/memory/details", "/debug/memory/gc/configure",
            "/debug/report", "/otel-spans", "/liteadmin/slack/connect/{token}", "/robots.txt",
            "/litellm/.well-known/litellm-ui-config", "/.well-known/litellm-ui-config",
            "/lazy/warm/{name}", "/openapi.json", "/docs/oauth2-redirect", "/redoc",
            "/_next", "/litellm-asset-prefix/_next", "/ui", "/swagger",
        )
    },
    # Guardrails run on the guardrail's own provider, not on a model Earmark budgets.
    "/apply_guardrail": RouteClass.NO_PROVIDER,
    "/guardrails/apply_guardrail": RouteClass.NO_PROVIDER,
    # LiteLLM's MCP gateway, vector stores and indexes: their call types decide (tool calls,
    # stores made and searched are refused; reads pass).
    **{
        path: RouteClass.GATED
        for path in (
            "/mcp/proxy", "/mcp", "/toolset/{toolset_name}/mcp", "/{mcp_server_name}/mcp",
            "/vector_stores", "/v1/vector_stores", "/vector_stores/{vector_store_id}",
            "/v1/vector_stores/{vector_store_id}", "/vector_stores/{vector_store_id:path}/search",
            "/v1/vector_stores/{vector_store_id:path}/search", "/v1/indexes",
        )
    },
}  # fmt: skip


def route_class(
    path: str, methods: Iterable[str], tags: Iterable[str], websocket: bool
) -> RouteClass | None:
    """What one route of the proxy is (None: not classified, which the route table's test
    reports). A route is REFUSED for any of its methods that REFUSED_ROUTES names."""
    if websocket:
        return RouteClass.SOCKET
    if any((method, path) in REFUSED_ROUTES for method in methods):
        return RouteClass.REFUSED
    named = list(tags)
    if any(tag.lower().endswith(PASS_THROUGH_TAG_SUFFIX) for tag in named):
        return RouteClass.PASS_THROUGH
    if not named:
        return UNTAGGED.get(path)
    if any(tag in GATED_TAGS for tag in named):
        return RouteClass.GATED
    if all(tag in NO_PROVIDER_TAGS for tag in named):
        return RouteClass.NO_PROVIDER
    return None


Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def refusal_of(scope: Scope, refused_prefixes: frozenset[str] = frozenset()) -> str:
    """Why the guard refuses a request ("": it passes): every websocket, the REFUSED HTTP
    routes, and every path under refused_prefixes (the pass-through prefixes the gate does
    not read), by the path the proxy routes on (its root path taken off)."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", "")).rstrip("/")
    if root and path.startswith(root + "/"):
        path = path[len(root) :]
    shown = path[: limits.label_value_length_max]
    if scope.get("type") == "websocket":
        return (
            f"Earmark's gate refuses the websocket {shown!r}: a socket passes no hook the "
            "gate could hold it in; not opened"
        )
    if scope.get("type") != "http":
        return ""
    if (str(scope.get("method")), path) in REFUSED_ROUTES:
        return (
            f"Earmark's gate refuses {scope.get('method')} {shown!r}: it calls models with "
            "the proxy's own keys outside any hook; not sent"
        )
    first = "/" + path.lstrip("/").split("/", 1)[0]
    if first in refused_prefixes:
        return (
            f"Earmark's gate refuses the pass-through {shown!r}: only OpenAI's and "
            "Anthropic's metered endpoints pass through the gate; not sent"
        )
    return ""


class Guard:
    """The proxy's router behind Earmark's guard: what refusal_of names is answered 403
    before any route of the proxy runs; everything else goes on to the router."""

    def __init__(self, inner: ASGIApp, refused_prefixes: frozenset[str]) -> None:
        self.inner = inner
        self.refused_prefixes = refused_prefixes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        why = refusal_of(scope, self.refused_prefixes)
        if not why:
            await self.inner(scope, receive, send)
            return
        body = json.dumps({"error": {"message": why, "type": "earmark_refused"}}).encode()
        start = {
            "status": 403,
            "headers": [(b"content-type", b"application/json"), (b"x-earmark-refused", b"1")],
        }
        if scope["type"] == "http":
            await send({"type": "http.response.start", **start})
            await send({"type": "http.response.body", "body": body})
            return
        # A websocket: refused before it is accepted, with the body where the server can
        # send one (the ASGI websocket.http.response extension), else a plain 403.
        await receive()  # websocket.connect
        if "websocket.http.response" in (scope.get("extensions") or {}):
            await send({"type": "websocket.http.response.start", **start})
            await send({"type": "websocket.http.response.body", "body": body})
        else:
            await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})


def guard(app: Any, pass_through_prefixes: Iterable[str]) -> None:
    """Puts the guard in front of a Starlette app's router (LiteLLM's proxy), once: inside
    every middleware, so that the path it reads has had the proxy's per-request root path
    taken off. pass_through_prefixes: the proxy's pass-through prefixes; those the gate does
    not read are refused."""
    router = app.router
    if getattr(router, "earmark_guarded", False):
        return
    refused = frozenset(pass_through_prefixes) - GATED_PASS_THROUGH_PREFIXES
    router.middleware_stack = Guard(router.middleware_stack, refused)
    router.earmark_guarded = True
