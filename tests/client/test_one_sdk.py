"""One SDK with two faces: the synchronous Client is derived from AsyncClient, has its every
call with the same signature, reaches everything the wire carries, names an unreachable
sidecar within the call's deadline, and rejects bad input with ValueError."""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from collections.abc import AsyncIterator, Callable, Set
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

import earmark.client
from earmark.client import (
    AsyncClient,
    Client,
    Hold,
    OveragePolicy,
    Refusal,
    RefusalReason,
    Reservation,
    RetryPolicy,
    Shape,
    SyncHold,
    UnavailableError,
)
from earmark.client.llm import Meter
from earmark.server import Sidecar
from earmark.v1 import budget_pb2 as pb
from earmark.v1 import budget_pb2_grpc as pb_grpc
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import canned_budget, free_port
from tests.service.test_security import make_pki

CLIENT = Path(earmark.client.__file__).parent
# What the synchronous face says where the async one says the left-hand name.
TWIN_NAMES = {"AsyncClient": "Client", "Hold": "SyncHold", "AsyncIterator": "Iterator"}
# What the synchronous face leaves out, and why: a grpc.aio channel belongs to the event
# loop it was made on, and a Client's loop is its own.
LEFT_OUT = {"__init__": {"channel"}}
CONTEXT = {"__aenter__": "__enter__", "__aexit__": "__exit__"}


def _synced(annotation: object) -> object:
    """An async face's annotation as its synchronous twin would write it."""
    if not isinstance(annotation, str):
        return annotation
    return re.sub(
        r"\b(" + "|".join(TWIN_NAMES) + r")\b", lambda m: TWIN_NAMES[m.group(1)], annotation
    )


def _signature(function: object, left_out: Set[str] = frozenset()) -> list[tuple[object, ...]]:
    """A signature as comparable rows: each parameter's name, kind, default and annotation,
    then the return annotation."""
    signature = inspect.signature(function)  # type: ignore[arg-type]
    rows: list[tuple[object, ...]] = [
        (p.name, p.kind, p.default, _synced(p.annotation))
        for p in signature.parameters.values()
        if p.name not in left_out
    ]
    return [*rows, ("return", _synced(signature.return_annotation))]


def differences(
    async_face: type,
    sync_face: type,
    attributes: tuple[object, object],
    *,
    constructor: bool = True,
) -> list[str]:
    """Every way sync_face is not async_face's twin: a public method, property or attribute
    (of the pair of objects in attributes, async then sync) missing, a signature that
    differs, or a coroutine left asynchronous; the constructors too, when workers call
    them."""
    found = []
    public = {n for n in dir(async_face) if not n.startswith("_")}
    public |= {"__init__"} if constructor else set()
    for name in sorted(public | set(CONTEXT)):
        twin_name = CONTEXT.get(name, name)
        theirs = getattr(async_face, name, None)
        ours = getattr(sync_face, twin_name, None)
        if theirs is None:
            continue
        if ours is None:
            found.append(f"{twin_name}: missing")
        elif callable(theirs) and name not in CONTEXT:
            left_out = LEFT_OUT.get(name, set())
            if _signature(theirs, left_out) != _signature(ours) or (
                inspect.iscoroutinefunction(ours) or inspect.isasyncgenfunction(ours)
            ):
                found.append(f"{name}: {inspect.signature(ours)} != {inspect.signature(theirs)}")
    theirs_made, ours_made = attributes
    public_attributes = {n for n in vars(theirs_made) if not n.startswith("_")}
    missing = sorted(n for n in public_attributes if not hasattr(ours_made, n))
    found += [f"{name}: missing" for name in missing]
    return found


async def test_the_sync_client_has_every_call_of_the_async_one() -> None:
    """Every public method of AsyncClient and Hold is on Client and SyncHold with the same
    parameters, defaults and annotations, and runs synchronously; their public attributes
    are there too."""
    async with AsyncClient("127.0.0.1:1") as client:
        sync = await asyncio.to_thread(Client, "127.0.0.1:1")
        try:
            found = differences(AsyncClient, Client, (client, sync))
            pair = (client.hold("b", 1), sync.hold("b", 1))
            # Workers get a Hold or a SyncHold from hold(), never from their constructors.
            found += differences(Hold, SyncHold, pair, constructor=False)
        finally:
            await asyncio.to_thread(sync.close)
    assert [] == found


def test_a_parameter_added_to_one_face_only_is_found() -> None:
    """The comparison finds a parameter the sync face lacks, a default that differs, and a
    coroutine left asynchronous."""

    class Async:
        async def reserve(self, budget_id: str, amount: int = 0, *, final: bool = False) -> int:
            return amount

        async def renew(self, reservation_id: str) -> int:
            return 0

    class Sync:
        def reserve(self, budget_id: str, amount: int = 1) -> int:
            return amount

        async def renew(self, reservation_id: str) -> int:
            return 0

    made = Async()
    vars(made)["target"] = "127.0.0.1:50051"
    found = differences(Async, Sync, (made, Sync()))
    assert ["renew", "reserve", "target"] == [line.split(":")[0] for line in found]


def test_the_modules_of_the_sdk_import_no_circle() -> None:
    """No module of earmark.client imports one that imports it back (hold.py takes its
    types from types.py, not from aio.py)."""
    imports: dict[str, set[str]] = {}
    for path in CLIENT.glob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "earmark.client."
            ):
                names.add(str(node.module).rsplit(".", 1)[1])
        imports[path.stem] = names
    circles = sorted(
        (a, b) for a, names in imports.items() for b in names if a in imports.get(b, set())
    )
    assert [] == circles


def test_input_errors_raise_value_error_naming_the_parameter() -> None:
    """Bad settings raise ValueError naming the parameter, whatever python -O does to
    asserts."""
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: RetryPolicy(attempts_max=0), "attempts_max"),
        (lambda: RetryPolicy(backoff_seconds_base=0), "backoff_seconds_base"),
        (lambda: RetryPolicy(backoff_seconds_max=0.01), "backoff_seconds_max"),
        (lambda: AsyncClient(timeout_seconds=0), "timeout_seconds"),
        (lambda: Client(timeout_seconds=601), "timeout_seconds"),
        (lambda: Meter("b", retry=RetryPolicy(attempts_max=11)), "retry.attempts_max"),
    ]  # fmt: skip
    named = []
    for make, name in cases:
        with pytest.raises(ValueError, match=rf"^{re.escape(name)} must be") as caught:
            make()
        named.append(str(caught.value).split(" ", 1)[0])
    assert [name for _, name in cases] == named


async def test_an_unreachable_sidecar_is_named_within_the_deadline(socket_dir: Path) -> None:
    """With nothing listening, a call raises UnavailableError naming the target and the
    deadline once its deadline (1 s) passes, without retrying for five of them; Admin's
    target is named the same way, and the synchronous Client does the same."""
    target = f"127.0.0.1:{free_port()}"
    admin = f"unix:{socket_dir / 'nobody.sock'}"
    messages = []
    async with AsyncClient(target, admin_target=admin, timeout_seconds=1) as client:
        for call in (client.reserve("b", 1), client.get_budget("b")):
            with pytest.raises(UnavailableError) as caught:
                # Bounded below five deadlines: the old client retried the wait five times.
                await asyncio.wait_for(call, timeout=10)
            messages.append(str(caught.value))

    def sync_reserve() -> None:
        with Client(target, timeout_seconds=1) as sync:
            sync.reserve("b", 1)

    with pytest.raises(UnavailableError) as caught:
        await asyncio.wait_for(asyncio.to_thread(sync_reserve), timeout=10)
    messages.append(str(caught.value))
    said = "UNAVAILABLE: no Earmark sidecar answered at {} within the call's deadline of 1 s"
    expected = [said.format(target), said.format(admin), said.format(target)]
    assert expected == [m.split(" (", 1)[0] for m in messages]


async def test_the_sync_client_reaches_everything_the_wire_carries(sidecar: Running) -> None:
    """Through the synchronous Client: escrow and overage on put_budget and in its state, a
    final-phase hold past a work-phase refusal, a SOFT admission past the limit, a typed
    renewal, and the archive time of a deleted budget."""

    def work() -> tuple[object, ...]:
        with Client(sidecar.target, admin_target=sidecar.admin_target) as client:
            escrow = client.put_budget("esc", 100, "t", escrow_bps=1_500)
            refused = client.reserve("esc", 90)
            with client.hold("esc", 90, final=True) as final:
                renewed = client.renew(final.reservation_id)
            soft = client.put_budget(
                "soft", 100, "t", overage_policy=OveragePolicy.SOFT, overage_limit=50
            )
            over = client.reserve("soft", 120, lease_seconds=30)
            assert isinstance(refused, Refusal)
            assert isinstance(over, Reservation)
            client.settle(over.reservation_id, 120)
            flagged = client.get_budget("soft")
            archived = client.delete_budget("soft")
        return (
            escrow.escrow_bps,
            refused.reason,
            final.admitted,
            type(renewed),
            soft.overage_policy,
            soft.overage_limit,
            over.over_limit,
            over.overage_policy,
            type(flagged.overage_since),
            type(archived.archived_at),
        )

    expected = (
        1_500,
        RefusalReason.INSUFFICIENT_BUDGET,
        True,
        datetime,
        OveragePolicy.SOFT,
        50,
        True,
        OveragePolicy.SOFT,
        datetime,
        datetime,
    )
    assert expected == await asyncio.to_thread(work)


class Recording(pb_grpc.BudgetServicer):
    """A canned sidecar that admits every Reserve and keeps the requests it was sent."""

    def __init__(self) -> None:
        self.requests: list[pb.ReserveRequest] = []

    async def Reserve(
        self, request: pb.ReserveRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.ReserveResponse:
        self.requests.append(request)
        return pb.ReserveResponse(admitted=True, reservation_id="r", amount=7, budget_id="cyc")

    async def Settle(
        self, request: pb.SettleRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.SettleResponse:
        return pb.SettleResponse(state=pb.RESERVATION_STATE_SETTLED)


@pytest.fixture
async def recording() -> AsyncIterator[tuple[Recording, str]]:
    servicer = Recording()
    async with canned_budget(servicer) as target:
        yield servicer, target


async def test_the_sync_hold_sends_account_feature_and_phase(
    recording: tuple[Recording, str],
) -> None:
    """A synchronous hold() on an account's cycle sends the account, the feature, the final
    phase, the shape and the job, as the async one does."""
    servicer, target = recording
    shape = Shape("openai", "gpt-4o", 10, 5)

    def work() -> None:
        with (
            Client(target) as client,
            client.hold("", account="acct", feature="chat", final=True, shape=shape, job="j"),
        ):
            pass

    await asyncio.to_thread(work)
    (sent,) = servicer.requests
    assert ("", "acct", "chat", pb.PHASE_FINAL, "gpt-4o", "j") == (
        sent.budget_id,
        sent.account,
        sent.feature,
        sent.phase,
        sent.shape.model,
        sent.job,
    )


async def test_the_sync_client_speaks_tls(dsn: str, socket_dir: Path, tmp_path: Path) -> None:
    """With credentials the synchronous Client reaches a sidecar that takes only clients
    with a certificate its CA signed; without them it is told, by the deadline, that
    nothing answered there."""
    pki = make_pki(tmp_path)
    settings = sidecar_settings(
        dsn, socket_dir, listen="127.0.0.1:0",
        tls_cert_file=pki["server"], tls_key_file=pki["server-key"],
        tls_client_ca_file=pki["ca"],
    )  # fmt: skip
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki["ca"].read_bytes(),
        private_key=pki["client-key"].read_bytes(),
        certificate_chain=pki["client"].read_bytes(),
    )
    side = Sidecar(settings)
    async with running(side, dsn) as s:
        target = f"127.0.0.1:{side.port}"

        def work() -> Reservation | Refusal:
            with Client(target, admin_target=s.admin_target, credentials=credentials) as client:
                client.put_budget("tls", 100, "t")
                return client.reserve("tls", 10)

        def plaintext() -> None:
            with Client(target, timeout_seconds=1) as client:
                client.reserve("tls", 10)

        held = await asyncio.to_thread(work)
        with pytest.raises(UnavailableError) as caught:
            await asyncio.wait_for(asyncio.to_thread(plaintext), timeout=10)
    assert (True, 90) == (held.admitted, held.remaining)
    assert f"UNAVAILABLE: no Earmark sidecar answered at {target}" in str(caught.value)


def test_every_exported_name_resolves() -> None:
    """Every name in earmark.client.__all__ is there: `from earmark.client import *` works."""
    assert [] == [name for name in earmark.client.__all__ if not hasattr(earmark.client, name)]
