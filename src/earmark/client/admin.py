"""The Admin calls of AsyncClient (and so of Client): budgets, prices, an account's cycles,
holds and the ledger, as the sidecar's admin listener serves them.

They are a mixin of AsyncClient, kept apart from the Budget calls a worker makes before it
spends. Listings of holds and of the ledger are async iterators that fetch the next page when
the last one is read; Client turns them into plain iterators.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from google.protobuf.timestamp_pb2 import Timestamp

from earmark.client.types import (
    BudgetState,
    BudgetTemplate,
    Settled,
    budget_state_of,
    settled_of,
    template_of,
    usage_message,
)
from earmark.core.model import (
    BudgetMode,
    EstimatePolicy,
    HoldState,
    LedgerKind,
    OveragePolicy,
    Phase,
    ThresholdBasis,
)
from earmark.core.periods import Period
from earmark.core.prices import Price, Usage, counts
from earmark.v1 import budget_pb2 as pb


class Unset(enum.Enum):
    """update_budget's default for a setting it leaves as it is."""

    UNSET = "unset"


UNSET = Unset.UNSET


def budget_request(budget_id: str, values: Mapping[str, object]) -> pb.PutBudgetRequest:
    """A PutBudgetRequest setting values (PutBudgetRequest's field names): None leaves an
    optional field absent, an enum is sent as its number, a datetime as a Timestamp."""
    request = pb.PutBudgetRequest(budget_id=budget_id)
    for name, value in values.items():
        if value is None:
            continue
        if name == "threshold_bps":
            assert isinstance(value, Sequence)
            request.threshold_bps.extend(value)
        elif isinstance(value, datetime):
            getattr(request, name).CopyFrom(_stamp(value))
        elif isinstance(value, enum.IntEnum):
            setattr(request, name, int(value))
        else:
            setattr(request, name, value)
    return request


@dataclass(frozen=True, slots=True)
class HoldRecord:
    """One reservation as operators see it (a hold() is the worker's side of one)."""

    reservation_id: str
    budget_id: str
    state: HoldState
    amount: int
    charged: int
    created_at: datetime
    expires_at: datetime
    also_budget_ids: tuple[str, ...] = ()
    # A Charge was made: the provider may have accepted the call.
    dispatched: bool = False
    phase: Phase = Phase.WORK
    idempotency_key: str = ""
    # The name of the worker token that made it.
    owner: str = ""
    job: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    closed_at: datetime | None = None
    # What the Settle (or the operator's resolve) said was used.
    settled_used: int | None = None
    # An operator's ReleaseHold closed it (its state is EXPIRED, as after a lapse).
    released: bool = False


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One append-only change to a budget's used and held."""

    entry_id: int
    budget_id: str
    reservation_id: str
    kind: LedgerKind
    held_delta: int
    used_delta: int
    at: datetime
    # A resolve's: what proved the outcome (earmark reconcile's bucket).
    evidence: str = ""


@dataclass(frozen=True, slots=True)
class SpendRow:
    """One group of a budget's spend: a model (provider/model), a job or a UTC day
    (YYYY-MM-DD), what its ledger entries moved used by, and over how many holds."""

    key: str
    used: int
    holds: int


@dataclass(frozen=True, slots=True)
class Spend:
    """A budget's spend summed by one grouping: its first groups, and what every group used
    together and how many there are (more than rows when max_rows left some out)."""

    unit: str
    rows: list[SpendRow]
    used: int
    groups: int


# How get_spend sums, by the wire enum's numbers.
SPEND_GROUPS = {
    "model": pb.SPEND_GROUP_MODEL,
    "job": pb.SPEND_GROUP_JOB,
    "day": pb.SPEND_GROUP_DAY,
}

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing, and the token that asks for the next ("" on the last)."""

    items: list[T]
    next_page_token: str


def _stamp(at: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(at)
    return stamp


def price_of(reply: pb.Price) -> Price:
    def at(name: str) -> datetime | None:
        return getattr(reply, name).ToDatetime(tzinfo=UTC) if reply.HasField(name) else None

    return Price(
        provider=reply.provider,
        model=reply.model,
        version=reply.version,
        effective_from=reply.effective_from.ToDatetime(tzinfo=UTC),
        effective_to=at("effective_to"),
        input_per_mtok=reply.input_usd_micros_per_mtok,
        output_per_mtok=reply.output_usd_micros_per_mtok,
        cached_input_per_mtok=reply.cached_input_usd_micros_per_mtok,
        request_fee=reply.request_usd_micros,
        source=reply.source,
        captured_at=at("captured_at"),
        daily_from_minute=reply.daily_from_minute,
        daily_to_minute=reply.daily_to_minute,
        cache_write_per_mtok=reply.cache_write_usd_micros_per_mtok,
        max_output_tokens=reply.max_output_tokens,
        cache_write_long_per_mtok=reply.cache_write_long_usd_micros_per_mtok,
        service_tier=reply.service_tier,
        tool_fees=counts(reply.tool_usd_micros.items()),
        input_tokens_above=reply.input_tokens_above,
        window_timezone=reply.window_timezone,
    )


def hold_record_of(reply: pb.Hold) -> HoldRecord:
    return HoldRecord(
        reservation_id=reply.reservation_id,
        budget_id=reply.budget_id,
        state=HoldState(reply.state),
        amount=reply.amount,
        charged=reply.charged,
        created_at=reply.created_at.ToDatetime(tzinfo=UTC),
        expires_at=reply.expires_at.ToDatetime(tzinfo=UTC),
        also_budget_ids=tuple(reply.also_budget_ids),
        dispatched=reply.dispatched,
        phase=Phase(reply.phase or Phase.WORK),
        idempotency_key=reply.idempotency_key,
        owner=reply.owner,
        job=reply.job,
        labels=dict(reply.labels),
        closed_at=reply.closed_at.ToDatetime(tzinfo=UTC) if reply.HasField("closed_at") else None,
        settled_used=reply.settled_used if reply.HasField("settled_used") else None,
        released=reply.released,
    )


def ledger_entry_of(reply: pb.LedgerEntry) -> LedgerEntry:
    return LedgerEntry(
        entry_id=reply.entry_id,
        budget_id=reply.budget_id,
        reservation_id=reply.reservation_id,
        kind=LedgerKind(reply.kind),
        held_delta=reply.held_delta,
        used_delta=reply.used_delta,
        at=reply.at.ToDatetime(tzinfo=UTC),
        evidence=reply.evidence,
    )


class AdminCalls:
    """Admin's calls, made through _admin_call (AsyncClient's: the admin listener, the
    admin token, the client's deadline and retries)."""

    async def _admin_call(self, method: str, request: Any) -> Any:
        raise NotImplementedError

    async def _pages(self, method: str, request: Any, field: str) -> AsyncIterator[Any]:
        """Every item (the answer's `field`) of a paged listing: request again with each
        answer's next_page_token until one comes back empty."""
        while True:
            reply = await self._admin_call(method, request)
            for item in getattr(reply, field):
                yield item
            if not reply.next_page_token:
                return
            request.page_token = reply.next_page_token

    async def put_budget(
        self,
        budget_id: str,
        limit: int | None,
        unit: str = "",
        *,
        default_estimate: int | None = None,
        estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN,
        escrow_bps: int = 0,
        overage_policy: OveragePolicy = OveragePolicy.HARD,
        overage_limit: int | None = None,
        period: Period = Period.NEVER,
        timezone: str = "",
        period_anchor: int = 0,
        threshold_bps: Sequence[int] = (),
        mode: BudgetMode = BudgetMode.ENFORCE,
        admissions_per_minute: int | None = None,
        units_per_minute: int | None = None,
        threshold_basis: ThresholdBasis = ThresholdBasis.COMMITTED,
        max_open_holds: int | None = None,
        max_admissions: int | None = None,
        closes_at: datetime | None = None,
    ) -> BudgetState:
        """Creates or replaces a budget (None: no limit); every setting not given takes its
        default (update_budget changes only what it names). escrow_bps keeps that share of
        the limit, in basis points, for final-phase holds; a SOFT overage_policy admits past
        the limit up to overage_limit (None: without bound) and flags the budget. period
        makes it start again at zero at the local midnight of each period's first day in
        timezone (an IANA name, "" for UTC), period_anchor the ISO weekday (WEEK) or day of
        the month (MONTH, QUARTER, YEAR) it starts on (0: the first); a changed period takes
        effect at the next boundary. threshold_bps writes a notice when spend reaches each
        share of the limit (8000 = 80%), once a period, measured on threshold_basis
        (COMMITTED: used + held; USED: settled spend only). OBSERVE mode admits what
        ENFORCE would refuse and says so (Reservation.would_refuse). admissions_per_minute
        and units_per_minute bound what it admits a minute, over a sliding window (None: no
        bound). Its run limits (issue 47): max_open_holds holds open at once (past it a
        Reserve is refused TOO_MANY_OPEN), max_admissions Reserves admitted a period
        (ADMISSIONS_SPENT), none from closes_at on (CLOSED); None: no such limit."""
        request = budget_request(
            budget_id,
            {
                "limit": limit,
                "unit": unit,
                "default_estimate": default_estimate,
                "estimate_policy": estimate_policy,
                "escrow_bps": escrow_bps,
                "overage_policy": overage_policy,
                "overage_limit": overage_limit,
                "period": period,
                "timezone": timezone,
                "period_anchor": period_anchor,
                "threshold_bps": threshold_bps,
                "mode": mode,
                "admissions_per_minute": admissions_per_minute,
                "units_per_minute": units_per_minute,
                "threshold_basis": threshold_basis,
                "max_open_holds": max_open_holds,
                "max_admissions": max_admissions,
                "closes_at": closes_at,
            },
        )
        return budget_state_of(await self._admin_call("PutBudget", request))

    async def update_budget(
        self,
        budget_id: str,
        *,
        update_mask: Sequence[str] | None = None,
        limit: int | Unset | None = UNSET,
        unit: str | Unset = UNSET,
        default_estimate: int | Unset | None = UNSET,
        estimate_policy: EstimatePolicy | Unset = UNSET,
        escrow_bps: int | Unset = UNSET,
        overage_policy: OveragePolicy | Unset = UNSET,
        overage_limit: int | Unset | None = UNSET,
        period: Period | Unset = UNSET,
        timezone: str | Unset = UNSET,
        period_anchor: int | Unset = UNSET,
        threshold_bps: Sequence[int] | Unset = UNSET,
        mode: BudgetMode | Unset = UNSET,
        admissions_per_minute: int | Unset | None = UNSET,
        units_per_minute: int | Unset | None = UNSET,
        threshold_basis: ThresholdBasis | Unset = UNSET,
        max_open_holds: int | Unset | None = UNSET,
        max_admissions: int | Unset | None = UNSET,
        closes_at: datetime | Unset | None = UNSET,
        limit_until: datetime | None = None,
        reason: str = "",
    ) -> BudgetState:
        """Changes only the settings given of an existing budget (UpdateBudget, AIP-134);
        every other setting stays. None clears an optional one (limit=None: unlimited).
        update_mask, when given, names the fields instead (PutBudgetRequest's names, or
        ["*"] for every field, as put_budget sets them); a field it names that is not
        given is cleared to its default. With limit_until (and limit), the limit is
        temporary: in force until then, the limit before any temporary one after it;
        reason says why the limit changes. Raises BudgetNotFoundError for a budget that
        does not exist, InvalidArgumentError naming the field for a merge PutBudget would
        refuse (or a limit_until not ahead, too far ahead or without limit), and
        ValueError when nothing is named."""
        given: dict[str, object] = {
            name: value
            for name, value in (
                ("limit", limit),
                ("unit", unit),
                ("default_estimate", default_estimate),
                ("estimate_policy", estimate_policy),
                ("escrow_bps", escrow_bps),
                ("overage_policy", overage_policy),
                ("overage_limit", overage_limit),
                ("period", period),
                ("timezone", timezone),
                ("period_anchor", period_anchor),
                ("threshold_bps", threshold_bps),
                ("mode", mode),
                ("admissions_per_minute", admissions_per_minute),
                ("units_per_minute", units_per_minute),
                ("threshold_basis", threshold_basis),
                ("max_open_holds", max_open_holds),
                ("max_admissions", max_admissions),
                ("closes_at", closes_at),
            )
            if value is not UNSET
        }
        paths = list(update_mask) if update_mask is not None else sorted(given)
        if not paths:
            raise ValueError("update_budget: give a setting to change, or an update_mask")
        request = pb.UpdateBudgetRequest(budget=budget_request(budget_id, given), reason=reason)
        request.update_mask.paths.extend(paths)
        if limit_until is not None:
            request.limit_until.CopyFrom(_stamp(limit_until))
        return budget_state_of(await self._admin_call("UpdateBudget", request))

    async def get_budget(self, budget_id: str) -> BudgetState:
        """A budget's limit, use, holds and settings."""
        request = pb.GetBudgetRequest(budget_id=budget_id)
        return budget_state_of(await self._admin_call("GetBudget", request))

    async def list_budgets(
        self, prefix: str = "", *, page_size: int = 0
    ) -> AsyncIterator[BudgetState]:
        """Every budget (archived ones too), or those whose id starts with prefix, in id
        order, fetched page_size at a time (0: the sidecar's default)."""
        request = pb.ListBudgetsRequest(prefix=prefix, page_size=page_size)
        async for state in self._pages("ListBudgets", request, "budgets"):
            yield budget_state_of(state)

    async def budgets_page(
        self, prefix: str = "", *, page_size: int = 0, page_token: str = ""
    ) -> Page[BudgetState]:
        """One page of list_budgets: what a paged view shows, one call each."""
        request = pb.ListBudgetsRequest(prefix=prefix, page_size=page_size, page_token=page_token)
        reply = await self._admin_call("ListBudgets", request)
        return Page([budget_state_of(s) for s in reply.budgets], reply.next_page_token)

    async def delete_budget(self, budget_id: str) -> BudgetState:
        """Archives a budget with no open holds (its ledger stays readable)."""
        request = pb.DeleteBudgetRequest(budget_id=budget_id)
        return budget_state_of(await self._admin_call("DeleteBudget", request))

    async def put_template(
        self,
        template_id: str,
        pattern: str,
        limit: int | None,
        unit: str = "",
        *,
        default_estimate: int | None = None,
        estimate_policy: EstimatePolicy = EstimatePolicy.MEDIAN,
        escrow_bps: int = 0,
        overage_policy: OveragePolicy = OveragePolicy.HARD,
        overage_limit: int | None = None,
        period: Period = Period.NEVER,
        timezone: str = "",
        period_anchor: int = 0,
        threshold_bps: Sequence[int] = (),
        mode: BudgetMode = BudgetMode.ENFORCE,
        admissions_per_minute: int | None = None,
        units_per_minute: int | None = None,
        threshold_basis: ThresholdBasis = ThresholdBasis.COMMITTED,
        max_open_holds: int | None = None,
        max_admissions: int | None = None,
        closes_at: datetime | None = None,
    ) -> BudgetTemplate:
        """Creates or replaces a budget template (issue 47): a budget whose id matches
        pattern (a budget id with one '/'-separated segment that is '*' alone, as
        end-user/*) and does not exist is made with these settings (put_budget's) on its
        first Reserve. Raises FailedPreconditionError for a pattern that overlaps another
        template's, or past the most templates there may be."""
        settings = budget_request(
            "",
            {
                "limit": limit,
                "unit": unit,
                "default_estimate": default_estimate,
                "estimate_policy": estimate_policy,
                "escrow_bps": escrow_bps,
                "overage_policy": overage_policy,
                "overage_limit": overage_limit,
                "period": period,
                "timezone": timezone,
                "period_anchor": period_anchor,
                "threshold_bps": threshold_bps,
                "mode": mode,
                "admissions_per_minute": admissions_per_minute,
                "units_per_minute": units_per_minute,
                "threshold_basis": threshold_basis,
                "max_open_holds": max_open_holds,
                "max_admissions": max_admissions,
                "closes_at": closes_at,
            },
        )
        request = pb.PutBudgetTemplateRequest(
            template_id=template_id, pattern=pattern, budget=settings
        )
        return template_of(await self._admin_call("PutBudgetTemplate", request))

    async def list_templates(self) -> list[BudgetTemplate]:
        """Every budget template, as ListBudgetTemplates answers them."""
        request = pb.ListBudgetTemplatesRequest()
        reply: pb.ListBudgetTemplatesResponse = await self._admin_call(
            "ListBudgetTemplates", request
        )
        return [template_of(template) for template in reply.templates]

    async def delete_template(self, template_id: str) -> BudgetTemplate:
        """Deletes a budget template: no budget is made from it from now on; those made
        from it stay as they are."""
        request = pb.DeleteBudgetTemplateRequest(template_id=template_id)
        return template_of(await self._admin_call("DeleteBudgetTemplate", request))

    async def put_price(
        self,
        provider: str,
        model: str,
        *,
        input_usd_micros_per_mtok: int,
        output_usd_micros_per_mtok: int,
        cached_input_usd_micros_per_mtok: int = 0,
        request_usd_micros: int = 0,
        effective_from: datetime | None = None,
        effective_to: datetime | None = None,
        source: str = "",
        captured_at: datetime | None = None,
        daily_from_minute: int = 0,
        daily_to_minute: int = 0,
        cache_write_usd_micros_per_mtok: int = 0,
        max_output_tokens: int = 0,
        cache_write_long_usd_micros_per_mtok: int = 0,
        service_tier: str = "",
        tool_usd_micros: Mapping[str, int] | None = None,
    ) -> Price:
        """Appends a price version for provider's model, in effect from effective_from (None:
        now); rates are micro-dollars per million tokens. Returns it with its version."""
        price = pb.Price(
            provider=provider,
            model=model,
            effective_from=_stamp(effective_from or datetime.now(UTC)),
            input_usd_micros_per_mtok=input_usd_micros_per_mtok,
            output_usd_micros_per_mtok=output_usd_micros_per_mtok,
            cached_input_usd_micros_per_mtok=cached_input_usd_micros_per_mtok,
            request_usd_micros=request_usd_micros,
            source=source,
            daily_from_minute=daily_from_minute,
            daily_to_minute=daily_to_minute,
            cache_write_usd_micros_per_mtok=cache_write_usd_micros_per_mtok,
            max_output_tokens=max_output_tokens,
            cache_write_long_usd_micros_per_mtok=cache_write_long_usd_micros_per_mtok,
            service_tier=service_tier,
            tool_usd_micros=dict(tool_usd_micros or {}),
        )
        if effective_to is not None:
            price.effective_to.CopyFrom(_stamp(effective_to))
        if captured_at is not None:
            price.captured_at.CopyFrom(_stamp(captured_at))
        return price_of(await self._admin_call("PutPrice", pb.PutPriceRequest(price=price)))

    async def list_prices(self, provider: str = "", model: str = "") -> list[Price]:
        """Every version of every price, or of provider's (and model's), oldest first."""
        request = pb.ListPricesRequest(provider=provider, model=model)
        reply: pb.ListPricesResponse = await self._admin_call("ListPrices", request)
        return [price_of(price) for price in reply.prices]

    async def list_cycles(self, account: str) -> list[BudgetState]:
        """An account's billing-cycle budgets, newest cycle first."""
        request = pb.ListCyclesRequest(account=account)
        reply: pb.ListCyclesResponse = await self._admin_call("ListCycles", request)
        return [budget_state_of(cycle) for cycle in reply.cycles]

    async def refresh_limits(self, account: str) -> list[BudgetState]:
        """Reads the account's limits from the limits provider now and applies them to its
        current cycle's budgets; returns its cycles."""
        request = pb.RefreshLimitsRequest(account=account)
        reply: pb.ListCyclesResponse = await self._admin_call("RefreshLimits", request)
        return [budget_state_of(cycle) for cycle in reply.cycles]

    async def list_holds(
        self, budget_id: str = "", *, state: HoldState | None = None, page_size: int = 0
    ) -> AsyncIterator[HoldRecord]:
        """A budget's holds (its own, and those that name it in also_budget_ids), in state
        or in all, in keyset order (owner, idempotency key, reservation id); with no
        budget_id, every budget's holds in state (HELD or IN_DOUBT, required then), oldest
        first. Fetched page_size at a time (0: the sidecar's default)."""
        request = pb.ListHoldsRequest(
            budget_id=budget_id,
            state=int(state or 0),  # type: ignore[arg-type]
            page_size=page_size,
        )
        async for hold in self._pages("ListHolds", request, "holds"):
            yield hold_record_of(hold)

    async def holds_page(
        self,
        budget_id: str = "",
        *,
        state: HoldState | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> Page[HoldRecord]:
        """One page of list_holds (with no budget_id, of every budget's holds in state)."""
        request = pb.ListHoldsRequest(
            budget_id=budget_id,
            state=int(state or 0),  # type: ignore[arg-type]
            page_size=page_size,
            page_token=page_token,
        )
        reply = await self._admin_call("ListHolds", request)
        return Page([hold_record_of(h) for h in reply.holds], reply.next_page_token)

    async def ledger_page(
        self, budget_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> Page[LedgerEntry]:
        """One page of list_ledger."""
        request = pb.ListLedgerRequest(
            budget_id=budget_id, page_size=page_size, page_token=page_token
        )
        reply = await self._admin_call("ListLedger", request)
        return Page([ledger_entry_of(e) for e in reply.entries], reply.next_page_token)

    async def list_ledger(
        self, budget_id: str, *, page_size: int = 0
    ) -> AsyncIterator[LedgerEntry]:
        """A budget's ledger, oldest entry first, fetched page_size at a time (0: the
        sidecar's default)."""
        request = pb.ListLedgerRequest(budget_id=budget_id, page_size=page_size)
        async for entry in self._pages("ListLedger", request, "entries"):
            yield ledger_entry_of(entry)

    async def resolve_hold(
        self,
        reservation_id: str,
        used: int = 0,
        *,
        usage: Usage | None = None,
        evidence: str = "",
    ) -> Settled:
        """Settles an in-doubt hold at what the provider billed (an amount in the budget's
        unit, or usage priced as a Settle's would be); the rest returns. evidence says what
        proved it, kept with the resolve's ledger entry."""
        request = pb.ResolveHoldRequest(reservation_id=reservation_id, used=used, evidence=evidence)
        if usage is not None:
            request.usage.CopyFrom(usage_message(usage))
        return settled_of(await self._admin_call("ResolveHold", request))

    async def release_hold(self, reservation_id: str) -> Settled:
        """Closes a held or in-doubt hold that nobody will settle: it keeps what was charged
        and the rest returns."""
        request = pb.ReleaseHoldRequest(reservation_id=reservation_id)
        return settled_of(await self._admin_call("ReleaseHold", request))

    async def get_spend(
        self,
        budget_id: str,
        group_by: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        max_rows: int = 0,
    ) -> Spend:
        """What budget_id spent from its ledger over [since, until) (None: no bound),
        summed by group_by: "model", "job" or "day" (UTC); at most max_rows groups (0: the
        sidecar's default), the most used first (by day, the newest first)."""
        group = SPEND_GROUPS.get(group_by)
        if group is None:
            raise ValueError(f"group_by: {group_by!r} is not one of {', '.join(SPEND_GROUPS)}")
        request = pb.GetSpendRequest(budget_id=budget_id, group_by=group, max_rows=max_rows)
        if since is not None:
            request.since.CopyFrom(_stamp(since))
        if until is not None:
            request.until.CopyFrom(_stamp(until))
        reply: pb.GetSpendResponse = await self._admin_call("GetSpend", request)
        rows = [SpendRow(r.key, r.used, r.holds) for r in reply.rows]
        return Spend(reply.unit, rows, reply.used, reply.groups)
