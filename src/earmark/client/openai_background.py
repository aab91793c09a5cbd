"""OpenAI's Response object (the Responses API) as Earmark reads it: whether a response is
still running or has ended, and the usage it reports, checked. It imports no HTTP client,
so that both the metered client (wire_openai.py, wire_transport.py) and `earmark reconcile`
(which runs where no provider SDK is installed) read a response the same way.

Why a response runs on after its answer: `responses.create(background=True)` answers at
once with status "queued" (or "in_progress") and usage null, and the model runs on at
OpenAI; `responses.retrieve(id)` (GET .../responses/{id}), a resumed stream (GET
.../responses/{id}?stream=true&starting_after=N) and `responses.cancel(id)` (POST
.../responses/{id}/cancel) answer the same Response later. Its status is one of
ResponseStatus (openai/types/responses/response_status.py): "queued" and "in_progress"
while it runs; "completed", "incomplete", "failed" and "cancelled" once it has ended. Its
usage is a ResponseUsage (response_usage.py): input_tokens (cache reads and writes among
them), input_tokens_details {cached_tokens, cache_write_tokens}, output_tokens (reasoning
among them), present once the response has ended (completed or incomplete always;
cancelled and failed when anything ran).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from earmark import limits
from earmark.client.wire_usage import cache_parts, reported_count, served_tier
from earmark.core.prices import Usage, counts
from earmark.core.reconcile_model import model_family

# The hold label a background response's id is recorded under once OpenAI answers with it
# (a Renew's labels): `earmark reconcile --project-key-file` retrieves the response by it.
RESPONSE_ID_LABEL = "openai.response_id"
RUNNING = frozenset({"queued", "in_progress"})
TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})
# Ended responses that always report their usage.
WITH_USAGE = frozenset({"completed", "incomplete"})
# The output items a Responses answer bills a built-in tool call for.
TOOL_ITEMS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
}


class InvalidResponseError(ValueError):
    """A Response that is not in OpenAI's published shape, or not the one asked for: nothing
    is settled or resolved from it. field names what failed ("usage.output_tokens")."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Ended:
    """How a call that ran on after its answer ended: its final status, and the usage the
    provider reports (None: it reports none)."""

    status: str
    usage: Usage | None

    @property
    def billed_nothing(self) -> bool:
        """Cancelled before it reported any usage: nothing ran that bills."""
        return self.usage is None and self.status == "cancelled"


def valid_id(value: Any) -> bool:
    """A response id a hold label can carry."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= limits.label_value_length_max
        and value.isprintable()
    )


def _count(value: Any, where: str, *, strict: bool) -> int:
    """A token count: absent or null is 0; anything but a whole number from 0 to
    tokens_per_request_max raises when strict, and counts 0 otherwise (as the metered
    client reads an answer it passes on)."""
    found = reported_count(value)
    if found is not None:
        return found
    if strict:
        raise InvalidResponseError(f"{where} is {str(value)[:40]!r}, not a token count", where)
    return 0


def response_usage(response: dict[str, Any], *, strict: bool = False) -> Usage:
    """A Response's usage (it must have one), and the built-in tool calls its output items
    bill. strict: counts that are not whole numbers from 0 up, or cached and cache-written
    tokens past the input they are part of, raise InvalidResponseError."""
    usage = response["usage"]
    details = usage.get("input_tokens_details") or {}
    if not isinstance(details, dict):
        if strict:
            raise InvalidResponseError(
                "usage.input_tokens_details is not an object", "usage.input_tokens_details"
            )
        details = {}
    if strict and not {"input_tokens", "output_tokens"} <= usage.keys():
        raise InvalidResponseError("usage lacks input_tokens or output_tokens", "usage")
    input_tokens = _count(usage.get("input_tokens"), "usage.input_tokens", strict=strict)
    output_tokens = _count(usage.get("output_tokens"), "usage.output_tokens", strict=strict)
    of = "usage.input_tokens_details"
    cached = _count(details.get("cached_tokens"), f"{of}.cached_tokens", strict=strict)
    written = _count(details.get("cache_write_tokens"), f"{of}.cache_write_tokens", strict=strict)
    if strict and cached + written > input_tokens:
        raise InvalidResponseError(
            f"{cached} cached and {written} cache-written tokens of {input_tokens} input tokens",
            of,
        )
    # Read as the metered client passes it on: parts the input cannot hold are priced as
    # input, rather than failing the Settle (wire_usage.py).
    cached, written = cache_parts(input_tokens, cached, written)
    tools: dict[str, int] = {}
    for item in response.get("output") or []:
        kind = TOOL_ITEMS.get(str(item.get("type"))) if isinstance(item, dict) else None
        if kind is not None:
            tools[kind] = tools.get(kind, 0) + 1
    if strict and any(n > limits.tool_calls_per_request_max for n in tools.values()):
        raise InvalidResponseError("more tool calls than one request can make", "output")
    return Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached,
        cache_write_input_tokens=written,
        # The tier the response ran at, which OpenAI bills (a request's may differ).
        service_tier=served_tier(response.get("service_tier")),
        tool_calls=counts(tools.items()),
    )


def ending(response: Any, response_id: str) -> Ended | None:
    """How the response response_id ended, read from a Response object; None while it runs.
    Raises InvalidResponseError for anything else: not a Response, another response's id,
    a status OpenAI does not publish, a usage that is not in its shape, or a completed or
    incomplete response without its usage."""
    if not isinstance(response, dict) or response.get("object", "response") != "response":
        raise InvalidResponseError("the answer is not a Response object", "object")
    if response.get("id") != response_id:
        raise InvalidResponseError(
            f"the answer is response {str(response.get('id'))[:80]!r}, not {response_id!r}",
            "id",
        )
    status = response.get("status")
    if status in RUNNING:
        return None
    if status not in TERMINAL:
        raise InvalidResponseError(
            f"status {str(status)[:40]!r} is none that OpenAI publishes", "status"
        )
    usage = response.get("usage")
    if usage is None:
        if status in WITH_USAGE:
            raise InvalidResponseError(f"a {status} response without its usage", "usage")
        return Ended(str(status), None)
    if not isinstance(usage, dict):
        raise InvalidResponseError("usage is not an object", "usage")
    return Ended(str(status), response_usage(response, strict=True))


@dataclass(frozen=True, slots=True)
class Held:
    """What a hold says of the call it covers. A response found by the id on a hold's label
    (the worker's to write) is that call's only if it agrees: the model the call was held
    for, made no earlier than the hold, and no more output than the hold could pay for."""

    model: str
    created_at: datetime
    # The most output tokens the hold could have paid for (None: no bound), and how that
    # was found, for the refusal's message.
    output_tokens_max: int | None = None
    output_bound: str = ""


def same_model(held: str, answered: str) -> bool:
    """Whether a response of model answered can be a call held for model held: the same
    model, or a dated snapshot of it (gpt-4o-2024-08-06 for gpt-4o; not gpt-4o-mini)."""
    if answered == held:
        return True
    return bool(held) and answered.startswith(f"{held}-") and model_family(answered) == held


def check_held(response: dict[str, Any], ended: Ended | None, held: Held) -> None:
    """Raises InvalidResponseError, naming the field, when response (already read by
    ending) cannot be the call of the hold held: another model, created before the hold
    (by more than limits.reconcile_response_clock_skew_seconds), or ended with more output
    tokens than the hold could pay for."""
    model = response.get("model")
    if not isinstance(model, str) or not same_model(held.model, model):
        raise InvalidResponseError(
            f"the response is of model {str(model)[:80]!r}, the hold's call of {held.model!r}",
            "model",
        )
    created = response.get("created_at")
    if (
        not isinstance(created, int | float)
        or isinstance(created, bool)
        or not math.isfinite(created)
        or created < 0
    ):
        raise InvalidResponseError(f"created_at is {str(created)[:40]!r}, not a time", "created_at")
    skew = limits.reconcile_response_clock_skew_seconds
    if created < held.created_at.timestamp() - skew:
        made = datetime.fromtimestamp(created, held.created_at.tzinfo).isoformat()
        raise InvalidResponseError(
            f"the response was created at {made}, before its hold ({held.created_at.isoformat()}, "
            f"{skew:g} s of clock skew allowed): it cannot be the hold's call",
            "created_at",
        )
    usage = ended.usage if ended is not None else None
    most = held.output_tokens_max
    if usage is not None and most is not None and usage.output_tokens > most:
        raise InvalidResponseError(
            f"{usage.output_tokens} output tokens, more than the hold could pay for: "
            f"{most} ({held.output_bound})",
            "usage.output_tokens",
        )
