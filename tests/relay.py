"""A TCP relay that delays a link, for tests that simulate regions far apart on one machine
(this kernel has no netem), and that partitions the link (cut, blackhole) until healed."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import socket
import struct
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Self

# One way's delay by default: two regions some thousands of kilometres apart.
DELAY_SECONDS = 0.04
# Reading from one side pauses while more than this waits for delivery to the other, so
# that a fast sender cannot make the relay buffer without bound.
QUEUED_BYTES_MAX = 4 * 1024 * 1024
# A target that does not answer fails the client's connection instead of holding it.
CONNECT_TIMEOUT_SECONDS = 5.0
# How long start(), stop() and the partitions wait for the relay's loop before failing.
CONTROL_TIMEOUT_SECONDS = 10.0


class Mode(enum.Enum):
    """What the relay does with connections: forward them, close them, or drop their bytes."""

    OPEN = "open"
    CUT = "cut"
    BLACKHOLE = "blackhole"
    # A blackhole one way: what the target answers is dropped, what the client sends is not.
    ANSWERS_LOST = "answers lost"


class _Mark(enum.Enum):
    """What travels in a direction's queue besides bytes, delayed as the bytes are."""

    EOF = "eof"
    RESET = "reset"


def _abort(transport: asyncio.Transport | None) -> None:
    """Closes transport at once, dropping what it has buffered, with an RST (SO_LINGER 0)."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        # An RST rather than a FIN: the peer learns at once that the connection is gone, as
        # a gRPC client behind a broken link would from its keepalive, only sooner.
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class _Side(asyncio.Protocol):
    """One socket of a relayed connection: the accepted client's or the one to the target."""

    def __init__(self, relay: Relay, link: _Link | None = None) -> None:
        self.relay = relay
        self.link = link
        self.transport: asyncio.Transport | None = None
        # Set once its socket is closed (connection_lost).
        self.gone = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.relay._sides.add(self)
        if self.link is None:
            self.relay._accepted(self)

    def data_received(self, data: bytes) -> None:
        if self.link is not None:
            self.link.outgoing(self).push(data)

    def eof_received(self) -> bool:
        if self.link is not None:
            self.link.outgoing(self).push(_Mark.EOF)
        # Half-closed: the other way may still carry the answer.
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.gone.set()
        self.relay._sides.discard(self)
        if self.link is not None and not self.link.closed:
            # Not closed by the relay: the socket failed or was reset, which the other side
            # learns after the bytes that came before it, as on a real network.
            self.link.incoming(self).drop()
            self.link.outgoing(self).push(_Mark.RESET)

    def pause_writing(self) -> None:
        if self.link is not None:
            self.link.incoming(self).dest_paused = True

    def resume_writing(self) -> None:
        if self.link is not None:
            direction = self.link.incoming(self)
            direction.dest_paused = False
            direction.flush()


class _Direction:
    """One way of a relayed connection: a queue of chunks, each delivered its delay after it
    was read, in order."""

    def __init__(self, link: _Link, source: _Side, dest: _Side) -> None:
        self.link = link
        self.source = source
        self.dest = dest
        self.queue: deque[tuple[float, bytes | _Mark]] = deque()
        self.queued_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        # The destination's transport buffer is full: delivery waits, and the queue grows.
        self.dest_paused = False
        self.source_paused = False
        self.ended = False

    def push(self, item: bytes | _Mark) -> None:
        """Queues item for delivery after the relay's current delay."""
        relay = self.link.relay
        if self.link.closed:
            return
        if self.dropping():
            self.link.dropped = True
            relay._dropped_bytes += len(item) if isinstance(item, bytes) else 0
            return
        loop = relay._running_loop()
        self.queue.append((loop.time() + relay._delay_seconds, item))
        if isinstance(item, bytes):
            self.queued_bytes += len(item)
            source = self.source.transport
            if (
                self.queued_bytes > QUEUED_BYTES_MAX
                and not self.source_paused
                and source is not None
                and not source.is_closing()
            ):
                source.pause_reading()
                self.source_paused = True
        if self.timer is None:
            self.flush()

    def flush(self) -> None:
        """Delivers every chunk that is due, then waits for the next one."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        loop = self.link.relay._running_loop()
        now = loop.time()
        while self.queue and not self.dest_paused and not self.link.closed:
            due, item = self.queue[0]
            if due > now:
                self.timer = loop.call_at(due, self.flush)
                break
            self.queue.popleft()
            self.deliver(item)
        source = self.source.transport
        if self.source_paused and self.queued_bytes <= QUEUED_BYTES_MAX:
            self.source_paused = False
            if source is not None and not source.is_closing():
                source.resume_reading()

    def deliver(self, item: bytes | _Mark) -> None:
        """Hands item to the destination, unless a blackhole has begun meanwhile."""
        if isinstance(item, bytes):
            self.queued_bytes -= len(item)
        relay = self.link.relay
        if self.dropping():
            self.link.dropped = True
            relay._dropped_bytes += len(item) if isinstance(item, bytes) else 0
            return
        if item is _Mark.RESET:
            self.link.abort()
            return
        dest = self.dest.transport
        if dest is None or dest.is_closing():
            return
        if isinstance(item, bytes):
            dest.write(item)
        else:
            try:
                dest.write_eof()
            except OSError:
                # Its peer reset it meanwhile (ENOTCONN): the other side closes it.
                dest.abort()
            self.ended = True
            self.link.finish_if_ended()

    def dropping(self) -> bool:
        """Whether a blackhole drops this way's bytes now."""
        mode = self.link.relay._mode
        return mode is Mode.BLACKHOLE or (mode is Mode.ANSWERS_LOST and self is self.link.down)

    def drop(self) -> None:
        """Forgets what is queued: its destination is gone."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()
        self.queued_bytes = 0


class _Link:
    """One relayed connection: the client's socket, the target's and the two ways between."""

    def __init__(self, relay: Relay, client: _Side) -> None:
        self.relay = relay
        self.client = client
        self.target = _Side(relay, self)
        client.link = self
        self.up = _Direction(self, client, self.target)
        self.down = _Direction(self, self.target, client)
        self.closed = False
        # Bytes were dropped in a blackhole: the stream is broken for good, so heal() resets
        # the connection rather than let either side read a stream with a hole in it.
        self.dropped = False

    def outgoing(self, side: _Side) -> _Direction:
        return self.up if side is self.client else self.down

    def incoming(self, side: _Side) -> _Direction:
        return self.down if side is self.client else self.up

    async def connect(self) -> None:
        """Connects to the target, then lets the client's bytes flow."""
        host, port = self.relay.target
        loop = self.relay._running_loop()
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_SECONDS):
                transport, _ = await loop.create_connection(lambda: self.target, host, port)
        except (OSError, TimeoutError):
            self.abort()
            return
        if self.closed or self.client.gone.is_set():
            # Cut, stopped or the client gone while connecting.
            _abort(transport)
            self.abort()
            return
        client = self.client.transport
        if client is not None and not client.is_closing():
            client.resume_reading()

    def finish_if_ended(self) -> None:
        """Closes both sockets gracefully once each way has delivered its EOF."""
        if self.up.ended and self.down.ended:
            self.closed = True
            self.relay._links.discard(self)
            for side in (self.client, self.target):
                if side.transport is not None:
                    side.transport.close()

    def abort(self) -> None:
        """Closes both sockets at once, dropping whatever is in flight."""
        self.closed = True
        self.relay._links.discard(self)
        self.up.drop()
        self.down.drop()
        _abort(self.client.transport)
        _abort(self.target.transport)


class Relay:
    """Forwards TCP connections from 127.0.0.1 to target with a delay each way, on its own
    event loop in a daemon thread; cut(), blackhole() and heal() partition the link."""

    def __init__(self, target: tuple[str, int], delay_seconds: float = DELAY_SECONDS) -> None:
        self.target = target
        self._delay_seconds = self._checked_delay(delay_seconds)
        self._mode = Mode.OPEN
        self._cut_count = 0
        self._dropped_bytes = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._port: int | None = None
        self._stopped = False
        # Serializes start(), stop() and the partitions when tests call them from threads.
        self._lock = threading.Lock()
        # Touched on the relay's loop only.
        self._sides: set[_Side] = set()
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The port the relay listens on (127.0.0.1)."""
        if self._port is None:
            raise RuntimeError("the relay is not started")
        return self._port

    @property
    def address(self) -> str:
        """The relay's "127.0.0.1:PORT", as a gRPC target."""
        return f"127.0.0.1:{self.port}"

    @property
    def mode(self) -> Mode:
        """OPEN, CUT, BLACKHOLE or ANSWERS_LOST."""
        return self._mode

    @property
    def cut_count(self) -> int:
        """How many times cut() was called."""
        return self._cut_count

    @property
    def dropped_bytes(self) -> int:
        """How many bytes blackholes have dropped, either way."""
        return self._dropped_bytes

    @property
    def connections(self) -> int:
        """How many relayed connections are open now."""
        return len(self._links)

    @property
    def delay_seconds(self) -> float:
        """The delay each chunk read from now on gets, one way."""
        return self._delay_seconds

    def start(self) -> None:
        """Starts the relay's thread and returns once it listens."""
        with self._lock:
            if self._thread is not None or self._stopped:
                raise RuntimeError("a relay starts once")
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=self._run, args=(loop,), name=f"relay to {self.target}", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
            try:
                self._wait(loop, self._listen())
            except BaseException:
                self._stop_locked()
                raise

    def stop(self) -> None:
        """Closes the listener and every connection and ends the thread; again, does nothing."""
        with self._lock:
            self._stop_locked()

    def cut(self) -> None:
        """A partition: resets every connection, and closes new ones as soon as accepted."""
        with self._lock:
            self._mode = Mode.CUT
            self._cut_count += 1
            self._control(self._abort_all)

    def blackhole(self, *, answers_only: bool = False) -> None:
        """A silent partition: connections stay open but every byte either way is dropped;
        answers_only, only the target's bytes (a request arrives, its answer is lost)."""
        with self._lock:
            self._mode = Mode.ANSWERS_LOST if answers_only else Mode.BLACKHOLE

    def heal(self) -> None:
        """Ends a partition; a connection that lost bytes in a blackhole is reset, its stream
        being broken."""
        with self._lock:
            self._mode = Mode.OPEN
            self._control(self._abort_dropped)

    def set_delay(self, seconds: float) -> None:
        """Sets the delay of chunks read from now on; those in flight keep theirs."""
        self._delay_seconds = self._checked_delay(seconds)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    @staticmethod
    def _checked_delay(seconds: float) -> float:
        if seconds < 0:
            raise ValueError(f"a delay of {seconds} s")
        return float(seconds)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None
        return self._loop

    @staticmethod
    def _wait(loop: asyncio.AbstractEventLoop, work: Awaitable[None]) -> None:
        """Runs work on the relay's loop from another thread and waits for it."""

        async def run() -> None:
            await work

        asyncio.run_coroutine_threadsafe(run(), loop).result(CONTROL_TIMEOUT_SECONDS)

    async def _listen(self) -> None:
        loop = self._running_loop()
        self._server = await loop.create_server(lambda: _Side(self), "127.0.0.1", 0)
        self._port = int(self._server.sockets[0].getsockname()[1])

    def _accepted(self, side: _Side) -> None:
        """A client connected: closed at once in a cut, else relayed to the target."""
        if self._mode is Mode.CUT or self._stopped:
            _abort(side.transport)
            return
        assert side.transport is not None
        # Nothing is read until the target's socket is there to take it.
        side.transport.pause_reading()
        link = _Link(self, side)
        self._links.add(link)
        task = self._running_loop().create_task(link.connect())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _abort_all(self) -> list[_Side]:
        """Resets every connection, also those closing, whose unsent bytes are dropped."""
        sides = list(self._sides)
        for link in list(self._links):
            link.abort()
        for side in sides:
            _abort(side.transport)
        return sides

    def _abort_dropped(self) -> list[_Side]:
        """Resets every connection that lost bytes in a blackhole."""
        sides = []
        for link in [link for link in self._links if link.dropped]:
            sides += [link.client, link.target]
            link.abort()
        return sides

    def _control(self, action: Callable[[], list[_Side]]) -> None:
        """Runs action where the connections live and returns once the sockets it aborted
        are closed, so that a test's next step sees the partition in place."""
        loop = self._loop
        if loop is None or self._stopped:
            # Not running: there is no connection to act on.
            return
        if threading.current_thread() is self._thread:
            action()
            return

        async def act() -> None:
            await self._closed(action())

        self._wait(loop, act())

    async def _closed(self, sides: list[_Side]) -> None:
        """Waits until every side that had a socket has closed it: an abort closes the
        socket on the loop's next turn."""
        async with asyncio.timeout(CONTROL_TIMEOUT_SECONDS):
            for side in sides:
                if side.transport is not None:
                    await side.gone.wait()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._closed(self._abort_all())
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # Sockets a cancelled connect had opened close on the loop's next turns.
        await self._closed(self._abort_all())
        if self._server is not None:
            await self._server.wait_closed()

    def _stop_locked(self) -> None:
        loop, thread = self._loop, self._thread
        if self._stopped or loop is None or thread is None:
            self._stopped = True
            return
        self._stopped = True
        try:
            self._wait(loop, self._shutdown())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CONTROL_TIMEOUT_SECONDS)
