"""A worker that treats SIGTERM as "finish the call in hand": it holds, charges, says so,
and on SIGTERM charges the rest of its step, records what it used, and leaves its hold()
block, which settles. The shutdown-order test runs it beside a sidecar process."""

from __future__ import annotations

import signal
import sys
import threading
import time

from earmark.client import Client


def main(target: str, budget_id: str, call_seconds: float) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with Client(target, timeout_seconds=10) as client, client.hold(budget_id, 1_000) as h:
        h.charge(100)
        print(h.reservation_id, flush=True)
        stop.wait()
        # The provider call already under way when the pod was told to stop: it takes
        # call_seconds more (longer than the sidecar's quiet period, so that only its drain
        # of open holds can keep the hold's Charge and Settle answered).
        time.sleep(call_seconds)
        h.charge(300)
        h.used = 400
    print("settled", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
