"""Plan changes pushed: `earmark kinde-webhooks` as a real process against a fake Kinde
(its JWKS over real HTTP) and the test PostgreSQL, and the sidecars' watch of the marks it
leaves."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import threading
import time
import urllib.error
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import jwt
import pytest
import yaml

from earmark import limits
from earmark.plans.marks import MarkWatcher
from earmark.settings import KINDE_CLIENT_ID, KINDE_CLIENT_SECRET
from earmark.store import Store
from earmark.v1 import budget_pb2 as pb
from earmark.webhooks import settings as webhook_settings
from earmark.webhooks.keys import KeysUnavailable, KindeKeys, UnknownKey
from tests.conftest import Running, running
from tests.fake_kinde import CLIENT_ID, CLIENT_SECRET, FakeKinde, fake_kinde
from tests.fake_kinde_state import Agreement
from tests.helpers import (
    FakeClock,
    assert_invariants,
    child,
    eventually,
    free_port,
    scrape,
    stop_by_repeating,
)
from tests.plans.kinde_keys import (
    TRIGGERS,
    SigningKey,
    event,
    jwks,
    kinde_event,
    new_key,
    webhook_id,
)
from tests.service.test_plans import START, plans_sidecar, reserve, until_remaining

PLAN_CHANGED = "customer.plan_changed"


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return new_key("kinde-key-1")


@pytest.fixture(scope="module")
def other_key() -> SigningKey:
    """Not Kinde's: a token it signs must not verify, whatever kid it names."""
    return new_key("kinde-key-1")


@pytest.fixture
def kinde(key: SigningKey, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKinde]:
    monkeypatch.setenv(KINDE_CLIENT_ID, CLIENT_ID)
    monkeypatch.setenv(KINDE_CLIENT_SECRET, CLIENT_SECRET)
    with fake_kinde() as fake:
        fake.state.limits["acct"] = {"tokens": 100_000}
        fake.state.jwks = jwks(key)
        yield fake


@pytest.fixture
async def marks_dsn(dsn: str) -> str:
    """The test database with no plan marks and no event ids left by other tests."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("TRUNCATE plan_marks, webhook_events")
    finally:
        await conn.close()
    return dsn


@dataclass
class Webhooks:
    url: str
    port: int
    output: Path
    process: asyncio.subprocess.Process

    async def post(
        self, body: bytes | str, *, delivery: str | None = None
    ) -> tuple[int, dict[str, object]]:
        """Posts body as Kinde does (application/jwt), with delivery as its webhook-id."""
        headers = {"content-type": "application/jwt"}
        if delivery is not None:
            headers["webhook-id"] = delivery
        async with httpx.AsyncClient(timeout=10) as client:
            answer = await client.post(
                f"{self.url}/kinde/webhooks",
                content=body.encode() if isinstance(body, str) else body,
                headers=headers,
            )
        return answer.status_code, answer.json()


@contextlib.asynccontextmanager
async def webhooks_process(kinde: FakeKinde, dsn: str, folder: Path) -> AsyncIterator[Webhooks]:
    """`earmark kinde-webhooks` on a free loopback port, its log in a file; stopped with
    SIGTERM, repeated until it exits, at the end (killed if it will not stop), also on
    failure."""
    port = free_port()
    output = folder / f"webhooks-{port}.log"
    with output.open("wb") as log_file:
        async with child(
            sys.executable, "-m", "earmark", "kinde-webhooks",
            "--listen", f"127.0.0.1:{port}", "--kinde-domain", kinde.url,
            "--database-url", dsn, "--log-format", "json",
            stdout=log_file, stderr=asyncio.subprocess.STDOUT,
        ) as process:  # fmt: skip
            url = f"http://127.0.0.1:{port}"

            async def ready() -> bool:
                assert process.returncode is None, output.read_text()
                try:
                    async with httpx.AsyncClient(timeout=1) as client:
                        return 200 == (await client.get(f"{url}/healthz")).status_code
                except httpx.TransportError:
                    return False

            await eventually(ready, within_seconds=30, what="kinde-webhooks serving")
            yield Webhooks(url=url, port=port, output=output, process=process)
            await stop_by_repeating(process, within_seconds=15)


@pytest.fixture
async def webhooks(kinde: FakeKinde, marks_dsn: str, tmp_path: Path) -> AsyncIterator[Webhooks]:
    async with webhooks_process(kinde, marks_dsn, tmp_path) as running_webhooks:
        yield running_webhooks


async def table_counts(dsn: str) -> tuple[int, int]:
    """How many plan marks and kept event ids the database holds."""
    conn = await asyncpg.connect(dsn)
    try:
        return (
            await conn.fetchval("SELECT count(*) FROM plan_marks"),
            await conn.fetchval("SELECT count(*) FROM webhook_events"),
        )
    finally:
        await conn.close()


async def test_a_plan_change_reaches_the_next_reserve_by_account(
    kinde: FakeKinde, key: SigningKey, webhooks: Webhooks, marks_dsn: str, socket_dir: Path
) -> None:
    """Kinde changes the plan (a new agreement, the old one cancelled) and signs a
    customer.plan_changed: the account is marked in PostgreSQL, a running sidecar's next
    Reserve by account sees the new limit within seconds, though its cache (on a clock
    moved 5 s) would keep the old one for 60 s, and the reports after it go to the new
    agreement, none to the old."""
    kinde.state.agreements["acct"] = [Agreement("agreement_old", features=("tokens",))]
    clock = FakeClock(START)
    kinde.state.now = clock
    async with running(plans_sidecar(marks_dsn, socket_dir, kinde, clock), marks_dsn) as side:
        first = await side.budget.Reserve(reserve("acct", 1_000, "first"))
        held = await side.budget.Reserve(reserve("acct", 1_000, "held"))
        await side.budget.Settle(pb.SettleRequest(reservation_id=first.reservation_id, used=500))
        await metered(kinde, "agreement_old", 500)
        kinde.state.limits["acct"] = {"tokens": 250_000}
        kinde.state.change_plan("acct", Agreement("agreement_new", features=("tokens",)))
        reports_before = len(kinde.state.meter_reports)
        # Seconds pass, far fewer than the cache's 60: only the mark can make it read again.
        clock.advance(timedelta(seconds=5))
        status, answer = await webhooks.post(key.sign(event(kinde.url, PLAN_CHANGED, "acct")))
        assert (200, {"result": "marked"}) == (status, answer)
        assert (1, 1) == await table_counts(marks_dsn)
        took = await _until_remaining_within(side, 248_500, seconds=10)
        assert took < limits.limit_fresh_seconds_default / 6
        await side.budget.Settle(pb.SettleRequest(reservation_id=held.reservation_id, used=700))
        await metered(kinde, "agreement_new", 1_200)
    after = kinde.state.meter_reports[reports_before:]
    assert {"agreement_new"} == {r["customer_agreement_id"] for r in after}
    assert 500 == kinde.state.meters[("agreement_old", "tokens")]
    await assert_invariants(marks_dsn)


async def metered(kinde: FakeKinde, agreement: str, total: int) -> None:
    """Waits until the fake Kinde's meter of agreement's tokens holds total."""

    async def holds() -> bool:
        return kinde.state.meters.get((agreement, "tokens")) == total

    await eventually(holds, within_seconds=10, what=f"{agreement} metered at {total}")


async def _until_remaining_within(side: Running, remaining: int, *, seconds: float) -> float:
    started = time.monotonic()
    await until_remaining(side, remaining)
    took = time.monotonic() - started
    assert took < seconds
    return took


async def test_each_refusal_has_its_status_and_changes_nothing(
    kinde: FakeKinde, key: SigningKey, other_key: SigningKey, webhooks: Webhooks, marks_dsn: str
) -> None:
    """A bad signature, a wrong issuer, an expired or too old token, another algorithm, a
    body that is no JWT, an event naming no customer and a body past the bound are each
    refused with their status; a known event Earmark does not act on is acknowledged; none
    marks anything, and the counter counts each result."""
    now = int(time.time())
    good = event(kinde.url, PLAN_CHANGED, "acct")
    no_exp = {k: v for k, v in good.items() if k != "exp"}
    hmac = jwt.encode(good, "a-shared-secret-of-32-bytes-long!", algorithm="HS256")
    cases = {
        "other key": other_key.sign(good),
        "wrong issuer": key.sign(good | {"iss": "https://someone-else.kinde.com"}),
        "expired": key.sign(good | {"exp": now - 3600}),
        "too old": key.sign(
            no_exp | {"iat": now - 2 * int(limits.webhook_delivery_age_seconds_max)}
        ),
        "no time": key.sign({k: v for k, v in no_exp.items() if k not in ("iat", "timestamp")}),
        "hs256": hmac,
        "not a jwt": "this is not a token",
        "no customer": key.sign(good | {"data": {"plan_code": "pro"}}),
        "slash account": key.sign(good | {"data": {"customer_id": "a/b"}}),
        "too large": "x" * (limits.webhook_body_bytes_max + 1),
        "ignored": key.sign(event(kinde.url, "customer.meter_usage_updated", "acct")),
    }
    actual = {}
    for name, body in cases.items():
        status, answer = await webhooks.post(body)
        actual[name] = (status, answer["result"])
    expected = {
        "other key": (401, "unauthorized"),
        "wrong issuer": (401, "unauthorized"),
        "expired": (401, "expired"),
        "too old": (401, "expired"),
        "no time": (401, "unauthorized"),
        "hs256": (401, "unauthorized"),
        "not a jwt": (400, "malformed"),
        "no customer": (400, "malformed"),
        "slash account": (400, "malformed"),
        "too large": (413, "too_large"),
        "ignored": (200, "ignored"),
    }
    assert expected == actual
    assert (0, 0) == await table_counts(marks_dsn)
    counted = {
        labels[0][1]: value
        for (name, labels), value in scrape(webhooks.port).items()
        if name == "earmark_webhooks_total" and value
    }
    assert {
        "unauthorized": 4, "expired": 2, "malformed": 3, "too_large": 1, "ignored": 1,
    } == counted  # fmt: skip
    logged = webhooks.output.read_text()
    leaked = [name for name, body in cases.items() if name != "too large" and body in logged]
    assert [] == leaked


async def marked_at(dsn: str, account: str) -> datetime | None:
    """When the account was last marked, as the database holds it."""
    conn = await asyncpg.connect(dsn)
    try:
        at: datetime | None = await conn.fetchval(
            "SELECT marked_at FROM plan_marks WHERE account = $1", account
        )
        return at
    finally:
        await conn.close()


async def test_a_delivery_sent_again_is_acknowledged_and_applied_once(
    kinde: FakeKinde, key: SigningKey, webhooks: Webhooks, marks_dsn: str
) -> None:
    """A delivery Kinde sends again (the same webhook-id with the same token or one signed
    anew, or without the header the same event id) is answered 200 replayed and leaves the
    account's first mark as it was."""
    delivery = webhook_id()
    first_claims = kinde_event("customer.agreement_cancelled", "acct", event_id="event_1")
    token = key.sign(first_claims)
    resigned = key.sign(first_claims | {"event_id": "event_2"})
    plain = key.sign(kinde_event("customer.plan_changed", "other", event_id="event_3"))
    answers = [
        await webhooks.post(token, delivery=delivery),
        await webhooks.post(token, delivery=delivery),
        await webhooks.post(resigned, delivery=delivery),
        await webhooks.post(token),
        await webhooks.post(plain),
        await webhooks.post(plain),
    ]
    first_mark = await marked_at(marks_dsn, "acct")
    await webhooks.post(token, delivery=delivery)
    assert [
        (200, {"result": "marked"}),
        (200, {"result": "replayed"}),
        (200, {"result": "replayed"}),
        (200, {"result": "replayed"}),
        (200, {"result": "marked"}),
        (200, {"result": "replayed"}),
    ] == answers
    assert (2, 2, first_mark) == (
        *await table_counts(marks_dsn),
        await marked_at(marks_dsn, "acct"),
    )


async def test_every_published_event_type_is_acknowledged_and_limit_changes_mark(
    kinde: FakeKinde, key: SigningKey, webhooks: Webhooks, marks_dsn: str
) -> None:
    """Each trigger Kinde publishes, in its documented payload (no iss, iat or exp), is
    answered 200, the four that change limits (customer.plan_assigned among them) marking
    their account and the rest nothing, and a type Kinde does not publish is answered 200
    and logged once however often it comes."""
    actual = {}
    for kind in TRIGGERS:
        status, answer = await webhooks.post(key.sign(kinde_event(kind, kind.replace(".", "-"))))
        actual[kind] = (status, answer["result"])
    unknown = [await webhooks.post(key.sign(kinde_event("customer.teleported", "acct")))
               for _ in range(3)]  # fmt: skip
    marking = {
        "customer.plan_assigned", "customer.plan_changed", "customer.agreement_created",
        "customer.agreement_cancelled",
    }  # fmt: skip
    expected = {kind: (200, "marked" if kind in marking else "ignored") for kind in TRIGGERS}
    assert expected == actual
    assert [(200, {"result": "unknown_type"})] * 3 == unknown
    conn = await asyncpg.connect(marks_dsn)
    try:
        marked = {r["account"] for r in await conn.fetch("SELECT account FROM plan_marks")}
    finally:
        await conn.close()
    assert {kind.replace(".", "-") for kind in marking} == marked
    lines = webhooks.output.read_text().splitlines()
    assert 1 == sum('"webhook_type_unknown"' in line for line in lines)
    assert [] == [line for line in lines if "Traceback" in line]


async def test_the_issuer_is_checked_only_when_the_token_names_one(
    kinde: FakeKinde, key: SigningKey, webhooks: Webhooks, marks_dsn: str
) -> None:
    """A token without iss (Kinde's documented payload) or naming the Kinde domain is
    accepted, and one naming another issuer is refused 401 and marks nothing."""
    answers = [
        await webhooks.post(key.sign(kinde_event(PLAN_CHANGED, "no_iss"))),
        await webhooks.post(key.sign(kinde_event(PLAN_CHANGED, "kinde_iss") | {"iss": kinde.url})),
        await webhooks.post(
            key.sign(kinde_event(PLAN_CHANGED, "other_iss") | {"iss": "https://x.kinde.com"})
        ),
    ]
    assert [
        (200, {"result": "marked"}),
        (200, {"result": "marked"}),
        (401, {"result": "unauthorized", "error": f"the token's issuer is not {kinde.url}"}),
    ] == answers
    assert (2, 2) == await table_counts(marks_dsn)


async def test_a_token_is_accepted_for_as_long_as_kinde_sends_it_again(
    kinde: FakeKinde, key: SigningKey, webhooks: Webhooks, marks_dsn: str
) -> None:
    """A token issued 30 hours ago (by its timestamp, as Kinde documents it, or by an iat)
    is accepted within Kinde's 36-hour retries, and one older than that window and its
    margin is refused 401 expired."""
    now = datetime.now(UTC)
    hours_30 = now - timedelta(hours=30)
    too_old = now - timedelta(seconds=limits.webhook_delivery_age_seconds_max, hours=1)
    answers = [
        await webhooks.post(key.sign(kinde_event(PLAN_CHANGED, "stamped", at=hours_30))),
        await webhooks.post(
            key.sign(kinde_event(PLAN_CHANGED, "issued") | {"iat": int(hours_30.timestamp())})
        ),
        await webhooks.post(key.sign(kinde_event(PLAN_CHANGED, "stale", at=too_old))),
    ]
    assert [(200, "marked"), (200, "marked"), (401, "expired")] == [
        (status, answer["result"]) for status, answer in answers
    ]
    assert (2, 2) == await table_counts(marks_dsn)


async def abort_post(port: int, *, reset: bool) -> None:
    """Starts a webhook post, sends its headers, waits for the receiver's 100 Continue (its
    app is reading the body: a reset that came before the receiver read the headers would
    end a connection that never was a request, which nothing counts), sends a piece of the
    body, then goes away: closes the connection, or resets it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /kinde/webhooks HTTP/1.1\r\nhost: 127.0.0.1\r\nexpect: 100-continue\r\n"
        b"content-type: application/jwt\r\ncontent-length: 4096\r\n\r\n"
    )
    await writer.drain()
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
    assert interim.startswith(b"HTTP/1.1 100 "), interim
    writer.write(b"eyJhbGciOi")
    await writer.drain()
    if reset:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_clients_that_go_away_mid_body_are_counted_not_tracebacks(
    kinde: FakeKinde, key: SigningKey, webhooks: Webhooks, marks_dsn: str
) -> None:
    """100 posts cut off mid-body (half closed, half reset) are counted as disconnected
    with no traceback and at most one log line each, and the receiver still takes Kinde's
    next delivery."""

    for n in range(100):
        await abort_post(webhooks.port, reset=n % 2 == 1)

    async def all_counted() -> bool:
        try:
            samples = scrape(webhooks.port)
        except urllib.error.HTTPError:
            # 503 while the aborted posts still hold more than webhook_requests_max slots.
            return False
        return 100 == samples.get(("earmark_webhooks_total", (("result", "disconnected"),)))

    await eventually(all_counted, within_seconds=10, what="100 disconnects counted")
    after = await webhooks.post(key.sign(kinde_event(PLAN_CHANGED, "acct")), delivery=webhook_id())
    log = webhooks.output.read_text()
    disconnect_lines = sum('"client_disconnected"' in line for line in log.splitlines())
    assert (200, {"result": "marked"}) == after
    assert (False, False, True) == (
        "Traceback" in log, "ClientDisconnect" in log, 1 <= disconnect_lines <= 100
    )  # fmt: skip


async def test_an_unknown_key_id_fetches_the_keys_once_then_is_refused(
    kinde: FakeKinde, key: SigningKey, webhooks: Webhooks, marks_dsn: str
) -> None:
    """A token naming a key id Kinde's set lacks fetches the set (once), is refused 401,
    and the next within the interval is refused without another fetch."""
    token = key.sign(event(kinde.url, PLAN_CHANGED, "acct"), kid="rotated-away")
    answers = [await webhooks.post(token) for _ in range(2)]
    refused = {
        "result": "unauthorized",
        "error": "key id 'rotated-away' is not in Kinde's key set",
    }
    assert [(401, refused)] * 2 == answers
    assert 1 == kinde.state.requests["jwks"]
    assert (0, 0) == await table_counts(marks_dsn)


async def test_keys_are_fetched_again_at_most_once_per_interval(
    kinde: FakeKinde, key: SigningKey
) -> None:
    """A key id the cached set lacks fetches the set again only once the refetch interval
    has passed since the last fetch; a key that appeared meanwhile is then found."""
    now = [0.0]
    keys = KindeKeys(kinde.url, monotonic=lambda: now[0])
    await keys.key(key.kid)
    added = new_key("kinde-key-2")
    kinde.state.jwks = jwks(key, added)
    outcomes = []
    for at in (1.0, limits.webhook_jwks_refetch_seconds_min + 0.5):
        now[0] = at
        try:
            outcomes.append((await keys.key(added.kid)).key_id)
        except UnknownKey:
            outcomes.append("unknown")
    assert ["unknown", "kinde-key-2"] == outcomes
    assert 2 == kinde.state.requests["jwks"]


async def test_a_stalled_key_set_is_unavailable_after_the_timeout(kinde: FakeKinde) -> None:
    """Kinde's JWKS that does not answer is KeysUnavailable once the fetch's timeout has
    passed, naming the URL."""
    kinde.state.stall = threading.Event()
    keys = KindeKeys(kinde.url, timeout_seconds=0.3)
    try:
        with pytest.raises(KeysUnavailable) as caught:
            await keys.key("kinde-key-1")
    finally:
        kinde.state.stall.set()
    assert f"kinde jwks: could not be fetched from {kinde.url}/.well-known/jwks" == str(
        caught.value
    )


async def test_sigterm_stops_it_and_a_bad_domain_is_one_line(
    kinde: FakeKinde, marks_dsn: str, tmp_path: Path
) -> None:
    """SIGTERM, repeated until it exits, stops the command with exit 0; a Kinde domain
    that is not https is refused in one line naming the setting."""
    async with webhooks_process(kinde, marks_dsn, tmp_path) as running_webhooks:
        process = running_webhooks.process
    assert 0 == process.returncode
    refused = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "earmark", "kinde-webhooks", "--kinde-domain", "http://kinde.example",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(refused.communicate(), timeout=60)
    assert (1, "earmark kinde-webhooks: kinde_domain: needs Kinde's https:// URL, e.g. "
            "https://yours.kinde.com (plain http only on a loopback address)") == (
        refused.returncode, err.decode().strip())  # fmt: skip


async def _mark(dsn: str, account: str, at: datetime) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "INSERT INTO plan_marks (account, marked_at) VALUES ($1, $2) "
            "ON CONFLICT (account) DO UPDATE SET marked_at = EXCLUDED.marked_at",
            account,
            at,
        )
    finally:
        await conn.close()


async def test_the_watch_applies_new_marks_once_and_no_history(
    store: Store, marks_dsn: str
) -> None:
    """The first pass takes no marks made before it; later passes forget each new mark's
    account once, in pages, including a mark that committed late with an earlier time."""
    forgotten: list[str] = []
    watcher = MarkWatcher(store, forgotten.append, rows_max=2)
    await _mark(marks_dsn, "before", await store.database_now() - timedelta(seconds=1))
    await watcher.poll_once()
    start = await store.database_now()
    for n, account in enumerate(("a", "b", "c")):
        await _mark(marks_dsn, account, start + timedelta(milliseconds=10 * (n + 1)))
    first = await watcher.poll_once()
    again = await watcher.poll_once()
    await _mark(marks_dsn, "late", start + timedelta(milliseconds=5))
    late = await watcher.poll_once()
    assert (3, 0, 1) == (first, again, late)
    assert ["a", "b", "c", "late"] == forgotten


def test_the_shipped_manifest_runs_the_command_with_settings_it_takes() -> None:
    """deploy/kubernetes/kinde-webhooks.yaml runs `kinde-webhooks` with an environment the
    command's settings accept (the Secret's URL standing in for its reference)."""
    manifest = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
    docs = list(yaml.safe_load_all((manifest / "kinde-webhooks.yaml").read_text()))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    secret_url = "postgresql://secret@db/earmark"
    environ = {e["name"]: e.get("value", secret_url) for e in container["env"]}
    settings = webhook_settings.load({}, environ)
    assert (["kinde-webhooks"], "0.0.0.0:8788", True) == (
        container["args"],
        settings.listen,
        settings.insecure_listen,
    )
