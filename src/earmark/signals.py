"""The stop signals of the long-running commands (serve, kinde-webhooks, console).

SIGTERM or SIGINT starts a command's stop. Once the stop is done, the command ignores them:
a supervisor that repeats its SIGTERM, or a second Ctrl-C, comes while the process exits
and has nothing left to stop. Without that, the event loop's close would restore the
default actions, and such a signal would end a clean exit as killed (-15) or with a
KeyboardInterrupt traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals(
    loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any
) -> Iterator[None]:
    """Calls callback(*args) on the loop for each SIGTERM or SIGINT within the block; once
    the block (the command's stop) is done, both change nothing until the exit."""
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, callback, *args)
    try:
        yield
    finally:
        for signum in STOP_SIGNALS:
            # Removing the loop's handler restores the default action, so the ignore
            # follows at once; the loop then has no handler left to restore when it closes.
            loop.remove_signal_handler(signum)
            signal.signal(signum, signal.SIG_IGN)
