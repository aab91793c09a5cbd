"""What the LiteLLM gate decides without LiteLLM: which budgets a request holds on, which
of the proxy's call types bill and how each is read, how a failed call's hold ends, and
what a refusal tells the caller. Plain data in, answers out; earmark.integrations.litellm
wires these into LiteLLM's CustomLogger hooks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from earmark import limits
from earmark.client.errors import (
    BudgetNotFoundError,
    ClientError,
    EarmarkClientError,
    FailedPreconditionError,
    InvalidArgumentError,
    PermissionDeniedError,
    UnauthenticatedError,
)
from earmark.client.meter import never_sent
from earmark.client.types import Refusal
from earmark.client.wire import Route
from earmark.client.wire_openai import Chat, Embeddings, Responses
from earmark.core.model import Outcome

# The key's, team's or organization's metadata field that names the budget, and the field
# that names more budgets the same hold is taken on (all or nothing).
BUDGET_FIELD = "earmark_budget_id"
ALSO_FIELD = "earmark_also_budget_ids"
# The request header that names the budget when no metadata does.
BUDGET_HEADER = "x-earmark-budget"

# How long a sent request's outcome is waited for after its handler ends, and the holds'
# lease (unset: the sidecar's default; each hold renews while its call runs).
GRACE_ENV = "EARMARK_LITELLM_OUTCOME_GRACE_SECONDS"
LEASE_ENV = "EARMARK_LEASE_SECONDS"

# The proxy's call types that bill, by the OpenAI wire format LiteLLM's request body takes
# for them (LiteLLM's CallTypes: the chat, Responses and embeddings endpoints).
ROUTES: dict[str, Route] = {
    "acompletion": Chat(),
    "completion": Chat(),
    "aresponses": Responses(),
    "responses": Responses(),
    "aembedding": Embeddings(),
    "embedding": Embeddings(),
}
# Call types that reach no model and bill nothing: passed through without a hold. Reading,
# listing, deleting and cancelling what was made before, files and vector store files,
# moderations (free at OpenAI) and LiteLLM's pass-through routes.
FREE = frozenset(
    {
        "pass_through_endpoint", "llm_passthrough_route", "allm_passthrough_route",
        "moderation", "amoderation",
        "get_responses", "aget_responses", "delete_responses", "adelete_responses",
        "cancel_responses", "acancel_responses", "alist_input_items",
        "file_retrieve", "afile_retrieve", "file_delete", "afile_delete", "file_list",
        "afile_list", "create_file", "acreate_file", "file_content", "afile_content",
        "retrieve_batch", "aretrieve_batch", "cancel_batch", "acancel_batch",
        "retrieve_fine_tuning_job", "aretrieve_fine_tuning_job", "list_fine_tuning_jobs",
        "alist_fine_tuning_jobs", "cancel_fine_tuning_job", "acancel_fine_tuning_job",
        "vector_store_file_list", "avector_store_file_list", "vector_store_file_retrieve",
        "avector_store_file_retrieve", "vector_store_file_content",
        "avector_store_file_content", "vector_store_file_delete", "avector_store_file_delete",
        "video_retrieve", "avideo_retrieve", "video_content", "avideo_content", "video_list",
        "avideo_list", "video_delete", "avideo_delete",
    }
)  # fmt: skip


class GateError(Exception):
    """A request the gate does not send, with the HTTP status LiteLLM answers it with."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class Budgets:
    """Where a request's hold is taken: the budget, and the budgets it nests in."""

    budget_id: str
    also_budget_ids: tuple[str, ...] = ()


def _named(metadata: Mapping[str, Any] | None, field: str) -> str:
    value = (metadata or {}).get(field)
    return value if isinstance(value, str) else ""


def _listed(metadata: Mapping[str, Any] | None) -> list[str]:
    value = (metadata or {}).get(ALSO_FIELD)
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [part for part in value if isinstance(part, str) and part]
    return []


def budgets_of(
    key: Mapping[str, Any] | None,
    team: Mapping[str, Any] | None,
    organization: Mapping[str, Any] | None,
    headers: Mapping[str, str],
) -> Budgets:
    """The budgets a request holds on: the most specific budget that metadata names (the
    key's, else the team's, else the organization's) and, nesting it, the others they name
    and every earmark_also_budget_ids; with no metadata naming one, the request's
    x-earmark-budget header. Raises GateError (403) when nothing names a budget, so that no
    call goes out unheld."""
    levels = [key, team, organization]
    named = [_named(level, BUDGET_FIELD) for level in levels]
    chosen = [budget for budget in named if budget]
    if chosen:
        budget_id, rest = chosen[0], chosen[1:]
    else:
        budget_id, rest = _header(headers), []
    if not budget_id:
        raise GateError(
            403,
            f"no Earmark budget for this request: set {BUDGET_FIELD} in the key's or team's "
            f"metadata, or send the {BUDGET_HEADER} header",
        )
    also: list[str] = []
    for candidate in [*rest, *(b for level in levels for b in _listed(level))]:
        if candidate != budget_id and candidate not in also:
            also.append(candidate)
    if len(also) > limits.also_budget_ids_max:
        raise GateError(
            400,
            f"{ALSO_FIELD}: at most {limits.also_budget_ids_max} budgets, not {len(also)}",
        )
    return Budgets(budget_id, tuple(also))


def _header(headers: Mapping[str, str]) -> str:
    for name, value in headers.items():
        if name.lower() == BUDGET_HEADER and isinstance(value, str):
            return value.strip()
    return ""


def route_of(call_type: str) -> Route | None:
    """How a call type is read and held; None for one that bills nothing. Raises
    GateError (403) for one that bills and that Earmark cannot price, which is not sent."""
    route = ROUTES.get(call_type)
    if route is None and call_type not in FREE:
        raise GateError(
            403,
            f"Earmark cannot price LiteLLM call type {call_type!r}; not sent (the gate "
            "meters chat completions, responses and embeddings)",
        )
    return route


@dataclass(frozen=True, slots=True)
class Ending:
    """How a failed call's hold ends: at used (None: what was charged) with outcome."""

    outcome: Outcome
    used: int | None


RELEASED = Ending(Outcome.CANCELLED, 0)
IN_DOUBT = Ending(Outcome.UNKNOWN, None)


def from_provider(error: BaseException) -> bool:
    """LiteLLM's exceptions for a provider's answer name the provider (llm_provider); the
    proxy's own (a hook's HTTPException, a disconnect's 499) do not."""
    return getattr(error, "llm_provider", None) is not None


def failed(error: BaseException | None, dispatched: bool) -> Ending:
    """A call that raised: a provider's 4xx, or a request that never left, billed nothing;
    a timeout, a 5xx or an error without a status may have run at the provider, so the
    hold stays in doubt with its prompt charge until `earmark reconcile` or an operator
    resolves it. The proxy's own error says nothing of the provider: released if the
    request was never sent, in doubt if it was."""
    if error is None or not from_provider(error):
        if error is not None and never_sent(error):
            return Ending(Outcome.FAILED, 0)
        return IN_DOUBT if dispatched else RELEASED
    if never_sent(error):
        return Ending(Outcome.FAILED, 0)
    status = getattr(error, "status_code", None)
    # A timeout (LiteLLM's Timeout carries 408) was sent and may have run.
    if isinstance(status, int) and 400 <= status < 500 and status != 408:
        return Ending(Outcome.FAILED, 0)
    return IN_DOUBT


def refusal_error(refusal: Refusal, unit: str = "") -> GateError:
    """A refusal as LiteLLM answers it: 429, Earmark's reason, the budget that refused and
    what it has left, and Retry-After when a rate window is full."""
    reason = refusal.reason.name.removeprefix("REFUSAL_REASON_")
    budget = refusal.refused_budget_id or refusal.budget_id
    left = "unlimited" if refusal.remaining is None else f"{refusal.remaining}"
    message = (
        f"Earmark refused: {reason} on budget {budget!r} "
        f"(asked {refusal.amount}, remaining {left}{' ' + unit if unit else ''})"
    )
    if refusal.message:
        message += f": {refusal.message}"
    headers = {"x-earmark-refusal": reason, "x-earmark-budget": budget}
    if refusal.remaining is not None:
        headers["x-earmark-remaining"] = str(refusal.remaining)
    if refusal.retry_after is not None:
        headers["retry-after"] = str(max(1, int(refusal.retry_after.total_seconds() + 0.999)))
    return GateError(429, message, headers)


# How a sidecar's error on the Reserve is answered, most specific class first: the caller's
# request (a budget that is not there, a model without a price) is a 4xx; the gate's own
# trouble reaching the sidecar is a 503, after which the request is not sent.
_STATUS_OF: tuple[tuple[type[EarmarkClientError], int], ...] = (
    (BudgetNotFoundError, 404),
    (InvalidArgumentError, 400),
    (FailedPreconditionError, 400),
    (PermissionDeniedError, 403),
    (UnauthenticatedError, 503),
)


def reserve_error(error: EarmarkClientError) -> GateError:
    """An error the Reserve raised, as LiteLLM answers it: the request is not sent."""
    status = next((code for kind, code in _STATUS_OF if isinstance(error, kind)), 503)
    if status >= 500:
        # The gate's own trouble: the caller is not told where the sidecar is (the proxy's
        # log says).
        return GateError(status, "Earmark's sidecar could not hold the request; not sent")
    detail = error.details if isinstance(error, ClientError) else str(error)
    reason = f" ({error.reason})" if error.reason else ""
    return GateError(status, f"Earmark could not hold the request{reason}: {detail}; not sent")


def seconds_of(name: str, given: float | str | None, default: float) -> float:
    """A duration setting: given (a number, or an env variable's text), else default;
    bounded by the limit of its kind, the error naming the variable."""
    if given is None or given == "":
        return default
    most = (
        limits.litellm_outcome_grace_seconds_max
        if name == GRACE_ENV
        else limits.lease_seconds_max_ceiling
    )
    least = limits.lease_seconds_min if name == LEASE_ENV else 0.0
    try:
        seconds = float(given)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, not {given!r}") from None
    if seconds <= 0 or seconds < least or seconds > most:
        raise ValueError(f"{name} must be from {least:g} to {most:g} seconds, not {given!r}")
    return seconds
