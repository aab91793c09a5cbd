"""The Kinde provider against a fake Kinde over real HTTP on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import pytest

from earmark.plans.kinde import KindeProvider
from earmark.plans.provider import ProviderUnavailable
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde


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
