"""The Python SDK's conformance adapter (docs/conformance.md): JSON lines on stdin, one
AsyncClient driven as a worker drives it (hold(), recover(), its journal), JSON lines on
stdout.

With --broken-fresh-keys it is the kit's deliberately broken adapter: every attempt of a
call goes out with an idempotency key of its own (an interceptor below the client's
retries rewrites it), as an SDK that makes a key per attempt instead of per logical call
would send it. The kit must fail it."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any, cast

import grpc
from google.protobuf.message import Message

from earmark.client import AsyncClient
from earmark.client.errors import ClientError, RefusedError
from earmark.core.model import Outcome


class FreshKeys(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    """Gives every attempt of a keyed call a new idempotency key (the broken adapter)."""

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Message) -> Any:
        if "idempotency_key" in request.DESCRIPTOR.fields_by_name:
            fresh = type(request)()
            fresh.CopyFrom(request)
            fresh.idempotency_key = uuid.uuid4().hex  # type: ignore[attr-defined]
            request = fresh
        return await continuation(details, request)


class BlockFailed(Exception):
    """The block's own failure (`end: failed`): not an error of the SDK's."""


def say(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def next_command() -> dict[str, Any] | None:
    """The next line of stdin as a command; None at its end."""
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if not line:
        return None
    command: dict[str, Any] = json.loads(line)
    return command


def failure(error: ClientError, reservation_id: str = "") -> dict[str, Any]:
    answer: dict[str, Any] = {"done": True, "ok": False, "code": error.code.name}
    answer["reason"] = error.reason
    if reservation_id:
        answer["reservation_id"] = reservation_id
    return answer


async def hold(client: AsyncClient, command: dict[str, Any]) -> dict[str, Any]:
    """One hold() as the command says (docs/conformance.md)."""
    lease_ms = command.get("lease_ms")
    h = client.hold(
        command["budget_id"],
        command["amount"],
        lease_seconds=None if lease_ms is None else lease_ms / 1000,
        raise_on_refusal=False,
    )
    reservation_id = ""
    try:
        async with h:
            if h.refusal is not None:
                return {
                    "done": True,
                    "ok": True,
                    "admitted": False,
                    "reason": h.refusal.reason.name,
                }
            reservation_id = h.reservation_id
            say({"event": "reserved", "reservation_id": reservation_id})
            for amount in command.get("charges", []):
                await h.charge(amount)
            if command.get("pause"):
                say({"event": "paused", "reservation_id": reservation_id})
                resume = await next_command()
                assert resume == {"op": "resume"}, resume
            await asyncio.sleep(command.get("work_ms", 0) / 1000)
            if command.get("used") is not None:
                h.used = command["used"]
            end = command.get("end", "succeeded")
            if end == "unknown":
                h.outcome = Outcome.UNKNOWN
                raise BlockFailed("the work's outcome is unknown")
            if end == "failed":
                raise BlockFailed("the work failed")
    except BlockFailed:
        pass
    except RefusedError as error:
        return {"done": True, "ok": True, "admitted": False, "reason": error.refusal.reason.name}
    except ClientError as error:
        return failure(error, reservation_id)
    answer: dict[str, Any] = {"done": True, "ok": True, "admitted": True}
    answer["reservation_id"] = reservation_id
    if h.settled is not None:
        answer["state"] = h.settled.state.name
    return answer


async def main() -> None:
    interceptors = [cast(Any, FreshKeys())] if "--broken-fresh-keys" in sys.argv[1:] else []
    client: AsyncClient | None = None
    try:
        while (command := await next_command()) is not None:
            op = command.get("op")
            if op == "open":
                client = AsyncClient(
                    command["target"],
                    journal_dir=command.get("journal_dir"),
                    token=command.get("token"),
                    interceptors=interceptors,
                )
                say({"done": True, "ok": True})
            elif op == "hold" and client is not None:
                say(await hold(client, command))
            elif op == "recover" and client is not None:
                try:
                    await client.recover()
                    say({"done": True, "ok": True})
                except ClientError as error:
                    say(failure(error))
            elif op == "quit":
                break
            else:
                say({"done": True, "ok": False, "code": "UNIMPLEMENTED", "reason": "unknown op"})
    finally:
        if client is not None:
            await client.close()
    say({"done": True, "ok": True})


if __name__ == "__main__":
    asyncio.run(main())
