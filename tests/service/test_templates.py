"""Budget templates (issue 47) through live sidecars on a real PostgreSQL: a budget made on
first sight from the template its id matches, once, in the transaction that admits the
first Reserve, however many Reserves race for it across sidecars."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import asyncpg
import grpc
import pytest

from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running, running_all, sidecar_settings
from tests.helpers import assert_invariants, reason_of

DOLLAR = 1_000_000


def template(
    template_id: str, pattern: str, limit: int | None = DOLLAR, **more: object
) -> pb.PutBudgetTemplateRequest:
    budget = pb.PutBudgetRequest(unit="usd_micros", **more)  # type: ignore[arg-type]
    if limit is not None:
        budget.limit = limit
    return pb.PutBudgetTemplateRequest(template_id=template_id, pattern=pattern, budget=budget)


async def reserve(side: Running, budget_id: str, amount: int) -> pb.ReserveResponse:
    request = pb.ReserveRequest(
        budget_id=budget_id, amount=amount, idempotency_key=str(uuid.uuid4())
    )
    reply: pb.ReserveResponse = await side.budget.Reserve(request)
    return reply


async def test_a_reserve_on_a_budget_a_template_matches_makes_it(sidecar: Running) -> None:
    """A Reserve naming a budget that does not exist but matches a template is admitted on
    the budget made from it, which shows its template and settings."""
    await sidecar.admin.PutBudgetTemplate(template("users", "end-user/*", max_open_holds=5))
    reply = await reserve(sidecar, "end-user/alice", 300_000)
    state = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="end-user/alice"))
    assert (True, 700_000) == (reply.admitted, reply.remaining)
    assert ("users", DOLLAR, 5, 1, False) == (
        state.template_id,
        state.limit,
        state.max_open_holds,
        state.admissions,
        state.changed_by_hand,
    )
    await assert_invariants(sidecar.dsn)


async def test_a_budget_no_template_matches_is_still_not_found(sidecar: Running) -> None:
    """An id with another number of segments, or another literal, matches no template."""
    await sidecar.admin.PutBudgetTemplate(template("users", "end-user/*"))
    for budget_id in ("end-user", "end-user/a/b", "team/a"):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await reserve(sidecar, budget_id, 1)
        assert grpc.StatusCode.NOT_FOUND == caught.value.code()


async def test_templates_are_listed_replaced_and_deleted(sidecar: Running) -> None:
    """A put under the same id replaces the template with a higher version; a deleted one
    makes nothing more and its budgets stay."""
    first = await sidecar.admin.PutBudgetTemplate(template("users", "end-user/*"))
    second = await sidecar.admin.PutBudgetTemplate(template("users", "end-user/*", 2 * DOLLAR))
    await sidecar.admin.PutBudgetTemplate(template("teams", "team/*/pool"))
    listed = await sidecar.admin.ListBudgetTemplates(pb.ListBudgetTemplatesRequest())
    assert ["teams", "users"] == [t.template_id for t in listed.templates]
    assert second.version > first.version
    assert 2 * DOLLAR == listed.templates[1].budget.limit
    await reserve(sidecar, "end-user/bob", 1)
    deleted = await sidecar.admin.DeleteBudgetTemplate(
        pb.DeleteBudgetTemplateRequest(template_id="users")
    )
    assert ("users", True) == (deleted.template_id, deleted.HasField("deleted_at"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await reserve(sidecar, "end-user/carol", 1)
    assert grpc.StatusCode.NOT_FOUND == caught.value.code()
    bob = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="end-user/bob"))
    assert (2 * DOLLAR, 1) == (bob.limit, bob.used + bob.held)


@pytest.mark.parametrize(
    ("pattern", "other"),
    [("end-user/*", "end-user/*"), ("*/alice", "end-user/*"), ("org/*/x", "org/a/*")],
)
async def test_a_pattern_overlapping_another_templates_is_refused(
    sidecar: Running, pattern: str, other: str
) -> None:
    """A pattern that would match an id another template's matches is FAILED_PRECONDITION,
    naming that template, and nothing changes."""
    await sidecar.admin.PutBudgetTemplate(template("first", other))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await sidecar.admin.PutBudgetTemplate(template("second", pattern))
    reason, about = reason_of(caught.value)
    listed = await sidecar.admin.ListBudgetTemplates(pb.ListBudgetTemplatesRequest())
    assert (grpc.StatusCode.FAILED_PRECONDITION, "TEMPLATES_OVERLAP", "first") == (
        caught.value.code(),
        reason,
        about["template_id"],
    )
    assert ["first"] == [t.template_id for t in listed.templates]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (template("", "end-user/*"), "template_id"),
        (template("a b", "end-user/*"), "template_id"),
        (template("t", "end-user/alice"), "pattern"),
        (template("t", "*/*"), "pattern"),
        (template("t", "end-user/a*"), "pattern"),
        (template("t", "end-user//*"), "pattern"),
        (template("t", "end-user/*", -1), "budget.limit"),
        (template("t", "end-user/*", max_open_holds=-1), "budget.max_open_holds"),
        (
            pb.PutBudgetTemplateRequest(
                template_id="t", pattern="end-user/*", budget=pb.PutBudgetRequest()
            ),
            "budget.unit",
        ),
    ],
)
async def test_bad_templates_name_their_field(
    sidecar: Running, request_: pb.PutBudgetTemplateRequest, field: str
) -> None:
    """A bad id, pattern or setting is INVALID_ARGUMENT naming its field."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await sidecar.admin.PutBudgetTemplate(request_)
    assert (grpc.StatusCode.INVALID_ARGUMENT, field) == (
        caught.value.code(),
        reason_of(caught.value)[1]["field"],
    )


async def test_templates_are_bounded_in_number(sidecar: Running) -> None:
    """The template past limits.templates_max is refused TEMPLATES_FULL."""
    from earmark import limits

    for n in range(limits.templates_max):
        await sidecar.admin.PutBudgetTemplate(template(f"t{n}", f"p{n}/*"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await sidecar.admin.PutBudgetTemplate(template("one-more", "more/*"))
    assert "TEMPLATES_FULL" == reason_of(caught.value)[0]


async def test_delete_of_an_unknown_template_is_not_found(sidecar: Running) -> None:
    """DeleteBudgetTemplate of an id with no template is NOT_FOUND naming it."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await sidecar.admin.DeleteBudgetTemplate(pb.DeleteBudgetTemplateRequest(template_id="nope"))
    assert (grpc.StatusCode.NOT_FOUND, "TEMPLATE_NOT_FOUND") == (
        caught.value.code(),
        reason_of(caught.value)[0],
    )


USERS = 20
RESERVES = 200
DIME = DOLLAR // 10


async def test_concurrent_first_reserves_across_two_sidecars_make_each_budget_once(
    dsn: str, socket_dir: Path
) -> None:
    """200 Reserves of $0.10 on 20 end users that do not exist yet, through 2 sidecars,
    with a template of $1.00: each end user's budget made once and exactly 10 admitted."""
    for n in range(2):
        (socket_dir / str(n)).mkdir()
    sides = [Sidecar(sidecar_settings(dsn, socket_dir / str(n))) for n in range(2)]
    async with running_all(sides, dsn) as pair:
        await pair[0].admin.PutBudgetTemplate(template("users", "end-user/*"))
        # 10 Reserves per user: exactly the template's $1.00.
        replies = await asyncio.gather(
            *(reserve(pair[n % 2], f"end-user/u{n % USERS}", DIME) for n in range(RESERVES))
        )
        admitted: dict[str, int] = {}
        for n, reply in enumerate(replies):
            user = f"end-user/u{n % USERS}"
            admitted[user] = admitted.get(user, 0) + reply.admitted
        # One more on each, through the other sidecar: nothing is left.
        more = await asyncio.gather(
            *(reserve(pair[(u + 1) % 2], f"end-user/u{u}", DIME) for u in range(USERS))
        )
        assert {f"end-user/u{u}": 10 for u in range(USERS)} == admitted
        assert [(False, pb.REFUSAL_REASON_INSUFFICIENT_BUDGET)] * USERS == [
            (r.admitted, r.reason) for r in more
        ]
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch(
                "SELECT budget_id, held, admissions FROM budgets ORDER BY budget_id"
            )
        finally:
            await conn.close()
        assert [(f"end-user/u{u}", DOLLAR, 10) for u in sorted(range(USERS), key=str)] == [
            (r["budget_id"], r["held"], r["admissions"]) for r in rows
        ]
    await assert_invariants(dsn)
