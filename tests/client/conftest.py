"""The metered-call tests' fixtures: a fake OpenAI and a fake Anthropic, each with a
sidecar that prices its model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.llm_helpers import (
    CACHED,
    CEILING,
    CLAUDE,
    CLAUDE_RATES,
    INPUT,
    OUTPUT,
    put_price,
)
from tests.conftest import Running
from tests.fake_anthropic import FakeAnthropic, fake_anthropic
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
        max_output_tokens=CEILING,
    )
    return sidecar


@pytest.fixture
def claude() -> Iterator[FakeAnthropic]:
    with fake_anthropic(CLAUDE_RATES) as fake:
        yield fake


@pytest.fixture
async def priced_claude(sidecar: Running) -> Running:
    """The sidecar with a price for anthropic's test model in effect since yesterday, cache
    reads and writes at their own rates."""
    await put_price(
        sidecar,
        "anthropic",
        CLAUDE,
        input_usd_micros_per_mtok=CLAUDE_RATES.input,
        output_usd_micros_per_mtok=CLAUDE_RATES.output,
        cached_input_usd_micros_per_mtok=CLAUDE_RATES.cache_read,
        cache_write_usd_micros_per_mtok=CLAUDE_RATES.cache_write,
        cache_write_long_usd_micros_per_mtok=CLAUDE_RATES.cache_write_long,
        max_output_tokens=CEILING,
        tool_usd_micros={"web_search": CLAUDE_RATES.web_search},
    )
    return sidecar
