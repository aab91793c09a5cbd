"""The gate's tests use the metered-call tests' priced sidecar and fake OpenAI, at addresses
that stay the same for the whole package: each test still has its own sidecar, over its
own emptied database, and its own fake's state, but the sidecar is reached through a relay
(tests/integrations/relay.py) at the port a LiteLLM proxy started earlier was told
(EARMARK_TARGET), and the fake answers where that proxy's config sends. So the tests whose
proxy needs no settings of its own share one (`proxy`): its start, LiteLLM importing most
of its package, takes seconds of CPU each time."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from earmark.server import Sidecar
from tests.client.conftest import priced
from tests.conftest import Running, running, sidecar_settings
from tests.fake_openai import FakeOpenAI, _Handler
from tests.fake_openai_state import OpenAIState
from tests.http_fake import StateServer, serving
from tests.integrations.litellm_proxy import config, litellm_proxy
from tests.integrations.relay import Relay

__all__ = ["priced"]

# The xdist_group of the tests that take `proxy`: one worker runs them all, and starts it
# once for them (`make test` runs with --dist loadgroup).
SHARED_PROXY = "litellm_proxy"
# The xdist_group of the tests that take `lease_proxy` (a short lease and grace).
LEASE_PROXY = "litellm_lease_proxy"
# lease_proxy's settings: the gate's lease (EARMARK_LEASE_SECONDS), its grace for an
# outcome (EARMARK_LITELLM_OUTCOME_GRACE_SECONDS), and LiteLLM's SSE keepalive.
LEASE_SECONDS = 4
GRACE_SECONDS = 1
KEEPALIVE_SECONDS = 30


@dataclass(frozen=True)
class Address:
    """Where a proxy started once reaches each test's sidecar: the relay's port in front of
    its workers' port, and a link to its Admin socket."""

    relay: Relay
    admin_socket: Path

    @property
    def env(self) -> dict[str, str]:
        """The gate's environment to reach them, as env_of(sidecar) gives it."""
        return {
            "EARMARK_TARGET": f"127.0.0.1:{self.relay.port}",
            "EARMARK_ADMIN_TARGET": f"unix:{self.admin_socket}",
        }


@pytest.fixture(scope="package")
def sidecar_address() -> Iterator[Address]:
    # A short folder: a socket path may not pass 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="em-"))
    relay = Relay()
    try:
        yield Address(relay, folder / "admin.sock")
    finally:
        relay.close()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
async def sidecar(dsn: str, socket_dir: Path, sidecar_address: Address) -> AsyncIterator[Running]:
    """The usual test sidecar (tests/conftest.py) over the test's emptied database, reached
    at the package's address while the test runs."""
    async with running(Sidecar(sidecar_settings(dsn, socket_dir)), dsn) as s:
        link = sidecar_address.admin_socket
        staged = link.with_suffix(".next")
        staged.unlink(missing_ok=True)
        staged.symlink_to(s.admin_target.removeprefix("unix:"))
        staged.replace(link)
        with sidecar_address.relay.to(s.sidecar.port):
            yield s


@pytest.fixture(scope="package")
def openai_server() -> Iterator[StateServer[OpenAIState]]:
    """The fake OpenAI's server (tests/fake_openai.py) for the package; each test gives it
    a fresh state (`provider`)."""
    server = StateServer(_Handler, OpenAIState())
    with serving(server, "fake-openai", lambda: server.state.slow.set()):
        yield server


def provider_url(server: StateServer[OpenAIState]) -> str:
    return f"http://127.0.0.1:{server.server_port}/v1"


@pytest.fixture
def provider(openai_server: StateServer[OpenAIState]) -> Iterator[FakeOpenAI]:
    """A fake OpenAI as fake_openai() serves it, with a state of its own for the test (what
    it answers and what it saw), at the package's address; its stalled answers are let go
    when the test ends, as fake_openai() lets them go when it stops."""
    state = OpenAIState()
    openai_server.state = state
    try:
        yield FakeOpenAI(state=state, url=provider_url(openai_server))
    finally:
        state.slow.set()


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def proxy(
    sidecar_address: Address,
    openai_server: StateServer[OpenAIState],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[str]:
    """The real LiteLLM proxy with docs/litellm.md's config, in front of the fake and of
    each test's sidecar, with the upstream of LiteLLM's OpenAI pass-through routes (the
    fake); started once for the tests that take it (each with its own sidecar and fake's
    state, so each its own budgets), stopped when the worker is done with the package.
    Yields its URL."""
    env = {
        **sidecar_address.env,
        "OPENAI_API_BASE": provider_url(openai_server).removesuffix("v1"),
        "OPENAI_API_KEY": "sk-upstream",
    }
    async with litellm_proxy(
        config(provider_url(openai_server)), tmp_path_factory.mktemp("litellm"), env
    ) as url:
        yield url


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def lease_proxy(
    sidecar_address: Address,
    openai_server: StateServer[OpenAIState],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[str]:
    """The real LiteLLM proxy as `proxy` has it, but with the gate's lease LEASE_SECONDS,
    its outcome's grace GRACE_SECONDS and LiteLLM's SSE keepalive on (every
    KEEPALIVE_SECONDS): started once for the tests of holds that outlive a lease or a
    grace (xdist_group LEASE_PROXY), each with its own sidecar and fake's state. Yields its
    URL."""
    settings = config(provider_url(openai_server))
    settings["litellm_settings"]["sse_keepalive_ping_interval_seconds"] = KEEPALIVE_SECONDS
    env = {
        **sidecar_address.env,
        "EARMARK_LEASE_SECONDS": str(LEASE_SECONDS),
        "EARMARK_LITELLM_OUTCOME_GRACE_SECONDS": str(GRACE_SECONDS),
    }
    async with litellm_proxy(settings, tmp_path_factory.mktemp("litellm"), env) as url:
        yield url
