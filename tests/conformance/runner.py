"""The conformance kit's runner (docs/conformance.md): runs scenarios.json's scenarios
against an SDK's adapter process, on a sidecar whose clock the runner moves, through a
proxy (tests/client/recovery_profile_proxy.py) that loses, refuses or holds the calls a
scenario says. A scenario passes when every expectation holds and the invariant audit
passes; run_kit answers each scenario's result instead of stopping at the first
failure, so that a failing SDK (or a broken adapter) shows every scenario it fails."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc

from earmark.client.journal import (
    QUARANTINE,
    Journal,
    encode_record,
    legacy_record_name,
    record_name,
)
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import budget as put_budget
from tests.client.llm_helpers import holds as budget_holds
from tests.client.recovery_profile_proxy import (
    Context,
    Fault,
    Forward,
    Proxy,
    answer_lost,
    answered_with,
    proxy,
    refused,
)
from tests.conftest import Running
from tests.helpers import FakeClock, assert_invariants, eventually

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCENARIOS = HERE / "scenarios.json"
# The lease a scenario's holds get unless it names one: longer than any run, so that a
# lease passes only when the runner moves the clock (an `expire` step).
LEASE_MS_DEFAULT = 300_000
# How long the runner waits for any one thing an adapter or the sidecar should do.
STEP_SECONDS_MAX = 30.0
# A fault's `times: "all"`: more calls than any scenario makes.
TIMES_ALL = 1_000
# The tail of an adapter's stderr shown with a failure.
STDERR_TAIL_CHARS = 2_000
# A Settle answer that is no settled answer: OK, decodable, in state HELD.
NOT_SETTLED = pb.SettleResponse(charged=1, state=pb.RESERVATION_STATE_HELD).SerializeToString()


class ScenarioFailed(AssertionError):
    """An expectation of a scenario did not hold; the message says which and what was."""


def scenarios() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(SCENARIOS.read_text())["scenarios"]
    return loaded


@dataclass
class Result:
    scenario_id: str
    passed: bool
    diagnostic: str = ""


@dataclass
class Worker:
    """One adapter process: its lines read as they come, its last answer kept."""

    name: str
    process: asyncio.subprocess.Process
    stderr: Path
    lines: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    reservation_id: str = ""
    answer: dict[str, Any] | None = None
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        assert self.process.stdout is not None
        while line := await self.process.stdout.readline():
            try:
                parsed = json.loads(line)
            except ValueError:
                parsed = {"unparsed": line.decode(errors="replace")}
            await self.lines.put(parsed if isinstance(parsed, dict) else {"unparsed": parsed})
        await self.lines.put({"closed": True})

    async def send(self, command: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        await self.process.stdin.drain()

    async def until(self, wanted: str) -> dict[str, Any]:
        """Reads lines until the event wanted (or the command's end, for "done"); fails
        on an end or a closed process first."""
        while True:
            try:
                line = await asyncio.wait_for(self.lines.get(), STEP_SECONDS_MAX)
            except TimeoutError:
                raise ScenarioFailed(
                    f"{self.name}: no {wanted!r} within {STEP_SECONDS_MAX}s"
                ) from None
            if "closed" in line or "unparsed" in line:
                raise ScenarioFailed(f"{self.name}: {line} before {wanted!r}{self.tail()}")
            if line.get("event") == "reserved":
                self.reservation_id = str(line.get("reservation_id", ""))
            if line.get("done"):
                self.answer = line
                if line.get("reservation_id"):
                    self.reservation_id = str(line["reservation_id"])
                if wanted == "done":
                    return line
                raise ScenarioFailed(f"{self.name}: answered {line} before {wanted!r}")
            if line.get("event") == wanted:
                return line

    def tail(self) -> str:
        text = self.stderr.read_text(errors="replace") if self.stderr.exists() else ""
        return f"\n{self.name}'s stderr: {text[-STDERR_TAIL_CHARS:]}" if text else ""


@dataclass
class Run:
    """One scenario's run: its sidecar, proxy, workers, budget and journal."""

    adapter: Sequence[str]
    sidecar: Running
    clock: FakeClock
    middle: Proxy
    folder: Path
    budget_id: str
    workers: dict[str, Worker] = field(default_factory=dict)
    runner_holds: dict[str, str] = field(default_factory=dict)
    # Per request of a method, in order: the journal's file names when it arrived.
    on_arrival: dict[str, list[list[str]]] = field(default_factory=dict)
    applied: asyncio.Event = field(default_factory=asyncio.Event)
    lease_ms: int = LEASE_MS_DEFAULT

    @property
    def journal(self) -> Path:
        return self.folder / "journal"

    def files(self) -> list[str]:
        """The journal's files but its quarantine (and a writer's temporary files)."""
        if not self.journal.exists():
            return []
        return sorted(
            p.name
            for p in self.journal.iterdir()
            if p.name != QUARANTINE and not p.name.endswith(".tmp")
        )

    def quarantined(self) -> int:
        folder = self.journal / QUARANTINE
        return len(list(folder.iterdir())) if folder.exists() else 0


# Steps.


async def start(run: Run, step: dict[str, Any]) -> None:
    name = step["worker"]
    stderr = run.folder / f"{name}.stderr"
    with stderr.open("wb") as errors:
        process = await asyncio.create_subprocess_exec(
            *run.adapter,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=errors,
        )
    worker = Worker(name, process, stderr)
    worker.reader = asyncio.create_task(worker.read())
    run.workers[name] = worker
    await worker.send(
        {
            "op": "open",
            "target": run.middle.target,
            "journal_dir": str(run.journal) if step.get("journal") else None,
            "token": step.get("token"),
        }
    )
    opened = await worker.until("done")
    if not opened.get("ok"):
        raise ScenarioFailed(f"{name} did not open: {opened}{worker.tail()}")


async def hold(run: Run, step: dict[str, Any]) -> None:
    worker = run.workers[step["worker"]]
    run.lease_ms = step.get("lease_ms", LEASE_MS_DEFAULT)
    await worker.send(
        {
            "op": "hold",
            "budget_id": run.budget_id,
            "amount": step["amount"],
            "lease_ms": run.lease_ms,
            "charges": step.get("charges", []),
            "used": step.get("used"),
            "work_ms": step.get("work_ms", 0),
            "pause": step.get("pause", False),
            "end": step.get("end", "succeeded"),
        }
    )
    until = step.get("until", "done")
    if until == "applied":
        await worker.until("reserved")
        try:
            await asyncio.wait_for(run.applied.wait(), STEP_SECONDS_MAX)
        except TimeoutError:
            raise ScenarioFailed(
                f"no Settle applied within {STEP_SECONDS_MAX}s{worker.tail()}"
            ) from None
    else:
        await worker.until(until)


async def kill(run: Run, step: dict[str, Any]) -> None:
    worker = run.workers[step["worker"]]
    worker.process.send_signal(signal.SIGKILL)
    await worker.process.wait()


async def expire(run: Run, step: dict[str, Any]) -> None:
    """Moves the clock past the lease; waits until the sweeper took every held hold."""
    run.clock.advance(timedelta(milliseconds=run.lease_ms + 1_000))

    async def swept() -> bool:
        return all(h.state != pb.RESERVATION_STATE_HELD for h in await holds(run))

    await eventually(swept, within_seconds=STEP_SECONDS_MAX, what="the sweeper took the holds")


async def wait_calls(run: Run, step: dict[str, Any]) -> None:
    method, count = step["method"], step["count"]

    async def enough() -> bool:
        return len(run.middle.seen[method]) >= count

    await eventually(enough, within_seconds=STEP_SECONDS_MAX, what=f"{count} {method} calls")


async def recover(run: Run, step: dict[str, Any]) -> None:
    worker = run.workers[step["worker"]]
    await worker.send({"op": "recover"})
    answer = await worker.until("done")
    if not answer.get("ok"):
        raise ScenarioFailed(f"{worker.name}'s recover failed: {answer}{worker.tail()}")


async def recover_together(run: Run, step: dict[str, Any]) -> None:
    await asyncio.gather(*(recover(run, {"worker": name}) for name in step["workers"]))


async def runner_hold(run: Run, step: dict[str, Any]) -> None:
    """A hold the runner makes itself, straight on the sidecar, with a long lease."""
    answer = await run.sidecar.budget.Reserve(
        pb.ReserveRequest(
            budget_id=run.budget_id,
            amount=step["amount"],
            idempotency_key=f"{run.budget_id}-{step['as']}",
        )
    )
    assert answer.admitted, answer
    run.runner_holds[step["as"]] = answer.reservation_id


def settle_request(reservation_id: str, used: int) -> pb.SettleRequest:
    return pb.SettleRequest(reservation_id=reservation_id, used=used, outcome=pb.OUTCOME_SUCCEEDED)


async def record(run: Run, step: dict[str, Any]) -> None:
    """A record a worker left: in the standard format, or the first one."""
    request = settle_request(run.runner_holds[step["of"]], step["used"])
    if step.get("format") == "legacy":
        run.journal.mkdir(mode=0o700, exist_ok=True)
        path = run.journal / legacy_record_name(request.reservation_id)
        path.write_bytes(request.SerializeToString())
        path.chmod(0o600)
    else:
        Journal(run.journal).write(request)


async def junk(run: Run, step: dict[str, Any]) -> None:
    """A file in the journal that holds no record an SDK may replay."""
    run.journal.mkdir(mode=0o700, exist_ok=True)
    kind = step["kind"]
    if kind == "not_json":
        name, data = record_name("not-json"), b"{not json"
    elif kind == "version_3":
        record = json.loads(encode_record(settle_request("version-3", 1)))
        name, data = record_name("version-3"), json.dumps({**record, "version": 3}).encode()
    elif kind == "legacy_not_a_settle":
        name, data = legacy_record_name("not-a-settle"), b"\xff\xff\xff"
    else:
        raise ValueError(f"unknown junk {kind!r}")
    path = run.journal / name
    path.write_bytes(data)
    path.chmod(0o600)


async def resume(run: Run, step: dict[str, Any]) -> None:
    await run.workers[step["worker"]].send({"op": "resume"})


async def finish(run: Run, step: dict[str, Any]) -> None:
    await run.workers[step["worker"]].until("done")


async def budget(run: Run, step: dict[str, Any]) -> None:
    await put_budget(run.sidecar, run.budget_id, step["limit"], unit="tokens")


async def fault(run: Run, step: dict[str, Any]) -> None:
    times = step.get("times", 1)
    count = TIMES_ALL if times == "all" else int(times)
    run.middle.faults[step["method"]].extend(make_fault(run, step) for _ in range(count))


async def clear_faults(run: Run, step: dict[str, Any]) -> None:
    run.middle.faults.clear()


def make_fault(run: Run, step: dict[str, Any]) -> Fault:
    kind = step["kind"]
    if kind == "lose_answer":
        return answer_lost()
    if kind == "refuse":
        return refused(grpc.StatusCode[step["code"]])
    if kind == "answer_held_state":
        return answered_with(NOT_SETTLED)
    if kind == "apply_then_hang":

        async def hang(request: bytes, forward: Forward, context: Context) -> bytes:
            answer = await forward()
            run.applied.set()
            await asyncio.Event().wait()  # until the proxy stops
            return answer

        return hang
    if kind == "gather":
        wanted = step["count"]
        method = step["method"]

        async def gathered(request: bytes, forward: Forward, context: Context) -> bytes:
            async def arrived() -> bool:
                return len(run.middle.seen[method]) >= wanted

            await eventually(
                arrived, within_seconds=STEP_SECONDS_MAX, what=f"{wanted} {method} calls"
            )
            return await forward()

        return gathered
    raise ValueError(f"unknown fault {kind!r}")


STEPS = {
    "budget": budget,
    "start": start,
    "fault": fault,
    "clear_faults": clear_faults,
    "hold": hold,
    "resume": resume,
    "finish": finish,
    "kill": kill,
    "expire": expire,
    "wait_calls": wait_calls,
    "recover": recover,
    "recover_together": recover_together,
    "runner_hold": runner_hold,
    "record": record,
    "junk": junk,
}


# Expectations.


async def holds(run: Run) -> list[pb.Hold]:
    listed = await budget_holds(run.sidecar, run.budget_id)
    return sorted(listed, key=lambda h: h.created_at.ToNanoseconds())


def check(what: str, expected: Any, actual: Any) -> None:
    if expected != actual:
        raise ScenarioFailed(f"{what}: expected {expected!r}, was {actual!r}")


async def expect(run: Run, step: dict[str, Any]) -> None:
    if "answer" in step:
        worker = run.workers[step["answer"]["worker"]]
        answer = worker.answer or {}
        wanted = step["answer"]["is"]
        check(f"{worker.name}'s answer", wanted, {k: answer.get(k) for k in wanted})
    for method, count in step.get("calls", {}).items():
        check(f"{method} requests at the proxy", count, len(run.middle.seen[method]))
    for method in step.get("identical", []):
        sent = run.middle.seen[method]
        if not sent or any(request != sent[0] for request in sent):
            decoded = [
                str(getattr(pb, f"{method}Request").FromString(r)).replace("\n", " ") for r in sent
            ]
            raise ScenarioFailed(
                f"{method} requests should be one request sent again; were {decoded}"
            )
    if "renewed" in step:
        rid = run.workers[step["renewed"]].reservation_id
        renewed = {pb.RenewRequest.FromString(r).reservation_id for r in run.middle.seen["Renew"]}
        check("the reservations renewed", {rid}, renewed)
    if "journaled_on_arrival" in step:
        method = step["journaled_on_arrival"]
        arrivals = run.on_arrival.get(method, [])
        for request, found in zip(run.middle.seen[method], arrivals, strict=True):
            name = record_name(pb.SettleRequest.FromString(request).reservation_id)
            if name not in found:
                raise ScenarioFailed(
                    f"a {method} reached the sidecar before its record {name}; the journal had "
                    f"{found}"
                )
        if not arrivals:
            raise ScenarioFailed(f"no {method} arrived")
    if "records_for" in step:
        names = [record_name(run.workers[w].reservation_id) for w in step["records_for"]]
        check("the journal's records", sorted(names), run.files())
    if "no_secret_in_records" in step:
        secret = step["no_secret_in_records"].encode()
        for name in run.files():
            if secret in (run.journal / name).read_bytes():
                raise ScenarioFailed(f"record {name} holds the worker token")
    if "quarantined" in step:
        check("files in quarantine/", step["quarantined"], run.quarantined())
    if "holds" in step:
        seen = [
            {key: hold_field(h, key) for key in wanted}
            for h, wanted in zip(await holds(run), step["holds"], strict=False)
        ]
        check("the budget's holds", step["holds"], seen)
        check("the number of holds", len(step["holds"]), len(await holds(run)))
    if "budget" in step:
        state = await run.sidecar.admin.GetBudget(pb.GetBudgetRequest(budget_id=run.budget_id))
        check(
            "the budget's used and held", step["budget"], {"used": state.used, "held": state.held}
        )


def hold_field(h: pb.Hold, key: str) -> Any:
    if key == "state":
        return pb.ReservationState.Name(h.state).removeprefix("RESERVATION_STATE_")
    return getattr(h, key)


# The run.


async def run_scenario(
    adapter: Sequence[str],
    sidecar: Running,
    clock: FakeClock,
    folder: Path,
    scenario: dict[str, Any],
    budget_id: str,
) -> Result:
    async with proxy(sidecar.target) as middle:
        run = Run(adapter, sidecar, clock, middle, folder, budget_id)

        def noted(method: str, request: bytes) -> None:
            # The journal's files as each Settle arrives, before any fault acts on it.
            if method == "Settle":
                run.on_arrival.setdefault(method, []).append(run.files())

        middle.on_request = noted
        try:
            for index, step in enumerate(scenario["steps"]):
                kind = step["do"]
                action = expect if kind == "expect" else STEPS[kind]
                try:
                    await action(run, step)
                except ScenarioFailed as failed:
                    return Result(scenario["id"], False, f"step {index} ({kind}): {failed}")
            try:
                await assert_invariants(sidecar.dsn)
            except AssertionError as broken:
                return Result(scenario["id"], False, f"the invariant audit: {broken}")
            return Result(scenario["id"], True)
        finally:
            await stop_workers(run)


async def stop_workers(run: Run) -> None:
    for worker in run.workers.values():
        if worker.process.returncode is None:
            worker.process.kill()
            await worker.process.wait()
        if worker.reader is not None:
            worker.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker.reader


async def run_kit(
    adapter: Sequence[str],
    sidecar: Running,
    clock: FakeClock,
    folder: Path,
    tag: str,
    only: Sequence[str] = (),
) -> list[Result]:
    """Every scenario (or those named in only) against adapter, each in its own folder and
    budget; their results in order."""
    results = []
    for number, scenario in enumerate(scenarios()):
        if only and scenario["id"] not in only:
            continue
        place = folder / scenario["id"]
        shutil.rmtree(place, ignore_errors=True)
        place.mkdir(parents=True)
        budget_id = f"conformance/{tag}/{number:02d}"
        results.append(await run_scenario(adapter, sidecar, clock, place, scenario, budget_id))
    return results
