"""`earmark prices import` and `check` against the real genai-prices package and a live
sidecar: the book starts filled from the database, an import run twice changes nothing,
and a stale rate is listed as a disagreement with exit status 3."""

from __future__ import annotations

import argparse
import asyncio
import json
from decimal import Decimal
from typing import Any

import pytest
from genai_prices import data_snapshot

from earmark import cli
from earmark.ops.connect import Answer
from earmark.ops.price_import import DISAGREE_STATUS
from earmark.v1 import budget_pb2 as pb
from tests.client.llm_helpers import put_price
from tests.conftest import Running

MODEL = "gpt-4o"


async def run(s: Running, *argv: str) -> object:
    """What `earmark ARGV --admin-target ADMIN` answers."""
    args = cli.parser().parse_args([*argv, "--admin-target", s.admin_target])
    return await asyncio.to_thread(args.run, args)


def database_rate(name: str, tier: str = "") -> int:
    """The database's rate for gpt-4o, in micro-dollars per million tokens."""
    (model,) = [m for m in _openai().models if m.id == MODEL]
    prices = model.prices if not isinstance(model.prices, list) else model.prices[-1].prices
    value: Decimal = getattr(prices, name)
    for variant in model.price_variants or []:
        if variant.when == {"service_tier": tier} and getattr(variant.prices, name, None):
            value = getattr(variant.prices, name)
    return int(value * 1_000_000)


def _openai() -> Any:
    (provider,) = [p for p in data_snapshot.get_snapshot().providers if p.id == "openai"]
    return provider


async def test_an_import_fills_the_book_once_and_check_agrees(sidecar: Running) -> None:
    """Importing gpt-4o puts its default and priority rows at the database's rates, with
    their source; a second import puts nothing; check then finds no disagreement."""
    first = await run(sidecar, "prices", "import", "--provider", "openai", "--model", MODEL,
                      "-o", "json")  # fmt: skip
    second = await run(sidecar, "prices", "import", "--provider", "openai", "--model", MODEL)
    checked = await run(sidecar, "prices", "check", "--provider", "openai", "--model", MODEL)
    listed = await sidecar.admin.ListPrices(pb.ListPricesRequest(provider="openai", model=MODEL))
    by_tier = {p.service_tier: p for p in listed.prices}
    put = json.loads(str(first))["put"]
    assert {"", "priority"} <= {row["service_tier"] for row in put}
    assert (database_rate("input_mtok"), database_rate("input_mtok", "priority")) == (
        by_tier[""].input_usd_micros_per_mtok,
        by_tier["priority"].input_usd_micros_per_mtok,
    )
    assert by_tier[""].source.startswith("genai-prices ")
    assert str(second).endswith(
        f"put 0 prices; {len(put)} already in the book as genai-prices has them"
    )
    assert isinstance(checked, Answer)
    assert (0, True) == (checked.status, checked.text.startswith("the book agrees"))


async def test_a_stale_rate_is_listed_with_exit_status_3(sidecar: Running) -> None:
    """A book whose gpt-4o input rate is 1.83 times the database's is listed by check,
    naming the field and both values, and check ends with exit status 3."""
    stale = int(database_rate("input_mtok") * 183 // 100)
    await put_price(
        sidecar, "openai", MODEL, input_usd_micros_per_mtok=stale,
        output_usd_micros_per_mtok=database_rate("output_mtok"),
        cached_input_usd_micros_per_mtok=database_rate("cache_read_mtok"),
    )  # fmt: skip
    checked = await run(sidecar, "prices", "check", "--provider", "openai", "--model", MODEL,
                        "-o", "json")  # fmt: skip
    assert isinstance(checked, Answer)
    found = json.loads(checked.text)["disagreements"]
    default = [d["difference"] for d in found if d["service_tier"] == "default"]
    assert DISAGREE_STATUS == checked.status
    assert any(d.startswith(f"input_usd_micros_per_mtok: book {stale} vs ") for d in default)


def test_check_exits_3_from_the_command_line() -> None:
    """The command line turns a check's findings into exit status 3."""
    args = argparse.Namespace(
        command="prices", verb="check", run=lambda _: Answer("found", DISAGREE_STATUS)
    )
    with pytest.raises(SystemExit) as exited:
        cli.run_operator_command(args)
    assert DISAGREE_STATUS == exited.value.code
