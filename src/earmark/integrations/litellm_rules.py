"""What the LiteLLM gate decides without LiteLLM: which budgets a request holds on, which
of the proxy's call types bill and how each is read, how a failed call's hold ends, and
what a refusal tells the caller. Plain data in, answers out; earmark.integrations.litellm
wires these into LiteLLM's CustomLogger hooks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
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
from earmark.client.wire import FREE as FREE_ROUTE
from earmark.client.wire import Route, Routing
from earmark.client.wire_openai import Chat, Embeddings, Responses
from earmark.core.model import Outcome, RefusalReason

# The key's, team's or organization's metadata field that names the budget, and the field
# that names more budgets the same hold is taken on (all or nothing).
BUDGET_FIELD = "earmark_budget_id"
ALSO_FIELD = "earmark_also_budget_ids"
# The metadata field that lists the budgets a key (or its team, or organization) may choose
# with the header, beyond those the metadata already names.
ALLOWED_FIELD = "earmark_allowed_budget_ids"
# The request header that chooses the budget, among those the metadata allows.
BUDGET_HEADER = "x-earmark-budget"
# The team's or organization's metadata field that gives each end user a budget of its own:
# a budget id whose one whole '/'-separated segment is END_USER ("acme/end-user/{end_user}").
# A request with an end user (LiteLLM's end_user_id: the body's `user`, or a customer
# header) holds on that id with END_USER replaced by the end user's id; a budget template
# matching it (earmark templates put) makes the budget on the end user's first request.
END_USER_FIELD = "earmark_end_user_budget"
END_USER = "{end_user}"

# How long a sent request's outcome is waited for after its handler ends, and the holds'
# lease (unset: the sidecar's default; each hold renews while its call runs).
GRACE_ENV = "EARMARK_LITELLM_OUTCOME_GRACE_SECONDS"
LEASE_ENV = "EARMARK_LEASE_SECONDS"
# Set to 1 where only the proxy's admins make and change keys: then a key's own metadata may
# name budgets its team or organization does not (see budgets_of).
TRUST_KEYS_ENV = "EARMARK_LITELLM_TRUST_KEY_METADATA"

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
# listing, deleting and cancelling what was made before, files and vector store files, and
# moderations (free at OpenAI).
FREE = frozenset(
    {
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
        "list_containers", "alist_containers", "retrieve_container", "aretrieve_container",
        "delete_container", "adelete_container", "list_container_files",
        "alist_container_files", "get_assistants", "aget_assistants", "delete_assistant",
        "adelete_assistant", "aget_thread", "get_thread", "aget_messages", "get_messages",
        "video_retrieve_job", "avideo_retrieve_job", "video_get_character",
        "avideo_get_character", "list_mcp_tools",
    }
)  # fmt: skip
# LiteLLM's pass-through prefixes that reach a provider whose wire format Earmark meters, and
# the provider each reaches. Every other pass-through prefix is refused.
PASS_THROUGH = {"/openai": "openai", "/openai_passthrough": "openai", "/anthropic": "anthropic"}
# Call types whose route the gate reads itself: LiteLLM's pass-through endpoints, held when
# the route and body are one Earmark meters (PASS_THROUGH) and refused otherwise.
PASS_THROUGH_CALL_TYPES = frozenset(
    {"pass_through_endpoint", "llm_passthrough_route", "allm_passthrough_route"}
)
# Call types that bill, or may, and that Earmark cannot price: answered 403, never sent.
# Named one by one so that a test can hold them against the installed LiteLLM's CallTypes:
# a call type LiteLLM adds is refused too, and the test names it for a decision.
REFUSED = frozenset(
    {
        "atext_completion", "text_completion", "image_generation", "aimage_generation",
        "image_edit", "aimage_edit", "atranscription", "transcription", "aspeech", "speech",
        "rerank", "arerank", "search", "asearch", "decisions", "adecisions", "systemone",
        "asystemone", "_arealtime", "_aresponses_websocket", "create_batch", "acreate_batch",
        "anthropic_messages", "aanthropic_messages", "create_assistants",
        "acreate_assistants", "acreate_thread", "create_thread", "a_add_message",
        "add_message", "arun_thread", "run_thread", "arun_thread_stream", "run_thread_stream",
        "create_fine_tuning_job", "acreate_fine_tuning_job", "create_video", "acreate_video",
        "video_generation", "avideo_generation", "video_remix", "avideo_remix",
        "video_create_character", "avideo_create_character", "video_edit", "avideo_edit",
        "video_extension", "avideo_extension", "vector_store_file_create",
        "avector_store_file_create", "vector_store_file_update", "avector_store_file_update",
        "vector_store_create", "avector_store_create", "vector_store_search",
        "avector_store_search", "ingest", "aingest", "query", "aquery", "create_interaction",
        "acreate_interaction", "create_container", "acreate_container",
        "upload_container_file", "aupload_container_file", "create_sandbox", "acreate_sandbox",
        "delete_sandbox", "adelete_sandbox", "run_code", "arun_code", "code_interpreter_tool",
        "acode_interpreter_tool", "compact_responses", "acompact_responses",
        "generate_content", "agenerate_content", "generate_content_stream",
        "agenerate_content_stream", "ocr", "aocr", "call_mcp_tool", "asend_message",
        "send_message", "acreate_skill",
    }
)  # fmt: skip


class GateError(Exception):
    """A request the gate does not send, with the HTTP status LiteLLM answers it with."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        kind: str = "",
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        # LiteLLM's error type for the answer ("": the one LiteLLM gives the status).
        self.kind = kind


@dataclass(frozen=True, slots=True)
class Budgets:
    """Where a request's hold is taken: the budget, and the budgets it nests in."""

    budget_id: str
    also_budget_ids: tuple[str, ...] = ()


def _named(metadata: Mapping[str, Any] | None, field: str) -> str:
    value = (metadata or {}).get(field)
    return value if isinstance(value, str) else ""


def _listed(metadata: Mapping[str, Any] | None, field: str) -> list[str]:
    value = (metadata or {}).get(field)
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list):
        return [part for part in value if isinstance(part, str) and part]
    return []


def _levels_budgets(metadata: Mapping[str, Any] | None) -> set[str]:
    """Every budget one level's metadata names, nests or allows."""
    named = _named(metadata, BUDGET_FIELD)
    return {
        *([named] if named else []),
        *_listed(metadata, ALSO_FIELD),
        *_listed(metadata, ALLOWED_FIELD),
    }


def _key_within(
    key: Mapping[str, Any] | None,
    team: Mapping[str, Any] | None,
    organization: Mapping[str, Any] | None,
    trust_keys: bool,
) -> None:
    """A key's metadata is written by whoever may make or change the key, which in LiteLLM
    includes an internal user for keys of their own; its team's and organization's by their
    admins. So every budget the key's metadata names, nests or allows must be one its team
    or organization names, nests or allows (unless trust_keys: only admins make keys).
    Raises GateError (403) otherwise, naming none of the team's budgets."""
    mine = _levels_budgets(key)
    if not mine or trust_keys:
        return
    above = _levels_budgets(team) | _levels_budgets(organization)
    if not above:
        raise GateError(
            403,
            "this key's own metadata names Earmark budgets, and its team and organization "
            f"allow none: name them in the team's or organization's {ALLOWED_FIELD} (or set "
            f"{TRUST_KEYS_ENV}=1 where only admins make keys); not sent",
        )
    stray = sorted(mine - above)
    if stray:
        shown = ", ".join(repr(b[: limits.label_value_length_max]) for b in stray[:3])
        raise GateError(
            403,
            f"this key's metadata names budgets its team and organization do not allow "
            f"({shown}): list them in the team's or organization's {ALLOWED_FIELD}; not sent",
        )


# One segment of an end-user budget id, the end user's and the field's others: printable
# ASCII without spaces and none of '/' (a segment of its own), '{' and '}' (no placeholder),
# '*' (a template's wildcard).
_SEGMENT = re.compile(r"[\x21-\x29\x2b-\x2e\x30-\x7a\x7c\x7e]+")


def _end_user_pattern(
    key: Mapping[str, Any] | None,
    team: Mapping[str, Any] | None,
    organization: Mapping[str, Any] | None,
    trust_keys: bool,
    end_user: str,
) -> str:
    """The earmark_end_user_budget that applies: the team's, else the organization's ("":
    neither sets it), checked when the request has an end user. A key's own metadata may
    not set it, since an internal user may write it and would then choose which budgets the
    end users' ids name: GateError (403), unless trust_keys (only admins make keys), when
    the key's comes first."""
    mine = (key or {}).get(END_USER_FIELD)
    if mine and not trust_keys:
        raise GateError(
            403,
            f"this key's own metadata sets {END_USER_FIELD}, which only its team's or "
            f"organization's metadata may set (or set {TRUST_KEYS_ENV}=1 where only admins "
            "make keys); not sent",
        )
    levels = [("key", key), ("team", team), ("organization", organization)]
    for where, metadata in levels if trust_keys else levels[1:]:
        value = (metadata or {}).get(END_USER_FIELD)
        if not value:
            continue
        if not end_user:
            return str(value)
        segments = value.split("/") if isinstance(value, str) else []
        others = [segment for segment in segments if segment != END_USER]
        if (
            len(segments) - len(others) != 1
            or not others
            or not all(_SEGMENT.fullmatch(segment) for segment in others)
        ):
            raise GateError(
                403,
                f"the {where}'s {END_USER_FIELD} must be a budget id with {END_USER} as one "
                f"whole '/'-separated segment, once, beside at least one other (like "
                f"acme/end-user/{END_USER}); not sent",
            )
        return str(value)
    return ""


def end_user_budget(pattern: str, end_user: str) -> str:
    """The end user's budget: pattern with END_USER replaced by the end user's id, which the
    caller chooses and so must be one segment (_SEGMENT) of at most
    limits.litellm_end_user_chars_max characters, else GateError (400). The error shows at
    most that many characters of the id."""
    most = limits.litellm_end_user_chars_max
    if len(end_user) > most:
        raise GateError(
            400,
            f"the request's end user id (its `user`) is {len(end_user)} characters; at most "
            f"{most} for a budget per end user; not sent",
        )
    if not _SEGMENT.fullmatch(end_user):
        raise GateError(
            400,
            f"the request's end user id (its `user`) {end_user[:most]!r} is not one budget id "
            "segment: printable ASCII without spaces, '/', '*', '{' or '}'; not sent",
        )
    budget_id = pattern.replace(END_USER, end_user)
    # The sidecar's bound on a budget id (shorter than a label's): past it, the gate answers
    # rather than sending a Reserve the sidecar refuses.
    if len(budget_id) > limits.budget_id_length_max:
        raise GateError(
            400,
            f"the end user's budget id is {len(budget_id)} characters; at most "
            f"{limits.budget_id_length_max}; not sent",
        )
    return budget_id


def budgets_of(
    key: Mapping[str, Any] | None,
    team: Mapping[str, Any] | None,
    organization: Mapping[str, Any] | None,
    headers: Mapping[str, str],
    master: bool = False,
    trust_keys: bool = False,
    end_user: str | None = None,
) -> Budgets:
    """The budgets a request holds on: the most specific budget that metadata names (the
    key's, else the team's, else the organization's) and, nesting it, the others they name
    and every earmark_also_budget_ids. A key's own metadata counts only within what its team
    or organization allows (_key_within).

    The x-earmark-budget header chooses the budget only among those the metadata allows
    (any level's earmark_allowed_budget_ids, and the budgets it already names), or for the
    proxy's master key (master); the budgets the metadata names still nest the choice. A
    header naming any other budget is refused (403), so that a key never spends a budget it
    was not given. Raises GateError (403) when nothing names a budget, so that no call goes
    out unheld.

    A request with an end user (end_user, LiteLLM's end_user_id) whose team or organization
    sets earmark_end_user_budget holds on the end user's budget (end_user_budget), nested by
    the header's choice, if any, then the budgets the metadata names, as a named budget is
    nested; it must be nested by one at least (403), since the caller chooses its end user.
    Without an end user the rules above apply."""
    _key_within(key, team, organization, trust_keys)
    end_user = end_user or ""
    pattern = _end_user_pattern(key, team, organization, trust_keys, end_user)
    levels = [key, team, organization]
    named = [budget for budget in (_named(level, BUDGET_FIELD) for level in levels) if budget]
    listed = [b for level in levels for b in _listed(level, ALSO_FIELD)]
    chosen = _header(headers)
    if chosen:
        allowed = {*named, *listed, *(b for lv in levels for b in _listed(lv, ALLOWED_FIELD))}
        if not master and chosen not in allowed:
            raise GateError(
                403,
                f"the {BUDGET_HEADER} header names a budget this key may not use: list it in "
                f"the key's, team's or organization's {ALLOWED_FIELD}; not sent",
            )
    # The budgets in order, the one held on first and those nesting it after.
    order = [chosen, *named] if chosen else named
    if pattern and end_user:
        order = [end_user_budget(pattern, end_user), *order]
    if not order and pattern:
        raise GateError(
            403,
            f"no Earmark budget for this request: its team's or organization's "
            f"{END_USER_FIELD} holds each end user's calls on their own budget, and the "
            "request names no end user (the `user` field); not sent",
        )
    if not order:
        raise GateError(
            403,
            f"no Earmark budget for this request: set {BUDGET_FIELD} in the key's or team's "
            f"metadata (a key may choose among its {ALLOWED_FIELD} with the {BUDGET_HEADER} "
            "header)",
        )
    budget_id, rest = order[0], order[1:]
    also: list[str] = []
    for candidate in [*rest, *listed]:
        if candidate != budget_id and candidate not in also:
            also.append(candidate)
    if pattern and end_user and not also:
        # The caller chooses its end user's id, and a template makes a fresh budget for
        # each new one: unnested, a key could spend without bound by naming new end users.
        raise GateError(
            403,
            f"{END_USER_FIELD} needs a budget beside it that holds every end user's calls "
            f"too ({BUDGET_FIELD} or {ALSO_FIELD} in the team's or organization's metadata): "
            "the caller names its end user, and each new one gets a budget of its own; "
            "not sent",
        )
    if len(also) > limits.also_budget_ids_max:
        raise GateError(
            400,
            f"{ALSO_FIELD}: at most {limits.also_budget_ids_max} budgets, not {len(also)}",
        )
    if len(budget_id) > limits.label_value_length_max:
        raise GateError(400, f"{BUDGET_HEADER}: at most {limits.label_value_length_max} characters")
    return Budgets(budget_id, tuple(also))


def _header(headers: Mapping[str, str]) -> str:
    for name, value in headers.items():
        if name.lower() == BUDGET_HEADER and isinstance(value, str):
            return value.strip()
    return ""


def route_of(call_type: str) -> Route | None:
    """How a call type is read and held; None for one that bills nothing. Raises
    GateError (403) for one that bills and that Earmark cannot price, which is not sent.
    The pass-through call types are read by pass_through_of, from their route."""
    route = ROUTES.get(call_type)
    if route is None and call_type not in FREE:
        raise GateError(
            403,
            f"Earmark cannot price LiteLLM call type {call_type!r}; not sent (the gate "
            "meters chat completions, responses and embeddings)",
        )
    return route


@dataclass(frozen=True, slots=True)
class PassThrough:
    """A pass-through request the gate holds: the provider its prefix reaches, and the
    provider's billable route its path takes."""

    provider: str
    route: Route


def _provider_routing(provider: str) -> Routing:
    if provider == "anthropic":
        from earmark.client import wire_anthropic

        return wire_anthropic.routing
    from earmark.client import wire_openai

    return wire_openai.routing


def pass_through_of(request_route: str | None, body: Mapping[str, Any]) -> PassThrough | None:
    """How a request to one of LiteLLM's pass-through routes is held (None: it bills
    nothing). Held: a path under a prefix that reaches OpenAI's or Anthropic's API whose
    POST Earmark meters, with a body that names a model and does not stream. Passed: a path
    whose POST bills nothing at that provider. Refused (GateError 403, nothing sent):
    every other provider's prefix, and every other path, since the pass-through sends the
    proxy's own provider key and the gate cannot tell a GET from a POST here."""
    path = request_route or ""
    shown = path[: limits.label_value_length_max]
    if not plain_path(path):
        # LiteLLM builds the upstream URL from the decoded path: a "?" or "#" cuts it and
        # dot segments are resolved, so "/v1/chat/completions/.%3F" would be classified as
        # one path and sent as another.
        raise GateError(
            403,
            f"the pass-through path {shown!r} has characters or segments the gate does not "
            "send (?, #, %, \\, control characters, empty or dot segments); not sent",
        )
    prefix = next(
        (p for p in sorted(PASS_THROUGH, key=len, reverse=True) if path.startswith(p + "/")),
        None,
    )
    if prefix is None:
        raise GateError(
            403,
            f"Earmark cannot meter the pass-through route {shown!r}; not sent"
            " (only OpenAI's and Anthropic's metered endpoints pass through the gate)",
        )
    provider = PASS_THROUGH[prefix]
    found = _provider_routing(provider)(path[len(prefix) :])
    if found == FREE_ROUTE:
        return None
    if found is None or isinstance(found, str):
        raise GateError(403, f"Earmark cannot meter {shown!r} through the pass-through; not sent")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise GateError(
            403,
            f"{shown}: a pass-through to a metered endpoint takes a JSON body naming its "
            "model; not sent (reads go through the proxy's own routes)",
        )
    if body.get("stream"):
        raise GateError(
            400,
            f"{shown}: a streamed pass-through is not metered (it passes the provider's "
            "chunks on unread); not sent: stream through the proxy's own route",
        )
    refuse_unmetered(found, body)
    return PassThrough(provider, found)


# What a pass-through path may hold: no query or fragment marks, no escapes, no control
# characters; its segments neither empty nor dot segments nor hidden.
_UNSAFE_PATH = re.compile(r"[?#%\\\x00-\x1f\x7f]")


def plain_path(path: str) -> bool:
    """path is one the gate classifies exactly as LiteLLM will send it."""
    segments = path.split("/")[1:]
    return (
        path.startswith("/")
        and not _UNSAFE_PATH.search(path)
        and all(segment and not segment.startswith(".") for segment in segments)
    )


def refuse_unmetered(route: Route, body: Mapping[str, Any]) -> None:
    """Raises GateError (400) for a body the gate's route would hold but could not settle: a
    background Responses call answers before it runs, with no usage, and bills when it ends,
    which LiteLLM logs no event for."""
    if isinstance(route, Responses) and body.get("background"):
        raise GateError(
            400,
            "background: a background response through Earmark's gate is not metered (it is "
            "billed when it ends, after its answer); not sent: call it without background, or "
            "through earmark's metered OpenAI client",
        )


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


# The status and error type LiteLLM answers its own budget errors with (litellm's
# budget_exceeded_status_code, 422 by default, and ProxyErrorTypes.budget_exceeded): the
# OpenAI and Anthropic SDKs do not retry it. A refusal that waiting will not mend is answered
# so, and one that waiting mends with 429 and Retry-After.
BUDGET_EXCEEDED = "budget_exceeded"
BUDGET_EXCEEDED_STATUS = 422


# Refusals of a limit that cannot be read now, which the caller may send again later: a plan
# limit unknown, and in a region (issue 48) a share whose lease ended or is too short for
# the hold, until the region reaches its home again.
UNAVAILABLE_NOW = frozenset(
    {
        RefusalReason.LIMIT_UNAVAILABLE,
        RefusalReason.SHARE_LEASE_ENDED,
        RefusalReason.HOLD_OUTLIVES_SHARE,
    }
)


def refusal_error(
    refusal: Refusal, now: datetime, unit: str = "", budget_status: int = BUDGET_EXCEEDED_STATUS
) -> GateError:
    """A refusal as LiteLLM answers it, naming Earmark's reason, the budget that refused and
    what it has left. Waiting helps a full rate window (429, Retry-After its wait) and a
    budget whose period resets within limits.litellm_retry_after_seconds_max (429,
    Retry-After until the reset); a limit that cannot be read now (UNAVAILABLE_NOW) is a 503,
    which clients retry; any other refusal is final, LiteLLM's own budget error (budget_status,
    budget_exceeded), which the SDKs do not retry."""
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
    wait = refusal.retry_after.total_seconds() if refusal.retry_after is not None else None
    if wait is None and refusal.resets_at is not None:
        until = (refusal.resets_at - now).total_seconds()
        if until <= limits.litellm_retry_after_seconds_max:
            wait = max(0.0, until)
            message += f"; the budget resets at {refusal.resets_at.isoformat()}"
    if wait is not None:
        headers["retry-after"] = str(max(1, int(wait + 0.999)))
        return GateError(429, message, headers)
    if refusal.reason in UNAVAILABLE_NOW:
        return GateError(503, message, headers)
    return GateError(budget_status, message, headers, kind=BUDGET_EXCEEDED)


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
