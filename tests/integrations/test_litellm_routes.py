"""Every door of LiteLLM's proxy classified: the installed LiteLLM's call types and its whole
route table (lazy features registered) are held against the gate's tables, so that an
upgrade that adds a call type, a route or a tag fails here until it is classified; and the
real proxy with the gate refuses every websocket and every model probe, sending nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from earmark.integrations.litellm_routes import RouteClass, route_class
from earmark.integrations.litellm_rules import FREE, PASS_THROUGH_CALL_TYPES, REFUSED, ROUTES
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI
from tests.helpers import assert_invariants
from tests.integrations.conftest import SHARED_PROXY
from tests.integrations.litellm_proxy import MASTER

# The three tests read one route table: importing LiteLLM's proxy with every lazy feature
# takes tens of seconds, so they share a worker and the table is read once; the worker of
# the tests that take the proxy started once (tests/integrations/conftest.py).
pytestmark = pytest.mark.xdist_group(SHARED_PROXY)

ROOT = Path(__file__).resolve().parents[2]
# Handlers whose source names a model call that, read, is no call to a provider.
REVIEWED = {
    # Its acompletion is LiteLLM's mock_response, to exercise a logging callback.
    ("GET", "/health/services"),
    # It imports LiteLLM's request processing for its error answers; the guardrail it runs
    # calls the guardrail's own provider.
    ("POST", "/apply_guardrail"),
    ("POST", "/guardrails/apply_guardrail"),
}


@pytest.fixture(scope="module")
def installed() -> dict[str, Any]:
    """The installed LiteLLM's call types and routes, from
    tests/integrations/litellm_route_table.py run once as a subprocess (importing LiteLLM
    here would fetch its price map at import)."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.integrations.litellm_route_table"],
        capture_output=True, env=env, cwd=ROOT, timeout=180, check=True,
    )  # fmt: skip
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def test_every_call_type_of_the_installed_litellm_is_classified(installed: dict[str, Any]) -> None:
    """Each of LiteLLM's call types is held, free, a pass-through or refused, exactly one
    of them, and the gate's tables name no call type LiteLLM does not have."""
    call_types = set(installed["call_types"])
    tables = [set(ROUTES), set(FREE), set(PASS_THROUGH_CALL_TYPES), set(REFUSED)]
    named = [kind for table in tables for kind in table]
    unclassified = sorted(call_types - set(named))
    twice = sorted(kind for kind in set(named) if named.count(kind) > 1)
    unknown = sorted(set(named) - call_types)
    assert ([], [], []) == (unclassified, twice, unknown)


def test_every_route_of_the_installed_proxy_is_classified(installed: dict[str, Any]) -> None:
    """Each of the proxy's routes is gated, a pass-through, a socket, refused or reaches
    no model, and no route classified as reaching no model has a handler that calls one."""
    table = installed["routes"]
    classes = {
        (tuple(r["methods"]), r["path"]): route_class(
            r["path"], r["methods"], r["tags"], r["websocket"]
        )
        for r in table
    }
    unclassified = sorted(f"{' '.join(m)} {p}" for (m, p), c in classes.items() if c is None)
    calling = sorted(
        f"{' '.join(r['methods'])} {r['path']}"
        for r in table
        if r["calls_models"]
        and classes[(tuple(r["methods"]), r["path"])] == RouteClass.NO_PROVIDER
        and not any((m, r["path"]) in REVIEWED for m in r["methods"])
    )
    assert ([], []) == (unclassified, calling)
    assert 900 < len(table)
    sockets = [r["path"] for r in table if r["websocket"]]
    assert {"/v1/realtime", "/openai/{endpoint:path}", "/v1/responses"} <= set(sockets)


def concrete(path: str) -> str:
    """A route's path with each parameter filled in: a realtime path for a pass-through's
    rest, "x" for any other."""
    path = path.replace("{endpoint:path}", "v1/realtime")
    return re.sub(r"\{[^}]+\}", "x", path)


async def test_the_proxy_refuses_every_socket_and_model_probe_unsent(
    priced: Running, provider: FakeOpenAI, proxy: str, installed: dict[str, Any]
) -> None:
    """With the gate in the proxy's callbacks, every websocket route of the installed
    LiteLLM is refused 403 before it opens, naming the route, and so are the model probes
    (GET /health, POST /health/test_connection), RAG ingestion, a pass-through prefix the
    gate does not read (/azure) and a pass-through path LiteLLM would send elsewhere
    (".%3F"); the provider hears nothing, and the proxy still serves."""
    table = installed["routes"]
    sockets = sorted({concrete(r["path"]) for r in table if r["websocket"]})
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    url = proxy
    before = len(provider.state.requests)
    refused: dict[str, tuple[int, bool]] = {}
    for path in sockets:
        with pytest.raises(InvalidStatus) as caught:
            async with connect(
                f"ws{url.removeprefix('http')}{path}?model=gpt-4o",
                additional_headers={"Authorization": f"Bearer {MASTER}"},
                open_timeout=30,
            ):
                pass
        response = caught.value.response
        refused[path] = (response.status_code, path in response.body.decode())
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        auth = {"Authorization": f"Bearer {MASTER}"}
        probes = [
            await http.get("/health", headers=auth),
            await http.post("/health/test_connection", headers=auth, json={}),
            await http.post("/rag/ingest", headers=auth, json={}),
            await http.post(
                "/azure/openai/deployments/gpt-4o/chat/completions", headers=auth, json=chat
            ),
        ]
        trick = await http.post(
            "/openai/v1/chat/completions/.%3F", headers={"Authorization": "Bearer sk-team-a"},
            json=chat,
        )  # fmt: skip
        alive = await http.get("/health/liveliness")
    assert {path: (403, True) for path in sockets} == refused
    assert [403] * 4 == [p.status_code for p in probes]
    assert all("Earmark's gate refuses" in p.json()["error"]["message"] for p in probes)
    assert (403, True) == (trick.status_code, "dot segments" in trick.text)
    assert (200, before) == (alive.status_code, len(provider.state.requests))
    await assert_invariants(priced.dsn)
