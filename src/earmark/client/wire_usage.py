"""What a provider's usage report says of its cache and its service tier, read so that a
report out of its published shape neither fails the Settle nor lowers the charge.

It imports no HTTP client, so that the metered clients (wire_openai.py, wire_anthropic.py),
`earmark reconcile` (openai_background.py) and the LiteLLM gate read them alike.

Why the bounds: the sidecar refuses a usage whose cache reads and writes together exceed
its input tokens, or whose tier is no name it takes (validate/prices.py); a refused Settle
leaves the hold to its lease, and the sweeper then returns it, so the call would be
charged nothing. The cache parts are priced below (reads) or near (writes) the input rate,
so a part the report cannot have is counted as plain input, never as nothing.
"""

from __future__ import annotations

import re
from typing import Any

from earmark import limits

# The characters of a name the sidecar takes (validate.identifier): printable ASCII, no
# spaces.
_NAME = re.compile(r"[\x21-\x7e]+")


def cache_part(value: Any, input_tokens: int) -> int:
    """A count of input tokens read from (or written to) the provider's cache: a whole
    number from 0 to input_tokens; anything else counts 0, its tokens priced as input."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return value if 0 <= value <= min(input_tokens, limits.tokens_per_request_max) else 0


def reported_count(value: Any) -> int | None:
    """A token count from a provider's usage report: absent or null, 0; a whole number
    from 0 to limits.tokens_per_request_max, itself; anything else (a string, a fraction,
    a boolean, a count below 0 or past the bound) None: not believed, so that the call is
    left in doubt rather than settled at a count read as 0."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= limits.tokens_per_request_max else None


def cache_parts(input_tokens: int, read: Any, written: Any) -> tuple[int, int]:
    """(cache reads, cache writes) of input_tokens, each bounded by cache_part; when the two
    together are more than the input, the reads count 0 (their tokens at the input rate,
    the higher of the two)."""
    cached = cache_part(read, input_tokens)
    wrote = cache_part(written, input_tokens)
    if cached + wrote > input_tokens:
        cached = 0
    return cached, wrote


def served_tier(value: Any) -> str:
    """The service tier an answer says it ran at, as given ("default" says the default
    tier, which the price book keys as ""); "" (the tier it was held at) when it names
    none, or a name the sidecar would refuse."""
    if not isinstance(value, str) or len(value) > limits.service_tier_length_max:
        return ""
    return value if _NAME.fullmatch(value) else ""
