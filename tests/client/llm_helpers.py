"""What the metered-call tests share: the test's own prices, what the fake providers' bills
cost at them, and short ways to make budgets and read holds."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

from earmark.client.aio import RetryPolicy
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.fake_anthropic import Rates
from tests.fake_openai import Billed

# The test's own list prices for "gpt-4o", in micro-dollars per million tokens: high, so
# that a $5.00 ceiling is spent in tens of calls.
INPUT, CACHED, OUTPUT = 25_000_000, 12_500_000, 100_000_000
# The test models' output ceiling (Price.max_output_tokens): what a call that sets no
# maximum of its own is held for and told.
CEILING = 4_096
# The test's prices for Anthropic's test model: a cache read at a tenth of the input rate,
# a cache write at one and a quarter times it, as Anthropic prices them.
CLAUDE = "claude-test"
# One-hour cache writes at twice the input rate, and $10 per thousand web searches.
CLAUDE_RATES = Rates(
    input=25_000_000, output=100_000_000, cache_read=2_500_000, cache_write=31_250_000,
    cache_write_long=50_000_000, web_search=10_000,
)  # fmt: skip
QUICK = RetryPolicy(3, 0.001, 0.01)
# One attempt: a failed call leaves one hold to look at.
ONCE = RetryPolicy(1, 0.001, 0.01)


def cost(billed: Billed) -> int:
    """What the provider bills for one answer at the test's prices, rounded up as Earmark
    rounds."""
    micros = (
        (billed.prompt_tokens - billed.cached_tokens) * INPUT
        + billed.cached_tokens * CACHED
        + billed.completion_tokens * OUTPUT
    )
    return -(-micros // 1_000_000)


def micros(tokens: int, rate: int) -> int:
    """tokens at rate (micro-dollars per million tokens), rounded up as Earmark rounds."""
    return -(-tokens * rate // 1_000_000)


async def put_price(s: Running, provider: str, model: str, **rates: Any) -> None:
    """A price for provider's model in effect since yesterday."""
    since = Timestamp()
    since.FromDatetime(datetime.now(UTC) - timedelta(days=1))
    await s.admin.PutPrice(
        pb.PutPriceRequest(
            price=pb.Price(
                provider=provider,
                model=model,
                effective_from=since,
                source="https://example.com/test-prices",
                captured_at=since,
                **rates,
            )
        )
    )


async def budget(
    s: Running, budget_id: str, limit: int, unit: str = "usd_micros", **fields: Any
) -> None:
    await s.admin.PutBudget(
        pb.PutBudgetRequest(budget_id=budget_id, limit=limit, unit=unit, **fields)
    )


async def holds(s: Running, budget_id: str) -> list[pb.Hold]:
    page = await s.admin.ListHolds(pb.ListHoldsRequest(budget_id=budget_id))
    return list(page.holds)


def ask(text: str = "hello", **request: object) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], **request}


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on: a connection to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
