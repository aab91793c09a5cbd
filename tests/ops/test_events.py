"""`earmark events list` as an operator runs it: a process of its own, reading the
database the sidecars share."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import timedelta
from typing import Any

from earmark.ops import events as ops_events
from earmark.store import events as store_events
from earmark.store.events import EventLog
from tests.notices.recorded import (
    AT,
    exceeded_payload,
    in_doubt_payload,
    insert_event,
    threshold_payload,
)


async def earmark(*argv: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "earmark", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def rows(table: str) -> list[list[str]]:
    """A table's rows (header first), split on its column gaps."""
    return [[cell.strip() for cell in line.split("   ") if cell] for line in table.splitlines()]


async def recorded(dsn: str) -> tuple[list[str], list[int]]:
    """Four notices: one delivered, one retrying, one given up, one never tried yet; their
    ids and seqs, oldest first."""
    ids = [
        await insert_event(dsn, threshold_payload("acme/usd")),
        await insert_event(dsn, exceeded_payload("acme/tokens")),
        await insert_event(dsn, in_doubt_payload("acme/tokens")),
        await insert_event(dsn, threshold_payload("team", 5_000)),
    ]
    log = EventLog(dsn)
    try:
        due = await log.take_due("test", AT, 60.0, 10)
        assert due is not None
        seqs = [event.seq for event in due]
        await log.delivered(seqs[0], AT + timedelta(seconds=1))
        await log.retry(seqs[1], AT + timedelta(seconds=30), "answered HTTP 500")
        await log.failed(seqs[2], AT + timedelta(seconds=2), "answered HTTP 410")
        await log.release("test")
    finally:
        await log.close()
    return ids, seqs


async def test_events_list_shows_each_notice_and_its_delivery(dsn: str) -> None:
    """The table lists every notice newest first, each with its state and when (delivered,
    next attempt, given up), its attempts and last error; --state, --budget and --kind
    narrow it, and -o json adds each notice's payload."""
    ids, seqs = await recorded(dsn)
    listed = await earmark("events", "list", "--database-url", dsn)
    assert 0 == listed.returncode, listed.stderr
    created = "2026-12-01T11:59:30Z"
    assert [
        ["SEQ", "ID", "KIND", "BUDGET", "CREATED", "STATE", "ATTEMPTS", "LAST ERROR"],
        [str(seqs[3]), ids[3], "budget.threshold_crossed", "team", created, "pending", "0", "-"],
        [str(seqs[2]), ids[2], "hold.in_doubt", "acme/tokens", created,
         "failed 2026-12-01T11:59:32Z", "1", "answered HTTP 410"],
        [str(seqs[1]), ids[1], "budget.exceeded", "acme/tokens", created,
         "retrying, next 2026-12-01T12:00:00Z", "1", "answered HTTP 500"],
        [str(seqs[0]), ids[0], "budget.threshold_crossed", "acme/usd", created,
         "delivered 2026-12-01T11:59:31Z", "1", "-"],
    ] == rows(listed.stdout)  # fmt: skip
    failed = await earmark("events", "list", "--database-url", dsn, "--state", "failed")
    assert [ids[2]] == [row[1] for row in rows(failed.stdout)[1:]]
    narrowed = await earmark(
        "events", "list", "--database-url", dsn, "--budget", "acme/tokens",
        "--kind", "budget.exceeded", "-o", "json",
    )  # fmt: skip
    (exceeded,) = json.loads(narrowed.stdout)["events"]
    expected: dict[str, Any] = {
        "seq": seqs[1], "event_id": ids[1], "kind": "budget.exceeded",
        "budget_id": "acme/tokens", "created_at": created, "state": "retrying", "attempts": 1,
        "next_attempt_at": "2026-12-01T12:00:00Z", "delivered_at": None, "failed_at": None,
        "last_error": "answered HTTP 500", "payload": exceeded_payload("acme/tokens"),
    }  # fmt: skip
    assert expected == exceeded


async def test_events_list_says_when_there_is_nothing_or_no_database(dsn: str) -> None:
    """No notice is one line; a database that cannot be reached is one line on stderr and
    exit 1, without the URL's password."""
    empty = await earmark("events", "list", "--database-url", dsn, "--state", "pending")
    assert (0, "no notices pending\n") == (empty.returncode, empty.stdout)
    refused = await earmark(
        "events", "list", "--database-url", "postgresql://earmark:s3cret@127.0.0.1:1/none"
    )
    lines = refused.stderr.strip().splitlines()
    assert (1, 1) == (refused.returncode, len(lines)), refused.stderr
    assert lines[0].startswith("earmark events list: database unavailable")
    assert "s3cret" not in refused.stderr


def test_the_command_offers_the_states_the_store_knows() -> None:
    """--state's choices are the states the listing's SQL gives."""
    assert store_events.STATES == ops_events.STATES


async def test_events_list_narrows_to_price_notices_which_name_no_budget(dsn: str) -> None:
    """--kind price.changed lists the price notices, their budget shown as none."""
    await insert_event(dsn, threshold_payload("acme/usd"))
    price = {
        "type": "price.changed",
        "timestamp": "2026-12-01T11:59:30Z",
        "data": {"provider": "openai", "model": "gpt-4o", "version": 2},
    }
    price_id = await insert_event(dsn, price)
    listed = await earmark("events", "list", "--database-url", dsn, "--kind", "price.changed")
    assert 0 == listed.returncode, listed.stderr
    assert [[price_id, "price.changed", "-"]] == [row[1:4] for row in rows(listed.stdout)[1:]]
