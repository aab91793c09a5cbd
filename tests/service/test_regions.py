"""The home's Regions.Share request checks (issue 48): every ask checked before any is
answered, each problem named by its field; a region acts as its token's region alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from earmark import limits
from earmark.core import regions
from earmark.errors import InvalidArgument, PermissionDenied, Reason
from earmark.service.auth import CALLER, Caller
from earmark.service.convert import timestamp
from earmark.service.regions import share_asks
from earmark.v1 import budget_pb2 as pb

NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)


def request(*asks: pb.ShareAsk, region: str = "eu") -> pb.ShareRequest:
    return pb.ShareRequest(region=region, asks=list(asks))


def ask(budget_id: str = "b", sent_at: datetime = NOW, **counts: int) -> pb.ShareAsk:
    return pb.ShareAsk(budget_id=budget_id, sent_at=timestamp(sent_at), **counts)


def field_of(share: pb.ShareRequest) -> str:
    with pytest.raises(InvalidArgument) as raised:
        share_asks(share, NOW)
    return raised.value.field


def test_a_well_formed_request_is_read_whole() -> None:
    """Each ask becomes core's Ask for the request's region, in order."""
    whole = ask("a", want=5, need=2, returned=1, used=3, doubt=4, smallest_need=1)
    asks = share_asks(request(whole, ask("b")), NOW)
    assert [
        ("eu", "a", regions.Ask("eu", NOW, 5, 1, 3, 2, 4, 1)),
        ("eu", "b", regions.Ask("eu", NOW, 0, 0, 0)),
    ] == [(a.region, a.budget_id, a.ask) for a in asks]


def test_a_clock_the_home_does_not_agree_with_is_refused() -> None:
    """A sent_at further ahead of the home's clock than the skews allow, or further behind
    than the skews and a call's wait, names the field: its lease would outlive the home's."""
    ahead = NOW + regions.SENT_AHEAD_MAX + timedelta(milliseconds=1)
    behind = NOW - regions.SENT_BEHIND_MAX - timedelta(milliseconds=1)
    edges = (NOW + regions.SENT_AHEAD_MAX, NOW - regions.SENT_BEHIND_MAX)
    assert ["asks[0].sent_at", "asks[1].sent_at"] == [
        field_of(request(ask("a", ahead))),
        field_of(request(ask("a"), ask("b", behind))),
    ]
    assert 2 == len(share_asks(request(ask("a", edges[0]), ask("b", edges[1])), NOW))


def test_bad_asks_name_their_field() -> None:
    """Missing, repeated, negative, too many or a smallest need past the need: each refused
    before anything is answered."""
    too_many = [ask(f"b{i}") for i in range(limits.region_outbox_batch_max + 1)]
    assert [
        "region", "asks", "asks", "asks[1].budget_id", "asks[0].sent_at", "asks[0].want",
        "asks[0].doubt", "asks[0].budget_id", "asks[0].smallest_need", "asks[0].smallest_need",
    ] == [
        field_of(request(ask(), region="")),
        field_of(request()),
        field_of(request(*too_many)),
        field_of(request(ask("a"), ask("a"))),
        field_of(request(pb.ShareAsk(budget_id="a"))),
        field_of(request(ask(want=-1))),
        field_of(request(ask(doubt=limits.limit_units_max + 1))),
        field_of(request(ask(budget_id="a b"))),
        field_of(request(ask(need=5, smallest_need=6))),
        field_of(request(ask(smallest_need=-1))),
    ]  # fmt: skip


def test_a_region_acts_as_its_tokens_region_on_its_prefixes_alone() -> None:
    """With region tokens, a request naming another region, or a budget outside the
    token's prefixes, is refused PERMISSION_DENIED."""
    token = CALLER.set(Caller("eu", ("team-",)))
    try:
        reasons = []
        for share in (request(ask("team-a"), region="us"), request(ask("other"))):
            with pytest.raises(PermissionDenied) as raised:
                share_asks(share, NOW)
            reasons.append(raised.value.reason)
        allowed = share_asks(request(ask("team-a")), NOW)
    finally:
        CALLER.reset(token)
    assert [Reason.REGION_NOT_PERMITTED, Reason.BUDGET_NOT_PERMITTED] == reasons
    assert ["team-a"] == [a.budget_id for a in allowed]
