"""Prints the installed LiteLLM's call types and its proxy's whole route table as JSON, lazy
features registered (as LITELLM_DISABLE_LAZY_ROUTES would at start): each route's path, methods,
tags, whether it is a websocket, and whether its handler's source runs LiteLLM's request
processing (which calls the pre-call hooks). Run as a subprocess by the route tests, so
that the proxy's module and its import-time settings stay out of the test process."""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator
from typing import Any

# What a handler that calls a model through LiteLLM's processing, or around it, says.
CALLS_MODELS = re.compile(
    r"base_process_llm_request|ProxyBaseLLMRequestProcessing|pre_call_hook|route_request"
    r"|llm_router\.a\w+\(|litellm\.a(completion|embedding|responses|health_check)\("
    r"|ahealth_check|pass_through_request"
)


def walk(routes: Iterable[Any]) -> Iterator[Any]:
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from walk(inner.routes)
        else:
            yield route


def source(route: Any) -> str:
    try:
        return inspect.getsource(route.endpoint)
    except (AttributeError, OSError, TypeError):
        return ""


def main() -> None:
    from fastapi.routing import APIWebSocketRoute
    from litellm.proxy import proxy_server
    from litellm.proxy._lazy_features import register_all_features
    from litellm.types.utils import CallTypes

    register_all_features(proxy_server.app)
    table = [
        {
            "path": route.path,
            "methods": sorted(getattr(route, "methods", None) or []),
            "tags": [str(tag) for tag in getattr(route, "tags", None) or []],
            "websocket": isinstance(route, APIWebSocketRoute),
            "calls_models": bool(CALLS_MODELS.search(source(route))),
        }
        for route in walk(proxy_server.app.routes)
    ]
    kinds = [str(kind.value) for kind in CallTypes]
    print(json.dumps({"call_types": kinds, "routes": table}))


if __name__ == "__main__":
    main()
    # The table is printed, which is all this process is for: it ends here, without the
    # interpreter's exit (LiteLLM's exit handlers and the teardown of its thousands of
    # modules take about 2 s of CPU).
    sys.stdout.flush()
    os._exit(0)
