"""`earmark reconcile`'s pass over OpenAI background responses: in-doubt holds whose metered
client recorded a background response's id (the label openai.response_id) and ended
before the response did. With --project-key-file the response is retrieved by its id
(GET {api_base}/responses/{id}), checked (earmark.client.openai_background.ending: the
response asked for, in its published shape, its counts whole numbers from 0) and, ended,
resolved with --apply at its usage, priced as the hold's call was (its provider and
model, the tier the response ran at), the response named as evidence.

The usage reports cannot place such a call: OpenAI bills a background response when it
ends, maybe hours after the minute its hold was sent in. So every background hold still
in doubt is shown to the reports' pass as a call in flight: its minute, and the minutes
around it, resolve nothing by the reports.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from earmark import limits
from earmark.client.openai_background import (
    RESPONSE_ID_LABEL,
    Ended,
    InvalidResponseError,
    ending,
)
from earmark.core.model import HoldState
from earmark.core.reconcile import Resolution, Sent, Tokens
from earmark.ops.connect import Admin, OpsError
from earmark.ops.reports import ReportReader, openai_response
from earmark.v1 import budget_pb2 as pb


class Found(StrEnum):
    """What retrieving a background response found."""

    # Ended, with its usage (or cancelled with none): --apply resolves it.
    ENDED = "ended"
    # Still queued or in progress: left in doubt.
    RUNNING = "running"
    # Ended without the usage that would price it (failed): left for an operator.
    UNPRICED = "unpriced"
    # The retrieve failed, or its answer failed the checks: nothing is applied.
    REFUSED = "refused"
    # Past reconcile_responses_max this run: left for the next.
    DEFERRED = "deferred"
    # No --project-key-file: nothing retrieved.
    UNREAD = "unread"


# What leaves the run failing (exit 3): a hold that needs someone.
FAILING = frozenset({Found.UNPRICED, Found.REFUSED, Found.UNREAD})


@dataclass(frozen=True)
class Background:
    """An in-doubt hold of a background response, and what this run found of it."""

    call: Sent
    response_id: str
    found: Found = Found.UNREAD
    note: str = ""
    status: str = ""
    ended: Ended | None = None
    # With --apply: None when not applied, "" when resolved, else why ResolveHold refused.
    refused: str | None = None

    @property
    def resolved(self) -> bool:
        return self.refused == ""


def background_holds(admin: Admin, calls: list[Sent]) -> list[Background]:
    """The in-doubt calls among calls whose hold records a background response's id,
    oldest first."""
    doubted = {c.reservation_id: c for c in calls if c.state is HoldState.IN_DOUBT}
    if not doubted:
        return []
    request = pb.ListHoldsRequest(
        state=pb.RESERVATION_STATE_IN_DOUBT, page_size=limits.page_size_max
    )
    found = []
    for _ in range(limits.reconcile_pages_max):
        page = admin.call("ListHolds", request, pb.ListHoldsResponse)
        for hold in page.holds:
            call = doubted.get(hold.reservation_id)
            response_id = hold.labels.get(RESPONSE_ID_LABEL, "")
            if call is not None and response_id:
                found.append(Background(call, response_id, note="no --project-key-file"))
        if not page.next_page_token:
            return sorted(found, key=lambda b: (b.call.sent_at, b.call.reservation_id))
        request.page_token = page.next_page_token
    raise OpsError(f"the in-doubt holds span more than {limits.reconcile_pages_max} pages")


def retrieve(reader: ReportReader, backgrounds: list[Background]) -> list[Background]:
    """Each one's response, retrieved and checked; past reconcile_responses_max, deferred."""
    most = limits.reconcile_responses_max
    return [
        _read(reader, b) if n < most else replace(b, found=Found.DEFERRED, note=f"past {most}")
        for n, b in enumerate(backgrounds)
    ]


def _read(reader: ReportReader, b: Background) -> Background:
    try:
        answer = openai_response(reader, b.response_id)
        ended = ending(answer, b.response_id)
    except (OpsError, InvalidResponseError) as error:
        return replace(b, found=Found.REFUSED, note=str(error)[:300])
    if ended is None:
        status = str(answer.get("status"))
        return replace(b, found=Found.RUNNING, status=status, note=f"still {status}")
    if ended.usage is None and not ended.billed_nothing:
        note = f"{ended.status} without its usage: for an operator (earmark holds resolve)"
        return replace(b, found=Found.UNPRICED, status=ended.status, ended=ended, note=note)
    return replace(b, found=Found.ENDED, status=ended.status, ended=ended)


def evidence(b: Background) -> str:
    """What proves the resolve: the response, its status and its counts."""
    assert b.ended is not None
    u = b.ended.usage
    counts = "no usage reported" if u is None else (
        f"{u.input_tokens} input ({u.cached_input_tokens} cached, "
        f"{u.cache_write_input_tokens} cache-written), {u.output_tokens} output tokens"
    )  # fmt: skip
    return f"openai response {b.response_id} {b.ended.status}: {counts}"[
        : limits.evidence_length_max
    ]


def apply(admin: Admin, provider: str, backgrounds: list[Background]) -> list[Background]:
    """ResolveHold for each ended one, at its usage (at 0 for one cancelled with none),
    priced as its call was; one refused (settled meanwhile) is said and the others go on."""
    done = []
    for b in backgrounds:
        if b.found is not Found.ENDED or b.ended is None:
            done.append(b)
            continue
        request = pb.ResolveHoldRequest(reservation_id=b.call.reservation_id, evidence=evidence(b))
        u = b.ended.usage
        if u is None:
            request.used = 0
        else:
            request.usage.CopyFrom(pb.TokenUsage(
                input_tokens=u.input_tokens, cached_input_tokens=u.cached_input_tokens,
                output_tokens=u.output_tokens, requests=1, provider=provider,
                model=b.call.model, service_tier=u.service_tier,
                cache_write_input_tokens=u.cache_write_input_tokens,
                tool_calls=dict(u.tool_calls),
            ))  # fmt: skip
        try:
            admin.call("ResolveHold", request, pb.SettleResponse)
        except OpsError as refused:
            done.append(replace(b, refused=str(refused)))
            continue
        done.append(replace(b, refused=""))
    return done


def in_flight(calls: list[Sent], backgrounds: list[Background]) -> list[Sent]:
    """calls, each background hold not resolved shown as a call in flight (HELD): the
    reports bill it when it ends, not in the minute it was sent."""
    open_ids = {b.call.reservation_id for b in backgrounds if not b.resolved}
    return [
        replace(c, state=HoldState.HELD)
        if c.reservation_id in open_ids and c.state is HoldState.IN_DOUBT
        else c
        for c in calls
    ]


def failing(backgrounds: list[Background], applying: bool) -> bool:
    """Whether a background hold needs someone: unread, refused, unpriced, refused by
    ResolveHold, or resolvable and not applied."""
    return any(
        b.found in FAILING or bool(b.refused) or (b.found is Found.ENDED and not applying)
        for b in backgrounds
    )


def as_resolutions(backgrounds: list[Background]) -> list[tuple[Resolution, str]]:
    """The resolves applied (or refused), as the reports' pass counts its own for the
    metrics: each with "" or why it was refused."""
    found = []
    for b in backgrounds:
        if b.refused is None or b.ended is None:
            continue
        u = b.ended.usage
        tokens = None if u is None else Tokens(
            u.input_tokens, u.cached_input_tokens, u.output_tokens, 1,
            u.cache_write_input_tokens,
        )  # fmt: skip
        resolution = Resolution(
            b.call.reservation_id, b.call.model, b.call.service_tier, tokens, evidence(b), False
        )
        found.append((resolution, b.refused))
    return found


def as_json(b: Background) -> dict[str, Any]:
    u = b.ended.usage if b.ended is not None else None
    return {
        "reservation_id": b.call.reservation_id, "budget_id": b.call.budget_id,
        "response_id": b.response_id, "found": str(b.found), "status": b.status,
        "note": b.note,
        "usage": None if u is None else {
            "input": u.input_tokens, "cached": u.cached_input_tokens,
            "cache_written": u.cache_write_input_tokens, "output": u.output_tokens,
            "tool_calls": dict(u.tool_calls),
        },
        "resolved": b.resolved, "refused": b.refused or "",
    }  # fmt: skip


def as_rows(backgrounds: list[Background]) -> list[list[str]]:
    """The table's rows: each hold, its response, what was found and done."""
    rows = []
    for b in backgrounds:
        done = "resolved" if b.resolved else f"not resolved: {b.refused}" if b.refused else ""
        note = b.note or (evidence(b).split(": ", 1)[-1] if b.ended is not None else "")
        rows.append([b.call.reservation_id, b.response_id, str(b.found), done or note])
    return rows
