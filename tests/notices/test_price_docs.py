"""docs/notices.md's price.changed example is what core.notices writes for the versions it
describes, byte for byte once serialized, so a receiver's author can code against it."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from earmark.core import notices
from earmark.core.prices import Price
from tests.notices.test_docs import block


def test_the_price_changed_example_is_the_payload_the_sidecar_writes() -> None:
    """The example is price_event's payload for version 3 of gpt-4o's priority tier, put
    dated, replacing version 2 of the same tier (version 1, another tier, is not it)."""
    captured = datetime(2026, 12, 14, 9, 30, tzinfo=UTC)
    old = Price(
        "openai", "gpt-4o", 2, datetime(2026, 6, 1, tzinfo=UTC), None, 4_250_000, 17_000_000,
        cached_input_per_mtok=2_125_000, source="https://openai.com/api/pricing",
        max_output_tokens=16_384, service_tier="priority", tool_fees=(("web_search", 10_000),),
    )  # fmt: skip
    other_tier = Price("openai", "gpt-4o", 1, datetime(2026, 1, 1, tzinfo=UTC), None, 1, 1)
    new = Price(
        "openai", "gpt-4o", 3, datetime(2027, 1, 1, tzinfo=UTC), None, 3_750_000, 15_000_000,
        cached_input_per_mtok=1_875_000, source="https://openai.com/api/pricing",
        captured_at=captured, max_output_tokens=16_384, service_tier="priority",
        tool_fees=(("web_search", 10_000),),
    )  # fmt: skip
    before = notices.replaced([other_tier, old, new], new)
    event = notices.price_event(new, before, datetime(2027, 1, 1, 0, 0, 0, 408_000, tzinfo=UTC))
    documented = json.loads(block("json", '"type": "price.changed"'))
    assert (documented, "") == (event.payload, event.budget_id)
