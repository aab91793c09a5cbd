"""The console's login throttle, over real HTTP on loopback addresses (127.0.0.1 and others
of 127/8, each a client address of its own) and on the test's clock: wrong tokens past a
limit, from one address or from all together, are answered 429 with Retry-After without the
token being looked at, once per burst in the log, until the window passes; and the table of
addresses it keeps stays within its bound."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import structlog

from earmark import limits
from earmark.console.app import serving
from earmark.console.settings import ConsoleSettings
from earmark.console.throttle import LoginThrottle, Throttled
from tests.console.test_security import LOGIN, csrf_of
from tests.helpers import FakeClock

PER_ADDRESS = limits.console_login_failures_per_address_max
OVERALL = limits.console_login_failures_max
WINDOW = timedelta(seconds=limits.console_login_window_seconds)
RETRY_AFTER = str(int(limits.console_login_window_seconds))


@dataclass
class Visitor:
    """A browser's worth of the console from one client address: its session and the
    login form's CSRF token."""

    http: httpx.AsyncClient
    csrf: str

    async def log_in(self, token: str, headers: dict[str, str] | None = None) -> httpx.Response:
        form = {"token": token, "csrf": self.csrf, "next": "/"}
        return await self.http.post("/login", data=form, headers=headers)


@contextlib.asynccontextmanager
async def console_on(tmp_path: Path, clock: FakeClock) -> AsyncIterator[str]:
    """The console with a login token, on clock, serving 127.0.0.1:0; yields its URL. The
    login pages make no Admin call, so no sidecar is needed behind it."""
    token_file = tmp_path / "login"
    token_file.write_text(LOGIN + "\n")
    settings = ConsoleSettings(
        listen="127.0.0.1:0",
        admin_target=f"unix:{tmp_path / 'no-admin.sock'}",
        login_token_file=token_file,
    )
    async with serving(settings, clock) as (_, url):
        yield url


@contextlib.asynccontextmanager
async def visitor(url: str, address: str) -> AsyncIterator[Visitor]:
    """A visitor connecting from address (any of 127/8 on Linux) with the login page read."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    async with httpx.AsyncClient(base_url=url, transport=transport) as http:
        yield Visitor(http, await csrf_of(http, "/login"))


def spoofed(n: int) -> dict[str, str]:
    """An X-Forwarded-For header claiming the nth address of 10/8."""
    return {"x-forwarded-for": f"10.0.{n // 256}.{n % 256}"}


def events(
    logs: Sequence[MutableMapping[str, Any]], name: str, *keys: str
) -> list[tuple[Any, ...]]:
    """The named log lines, each as its values of keys."""
    return [tuple(line.get(key) for key in keys) for line in logs if line["event"] == name]


async def test_wrong_tokens_from_one_address_are_throttled_until_the_window_passes(
    tmp_path: Path, clock: FakeClock
) -> None:
    """300 wrong tokens from one address, ten at a time (each claiming another address in
    X-Forwarded-For, which is not believed), are 401 up to the per-address limit and 429
    with Retry-After past it; the right token while throttled gets the very same 429, and
    once the clock passes the window it logs in; the log has one throttle line for the
    burst and one for its end."""

    async def guesses(guesser: Visitor, first: int) -> list[httpx.Response]:
        numbers = range(first, first + 30)
        return [await guesser.log_in(f"guess-{n}", spoofed(n)) for n in numbers]

    with structlog.testing.capture_logs() as logs:
        async with console_on(tmp_path, clock) as url, visitor(url, "127.0.0.1") as guesser:
            # Ten connections at once, as an attacker would send them: guesses that overlap
            # are counted too.
            batches = await asyncio.gather(*(guesses(guesser, 30 * k) for k in range(10)))
            wrong = [answer for batch in batches for answer in batch]
            right = await guesser.log_in(LOGIN)
            clock.advance(WINDOW - timedelta(seconds=1))
            almost = await guesser.log_in(LOGIN)
            clock.advance(timedelta(seconds=1))
            after = await guesser.log_in(LOGIN)
    refused = [answer for answer in wrong if answer.status_code == 429]
    assert {(401, None): PER_ADDRESS, (429, RETRY_AFTER): 300 - PER_ADDRESS} == Counter(
        (answer.status_code, answer.headers.get("retry-after")) for answer in wrong
    )
    assert (429, RETRY_AFTER, refused[-1].text) == (
        right.status_code, right.headers.get("retry-after"), right.text,
    )  # fmt: skip
    assert (429, "1") == (almost.status_code, almost.headers.get("retry-after"))
    assert (303, "/") == (after.status_code, after.headers.get("location"))
    assert LOGIN not in right.text
    assert [("address", "127.0.0.1", PER_ADDRESS)] == events(
        logs, "login_throttled", "scope", "address", "failures"
    )
    assert [("address", "127.0.0.1", 300 - PER_ADDRESS + 2)] == events(
        logs, "login_throttle_ended", "scope", "address", "refused"
    )


async def test_many_addresses_together_are_throttled_by_the_overall_limit(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Addresses that each stay under the per-address limit are throttled together once
    their wrong tokens pass the overall limit: then an address that never guessed is 429
    with the right token, until the clock passes the window; one line logs the burst."""
    under = PER_ADDRESS - 1
    guessers = [f"127.0.0.{10 + n}" for n in range(OVERALL // under + 2)]

    async def guesses(url: str, address: str) -> list[int]:
        async with visitor(url, address) as guesser:
            return [(await guesser.log_in(f"guess-{n}")).status_code for n in range(under)]

    with structlog.testing.capture_logs() as logs:
        async with console_on(tmp_path, clock) as url:
            batches = await asyncio.gather(*(guesses(url, address) for address in guessers))
            answers = [status for batch in batches for status in batch]
            async with visitor(url, "127.0.0.2") as operator:
                during = await operator.log_in(LOGIN)
                clock.advance(WINDOW)
                after = await operator.log_in(LOGIN)
    assert {401: OVERALL, 429: len(answers) - OVERALL} == Counter(answers)
    assert (429, RETRY_AFTER) == (during.status_code, during.headers.get("retry-after"))
    assert (303, "/") == (after.status_code, after.headers.get("location"))
    assert [("overall", None, OVERALL)] == events(
        logs, "login_throttled", "scope", "address", "failures"
    )
    assert [("overall", len(answers) - OVERALL + 1)] == events(
        logs, "login_throttle_ended", "scope", "refused"
    )


async def test_a_login_leaves_another_address_s_count_alone(
    tmp_path: Path, clock: FakeClock
) -> None:
    """An operator's login from one address does not reset the wrong tokens counted
    against another: that address is still throttled at its limit."""
    async with (
        console_on(tmp_path, clock) as url,
        visitor(url, "127.0.0.3") as guesser,
        visitor(url, "127.0.0.1") as operator,
    ):
        first = [(await guesser.log_in(f"guess-{n}")).status_code for n in range(PER_ADDRESS - 1)]
        logged_in = await operator.log_in(LOGIN)
        last = await guesser.log_in("guess-last")
        refused = await guesser.log_in(LOGIN)
    assert [401] * (PER_ADDRESS - 1) == first
    assert (303, 401, 429) == (logged_in.status_code, last.status_code, refused.status_code)


def test_a_throttled_attempt_never_looks_at_the_token(clock: FakeClock) -> None:
    """Once an address is throttled its attempts raise Throttled without calling the token
    check, and after the window the check is made again."""
    throttle = LoginThrottle(clock)
    looked: list[str] = []

    def wrong() -> bool:
        looked.append("wrong")
        return False

    def right() -> bool:
        looked.append("right")
        return True

    failed = [throttle.attempt("192.0.2.1", wrong) for _ in range(PER_ADDRESS)]
    waits = []
    for check in (wrong, right):
        try:
            throttle.attempt("192.0.2.1", check)
        except Throttled as throttled:
            waits.append(throttled.retry_after_seconds)
    clock.advance(WINDOW)
    after = throttle.attempt("192.0.2.1", right)
    assert [False] * PER_ADDRESS == failed
    assert [int(limits.console_login_window_seconds)] * 2 == waits
    assert ["wrong"] * PER_ADDRESS + ["right"] == looked
    assert after


def test_the_table_of_addresses_never_passes_its_limit(clock: FakeClock) -> None:
    """Wrong tokens from more addresses than the table holds keep it at its limit, the
    oldest row dropped first: the first address, one guess short of its limit, is counted
    afresh, while the newest, as close to it, is throttled at its next wrong token."""
    most = limits.console_login_addresses_max
    # An overall limit out of reach, so that the table itself is what fills.
    throttle = LoginThrottle(clock, failures_max=10 * most)
    addresses = [f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}" for n in range(most + 50)]
    oldest, newest = addresses[0], addresses[-1]
    sizes = []
    for _ in range(PER_ADDRESS - 2):
        throttle.attempt(oldest, lambda: False)
    for address in addresses:
        throttle.attempt(address, lambda: False)
        sizes.append(len(throttle))
    for _ in range(PER_ADDRESS - 2):
        throttle.attempt(newest, lambda: False)
    for address in (oldest, newest):
        throttle.attempt(address, lambda: False)
    refused = []
    for address in (oldest, newest):
        try:
            throttle.attempt(address, lambda: False)
        except Throttled:
            refused.append(address)
    assert (most, most) == (max(sizes), len(throttle))
    assert [newest] == refused
