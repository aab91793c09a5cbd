"""The log's set-up: the standard library's records (asyncpg's) come out as the same JSON
lines as Earmark's own."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import structlog

from earmark import logging as earmark_logging


def test_a_record_of_the_asyncpg_logger_is_one_json_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A traceback asyncpg's logger writes (a pool restoring a connection while PostgreSQL
    restarts) is one JSON line with its logger, level and exception; a library's info line
    is not written."""
    path = tmp_path / "log"
    monkeypatch.setattr(earmark_logging, "_sink", None)
    with path.open("w") as out:
        monkeypatch.setattr(sys, "stdout", out)
        try:
            earmark_logging.configure("info", "json")
            asyncpg_log = logging.getLogger("asyncpg.pool")
            try:
                raise ConnectionResetError("the server closed the connection")
            except ConnectionResetError:
                asyncpg_log.exception("error restoring a connection")
            asyncpg_log.info("a library's info line")
            structlog.get_logger("earmark").info("earmark_line")
        finally:
            structlog.reset_defaults()
            root = logging.getLogger()
            for handler in root.handlers[:]:
                if isinstance(handler, earmark_logging.StdlibHandler):
                    root.removeHandler(handler)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [
        ("error restoring a connection", "error", "asyncpg.pool"),
        ("earmark_line", "info", None),
    ] == [(line["event"], line["level"], line.get("logger")) for line in lines]
    exception = lines[0]["exception"]
    assert (True, True, True) == (
        exception.startswith("Traceback (most recent call last):"),
        exception.endswith("ConnectionResetError: the server closed the connection"),
        "timestamp" in lines[0],
    )
