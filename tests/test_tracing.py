"""OpenTelemetry: the SDK's client spans and the sidecar's server spans make one trace,
read back from the SDK's in-memory exporter, and the sidecar's log lines carry its ids."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import structlog
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from structlog.testing import LogCapture

from earmark import logging as earmark_logging
from earmark.client import AsyncClient, BudgetNotFoundError
from earmark.server import Sidecar
from earmark.tracing import add_trace_ids, client_interceptor
from tests.conftest import Running, running, sidecar_settings
from tests.helpers import assert_invariants, eventually


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def logs() -> Iterator[LogCapture]:
    """The sidecar's log lines as dicts, through the trace id processor."""
    capture = LogCapture()
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, add_trace_ids, capture]
    )
    try:
        yield capture
    finally:
        structlog.reset_defaults()


@pytest.fixture
async def traced(dsn: str, socket_dir: Path, provider: TracerProvider) -> AsyncIterator[Running]:
    settings = sidecar_settings(dsn, socket_dir, tracing=True)
    async with running(Sidecar(settings, tracer_provider=provider), dsn) as s:
        yield s


def named(spans: tuple[ReadableSpan, ...], name: str, kind: SpanKind) -> ReadableSpan:
    (span,) = [s for s in spans if s.name == name and s.kind is kind]
    return span


async def finished(exporter: InMemorySpanExporter, name: str) -> tuple[ReadableSpan, ...]:
    """The finished spans once both ends of the call named have finished theirs.

    A failed call's server span ends after `context.abort` has sent the status, so
    the client can hold its answer before the sidecar has finished its span.
    """

    async def both() -> bool:
        kinds = {s.kind for s in exporter.get_finished_spans() if s.name == name}
        return {SpanKind.CLIENT, SpanKind.SERVER} <= kinds

    await eventually(both, within_seconds=5, what=f"both spans of {name}")
    return exporter.get_finished_spans()


async def test_a_call_is_one_trace_from_worker_to_log_line(
    traced: Running, provider: TracerProvider, exporter: InMemorySpanExporter, logs: LogCapture
) -> None:
    """A Reserve through the traced SDK is a CLIENT span whose child is the sidecar's
    SERVER span, and the sidecar's reserve log line names that trace and span."""
    async with AsyncClient(
        traced.target,
        admin_target=traced.admin_target,
        interceptors=[client_interceptor(provider)],
    ) as client:
        await client.put_budget("traced", 1_000, "t")
        held = await client.reserve("traced", 100)
    spans = await finished(exporter, "earmark.v1.Budget/Reserve")
    outer = named(spans, "earmark.v1.Budget/Reserve", SpanKind.CLIENT)
    inner = named(spans, "earmark.v1.Budget/Reserve", SpanKind.SERVER)
    (line,) = [e for e in logs.entries if e["event"] == "reserve"]
    assert outer.context is not None
    assert inner.context is not None
    assert inner.parent is not None
    assert outer.context.trace_id == inner.context.trace_id
    assert outer.context.span_id == inner.parent.span_id
    assert {"rpc.system": "grpc", "rpc.service": "earmark.v1.Budget", "rpc.method": "Reserve",
            "rpc.grpc.status_code": 0} == dict(inner.attributes or {})  # fmt: skip
    assert (format(inner.context.trace_id, "032x"), format(inner.context.span_id, "016x")) == (
        line["trace_id"],
        line["span_id"],
    )
    assert held.reservation_id == line["reservation_id"]  # type: ignore[union-attr]
    await assert_invariants(traced.dsn)


async def test_a_failed_call_ends_its_spans_in_error(
    traced: Running, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A call that fails NOT_FOUND ends both spans with status ERROR and the gRPC code."""
    async with AsyncClient(
        traced.target,
        admin_target=traced.admin_target,
        interceptors=[client_interceptor(provider)],
    ) as client:
        with pytest.raises(BudgetNotFoundError):
            await client.get_budget("missing")
    spans = await finished(exporter, "earmark.v1.Admin/GetBudget")
    for kind in (SpanKind.CLIENT, SpanKind.SERVER):
        span = named(spans, "earmark.v1.Admin/GetBudget", kind)
        assert (StatusCode.ERROR, 5) == (
            span.status.status_code,
            (span.attributes or {})["rpc.grpc.status_code"],
        )


def test_configure_with_tracing_adds_the_trace_ids() -> None:
    """`earmark serve --tracing` configures the log with the trace id processor."""
    try:
        earmark_logging.configure("info", "json", tracing=True)
        processors = structlog.get_config()["processors"]
    finally:
        structlog.reset_defaults()
    assert add_trace_ids in processors
