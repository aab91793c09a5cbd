"""Reading a provider's reports: the admin key never follows a redirect nor crosses a
network in the clear, and a report out of its published shape is one line, not a trace."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from earmark.core.reconcile import Kind
from earmark.ops.connect import OpsError
from earmark.ops.reports import ReportReader, Scope, openai_line, openai_usage
from tests.http_fake import JsonHandler, StateServer, serving

SINCE = datetime(2026, 12, 1, tzinfo=UTC)
KEY = "sk-admin-" + "d4" * 24


@dataclass
class Seen:
    """What a server answers every GET with, and the Authorization headers it saw."""

    answer: tuple[int, dict[str, Any]]
    location: str = ""
    authorizations: list[str] = field(default_factory=list)


class _Handler(JsonHandler):
    server: StateServer[Seen]

    def do_GET(self) -> None:
        seen = self.server.state
        seen.authorizations.append(self.headers.get("authorization", ""))
        status, body = seen.answer
        if seen.location:
            self.send_response(status)
            self.send_header("location", seen.location)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        self.send_json(status, body)


def read(base: str) -> None:
    reader = ReportReader("openai", base, KEY)
    openai_usage(reader, Scope(api_key_id="key_1"), SINCE, SINCE + timedelta(hours=1))


def test_a_redirect_is_refused_and_the_key_stays_home() -> None:
    """A 302 to another server is an error naming the status; the other server never sees
    the admin key."""
    elsewhere = Seen((200, {"data": [], "has_more": False}))
    with serving(StateServer(_Handler, elsewhere), "elsewhere") as other:
        redirecting = Seen((302, {}), location=f"http://127.0.0.1:{other}/v1/x")
        with (
            serving(StateServer(_Handler, redirecting), "redirecting") as port,
            pytest.raises(OpsError) as caught,
        ):
            read(f"http://127.0.0.1:{port}/v1")
    assert (True, [], False) == (
        str(caught.value).startswith("openai answered 302 to GET /organization/usage/"),
        elsewhere.authorizations,
        KEY in str(caught.value),
    )


def test_plain_http_is_only_for_this_machine() -> None:
    """An http base off this machine is refused before anything is sent."""
    with pytest.raises(OpsError) as caught:
        read("http://api.example.com/v1")
    assert "must be an https URL" in str(caught.value)


def test_a_report_out_of_its_shape_is_one_line() -> None:
    """A bucket without its start time is named as a report out of its published shape."""
    shapeless = Seen((200, {"data": [{"results": []}], "has_more": False}))
    with (
        serving(StateServer(_Handler, shapeless), "shapeless") as port,
        pytest.raises(OpsError) as caught,
    ):
        read(f"http://127.0.0.1:{port}/v1")
    assert str(caught.value).startswith(
        "openai's usage report /organization/usage/completions is not in its published shape"
    )


# OpenAI's line items: a model's "MODEL, KIND" (the cookbook's recorded run), "Image models"
# (the SDK's published example), and the tools' and storage's lines as seen in the wild
# (their text is not published: docs/reconcile.md, "Cost lines that name no model").
LINE_ITEMS = {
    "gpt-4o-2024-08-06, input": (Kind.MODEL, "gpt-4o-2024-08-06"),
    "ft-gpt-4o-2024-08-06, output": (Kind.MODEL, "ft-gpt-4o-2024-08-06"),
    "gpt-4o-mini-search-preview, cached input": (Kind.MODEL, "gpt-4o-mini-search-preview"),
    "web search tool calls": (Kind.TOOLS, ""),
    "Web Search Tool Calls": (Kind.TOOLS, ""),
    "gpt-4o, web search tool calls": (Kind.TOOLS, ""),
    "file search tool calls": (Kind.TOOLS, ""),
    "code interpreter sessions": (Kind.TOOLS, ""),
    "Code interpreter": (Kind.TOOLS, ""),
    "containers": (Kind.TOOLS, ""),
    "vector store storage": (Kind.STORAGE, ""),
    "file search storage": (Kind.STORAGE, ""),
    "Vector storage": (Kind.STORAGE, ""),
    "Image models": (Kind.OTHER, ""),
    "gpt-4o": (Kind.OTHER, ""),
    "": (Kind.OTHER, ""),
    # A fine-tuned model's name may hold the words: only the KIND after its comma is read.
    "ft:gpt-4o-mini-2024-07-18:acme:storage-bot:abc123, input": (
        Kind.MODEL, "ft:gpt-4o-mini-2024-07-18:acme:storage-bot:abc123",
    ),
    "ft:gpt-4.1:acme:container-ops:x1, input": (Kind.MODEL, "ft:gpt-4.1:acme:container-ops:x1"),
    "ft:gpt-4.1:acme:file_search:x1, output": (Kind.MODEL, "ft:gpt-4.1:acme:file_search:x1"),
}  # fmt: skip


def test_a_cost_line_is_classed_by_the_kind_it_names() -> None:
    """A model's line is its model's, whatever its name holds, a tool's or storage's is
    classed by its words in any case, and any other line is other, never a model."""
    assert LINE_ITEMS == {line: openai_line(line) for line in LINE_ITEMS}
