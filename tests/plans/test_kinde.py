"""The Kinde provider against a fake Kinde over real HTTP on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
import structlog

from earmark import limits
from earmark.metrics import Metrics
from earmark.plans.kinde import KindeProvider, parse_time
from earmark.plans.provider import Period, ProviderRejected, ProviderUnavailable
from tests.fake_kinde import (
    CLIENT_ID,
    CLIENT_SECRET,
    Agreement,
    FakeKinde,
    KindeState,
    fake_kinde,
)
from tests.helpers import FakeClock


@pytest.fixture
def kinde() -> Iterator[FakeKinde]:
    with fake_kinde() as fake:
        yield fake


@pytest.fixture
async def provider(kinde: FakeKinde) -> AsyncIterator[KindeProvider]:
    p = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET)
    try:
        yield p
    finally:
        await p.close()


async def test_limits_follow_pages_and_keep_null(kinde: FakeKinde, provider: KindeProvider) -> None:
    """Five entitlements over three pages of two come back whole; null is no maximum."""
    kinde.state.limits["acct-1"] = {
        "tokens": 100_000, "images": 50, "seats": 3, "storage": None, "calls": 0,
    }  # fmt: skip
    found = await provider.read_limits("acct-1")
    assert {"tokens": 100_000, "images": 50, "seats": 3, "storage": None, "calls": 0} == found
    assert (1, 3) == (kinde.state.requests["token"], kinde.state.requests["entitlements"])


async def test_token_is_cached_until_near_expiry(kinde: FakeKinde) -> None:
    """One token serves calls until a minute before it expires; then a new one is taken."""
    now = [0.0]
    p = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET, monotonic=lambda: now[0])
    try:
        kinde.state.limits["a"] = {"tokens": 1}
        await p.read_limits("a")
        now[0] = 3600 - 61
        await p.read_limits("a")
        now[0] = 3600 - 59
        await p.read_limits("a")
    finally:
        await p.close()
    assert 2 == kinde.state.requests["token"]


async def test_usage_is_reported_absolute_to_the_current_agreement(
    kinde: FakeKinde, provider: KindeProvider
) -> None:
    """The meter is set to the total, against the agreement that has not expired, found
    once per account; a repeated report leaves the meter where it was."""
    at = datetime(2026, 8, 15, 12, tzinfo=UTC)
    await provider.report_usage("acct-1", "tokens", 31_200, at)
    await provider.report_usage("acct-1", "tokens", 80_000, at)
    await provider.report_usage("acct-1", "tokens", 80_000, at)
    assert {("agreement_acct-1", "tokens"): 80_000} == kinde.state.meters
    assert 1 == kinde.state.requests["agreements"]
    assert {"absolute"} == {r["meter_type_code"] for r in kinde.state.meter_reports}
    assert {"2026-08-15T12:00:00Z"} == {
        r["meter_usage_timestamp"] for r in kinde.state.meter_reports
    }


async def test_failures_name_the_call_and_no_secret(
    kinde: FakeKinde, provider: KindeProvider
) -> None:
    """A 503, a refused credential and an unreachable server are ProviderUnavailable whose
    messages name the call and carry neither the secret nor a token."""
    kinde.state.failing = True
    with pytest.raises(ProviderUnavailable) as down:
        await provider.read_limits("acct-1")
    kinde.state.failing = False
    wrong = KindeProvider(kinde.url, CLIENT_ID, "not-the-secret")
    try:
        with pytest.raises(ProviderUnavailable) as refused:
            await wrong.read_limits("acct-1")
    finally:
        await wrong.close()
    gone = KindeProvider("http://127.0.0.1:9", CLIENT_ID, CLIENT_SECRET)
    try:
        with pytest.raises(ProviderUnavailable) as unreachable:
            await gone.read_limits("acct-1")
    finally:
        await gone.close()
    messages = [str(e.value) for e in (down, refused, unreachable)]
    assert [
        "kinde token: HTTP 503",
        "kinde token: HTTP 401",
        "kinde token: ConnectError",
    ] == messages
    assert not any(CLIENT_SECRET in m or "Bearer" in m for m in messages)


async def test_a_stalled_provider_times_out(kinde: FakeKinde) -> None:
    """A provider that does not answer is ProviderUnavailable after the timeout."""
    kinde.state.stall = threading.Event()
    p = KindeProvider(kinde.url, CLIENT_ID, CLIENT_SECRET, timeout_seconds=0.3)
    try:
        with pytest.raises(ProviderUnavailable) as stalled:
            await p.read_limits("acct-1")
    finally:
        kinde.state.stall.set()
        await p.close()
    assert "kinde token: timed out" == str(stalled.value)


@pytest.mark.parametrize(
    ("maximum", "problem"),
    [
        (2**63, "is 9223372036854775808; at most 1000000000000000000"),
        (-1, "is -1; it must be >= 0"),
        ("100", "is '100', not a whole number"),
        (1.5, "is 1.5, not a whole number"),
        (True, "is True, not a whole number"),
    ],
)
async def test_a_maximum_past_the_bound_is_unavailable(
    kinde: FakeKinde, provider: KindeProvider, maximum: object, problem: str
) -> None:
    """An entitlement_limit_max that PutBudget would refuse makes the read
    ProviderUnavailable, naming the feature and the value."""
    kinde.state.limits["acct-1"] = {"tokens": 10, "images": maximum}
    with pytest.raises(ProviderUnavailable) as caught:
        await provider.read_limits("acct-1")
    expected = f"kinde entitlements: feature 'images': entitlement_limit_max {problem}"
    assert expected == str(caught.value)


T0 = datetime(2026, 12, 1, 10, tzinfo=UTC)
ANCHOR = datetime(2026, 11, 15, tzinfo=UTC)


@pytest.fixture
def clock(kinde: FakeKinde) -> FakeClock:
    """One clock for the provider and the fake, so that both agree on the period."""
    at = FakeClock(T0)
    kinde.state.now = at
    return at


@pytest.fixture
async def timed(kinde: FakeKinde, clock: FakeClock) -> AsyncIterator[tuple[KindeProvider, Metrics]]:
    """A provider on the test's clocks (wall and monotonic) with its own metrics."""
    metrics = Metrics()
    p = KindeProvider(
        kinde.url,
        CLIENT_ID,
        CLIENT_SECRET,
        clock=clock,
        monotonic=lambda: (clock() - T0).total_seconds(),
        metrics=metrics,
    )
    try:
        yield p, metrics
    finally:
        await p.close()


def answers(metrics: Metrics, call: str, status: str) -> float | None:
    return metrics.registry.get_sample_value(
        "earmark_provider_answers_total", {"call": call, "status": status}
    )


def two_agreements(kinde: FakeKinde) -> None:
    kinde.state.agreements["acct"] = [
        Agreement("agr_old", features=("tokens",), expires_on=datetime(2026, 1, 1, tzinfo=UTC)),
        Agreement("agr_tokens", features=("tokens",), anchor=ANCHOR),
        Agreement("agr_images", plan_code="media", features=("images",)),
    ]


async def test_the_agreement_is_per_feature_and_gives_its_period(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """Each feature's report goes to the live agreement carrying it, asked for with the
    feature_code filter and page_size 100; its period is the one containing now, in UTC,
    and an agreement without period fields gives none."""
    provider, _ = timed
    two_agreements(kinde)
    period = await provider.read_period("acct", "tokens")
    await provider.report_usage("acct", "tokens", 10, T0)
    await provider.report_usage("acct", "images", 20, T0)
    no_period = await provider.read_period("acct", "images")
    filters = [(q["customer_id"], q.get("feature_code"), q["page_size"])
               for name, q in kinde.state.queries if name == "agreements"]  # fmt: skip
    expected_period = Period(ANCHOR, ANCHOR + timedelta(days=30))
    assert (expected_period, None) == (period, no_period)
    assert {("agr_tokens", "tokens"): 10, ("agr_images", "images"): 20} == kinde.state.meters
    assert [("acct", "tokens", "100"), ("acct", "images", "100")] == filters


async def test_the_agreement_is_read_again_at_its_period_end(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """The agreement is kept until its period ends, then read again with the next period;
    each report is booked to the period it arrived in."""
    provider, _ = timed
    two_agreements(kinde)
    await provider.report_usage("acct", "tokens", 10, clock())
    clock.set(ANCHOR + timedelta(days=30) - timedelta(seconds=1))
    await provider.report_usage("acct", "tokens", 15, clock())
    reads_in_period = kinde.state.requests["agreements"]
    clock.set(ANCHOR + timedelta(days=30))
    next_period = await provider.read_period("acct", "tokens")
    await provider.report_usage("acct", "tokens", 3, clock())
    expected = Period(ANCHOR + timedelta(days=30), ANCHOR + timedelta(days=60))
    assert (1, 2, expected) == (reads_in_period, kinde.state.requests["agreements"], next_period)
    assert {
        ("agr_tokens", "tokens", ANCHOR): 15,
        ("agr_tokens", "tokens", ANCHOR + timedelta(days=30)): 3,
    } == kinde.state.booked


async def test_an_agreement_whose_period_end_has_passed_is_kept_and_read_again_later(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """An agreement whose current_period_end is in the past (Kinde's roll lagging, as its
    document allows) is kept with that period and takes usage, and is read again only once
    limits.agreement_lagging_recheck_seconds have passed, by when Kinde has caught up."""
    provider, _ = timed
    lagging = Agreement("agr_lagging", features=("tokens",), anchor=ANCHOR, lag=timedelta(days=20))
    kinde.state.agreements["acct"] = [lagging]
    ended = await provider.read_period("acct", "tokens")
    await provider.report_usage("acct", "tokens", 10, clock())
    recheck = timedelta(seconds=limits.agreement_lagging_recheck_seconds)
    clock.advance(recheck - timedelta(seconds=1))
    still = await provider.read_period("acct", "tokens")
    reads_before = kinde.state.requests["agreements"]
    lagging.lag = timedelta(0)
    clock.advance(timedelta(seconds=1))
    caught_up = await provider.read_period("acct", "tokens")
    assert (
        Period(ANCHOR - timedelta(days=30), ANCHOR),
        Period(ANCHOR - timedelta(days=30), ANCHOR),
        1,
        Period(ANCHOR, ANCHOR + timedelta(days=30)),
        2,
    ) == (ended, still, reads_before, caught_up, kinde.state.requests["agreements"])
    assert {("agr_lagging", "tokens"): 10} == kinde.state.meters


async def test_an_agreement_expiring_later_is_used_until_then(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """An agreement whose expires_on is still ahead is live until then, and read again at
    that moment (not only after agreement_cache_seconds_max)."""
    provider, _ = timed
    ending = Agreement("agr_ending", features=("tokens",), expires_on=T0 + timedelta(minutes=10))
    kinde.state.agreements["acct"] = [ending]
    await provider.report_usage("acct", "tokens", 10, clock())
    kinde.state.agreements["acct"] = [ending, Agreement("agr_next", features=("tokens",))]
    clock.advance(timedelta(minutes=9))
    await provider.report_usage("acct", "tokens", 11, clock())
    clock.advance(timedelta(minutes=1))
    await provider.report_usage("acct", "tokens", 12, clock())
    assert {("agr_ending", "tokens"): 11, ("agr_next", "tokens"): 12} == kinde.state.meters


async def test_a_report_refused_for_its_agreement_reads_the_agreement_again(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """A 400 on a report is ProviderRejected with Kinde's code, counted; the next report
    reads the agreements again and goes to the new plan's agreement."""
    provider, metrics = timed
    two_agreements(kinde)
    await provider.report_usage("acct", "tokens", 10, clock())
    kinde.state.refuse_reports["agr_tokens"] = "AGREEMENT_CANCELLED"
    kinde.state.change_plan("acct", Agreement("agr_new", features=("tokens",), anchor=T0))
    with pytest.raises(ProviderRejected) as refused:
        await provider.report_usage("acct", "tokens", 11, clock())
    await provider.report_usage("acct", "tokens", 12, clock())
    assert ("AGREEMENT_CANCELLED", "kinde meter_usage: HTTP 400 'AGREEMENT_CANCELLED'") == (
        refused.value.code, str(refused.value)
    )  # fmt: skip
    # A read is its first page: the new plan's listing has two pages.
    reads = [
        q for name, q in kinde.state.queries if name == "agreements" and "starting_after" not in q
    ]
    assert (2, 12, 1.0) == (
        len(reads),
        kinde.state.meters[("agr_new", "tokens")],
        answers(metrics, "meter_usage", "bad_request"),
    )


async def test_a_forbidden_report_reads_the_agreement_again(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """A report answered 403 drops its agreement: once the scope is back, the report reads
    the agreements again."""
    provider, _ = timed
    await provider.report_usage("acct", "tokens", 10, clock())
    kinde.state.missing_scopes.add("create:meter_usage")
    with pytest.raises(ProviderUnavailable):
        await provider.report_usage("acct", "tokens", 11, clock())
    kinde.state.missing_scopes.clear()
    await provider.report_usage("acct", "tokens", 12, clock())
    assert (2, 12) == (
        kinde.state.requests["agreements"],
        kinde.state.meters[("agreement_acct", "tokens")],
    )


async def test_forget_drops_every_agreement_of_the_account_alone(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """After forget(acct) both of its features read their agreement again; another
    account's stays cached."""
    provider, _ = timed
    for account, feature in [("acct", "tokens"), ("acct", "images"), ("other", "tokens")]:
        await provider.read_period(account, feature)
    provider.forget("acct")
    for account, feature in [("acct", "tokens"), ("acct", "images"), ("other", "tokens")]:
        await provider.read_period(account, feature)
    read = [
        (q["customer_id"], q["feature_code"]) for n, q in kinde.state.queries if n == "agreements"
    ]
    assert [
        ("acct", "tokens"), ("acct", "images"), ("other", "tokens"),
        ("acct", "tokens"), ("acct", "images"),
    ] == read  # fmt: skip


async def test_a_forbidden_answer_fetches_one_token_then_names_the_missing_scope(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """A 403 with a token older than the refetch interval fetches one new token; a 403
    again is a missing scope, named, logged once, counted; no other token is fetched
    within the interval."""
    provider, metrics = timed
    kinde.state.limits["acct"] = {"tokens": 5}
    await provider.read_limits("acct")
    clock.advance(timedelta(seconds=limits.provider_token_refetch_seconds_min + 1))
    kinde.state.missing_scopes.add("read:billing_entitlements")
    with structlog.testing.capture_logs() as logs:
        errors = []
        for _ in range(3):
            with pytest.raises(ProviderUnavailable) as forbidden:
                await provider.read_limits("acct")
            errors.append(str(forbidden.value))
            clock.advance(timedelta(seconds=5))
    expected = (
        "kinde entitlements: HTTP 403 'FORBIDDEN': a scope is missing; the M2M application "
        "needs read:billing_entitlements"
    )
    assert [expected] * 3 == errors
    assert (2, 4.0) == (
        kinde.state.requests["token"],
        answers(metrics, "entitlements", "forbidden"),
    )
    assert [
        {"call": "entitlements", "scope": "read:billing_entitlements", "code": "FORBIDDEN"}
    ] == [
        {k: e[k] for k in ("call", "scope", "code")}
        for e in logs
        if e["event"] == "kinde_forbidden"
    ]


async def test_a_revoked_token_is_replaced(
    kinde: FakeKinde, clock: FakeClock, timed: tuple[KindeProvider, Metrics]
) -> None:
    """A token Kinde no longer knows (403, no 401) is replaced once the refetch interval
    has passed, and the call succeeds with the new one."""
    provider, _ = timed
    kinde.state.limits["acct"] = {"tokens": 5}
    await provider.read_limits("acct")
    kinde.state.tokens.clear()
    clock.advance(timedelta(seconds=limits.provider_token_refetch_seconds_min))
    found = await provider.read_limits("acct")
    assert ({"tokens": 5}, 2) == (found, kinde.state.requests["token"])


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("5", 5),
        (None, limits.provider_rate_limit_reset_seconds_default),
        ("soon", limits.provider_rate_limit_reset_seconds_default),
        ("1.5", limits.provider_rate_limit_reset_seconds_default),
        ("9" * 5000, limits.provider_rate_limit_reset_seconds_max),
    ],
)
async def test_a_rate_limit_refuses_every_call_until_its_reset(
    kinde: FakeKinde,
    clock: FakeClock,
    timed: tuple[KindeProvider, Metrics],
    header: str | None,
    seconds: int,
) -> None:
    """A 429 is ProviderUnavailable with retry_at from RateLimit-Reset (bounded; missing or
    garbled: the default); until then no call is sent; then the call goes through."""
    provider, metrics = timed
    kinde.state.limits["acct"] = {"tokens": 5}
    kinde.state.rate_limited, kinde.state.rate_limit_reset = 1, header
    with pytest.raises(ProviderUnavailable) as limited:
        await provider.read_limits("acct")
    sent = sum(kinde.state.requests.values())
    clock.advance(timedelta(seconds=seconds) - timedelta(milliseconds=1))
    with pytest.raises(ProviderUnavailable) as refused:
        await provider.report_usage("acct", "tokens", 1, clock())
    refused_without_sending = sum(kinde.state.requests.values()) == sent
    clock.advance(timedelta(milliseconds=1))
    found = await provider.read_limits("acct")
    retry_at = T0 + timedelta(seconds=seconds)
    assert (retry_at, retry_at, True) == (
        limited.value.retry_at, refused.value.retry_at, refused_without_sending
    )  # fmt: skip
    assert ({"tokens": 5}, 1.0) == (found, answers(metrics, "entitlements", "rate_limited"))


async def test_an_entitlement_without_a_feature_code_is_skipped(
    kinde: FakeKinde, provider: KindeProvider
) -> None:
    """An entitlement without feature_code is left out and logged; the others are read."""
    kinde.state.limits["acct"] = {"tokens": 5}
    kinde.state.extra_entitlements["acct"] = [{"id": "ent_fee", "fixed_charge": 100}]
    with structlog.testing.capture_logs() as logs:
        found = await provider.read_limits("acct")
    skipped = [e["entitlement"] for e in logs if e["event"] == "kinde_entitlement_skipped"]
    assert ({"tokens": 5}, ["'ent_fee'"]) == (found, skipped)


async def test_timestamps_are_utc_whole_seconds_with_z(
    kinde: FakeKinde, provider: KindeProvider
) -> None:
    """A report's time goes out in UTC, whole seconds, with Z, whatever its offset."""
    at = datetime(2026, 12, 1, 12, 0, 0, 987_654, tzinfo=timezone(timedelta(hours=2)))
    await provider.report_usage("acct", "tokens", 1, at)
    assert ["2026-12-01T10:00:00Z"] == [
        r["meter_usage_timestamp"] for r in kinde.state.meter_reports
    ]


def test_kinde_times_are_read_in_utc_whatever_their_offset() -> None:
    """Period fields with any offset (or none) are read as the same UTC instant."""
    written = ["2026-12-01T12:00:00+02:00", "2026-12-01T10:00:00Z", "2026-12-01T10:00:00",
               "2026-12-01T05:00:00-05", "not a time", None]  # fmt: skip
    at = datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert [at, at, at, at, None, None] == [parse_time(w) for w in written]


async def test_the_token_domain_serves_tokens_and_the_api_domain_the_calls() -> None:
    """With a token domain, the token is asked for there with its audience, and every API
    call goes to the (custom) API domain."""
    state = KindeState()
    state.limits["acct"] = {"tokens": 5}
    with fake_kinde(state) as api, fake_kinde(state) as tokens:
        p = KindeProvider(api.url, CLIENT_ID, CLIENT_SECRET, token_domain=tokens.url)
        try:
            await p.read_limits("acct")
            await p.report_usage("acct", "tokens", 1, T0)
        finally:
            await p.close()
    api_host, token_host = api.url.removeprefix("http://"), tokens.url.removeprefix("http://")
    assert [
        ("token", token_host), ("entitlements", api_host), ("agreements", api_host),
        ("meter_usage", api_host),
    ] == state.hosts  # fmt: skip
