"""`earmark reconcile`'s pass over OpenAI background responses: in-doubt holds whose metered
client recorded a background response's id (the label openai.response_id) and ended
before the response did. With --project-key-file the response is retrieved by its id
(GET {api_base}/responses/{id}), checked (earmark.client.openai_background.ending: the
response asked for, in its published shape, its counts whole numbers from 0; and
check_held: the model the hold's call was held for, created no earlier than the hold, no
more output tokens than the hold could pay for) and, ended, resolved with --apply at its
usage, priced as the hold's call was (its provider and model, the tier the response ran
at), the response named as evidence.

The label is the worker's to write, so it is evidence to check, not to believe: a
response id on more than one in-doubt hold is refused for each of them (one response
cannot be two calls, and resolving each at its usage would bill it twice).

The usage reports cannot place such a call: OpenAI bills a background response when it
ends, maybe hours after the minute its hold was sent in. So every background hold still
in doubt is shown to the reports' pass as a call in flight: its minute, and the minutes
around it, resolve nothing by the reports.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from earmark import limits
from earmark.client.openai_background import (
    RESPONSE_ID_LABEL,
    Ended,
    Held,
    InvalidResponseError,
    check_held,
    ending,
)
from earmark.core import prices
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
    # Its response id is on another in-doubt hold too: neither is retrieved nor applied.
    DUPLICATE = "duplicate"
    # Past reconcile_responses_max this run: left for the next.
    DEFERRED = "deferred"
    # No --project-key-file: nothing retrieved.
    UNREAD = "unread"


# What leaves the run failing (exit 3): a hold that needs someone.
FAILING = frozenset({Found.UNPRICED, Found.REFUSED, Found.DUPLICATE, Found.UNREAD})


@dataclass(frozen=True)
class Background:
    """An in-doubt hold of a background response, and what this run found of it."""

    call: Sent
    response_id: str
    # When its hold was made (Hold.created_at): its response cannot be older.
    created_at: datetime
    found: Found = Found.UNREAD
    note: str = ""
    # What a refusal (or a duplicate) failed on: the answer's field ("model", "created_at",
    # "usage.output_tokens"...), or the hold's label.
    failed: str = ""
    status: str = ""
    ended: Ended | None = None
    # With --apply: None when not applied, "" when resolved, else why ResolveHold refused.
    refused: str | None = None

    @property
    def resolved(self) -> bool:
        return self.refused == ""


def background_holds(admin: Admin, calls: list[Sent]) -> list[Background]:
    """The in-doubt calls among calls whose hold records a background response's id,
    oldest first; those whose id is on another in-doubt hold too (of any budget, key or
    time) found DUPLICATE."""
    doubted = {c.reservation_id: c for c in calls if c.state is HoldState.IN_DOUBT}
    if not doubted:
        return []
    request = pb.ListHoldsRequest(
        state=pb.RESERVATION_STATE_IN_DOUBT, page_size=limits.page_size_max
    )
    found = []
    carriers: defaultdict[str, list[str]] = defaultdict(list)
    for _ in range(limits.reconcile_pages_max):
        page = admin.call("ListHolds", request, pb.ListHoldsResponse)
        for hold in page.holds:
            response_id = hold.labels.get(RESPONSE_ID_LABEL, "")
            if not response_id:
                continue
            carriers[response_id].append(hold.reservation_id)
            call = doubted.get(hold.reservation_id)
            if call is not None:
                made = hold.created_at.ToDatetime(tzinfo=UTC)
                found.append(Background(call, response_id, made, note="no --project-key-file"))
        if not page.next_page_token:
            found = [_duplicate(b, carriers[b.response_id]) for b in found]
            return sorted(found, key=lambda b: (b.call.sent_at, b.call.reservation_id))
        request.page_token = page.next_page_token
    raise OpsError(f"the in-doubt holds span more than {limits.reconcile_pages_max} pages")


def _duplicate(b: Background, holding: list[str]) -> Background:
    """b, found DUPLICATE when its response id is on other in-doubt holds too."""
    others = [rid for rid in holding if rid != b.call.reservation_id]
    if not others:
        return b
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    note = (
        f"response {b.response_id} is on {len(holding)} in-doubt holds (also {shown}): one "
        "response is one call, so it is applied to none of them (for an operator)"
    )
    return replace(b, found=Found.DUPLICATE, failed=RESPONSE_ID_LABEL, note=note[:300])


def retrieve(
    admin: Admin, provider: str, reader: ReportReader, backgrounds: list[Background]
) -> list[Background]:
    """Each one's response (but a duplicate's), retrieved and checked against its hold;
    past reconcile_responses_max, deferred."""
    most = limits.reconcile_responses_max
    bounds = Bounds(admin, provider)
    done, read = [], 0
    for b in backgrounds:
        if b.found is Found.DUPLICATE:
            done.append(b)
        elif read >= most:
            done.append(replace(b, found=Found.DEFERRED, note=f"past {most}"))
        else:
            read += 1
            done.append(_read(reader, b, bounds.held(b)))
    return done


class Bounds:
    """The most output tokens each hold could have paid for, from its call's record (the
    hold's amount, unit, model and tier), its model's prices and its budget's overage
    policy; each model's prices and each budget read once a run.

    The Admin API does not give a hold's shape (the output cap its call was sent with), so
    the cap is bounded by what the hold held: a hold reserved by shape holds at least its
    cap's output at the model's output rate (its tokens, for a budget in tokens), and the
    lowest rate of the tier's versions is taken, whichever version priced it. A SOFT
    budget's call that set no cap was sent with the model's ceiling but held only an
    estimate: on a SOFT budget the bound is at least the tier's highest ceiling."""

    def __init__(self, admin: Admin, provider: str) -> None:
        self.admin = admin
        self.provider = provider
        self._prices: dict[str, list[pb.Price]] = {}
        self._soft: dict[str, bool] = {}

    def held(self, b: Background) -> Held:
        call = b.call
        if call.model not in self._prices:
            request = pb.ListPricesRequest(provider=self.provider, model=call.model)
            found = self.admin.call("ListPrices", request, pb.ListPricesResponse)
            self._prices[call.model] = list(found.prices)
        if call.budget_id not in self._soft:
            request_budget = pb.GetBudgetRequest(budget_id=call.budget_id)
            budget = self.admin.call("GetBudget", request_budget, pb.BudgetState)
            self._soft[call.budget_id] = budget.overage_policy == pb.OVERAGE_POLICY_SOFT
        most, how = output_tokens_max(
            call, self._prices[call.model], soft=self._soft[call.budget_id]
        )
        return Held(call.model, b.created_at, most, how)


def output_tokens_max(
    call: Sent, versions: list[pb.Price], *, soft: bool
) -> tuple[int | None, str]:
    """The most output tokens call's hold could have paid for, and how that was found;
    None: no bound (the model's output is free at every version of its tier)."""
    wanted = prices.tier(call.service_tier)
    at_tier = [
        p for p in versions if p.model == call.model and prices.tier(p.service_tier) == wanted
    ]
    ceiling = max((p.max_output_tokens for p in at_tier), default=0) if soft else 0
    most: int
    if call.unit == prices.TOKENS:
        most, how = call.amount, f"the {call.amount} tokens its hold held"
    elif call.unit != prices.USD_MICROS:
        most, how = 0, f"a budget in {call.unit!r} prices no tokens"
    elif not at_tier:
        tier = f" at tier {wanted!r}" if wanted else ""
        most, how = 0, f"no price of {call.model!r}{tier} to bound it by"
    else:
        rate = min(p.output_usd_micros_per_mtok for p in at_tier)
        if rate <= 0:
            return None, "its output is free"
        most = call.amount * prices.TOKENS_PER_RATE // rate
        how = f"the {call.amount} usd_micros its hold held, at {rate} per million output tokens"
    if ceiling > most:
        return ceiling, "the model's ceiling, which a SOFT budget's call may be sent with"
    return most, how


def _read(reader: ReportReader, b: Background, held: Held) -> Background:
    try:
        answer = openai_response(reader, b.response_id)
        ended = ending(answer, b.response_id)
        check_held(answer, ended, held)
    except OpsError as error:
        return replace(b, found=Found.REFUSED, note=str(error)[:300])
    except InvalidResponseError as error:
        return replace(b, found=Found.REFUSED, failed=error.field, note=str(error)[:300])
    if ended is None:
        status = str(answer.get("status"))
        return replace(b, found=Found.RUNNING, status=status, note=f"still {status}")
    if ended.usage is None and not ended.billed_nothing:
        note = f"{ended.status} without its usage: for an operator (earmark holds resolve)"
        return replace(b, found=Found.UNPRICED, status=ended.status, ended=ended, note=note)
    return replace(b, found=Found.ENDED, status=ended.status, ended=ended, note="")


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
        "failed": b.failed, "note": b.note,
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
        if b.failed:
            note = f"{b.failed}: {note}"
        rows.append([b.call.reservation_id, b.response_id, str(b.found), done or note])
    return rows
