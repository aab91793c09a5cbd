"""The admission rate limit as a pure rule: a fixed one-minute window per account."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from earmark.core.ratelimit import AdmissionWindow, admit_rate, give_back

START = datetime(2026, 8, 15, 12, tzinfo=UTC)


def test_the_121st_in_a_minute_waits_for_the_window() -> None:
    """120 admissions pass; the 121st is refused with the time left in the window, counts
    nothing, and is admitted once the window has passed."""
    window = AdmissionWindow("acct")
    passed = [admit_rate(window, START + timedelta(seconds=i / 4), 120).allowed for i in range(120)]
    refused = admit_rate(window, START + timedelta(seconds=45), 120)
    later = admit_rate(window, START + timedelta(seconds=60), 120)
    assert [True] * 120 == passed
    assert (False, timedelta(seconds=15)) == (refused.allowed, refused.retry_after)
    assert (True, 1) == (later.allowed, window.admissions)


def test_a_refused_budget_gives_its_admission_back() -> None:
    """An admission the budget refused is uncounted, so refusals do not use the rate."""
    window = AdmissionWindow("acct")
    admit_rate(window, START, 2)
    admit_rate(window, START, 2)
    give_back(window)
    assert (True, 2) == (admit_rate(window, START, 2).allowed, window.admissions)
