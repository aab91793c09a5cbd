"""structlog set-up: JSON lines by default, a readable console renderer on a terminal, and
a log that cannot fail what logs.

Every RPC, background pass and HTTP request writes log lines in its own path. A write that
fails (the disk under a redirected stdout is full, a pipe's reader went away) must not turn
the call that logged into an error: the line is dropped and counted
(earmark_log_records_dropped_total, read from LogSink.dropped), and one line on stderr says
when dropping starts and one when writes work again, so that a person reading the log knows
where its gap is.

The standard library's logging (asyncpg's: a pool's reconnect traceback while PostgreSQL
restarts) goes through the same renderer to the same sink, so that every line of the log
is one JSON document, a library's too; only its warnings and worse are written (a library's
info lines, httpx's among them, would repeat URLs that may carry credentials).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

import orjson
import structlog


class LogSink:
    """Log lines written to one file descriptor with os.write: one system call per line,
    nothing buffered in Python that a failed flush could keep or tear. A line that cannot
    be written is dropped and counted; the call that logged never sees the error."""

    def __init__(self, fd: int, notice_fd: int | None = None) -> None:
        self.fd = fd
        # Where the start and the end of a gap are told: stderr, unless that is the log.
        self.notice_fd = notice_fd
        self.dropped = 0
        self._dropping = False
        self._dropped_at_start = 0
        # A line cut short by a failed write: the next line that is written starts on a
        # line of its own, so that every whole line of the log stays one JSON document.
        self._torn = False
        # Threads log too (the plans file's reload, the embedded database's supervisor).
        self._lock = threading.Lock()

    @property
    def dropping(self) -> bool:
        return self._dropping

    def write(self, line: bytes) -> None:
        """Writes line and a newline, or drops it."""
        with self._lock:
            data = b"\n" + line + b"\n" if self._torn else line + b"\n"
            written = 0
            try:
                while written < len(data):
                    written += os.write(self.fd, data[written:])
            except OSError as error:
                self._drop(error, torn=self._torn or 0 < written)
                return
            self._torn = False
            if self._dropping:
                self._dropping = False
                self._notice(
                    f"earmark: the log is written again; {self.dropped - self._dropped_at_start}"
                    " lines were dropped"
                )

    def _drop(self, error: OSError, *, torn: bool) -> None:
        self._torn = torn
        self.dropped += 1
        if not self._dropping:
            self._dropping = True
            self._dropped_at_start = self.dropped - 1
            cause = errno.errorcode.get(error.errno or 0, type(error).__name__)
            self._notice(
                f"earmark: cannot write the log ({cause}: {error.strerror}); dropping log "
                "lines until a write succeeds (earmark_log_records_dropped_total counts them)"
            )

    def _notice(self, text: str) -> None:
        if self.notice_fd is None:
            return
        # stderr may be on the same full disk: the counter still tells.
        with contextlib.suppress(OSError):
            os.write(self.notice_fd, text.encode() + b"\n")


class SinkLogger:
    """structlog's logger over a LogSink: every level writes the rendered line."""

    def __init__(self, sink: LogSink) -> None:
        self._sink = sink

    def msg(self, message: str | bytes) -> None:
        self._sink.write(message.encode() if isinstance(message, str) else message)

    log = debug = info = warn = warning = msg
    err = error = critical = exception = fatal = failure = msg


class StdlibHandler(logging.Handler):
    """The standard library's log records rendered by structlog's renderer (its formatter,
    a ProcessorFormatter) and written where structlog writes: one line a record, its
    traceback inside it."""

    def __init__(self, write: Callable[[str], None]) -> None:
        super().__init__()
        self._write = write

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write(self.format(record))
        except Exception:
            self.handleError(record)


def _json_text(obj: Any, **kwargs: Any) -> str:
    """orjson's rendering as text, which logging's formatters return."""
    return orjson.dumps(obj, **kwargs).decode()


def _route_stdlib(
    shared: list[structlog.typing.Processor],
    renderer: structlog.typing.Processor,
    write: Callable[[str], None],
    level: int,
) -> None:
    """Sends the root logger's records (every library's that propagates) through renderer
    to write, at level or worse and never below warnings; replaces an earlier configure's
    handler, and leaves others' (a test's capture) as they are."""
    handler = StdlibHandler(write)
    handler.setLevel(max(level, logging.WARNING))
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    for earlier in [h for h in root.handlers if isinstance(h, StdlibHandler)]:
        root.removeHandler(earlier)
    root.addHandler(handler)


# The process's sink, once configure() has run: the metrics read its count.
_sink: LogSink | None = None


def records_dropped() -> int:
    """Log lines this process dropped because they could not be written."""
    return 0 if _sink is None else _sink.dropped


def _fileno(stream: Any) -> int | None:
    """The stream's file descriptor; None for one that has none (a test's capture)."""
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):
        return None


def configure(level: str = "info", fmt: str = "auto", *, tracing: bool = False) -> None:
    """Configures structlog for the whole process; fmt is json, console or auto. With
    tracing, every line carries the current span's trace_id and span_id."""
    global _sink
    if fmt == "auto":
        fmt = "console" if sys.stdout.isatty() else "json"
    shared: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
    ]
    if tracing:
        from earmark.tracing import add_trace_ids

        shared.append(add_trace_ids)
    stdlib_renderer: structlog.typing.Processor
    if fmt == "console":
        processors: list[structlog.typing.Processor] = [*shared, structlog.dev.ConsoleRenderer()]
        stdlib_renderer = structlog.dev.ConsoleRenderer()
    else:
        # Every decision is a log line, so rendering is on the hot path: orjson renders
        # bytes several times faster than the json module, written without decoding.
        processors = [*shared, structlog.processors.JSONRenderer(serializer=orjson.dumps)]
        stdlib_renderer = structlog.processors.JSONRenderer(serializer=_json_text)
    stream = sys.stdout
    factory: Any = structlog.PrintLoggerFactory(stream)

    def write(line: str) -> None:
        print(line, file=stream, flush=True)

    fd = _fileno(stream)
    if fd is not None:
        # What print() may have buffered goes first; it may fail on the same full disk.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
        notice = _fileno(sys.stderr)
        sink = _sink = LogSink(fd, None if notice == fd else notice)
        factory = lambda *args: SinkLogger(sink)  # noqa: E731

        def write(line: str) -> None:
            sink.write(line.encode())

    numeric = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
    _route_stdlib(shared, stdlib_renderer, write, numeric)
