"""A worker that takes two holds, charges one (its provider call is out), says so, and works
forever: the crash test kills it."""

from __future__ import annotations

import sys
import time

from earmark.client import Client

# Renewed every third of it: a loaded machine may stall the worker for most of a second
# (make test runs three workers on two cores), which a lease of 1 s did not survive.
LEASE_SECONDS = 3


def main(target: str, budget_id: str) -> None:
    with (
        Client(target) as client,
        client.hold(budget_id, 25_000, lease_seconds=LEASE_SECONDS) as dispatched,
        client.hold(budget_id, 10_000, lease_seconds=LEASE_SECONDS) as idle,
    ):
        dispatched.charge(5_000)
        print(dispatched.reservation_id, idle.reservation_id, flush=True)
        while True:
            time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
