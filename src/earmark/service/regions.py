"""The home's Regions service (issue 48, docs/regions.md): a region's sidecar's asks for
its shares of budgets homed here, on the home's region listener. The region is the one its
token names (--region-token-file), never one the request chooses: a region acts on its
own shares alone."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

import structlog

from earmark import limits, validate
from earmark.core import regions
from earmark.errors import InvalidArgument, PermissionDenied, Reason
from earmark.metrics import Metrics
from earmark.service.auth import CALLER
from earmark.service.convert import timestamp
from earmark.service.drain import Drain
from earmark.service.errors import Context
from earmark.service.middleware import rpc
from earmark.store.regions import ShareAskInput, ShareOutcome, ShareView
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc
from earmark.validate import prices as validate_prices

log = structlog.get_logger("earmark.regions")


class HomeStore(Protocol):
    async def answer_shares(self, asks: list[ShareAskInput]) -> list[ShareOutcome]: ...


def _region(request: pb.ShareRequest) -> str:
    """The asking region: its token's name, which the request must repeat."""
    named = validate.identifier("region", request.region, limits.region_name_chars_max)
    caller = CALLER.get()
    if caller is not None and caller.name != named:
        raise PermissionDenied(
            f"region: the token named {caller.name!r} may not act as region {named!r}",
            Reason.REGION_NOT_PERMITTED,
            field="region",
        )
    return named


def _count(field: str, value: int) -> int:
    if not 0 <= value <= limits.limit_units_max:
        raise InvalidArgument(field, f"is {value}; it must be in [0, {limits.limit_units_max}]")
    return value


def share_asks(request: pb.ShareRequest, now: datetime) -> list[ShareAskInput]:
    """The request's asks, checked whole before any is answered; now is the home's clock,
    which every ask's sent_at must agree with (core.regions.sent_at_problem)."""
    region = _region(request)
    if not request.asks:
        raise InvalidArgument("asks", "is empty")
    if len(request.asks) > limits.region_outbox_batch_max:
        raise InvalidArgument(
            "asks", f"holds {len(request.asks)}; at most {limits.region_outbox_batch_max}"
        )
    asks = []
    named: set[str] = set()
    for i, ask in enumerate(request.asks):
        budget_id = validate.identifier(
            f"asks[{i}].budget_id", ask.budget_id, limits.budget_id_length_max
        )
        if budget_id in named:
            raise InvalidArgument(f"asks[{i}].budget_id", f"names {budget_id!r} again")
        caller = CALLER.get()
        if caller is not None and not caller.may_use(budget_id):
            raise PermissionDenied(
                f"asks[{i}].budget_id: the token of region {region!r} may not hold shares of "
                f"budget {budget_id!r}",
                Reason.BUDGET_NOT_PERMITTED,
                field=f"asks[{i}].budget_id",
                budget_id=budget_id,
            )
        named.add(budget_id)
        if not ask.HasField("sent_at"):
            raise InvalidArgument(f"asks[{i}].sent_at", "is required")
        sent_at = validate_prices.timestamp(f"asks[{i}].sent_at", ask.sent_at)
        problem = regions.sent_at_problem(sent_at, now)
        if problem is not None:
            raise InvalidArgument(f"asks[{i}].sent_at", problem)
        asked = regions.Ask(
            region=region,
            sent_at=sent_at,
            want=_count(f"asks[{i}].want", ask.want),
            returned=_count(f"asks[{i}].returned", ask.returned),
            used=_count(f"asks[{i}].used", ask.used),
            need=_count(f"asks[{i}].need", ask.need),
            doubt=_count(f"asks[{i}].doubt", ask.doubt),
            smallest=_count(f"asks[{i}].smallest_need", ask.smallest_need),
        )
        if asked.smallest > asked.need:
            raise InvalidArgument(f"asks[{i}].smallest_need", "is more than need")
        asks.append(ShareAskInput(region, budget_id, asked))
    return asks


def share_answer(outcome: ShareOutcome) -> pb.ShareAnswer:
    answer = outcome.answer
    if not outcome.found or answer is None:
        return pb.ShareAnswer(budget_id=outcome.budget_id, found=False, message=outcome.message)
    return pb.ShareAnswer(
        budget_id=outcome.budget_id,
        found=True,
        asked_at=timestamp(answer.asked_at),
        granted=answer.granted,
        released=answer.released,
        short=answer.short,
        granted_now=outcome.granted_now,
        unit=outcome.unit,
    )


class RegionsService(pb_grpc.RegionsServicer):
    def __init__(
        self, store: HomeStore, metrics: Metrics, drain: Drain, clock: Callable[[], datetime]
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.drain = drain
        self.clock = clock

    @rpc("Share")
    async def Share(self, request: pb.ShareRequest, context: Context) -> pb.ShareResponse:
        asks = share_asks(request, self.clock())
        outcomes = await self.store.answer_shares(asks)
        granted = sum(o.granted_now for o in outcomes)
        log.info("share", region=asks[0].region, asks=len(asks), granted=granted)
        return pb.ShareResponse(answers=[share_answer(o) for o in outcomes])


def share_message(view: ShareView) -> pb.Share:
    """A share as Admin.ListShares answers it."""
    message = pb.Share(
        budget_id=view.budget_id,
        region=view.region,
        home=view.home,
        granted=view.granted,
        released=view.released,
        used=view.used,
        outstanding=view.outstanding,
        doubt=view.doubt,
        reclaimed=view.reclaimed,
    )
    if view.lease_until is not None:
        message.lease_until.CopyFrom(timestamp(view.lease_until))
    if view.heard_at is not None:
        message.heard_at.CopyFrom(timestamp(view.heard_at))
    return message
