"""tests/relay.py: the delaying, partitionable TCP relay the region tests put between regions."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests import relay as relay_module
from tests.helpers import eventually_sync
from tests.relay import Mode, Relay

DELAY_SECONDS = 0.04
# A read that should answer at once fails the test after this rather than hang it.
IO_TIMEOUT_SECONDS = 5.0
# A blackholed read is expected to time out: long enough that a relayed answer would have come.
BLACKHOLE_READ_SECONDS = 0.3
# The echo server's handlers give up on a connection idle this long, so its close never hangs.
ECHO_IDLE_SECONDS = 10.0
CHUNK_BYTES = 64 * 1024
PAYLOAD_BYTES = 1024 * 1024


class Echo(socketserver.BaseRequestHandler):
    """Sends back what it reads until EOF; a reset (the relay's cut) just ends it."""

    def handle(self) -> None:
        self.request.settimeout(ECHO_IDLE_SECONDS)
        with contextlib.suppress(OSError):
            while chunk := self.request.recv(CHUNK_BYTES):
                self.request.sendall(chunk)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    """An echo server on 127.0.0.1 port 0 in threads, all joined at the end."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, name="echo server"
    )
    thread.start()
    try:
        host, port = server.socket.getsockname()
        yield host, port
    finally:
        server.shutdown()
        # Joins the handlers' threads too (ThreadingMixIn.block_on_close).
        server.server_close()
        thread.join()


def connect(relay: Relay) -> socket.socket:
    """A client socket connected to relay."""
    return socket.create_connection(("127.0.0.1", relay.port), timeout=IO_TIMEOUT_SECONDS)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """size bytes from sock, or fewer if it ends first."""
    data = b""
    while len(data) < size and (chunk := sock.recv(size - len(data))):
        data += chunk
    return data


def round_trip(sock: socket.socket, data: bytes) -> bytes:
    """What the echo server sends back for data."""
    sock.sendall(data)
    return recv_exactly(sock, len(data))


def read_to_eof(sock: socket.socket) -> bytes:
    """Everything sock receives until its EOF."""
    chunks = []
    while chunk := sock.recv(CHUNK_BYTES):
        chunks.append(chunk)
    return b"".join(chunks)


def recv_or_reset(sock: socket.socket) -> bytes:
    """What one recv gives, b"" for a reset as for an EOF: a closed connection either way."""
    try:
        return sock.recv(1)
    except ConnectionResetError:
        return b""


def first_read(relay: Relay) -> bytes:
    """What a new connection to relay reads first, b"" when it is closed or reset, also when
    the reset comes before connect() has returned."""
    try:
        with connect(relay) as sock:
            return recv_or_reset(sock)
    except ConnectionResetError:
        return b""


@pytest.mark.parametrize("queued_bytes_max", [relay_module.QUEUED_BYTES_MAX, 16 * 1024])
def test_bytes_pass_both_ways_unchanged(
    echo: tuple[str, int], monkeypatch: pytest.MonkeyPatch, queued_bytes_max: int
) -> None:
    """A 1 MiB payload comes back unchanged, also when the queue limit pauses reading often."""
    monkeypatch.setattr(relay_module, "QUEUED_BYTES_MAX", queued_bytes_max)
    payload = bytes(range(256)) * (PAYLOAD_BYTES // 256)
    with Relay(echo, DELAY_SECONDS) as relay:
        with connect(relay) as client:
            # Sent from a thread while this one reads, as an echo's client must.
            def send() -> None:
                client.sendall(payload)
                client.shutdown(socket.SHUT_WR)

            sender = threading.Thread(target=send, name="relay test sender")
            sender.start()
            try:
                received = read_to_eof(client)
            finally:
                sender.join()
        assert payload == received
        eventually_sync(
            lambda: 0 == relay.connections, within_seconds=5, what="the relayed connection closed"
        )


def test_a_round_trip_takes_at_least_twice_the_delay(echo: tuple[str, int]) -> None:
    """A request and its answer each wait the delay: the round trip takes at least twice 40 ms."""
    with Relay(echo, DELAY_SECONDS) as relay, connect(relay) as client:
        assert b"warm" == round_trip(client, b"warm")
        started = time.monotonic()
        answer = round_trip(client, b"ping")
        elapsed = time.monotonic() - started
    assert b"ping" == answer
    assert 2 * DELAY_SECONDS <= elapsed


def test_order_is_kept_over_many_small_writes(echo: tuple[str, int]) -> None:
    """500 small writes arrive in order, also those sent after the delay shrank mid-stream."""
    messages = [f"{i};".encode() for i in range(500)]
    with Relay(echo, DELAY_SECONDS) as relay, connect(relay) as client:
        for i, message in enumerate(messages):
            if 250 == i:
                relay.set_delay(0.0)
            client.sendall(message)
        client.shutdown(socket.SHUT_WR)
        received = read_to_eof(client)
    assert b"".join(messages) == received


def test_cut_resets_connections_until_healed(echo: tuple[str, int]) -> None:
    """cut() closes an open connection, dropping bytes in flight, and new ones at once;
    heal() lets new ones through again."""
    with Relay(echo, DELAY_SECONDS) as relay:
        with connect(relay) as before:
            assert b"a" == round_trip(before, b"a")
            # Long enough that the answer is still in flight when the cut comes.
            relay.set_delay(IO_TIMEOUT_SECONDS / 2)
            before.sendall(b"lost")
            relay.cut()
            assert (Mode.CUT, 1, 0) == (relay.mode, relay.cut_count, relay.connections)
            assert b"" == recv_or_reset(before)
        relay.set_delay(DELAY_SECONDS)
        assert b"" == first_read(relay)
        relay.heal()
        with connect(relay) as after:
            assert b"b" == round_trip(after, b"b")
        assert (Mode.OPEN, 1) == (relay.mode, relay.cut_count)


def test_blackhole_drops_every_byte_until_healed(echo: tuple[str, int]) -> None:
    """In a blackhole reads time out on open and new connections; heal() resets those that
    lost bytes and lets new ones through."""
    with Relay(echo, DELAY_SECONDS) as relay, connect(relay) as old:
        assert b"1" == round_trip(old, b"1")
        relay.blackhole()
        old.settimeout(BLACKHOLE_READ_SECONDS)
        old.sendall(b"2")
        with pytest.raises(TimeoutError):
            old.recv(1)
        with connect(relay) as new:
            new.settimeout(BLACKHOLE_READ_SECONDS)
            new.sendall(b"3")
            with pytest.raises(TimeoutError):
                new.recv(1)
            # Both bytes dropped, not waiting to be read: heal() must not let "3" through.
            eventually_sync(
                lambda: 2 == relay.dropped_bytes, within_seconds=5, what="2 bytes dropped"
            )
            relay.heal()
            new.settimeout(IO_TIMEOUT_SECONDS)
            assert b"" == recv_or_reset(new)
        old.settimeout(IO_TIMEOUT_SECONDS)
        assert b"" == recv_or_reset(old)
        with connect(relay) as healed:
            assert b"4" == round_trip(healed, b"4")
        assert (Mode.OPEN, 0) == (relay.mode, relay.cut_count)


def test_a_blackhole_of_answers_only_lets_requests_through(echo: tuple[str, int]) -> None:
    """blackhole(answers_only=True) delivers what the client sends and drops what the target
    answers (the echo's bytes, counted as they come back); heal() resets the connection."""
    with Relay(echo, DELAY_SECONDS) as relay, connect(relay) as old:
        relay.blackhole(answers_only=True)
        old.settimeout(BLACKHOLE_READ_SECONDS)
        old.sendall(b"abc")
        with pytest.raises(TimeoutError):
            old.recv(1)
        # The echo sends only what it read: its 3 bytes dropped are the request delivered.
        eventually_sync(lambda: 3 == relay.dropped_bytes, within_seconds=5, what="3 bytes")
        assert Mode.ANSWERS_LOST == relay.mode
        relay.heal()
        old.settimeout(IO_TIMEOUT_SECONDS)
        assert b"" == recv_or_reset(old)
        with connect(relay) as healed:
            assert b"d" == round_trip(healed, b"d")
        assert (Mode.OPEN, 0) == (relay.mode, relay.cut_count)


def test_stop_closes_everything_and_is_idempotent(echo: tuple[str, int]) -> None:
    """stop() closes open connections and the listener and joins the thread; again, nothing."""
    threads = set(threading.enumerate())
    relay = Relay(echo, DELAY_SECONDS)
    relay.start()
    port = relay.port
    with connect(relay) as client:
        assert b"x" == round_trip(client, b"x")
        relay.stop()
        assert b"" == recv_or_reset(client)
    relay.stop()
    assert [] == [t.name for t in threading.enumerate() if t.name.startswith("relay to")]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_SECONDS).close()
    # The echo server's handler of that connection ends once it sees the relay's reset.
    eventually_sync(
        lambda: set() == set(threading.enumerate()) - threads,
        within_seconds=5,
        what="every thread the test started ended",
    )


async def test_an_async_test_uses_it_from_its_own_loop(echo: tuple[str, int]) -> None:
    """The relay runs on its own loop, so a coroutine on pytest-asyncio's loop talks through it."""
    with Relay(echo, DELAY_SECONDS) as relay:
        reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
        try:
            writer.write(b"async")
            await writer.drain()
            answer = await asyncio.wait_for(reader.readexactly(5), IO_TIMEOUT_SECONDS)
        finally:
            writer.close()
            await writer.wait_closed()
    assert b"async" == answer
