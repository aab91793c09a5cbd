"""The console's edge over real HTTP on 127.0.0.1: a POST without the session's CSRF token
or without the login is refused and changes nothing, the login token is compared and never
shown, bad input is a 400 naming the field, and `earmark console` refuses to serve off
loopback without TLS (or --insecure-listen) and a login token."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
from pathlib import Path

import httpx
import pytest

from earmark.console.app import serving
from earmark.v1 import budget_pb2 as pb
from tests.conftest import Running
from tests.console.conftest import Console, console_settings
from tests.helpers import assert_invariants, child, free_port

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
    """A limit that is not a number, or past the largest a budget takes, is answered 400
    with the field named, before any Admin call; an unknown budget is a 404."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="tokens"))
    async with httpx.AsyncClient(base_url=console.url) as http:
        token = await csrf_of(http, "/budget?id=b")
        words = await http.post(
            "/actions/limit", data={"budget": "b", "limit": "ten", "csrf": token}
        )
        huge = await http.post(
            "/actions/limit", data={"budget": "b", "limit": str(10**19), "csrf": token}
        )
        missing = await http.get("/budget?id=nobody")
        api = await http.get("/api/budget?id=nobody")
    assert (400, 400, 404, 404) == (
        words.status_code, huge.status_code, missing.status_code, api.status_code,
    )  # fmt: skip
    assert "limit: &#39;ten&#39; is not a whole number" in words.text
    assert "limit: 10,000,000,000,000,000,000 is not between" in huge.text
    assert "NOT_FOUND BUDGET_NOT_FOUND" in api.json()["error"]
    assert 100 == await limit_of(sidecar, "b")


async def test_a_login_token_guards_every_page_and_action(sidecar: Running, tmp_path: Path) -> None:
    """With a login token, pages redirect to /login, the API and actions are 401 and change
    nothing, a wrong token is refused, and the right one opens the pages; the token appears
    on no page."""
    await sidecar.admin.PutBudget(pb.PutBudgetRequest(budget_id="b", limit=100, unit="tokens"))
    token_file = tmp_path / "login"
    token_file.write_text(LOGIN + "\n")
    settings = console_settings(sidecar, login_token_file=token_file)
    async with serving(settings) as (_, url), httpx.AsyncClient(base_url=url) as http:
        page = await http.get("/budgets")
        assert (303, "/login?next=%2Fbudgets") == (page.status_code, page.headers["location"])
        csrf = await csrf_of(http, "/login")
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
    `make run`'s .earmark, serves the budgets page, and stops on SIGTERM."""
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
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), timeout=30)
    assert (200, 0) == (page.status_code, code)
    assert 'href="/budget?id=seen"' in page.text
