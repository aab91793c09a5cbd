"""The console's edge over real HTTP on 127.0.0.1: a POST without the session's CSRF token
or without the login is refused and changes nothing, the login token is compared and never
shown, bad input is a 400 naming the field, and `earmark console` refuses to serve off
loopback without TLS (or --insecure-listen) and a login token."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import sys
from pathlib import Path

import httpx
import pytest

from earmark import limits
from earmark.console.app import serving
from earmark.console.guard import Sessions
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.console.conftest import Console, console_settings
from tests.helpers import assert_invariants, child, free_port, stop_by_repeating
from tests.service.test_security import make_pki

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')
LOGIN = "a-login-token-of-one-word-7f3a9c"


async def limit_of(side: Running, budget_id: str) -> int:
    return (await side.admin.GetBudget(pb.GetBudgetRequest(budget_id=budget_id))).limit


async def csrf_of(http: httpx.AsyncClient, path: str) -> str:
    page = await http.get(path)
    assert 200 == page.status_code, page.text
    found = CSRF.search(page.text)
    assert found is not None, page.text
    return found[1]


async def test_a_post_without_the_csrf_token_changes_nothing(
    sidecar: Running, console: Console
) -> None:
    """A confirmed limit change without the token, or with another session's, is 403 and
    the limit stays; with the session's own token it goes through."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="tokens"))
    change = {"budget": "b", "limit": "5", "confirm": "yes"}
    async with (
        httpx.AsyncClient(base_url=console.url) as http,
        httpx.AsyncClient(base_url=console.url) as other,
    ):
        token = await csrf_of(http, "/budget?id=b")
        others = await csrf_of(other, "/budget?id=b")
        missing = await http.post("/actions/limit", data=change)
        wrong = await http.post("/actions/limit", data={**change, "csrf": others})
        assert (403, 403) == (missing.status_code, wrong.status_code)
        assert "CSRF" in missing.text
        assert 100 == await limit_of(sidecar, "b")
        done = await http.post("/actions/limit", data={**change, "csrf": token})
    assert (303, "/budget?id=b") == (done.status_code, done.headers["location"])
    assert 5 == await limit_of(sidecar, "b")
    await assert_invariants(sidecar.dsn)


async def test_bad_input_is_a_400_naming_the_field(sidecar: Running, console: Console) -> None:
    """A limit that is not a whole number (words, a double sign, a superscript, an
    exponent, forty digits) or past the largest a budget takes, and a Lab of no jobs, are
    answered 400 with the field named, before any Admin call; an unknown budget is a
    404."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="tokens"))
    async with httpx.AsyncClient(base_url=console.url) as http:
        token = await csrf_of(http, "/budget?id=b")
        words = await http.post(
            "/actions/limit", data={"budget": "b", "limit": "ten", "csrf": token}
        )
        huge = await http.post(
            "/actions/limit", data={"budget": "b", "limit": str(10**18 + 1), "csrf": token}
        )
        odd = [
            await http.post("/actions/limit", data={"budget": "b", "limit": raw, "csrf": token})
            for raw in ("--5", "²", "1e9", "9" * 40)
        ]
        lab = await http.post("/lab/run", data={"jobs": "0", "csrf": token})
        missing = await http.get("/budget?id=nobody")
        api = await http.get("/api/budget?id=nobody")
    assert (400, 400, 404, 404) == (
        words.status_code, huge.status_code, missing.status_code, api.status_code,
    )  # fmt: skip
    assert [400] * 5 == [answer.status_code for answer in (*odd, lab)]
    assert "jobs: 0 is not between 1 and 100" in lab.text
    assert "limit: &#39;ten&#39; is not a whole number" in words.text
    assert "limit: 1,000,000,000,000,000,001 is not between" in huge.text
    assert "NOT_FOUND BUDGET_NOT_FOUND" in api.json()["error"]
    assert 100 == await limit_of(sidecar, "b")


async def test_a_login_token_guards_every_page_and_action(sidecar: Running, tmp_path: Path) -> None:
    """With a login token, pages redirect to /login, the API and actions are 401 and change
    nothing, a wrong token is refused, and the right one opens the pages under a new session
    id; the token appears on no page."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="tokens"))
    token_file = tmp_path / "login"
    token_file.write_text(LOGIN + "\n")
    settings = console_settings(sidecar, login_token_file=token_file)
    async with serving(settings) as (_, url), httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/budgets")
        assert (303, "/login?next=%2Fbudgets") == (page.status_code, page.headers["location"])
        csrf = await csrf_of(http, "/login")
        before = http.cookies["earmark_console"]
        api = await http.get("/api/budgets")
        act = await http.post(
            "/actions/limit", data={"budget": "b", "limit": "1", "confirm": "yes", "csrf": csrf}
        )
        assert (401, 401) == (api.status_code, act.status_code)
        wrong = await http.post("/login", data={"token": "not-it", "csrf": csrf, "next": "/"})
        assert 401 == wrong.status_code
        right = await http.post(
            "/login", data={"token": LOGIN, "csrf": csrf, "next": "https://elsewhere.example/"}
        )
        assert (303, "/") == (right.status_code, right.headers["location"])
        # A new session at login: the id the browser had before is not the logged-in one.
        assert before != http.cookies["earmark_console"]
        bodies = [(await http.get(path)).text for path in ("/budgets", "/budget?id=b", "/lab")]
    assert 100 == await limit_of(sidecar, "b")
    assert all(">b<" in body or "Concurrency Lab" in body for body in bodies)
    assert not any(LOGIN in body for body in [*bodies, wrong.text])
    await assert_invariants(sidecar.dsn)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--listen", "0.0.0.0:0"], "listen: 0.0.0.0 is not a loopback address"),
        (["--listen", "0.0.0.0:0", "--insecure-listen"], "login_token_file"),
        (["--listen", "127.0.0.1:notaport"], "listen: '127.0.0.1:notaport' is not HOST:PORT"),
        (["--timeout-seconds", "soon"], "timeout_seconds: 'soon' is not a float"),
    ],
)
async def test_the_command_refuses_an_unsafe_or_bad_setting_in_one_line(
    flags: list[str], named: str
) -> None:
    """Off loopback without TLS, or without a login token, and malformed values: exit 1
    with one line naming the setting."""
    async with child(
        sys.executable, "-m", "earmark", "console", *flags,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        _, err = await asyncio.wait_for(process.communicate(), timeout=30)
    lines = err.decode().strip().splitlines()
    assert (1, 1) == (process.returncode, len(lines))
    assert named in lines[0]


async def test_the_command_serves_a_sidecars_data_dir_as_make_run_leaves_it(
    sidecar: Running, socket_dir: Path
) -> None:
    """`earmark console --data-dir DIR` finds Admin at DIR/admin.sock, as it does for
    `make run`'s .earmark, serves the budgets page, and stops with exit 0 on SIGTERM, repeated
    until it exits."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="seen", limit=7, unit="tokens"))
    port = free_port()
    async with child(
        sys.executable, "-m", "earmark", "console", "--data-dir", str(socket_dir),
        "--target", sidecar.target, "--listen", f"127.0.0.1:{port}", "--log-format", "json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    ) as process:  # fmt: skip
        assert process.stdout is not None
        event: dict[str, object] = {}
        while event.get("event") != "serving":
            line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
            assert line, "earmark console ended before serving"
            event = json.loads(line)
        assert f"http://127.0.0.1:{port}" == event["url"]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            page = await http.get("/budgets")
        code = await stop_by_repeating(process, within_seconds=30)
    assert (200, 0) == (page.status_code, code)
    assert 'href="/budget?id=seen"' in page.text


async def test_another_host_name_or_site_is_refused(sidecar: Running, console: Console) -> None:
    """A page asked for under a host name the console does not serve (a site that rebound
    its name to 127.0.0.1) is 421 with no CSRF token in it; a POST from another origin or
    a cross-site fetch is 403 and changes nothing."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="tokens"))
    change = {"budget": "b", "limit": "5", "confirm": "yes"}
    async with httpx.AsyncClient(base_url=console.url) as http:
        rebound = await http.get("/lab", headers={"host": "rebound.example:8080"})
        token = await csrf_of(http, "/budget?id=b")
        posted = {**change, "csrf": token}
        elsewhere = await http.post(
            "/actions/limit", data=posted, headers={"origin": "https://rebound.example"}
        )
        fetched = await http.post(
            "/actions/limit", data=posted, headers={"sec-fetch-site": "cross-site"}
        )
        by_name = await http.get(
            "/budgets", headers={"host": f"localhost:{console.url.rsplit(':', 1)[1]}"}
        )
    assert (421, 403, 403, 200) == (
        rebound.status_code, elsewhere.status_code, fetched.status_code, by_name.status_code,
    )  # fmt: skip
    assert CSRF.search(rebound.text) is None
    assert 100 == await limit_of(sidecar, "b")


async def test_release_acts_only_on_a_hold_in_doubt_of_the_page_s_budget(
    sidecar: Running, console: Console
) -> None:
    """Releasing a running hold, or a hold of another budget, is 400 naming reservation_id
    and takes nothing from the worker that holds it."""
    for name in ("b", "other"):
        await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id=name, limit=100, unit="tokens"))
    running = await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="b", amount=10, idempotency_key="run")
    )
    doubt = await sidecar.budget.Reserve(
        pb.ReserveRequest(budget_id="other", amount=10, idempotency_key="doubt")
    )
    await sidecar.budget.Settle(
        pb.SettleRequest(reservation_id=doubt.reservation_id, used=3, outcome=pb.OUTCOME_UNKNOWN)
    )
    async with httpx.AsyncClient(base_url=console.url) as http:
        token = await csrf_of(http, "/budget?id=b")
        answers = [
            await http.post(
                "/actions/release",
                data={"budget": "b", "reservation_id": rid, "confirm": "yes", "csrf": token},
            )
            for rid in (running.reservation_id, doubt.reservation_id)
        ]
    assert [400, 400] == [a.status_code for a in answers]
    assert all(
        "reservation_id:" in a.text and "is not a hold in doubt on b" in a.text for a in answers
    )
    held = await sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id="b"))
    assert (10, 1) == (held.held, held.open_reservations)
    await assert_invariants(sidecar.dsn)


def test_logging_in_gives_a_new_session_and_visitors_evict_none() -> None:
    """A login makes a new session id (one planted before never becomes logged in), and
    any number of anonymous visitors leaves logged-in sessions in place."""
    sessions = Sessions()
    planted = sessions.new()
    logged = sessions.log_in()
    for _ in range(limits.console_sessions_max + 10):
        sessions.new()
    assert planted.sid != logged.sid
    assert (False, True) == (
        sessions.of(planted.sid).logged_in,  # type: ignore[union-attr]
        sessions.of(logged.sid).logged_in,  # type: ignore[union-attr]
    )
    assert (None, None) == (sessions.of("short"), sessions.of(None))


async def test_over_tls_the_pages_are_https_and_the_cookie_is_host_only(
    sidecar: Running, tmp_path: Path
) -> None:
    """With a certificate and key the console serves HTTPS only: pages answer over TLS with
    a __Host- cookie marked Secure, and plain HTTP gets no page."""
    pki = make_pki(tmp_path)
    settings = console_settings(
        sidecar, tls_cert_file=pki["server"], tls_key_file=pki["server-key"]
    )
    async with serving(settings) as (_, url):
        assert url.startswith("https://127.0.0.1:")
        trust = ssl.create_default_context(cafile=str(pki["ca"]))
        async with httpx.AsyncClient(base_url=url, verify=trust) as http:
            page = await http.get("/budgets")
        async with httpx.AsyncClient(base_url=url.replace("https", "http", 1)) as plain:
            with pytest.raises(httpx.HTTPError):
                await plain.get("/budgets")
    cookie = page.headers["set-cookie"]
    assert 200 == page.status_code
    assert cookie.startswith("__Host-earmark_console=")
    assert {"Secure", "HttpOnly", "SameSite=Strict", "Path=/"} <= {
        part.strip() for part in cookie.split(";")
    }
