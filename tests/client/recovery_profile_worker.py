"""A worker process for the recovery-profile tests, a client made fresh from nothing but
its arguments and the journal on disk (so that only durable state crosses a restart):

    recovery_profile_worker.py settle TARGET JOURNAL RESERVATION_ID USED
    recovery_profile_worker.py recover TARGET JOURNAL

`settle` sends one journaled Settle (the test kills the process while it waits for the
answer); `recover` sends what the journal holds once and prints how many were answered."""

from __future__ import annotations

import asyncio
import json
import sys

from earmark.client import AsyncClient


async def main(command: str, target: str, journal: str, *rest: str) -> None:
    # Not `async with`: entering recovers, and `recover` must count its one replay.
    client = AsyncClient(target, journal_dir=journal)
    try:
        if command == "settle":
            reservation_id, used = rest
            print("sending", flush=True)
            settled = await client.settle(reservation_id, int(used))
            print(json.dumps({"state": settled.state.name}), flush=True)
        elif command == "recover":
            print(json.dumps({"recovered": await client.recover()}), flush=True)
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        await client.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
