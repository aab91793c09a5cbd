"""Reconciliation's data: the two sides of a bucket (what a provider's usage report counted,
the calls the ledger sent), what a bucket is classed, the resolutions its evidence proves,
and a day's drift. The rules are in core/reconcile.py."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from enum import StrEnum

from earmark import limits
from earmark.core.model import HoldState
from earmark.core.prices import USD_MICROS

BUCKET = timedelta(minutes=1)
DAY = timedelta(days=1)
# A model's dated snapshot ("gpt-4o-2024-08-06", "claude-sonnet-4-20250514") is reported
# under its date; a call names the alias it asked for. Both are compared without it.
_SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")


def model_family(model: str) -> str:
    return _SNAPSHOT.sub("", model)


@dataclass(frozen=True, slots=True)
class Tokens:
    """Token counts and requests; requests None where the provider does not count them."""

    input: int = 0
    cached: int = 0
    output: int = 0
    requests: int | None = 0
    # Of input: written to the provider's cache, and of those for an hour.
    written: int = 0
    written_long: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        requests = (
            None
            if self.requests is None or other.requests is None
            else self.requests + other.requests
        )
        return Tokens(
            self.input + other.input,
            self.cached + other.cached,
            self.output + other.output,
            requests,
            self.written + other.written,
            self.written_long + other.written_long,
        )

    def __sub__(self, other: Tokens) -> Tokens:
        negated = Tokens(
            -other.input,
            -other.cached,
            -other.output,
            None if other.requests is None else -other.requests,
            -other.written,
            -other.written_long,
        )
        return self + negated

    def uncounted(self) -> Tokens:
        """The same tokens, with no request count (a provider that counts none)."""
        return replace(self, requests=None)

    def empty(self) -> bool:
        return self.input == 0 and self.output == 0 and not self.requests


@dataclass(frozen=True, slots=True)
class Reported:
    """One result of the provider's usage report: a minute, a model, its counts."""

    start: datetime
    model: str
    tokens: Tokens


@dataclass(frozen=True, slots=True)
class Sent:
    """One call of the ledger (its record and its hold)."""

    reservation_id: str
    budget_id: str
    model: str
    service_tier: str
    sent_at: datetime
    state: HoldState
    amount: int
    charged: int
    # The usage its Settle or resolve reported; None when none did.
    usage: Tokens | None
    settled_used: int | None
    key_label: str = ""
    # Its budget's unit: only micro-dollars are compared with the cost report.
    unit: str = USD_MICROS
    # The latest it can have ended (its hold's lease or deadline); None: unknown, taken as
    # its send minute's end.
    ends_by: datetime | None = None
    # Of what the ledger priced it at, its built-in (server) tool calls' fees, in its
    # budget's micro-dollars: compared with the cost report's tool lines, not its model's.
    tool_fees: int = 0


class Kind(StrEnum):
    """What a cost line is for: a model's tokens, built-in tool calls (web search, file
    search, code interpreter), storage (vector stores, files), or something else."""

    MODEL = "model"
    # Compared, as one row a day, with the fees of the tool calls the ledger priced.
    TOOLS = "tools"
    # Accrues with time, not with calls: Earmark holds nothing for it. Listed, not compared.
    STORAGE = "storage"
    # Names no model and no kind Earmark knows: listed, unverifiable, never compared.
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Billed:
    """One row of the provider's cost report: a day's dollars for a model, or for a line
    that names none (kind, and the line as the provider wrote it)."""

    day: date
    model: str
    usd_micros: int
    kind: Kind = Kind.MODEL
    line: str = ""


class Class(StrEnum):
    MATCHED = "matched"
    # Billed, not in the ledger: an in-doubt call that ran, or spend outside Earmark.
    PROVIDER_ONLY = "provider-only"
    # In the ledger, not billed.
    LOCAL_ONLY = "local-only"
    # Both, beyond the tolerance: tokens miscounted.
    MISMATCH = "mismatch"
    # In-doubt calls the evidence cannot separate.
    UNRESOLVED = "unresolved"
    # Still filling (younger than the billing delay) or with calls still in flight.
    PENDING = "pending"


FAILING = frozenset({Class.PROVIDER_ONLY, Class.MISMATCH, Class.UNRESOLVED})


@dataclass(frozen=True, slots=True)
class Resolution:
    """An in-doubt call resolved by a bucket's evidence: at its tokens (None: at 0)."""

    reservation_id: str
    model: str
    service_tier: str
    tokens: Tokens | None
    evidence: str
    apportioned: bool


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    model: str
    cls: Class
    provider: Tokens
    ledger: Tokens
    unexplained: Tokens
    in_doubt: tuple[Sent, ...] = ()
    resolutions: tuple[Resolution, ...] = ()
    note: str = ""


# What a storage line's row says, and an unrecognised line's.
NOT_METERED = "not metered by Earmark: storage accrues with time, not with calls"
UNRECOGNISED = "names no model and no kind Earmark knows: listed, not compared"


@dataclass(frozen=True, slots=True)
class Drift:
    """A day's cost report for a model against the ledger's priced calls; or the day's
    tool lines against the ledger's tool fees (kind tools, model ""); or one line the
    ledger has nothing to set against (kind storage or other), listed."""

    day: date
    model: str
    provider_usd_micros: int
    ledger_usd_micros: int
    beyond: bool
    # Why the two cannot be compared ("" when they can): the ledger priced calls of a tier
    # the cost report leaves out (Anthropic's priority tier); a storage line, which
    # Earmark never meters; a line of no kind it knows. Then no ratio, and no drift.
    unverifiable: str = ""
    kind: Kind = Kind.MODEL
    # The provider's line items in the row (for a row of no model).
    lines: tuple[str, ...] = ()

    @property
    def ratio(self) -> float | None:
        if self.ledger_usd_micros == 0 or self.unverifiable:
            return None
        return self.provider_usd_micros / self.ledger_usd_micros


@dataclass(frozen=True, slots=True)
class Tolerance:
    # Tokens of a bucket agree within this share of the larger count.
    tokens_share: float = limits.reconcile_tokens_tolerance_share
    # A day's dollars agree within this share of the ledger's.
    drift_share: float = limits.reconcile_drift_tolerance_share
    billing_delay: timedelta = timedelta(seconds=limits.reconcile_billing_delay_seconds)


@dataclass(frozen=True, slots=True)
class Reconciliation:
    buckets: tuple[Bucket, ...]
    drift: tuple[Drift, ...]
    resolutions: tuple[Resolution, ...] = field(default=())

    def failing(self) -> bool:
        """Something is provider-only, mismatched, unresolved or drifted: exit status 3."""
        return any(b.cls in FAILING for b in self.buckets) or any(d.beyond for d in self.drift)


# What reconcile() compares with when the caller says nothing.
DEFAULT_TOLERANCE = Tolerance()
