"""What the operator's commands print: aligned tables for people, one JSON document for
programs, and amounts in their unit (micro-dollars as dollars)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC

from google.protobuf import json_format
from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from earmark.core.prices import USD_MICROS

MICROS_PER_DOLLAR = 1_000_000
# Between two columns of a table, as kubectl prints them.
GAP = "   "
NONE = "-"


def dollars(micros: int) -> str:
    """Micro-dollars as dollars: at least cents, and every micro-dollar that is there."""
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), MICROS_PER_DOLLAR)
    digits = f"{fraction:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}${whole:,}.{digits}"


def amount(value: int, unit: str) -> str:
    """An amount of unit as people read it: dollars for usd_micros, else grouped digits."""
    return dollars(value) if unit == USD_MICROS else f"{value:,}"


def delta(value: int, unit: str) -> str:
    """A ledger change, with its sign (0 as a dash)."""
    if value == 0:
        return NONE
    return ("+" if value > 0 else "") + amount(value, unit)


def timestamp(value: Timestamp) -> str:
    """A timestamp in UTC to the second, a dash when unset."""
    if not value.seconds and not value.nanos:
        return NONE
    return value.ToDatetime(tzinfo=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def enum_name(full: str, prefix: str) -> str:
    """An enum value's name without its prefix, lower-case: HELD for RESERVATION_STATE_HELD."""
    short = full.removeprefix(prefix).lower().replace("_", "-")
    return NONE if short == "unspecified" else short


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[str] = ()) -> str:
    """Columns padded to their widest cell; the columns named in right (amounts) aligned
    right, the others left; no trailing spaces."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.rjust(width) if header in right else cell.ljust(width)
            for cell, width, header in zip(cells, widths, headers, strict=True)
        ]
        return GAP.join(padded).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def as_dict(message: Message) -> dict[str, object]:
    """A message as protobuf's JSON mapping, with the proto's field names."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def as_json(message: Message) -> str:
    """One JSON document for a message, as grpcurl would print the same answer."""
    return json.dumps(as_dict(message), indent=2)
