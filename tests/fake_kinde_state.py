"""What the fake Kinde (tests/fake_kinde.py) holds: customers' agreements with their
billing periods, what its meter would hold, and the knobs a test turns. Kept apart from
the request handler so that the handler stays plain."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

# The scope each endpoint needs, as Kinde's document gives it.
SCOPES = {
    "entitlements": "read:billing_entitlements",
    "agreements": "read:billing_agreements",
    "meter_usage": "create:meter_usage",
}


def real_now() -> datetime:
    return datetime.now(UTC)


def kinde_time(at: datetime) -> str:
    """A time as the document's examples write it: whole seconds with an offset."""
    return at.astimezone(UTC).replace(microsecond=0).isoformat()


@dataclass
class Agreement:
    """One customer agreement. With an anchor, its billing periods are anchor + k * period
    (k any whole number), so that a test crosses into the next one by moving the fake's
    clock; without one, the agreement has no period fields, like an older tenant's. With a
    lag, Kinde's cycle roll (or its sync with the payment provider) is that far behind: the
    period listed as current is the one that held lag ago, so its current_period_end may be
    in the past, as Kinde's document says it may; usage is still booked to the period it
    arrives in ("recorded against the next billing cycle")."""

    id: str
    plan_code: str = "pro"
    # The features it carries; None: every feature (the default agreement of an account
    # whose agreements a test did not set).
    features: tuple[str, ...] | None = None
    expires_on: datetime | None = None
    anchor: datetime | None = None
    period: timedelta = timedelta(days=30)
    lag: timedelta = timedelta(0)

    def period_at(self, at: datetime) -> tuple[datetime, datetime] | None:
        if self.anchor is None:
            return None
        k = (at - self.anchor) // self.period
        start = self.anchor + k * self.period
        return start, start + self.period

    def carries(self, feature: str) -> bool:
        return self.features is None or feature in self.features

    def listed(self, now: datetime, feature: str | None) -> dict[str, Any]:
        codes = self.features or ((feature,) if feature is not None else ())
        item: dict[str, Any] = {
            "id": self.id,
            "plan_code": self.plan_code,
            "billing_group_id": f"group_{self.id}",
            "expires_on": None if self.expires_on is None else kinde_time(self.expires_on),
            "entitlements": [
                {"feature_code": code, "entitlement_id": f"entitlement_{code}"} for code in codes
            ],
        }
        period = self.period_at(now - self.lag)
        if period is not None:
            item["current_period_start"] = kinde_time(period[0])
            item["current_period_end"] = kinde_time(period[1])
        return item


@dataclass
class KindeState:
    """What the fake answers. Change it between requests; the lock guards it."""

    # account -> feature -> maximum (None: no maximum); any JSON value, so that a test can
    # send a maximum Kinde should never send (a string, a float, 10^30).
    limits: dict[str, dict[str, object]] = field(default_factory=dict)
    # Entitlements listed as they are, after those made from limits (one without a
    # feature_code, say).
    extra_entitlements: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # account -> its agreements; an account not here has an expired agreement and a live
    # one, agreement_<account>, that carries every feature and has no period fields.
    agreements: dict[str, list[Agreement]] = field(default_factory=dict)
    # (agreement id, feature) -> the meter's value, as last set
    meters: dict[tuple[str, str], int] = field(default_factory=dict)
    # What Kinde would hold: (agreement id, feature, period start or None) -> value, each
    # report booked to the agreement's period that contains the time it was received.
    booked: dict[tuple[str, str, datetime | None], int] = field(default_factory=dict)
    # Every meter report applied, in the order it was applied.
    meter_reports: list[dict[str, Any]] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    # (call, the Host header it came with), every call in order.
    hosts: list[tuple[str, str]] = field(default_factory=list)
    # (call, its query), every GET in order.
    queries: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)
    # Scopes the tokens lack: an endpoint needing one answers 403.
    missing_scopes: set[str] = field(default_factory=set)
    # The most items the fake puts on a page, whatever page_size asked (Kinde may answer
    # fewer): small, so that paging is exercised.
    page_cap: int = 2
    # The next rate_limited API calls answer 429 with RateLimit-Reset: rate_limit_reset
    # (None: no header), which a test may also make garbled.
    rate_limited: int = 0
    rate_limit_reset: str | None = "2"
    # agreement id -> the code of a 400 every meter report to it is answered with: the
    # document does not say what Kinde answers a report to a cancelled agreement, so a
    # test says it.
    refuse_reports: dict[str, str] = field(default_factory=dict)
    # Set: the next meter report is held until this event is set, then applied and
    # answered (to a client that gave up by then): the straggler.
    hold_report: threading.Event | None = None
    now: Callable[[], datetime] = real_now
    # True: every account's plan has one feature, "tokens", with no maximum.
    unlimited: bool = False
    failing: bool = False
    stall: threading.Event | None = None
    # Set: every answer's body trickles in, a byte every TRICKLE_SECONDS, until it is set.
    trickle: threading.Event | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    # What /.well-known/jwks answers: the keys webhooks are signed with.
    jwks: dict[str, Any] = field(default_factory=lambda: {"keys": []})

    def agreement(self, account: str) -> str:
        """The id of the default live agreement of an account whose agreements are not set."""
        return f"agreement_{account}"

    def agreements_of(self, account: str) -> list[Agreement]:
        return self.agreements.get(account) or [
            Agreement(f"agreement_{account}_old", expires_on=datetime(2025, 1, 1, tzinfo=UTC)),
            Agreement(self.agreement(account)),
        ]

    def change_plan(self, account: str, new: Agreement) -> None:
        """A plan change as Kinde does it: a new agreement, the old ones cancelled. The
        document leaves open whether cancelled agreements are listed; the fake lists them,
        with an expires_on in the past, so that the client must skip them."""
        now = self.now()
        with self.lock:
            kept = [
                a
                if a.expires_on is not None and a.expires_on <= now
                else Agreement(a.id, a.plan_code, a.features, now - timedelta(seconds=1),
                               a.anchor, a.period, a.lag)
                for a in self.agreements_of(account)
            ]  # fmt: skip
            self.agreements[account] = [*kept, new]

    def book(self, report: dict[str, Any], at: datetime) -> None:
        """Applies one meter report received at `at`; the caller holds the lock."""
        agreement_id, feature = report["customer_agreement_id"], report["billing_feature_code"]
        value = int(report["meter_value"])
        found = [a for lst in self.agreements.values() for a in lst if a.id == agreement_id]
        period = found[0].period_at(at) if found else None
        key = (agreement_id, feature, None if period is None else period[0])
        if report.get("meter_type_code") == "delta":
            value += self.booked.get(key, 0)
        self.meter_reports.append(report)
        self.meters[(agreement_id, feature)] = value
        self.booked[key] = value
