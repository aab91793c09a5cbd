"""structlog set-up: JSON lines by default, a readable console renderer on a terminal."""

from __future__ import annotations

import logging
import sys

import orjson
import structlog


def configure(level: str = "info", fmt: str = "auto", *, tracing: bool = False) -> None:
    """Configures structlog for the whole process; fmt is json, console or auto. With
    tracing, every line carries the current span's trace_id and span_id."""
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
    if fmt == "console":
        processors: list[structlog.typing.Processor] = [*shared, structlog.dev.ConsoleRenderer()]
        factory: structlog.typing.WrappedLogger = structlog.PrintLoggerFactory(sys.stdout)
    else:
        # Every decision is a log line, so rendering is on the hot path: orjson renders
        # bytes several times faster than the json module, written without decoding.
        processors = [*shared, structlog.processors.JSONRenderer(serializer=orjson.dumps)]
        factory = structlog.BytesLoggerFactory(sys.stdout.buffer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=factory,
        cache_logger_on_first_use=True,
    )
