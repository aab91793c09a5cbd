"""The real LiteLLM proxy for the gate's tests: `litellm --config` as a subprocess on
127.0.0.1, without LiteLLM's database, its one model group routed to a fake OpenAI and
Earmark's gate in litellm_settings.callbacks, as docs/litellm.md configures it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.helpers import child, eventually, free_port

ROOT = Path(__file__).resolve().parents[2]
# The proxy's master key (general_settings.master_key).
MASTER = "sk-master"
MODEL = "gpt-4o"
# LiteLLM imports most of its package at start: a cold start takes seconds on 2 cores.
START_SECONDS = 90.0


GATE = "earmark.integrations.litellm.gate"
# A guardrail-like hook after the gate (tests/integrations/litellm_hooks.py).
GUARD = "tests.integrations.litellm_hooks.guard"


def documented() -> dict[str, Any]:
    """The proxy config docs/litellm.md shows (its first yaml block)."""
    text = (ROOT / "docs" / "litellm.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.DOTALL)
    assert block is not None, "docs/litellm.md shows no yaml config"
    loaded: dict[str, Any] = yaml.safe_load(block.group(1))
    return loaded


def config(
    upstream: str, *, callbacks: tuple[str, ...] = (GATE,), timeout_seconds: float = 30.0
) -> dict[str, Any]:
    """docs/litellm.md's config as it is, but for the upstream (the fake), the upstream's
    timeout, the callbacks after the gate, and custom auth in place of LiteLLM's database."""
    settings = documented()
    (deployment,) = settings["model_list"]
    assert (MODEL, GATE) == (deployment["model_name"], settings["litellm_settings"]["callbacks"])
    deployment["litellm_params"].update(
        api_base=upstream, api_key="sk-upstream", timeout=timeout_seconds
    )
    settings["litellm_settings"]["callbacks"] = list(callbacks)
    settings["general_settings"].update(
        master_key=MASTER, custom_auth="tests.integrations.litellm_auth.user_api_key_auth"
    )
    return settings


@contextlib.asynccontextmanager
async def litellm_proxy(
    settings: dict[str, Any], tmp_path: Path, env: dict[str, str]
) -> AsyncIterator[str]:
    """Serves the LiteLLM proxy with settings until the block ends (also on failure);
    yields its base URL."""
    path = tmp_path / "litellm.yaml"
    path.write_text(yaml.safe_dump(settings))
    port = free_port()
    binary = shutil.which("litellm", path=str(Path(sys.executable).parent)) or "litellm"
    environment = {
        **os.environ,
        **env,
        "PYTHONPATH": str(ROOT),
        # No telemetry, no update checks: the machine has no internet.
        "LITELLM_TELEMETRY": "False",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        # As docs/litellm.md says: LiteLLM's OpenAI embeddings retry on their own otherwise.
        "DEFAULT_MAX_RETRIES": "0",
    }
    log = (tmp_path / "litellm.log").open("w")
    argv = (binary, "--config", str(path), "--host", "127.0.0.1", "--port", str(port))
    async with child(*argv, env=environment, stdout=log, stderr=log, cwd=tmp_path) as process:
        url = f"http://127.0.0.1:{port}"

        # One client for every look while the proxy starts: a client of its own for each
        # (its TLS context made anew) took 20 ms of CPU, hundreds of times per start.
        client = httpx.AsyncClient()

        async def up() -> bool:
            if process.returncode is not None:
                raise AssertionError(f"litellm exited: {(tmp_path / 'litellm.log').read_text()}")
            try:
                answer = await client.get(f"{url}/health/liveliness", timeout=1.0)
            except httpx.HTTPError:
                return False
            return answer.status_code == 200

        try:
            async with client:
                await eventually(up, within_seconds=START_SECONDS, what="the LiteLLM proxy answers")
            yield url
        finally:
            if process.returncode is None:
                process.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 10.0)
            log.close()
