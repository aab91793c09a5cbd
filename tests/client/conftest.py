"""The metered-call tests' fixtures: a fake OpenAI and a sidecar that prices its model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.llm_helpers import CACHED, INPUT, OUTPUT, put_price
from tests.conftest import Running
from tests.fake_openai import FakeOpenAI, fake_openai


@pytest.fixture
def provider() -> Iterator[FakeOpenAI]:
    with fake_openai() as fake:
        yield fake


@pytest.fixture
async def priced(sidecar: Running) -> Running:
    """The sidecar with a price for openai/gpt-4o in effect since yesterday."""
    await put_price(
        sidecar,
        "openai",
        "gpt-4o",
        input_usd_micros_per_mtok=INPUT,
        cached_input_usd_micros_per_mtok=CACHED,
        output_usd_micros_per_mtok=OUTPUT,
    )
    return sidecar
