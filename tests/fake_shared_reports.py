"""What both fakes' organization usage and cost reports share: the query string as the
SDKs and the providers' examples send it, UTC time buckets of a width, pages of buckets,
and adding up billed records by group. The providers' own shapes are in
tests/fake_openai_reports.py and tests/fake_anthropic_reports.py.

A list parameter arrives as `name[]=a&name[]=b` (both SDKs encode lists in brackets:
openai/_client.py and anthropic/_client.py, `Querystring(array_format="brackets")`; and
Anthropic's curl examples write `group_by[]=`) or as `name=a&name=b` (requests' encoding,
as OpenAI's usage cookbook sends it); the fakes read both."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, replace
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

R = TypeVar("R")
WIDTHS = {"1m": 60, "1h": 3_600, "1d": 86_400}
# Buckets a page by width: (default, most), as both providers document their `limit`.
PAGE_BUCKETS = {"1m": (60, 1_440), "1h": (24, 168), "1d": (7, 31)}


@dataclass(frozen=True)
class Publication:
    """How a fake's reports book and publish its bills: in the bucket booked_after_seconds
    after the request arrived (at its completion, as a long request is booked), and only
    published_after_seconds after that (usage data arrives late: Anthropic's within 5
    minutes of completion, occasionally later). The default: at arrival, at once."""

    booked_after_seconds: float = 0.0
    published_after_seconds: float = 0.0


def publish(state: object, publication: Publication) -> None:
    """From now on state's reports book and publish its bills as publication says."""
    setattr(state, "_publication", publication)  # noqa: B010 (the states are not ours)


def published(state: object, bills: list[Any], now: float) -> list[Any]:
    """The bills a report shows at now, each at the time it is booked at."""
    publication = getattr(state, "_publication", None)
    if not isinstance(publication, Publication):
        return bills
    booked = [replace(bill, at=bill.at + publication.booked_after_seconds) for bill in bills]
    return [bill for bill in booked if bill.at + publication.published_after_seconds <= now]


class ReportError(Exception):
    """A request the report endpoint refuses: its HTTP status and message, the parameter
    at fault, and the provider's error code."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


@dataclass(frozen=True)
class Query:
    """A request's path and query parameters."""

    path: str
    params: dict[str, list[str]]

    @classmethod
    def of(cls, target: str) -> Query:
        parts = urlsplit(target)
        return cls(parts.path, parse_qs(parts.query, keep_blank_values=True))

    def one(self, name: str) -> str | None:
        values = self.params.get(name)
        return values[-1] if values else None

    def many(self, name: str) -> list[str]:
        """A list parameter, sent as `name[]=` or `name=`."""
        return self.params.get(f"{name}[]", []) + self.params.get(name, [])

    def number(self, name: str) -> int | None:
        given = self.one(name)
        if given is None:
            return None
        try:
            return int(given)
        except ValueError:
            raise ReportError(400, f"Invalid value for '{name}': {given!r}.", name) from None

    def choices(self, name: str, allowed: Iterable[str]) -> list[str]:
        """A list parameter whose values must be among allowed."""
        values, known = self.many(name), set(allowed)
        for value in values:
            if value not in known:
                raise ReportError(400, f"Invalid value for '{name}': {value!r}.", name)
        return values


def width_of(query: Query, allowed: Iterable[str] = WIDTHS) -> tuple[str, int]:
    """The bucket_width asked for (default 1d) and its seconds."""
    name = query.one("bucket_width") or "1d"
    if name not in set(allowed):
        raise ReportError(400, f"Invalid value for 'bucket_width': {name!r}.", "bucket_width")
    return name, WIDTHS[name]


def page_size(query: Query, default: int, most: int, cap: int | None) -> int:
    """The buckets a page holds: the `limit` asked for (default when none, at most most),
    and at most cap, the test's small page size."""
    limit = query.number("limit")
    if limit is not None and not 1 <= limit <= most:
        raise ReportError(400, f"'limit' must be between 1 and {most}.", "limit")
    return min(limit or default, cap or most)


def floor_to(at: float, width: int) -> int:
    return int(at // width) * width


def buckets(first: int, end: float, width: int) -> list[tuple[int, int]]:
    """The buckets from first up to end: the first from first to the next boundary of
    width (first itself when it is not on one), then whole buckets, the last the one
    holding end's last second."""
    spans: list[tuple[int, int]] = []
    start = first
    while start < end:
        stop = floor_to(start, width) + width
        spans.append((start, stop))
        start = stop
    return spans


def paged(
    spans: list[tuple[int, int]], begin: int | None, size: int
) -> tuple[list[tuple[int, int]], int | None]:
    """The page of size buckets from the one starting at begin (the first when None), and
    where the next page begins (None when this is the last)."""
    starts = [start for start, _ in spans]
    if begin is not None and begin not in starts:
        raise ReportError(400, "Invalid value for 'page'.", "page")
    index = 0 if begin is None else starts.index(begin)
    page = spans[index : index + size]
    following = index + size
    return page, starts[following] if following < len(spans) else None


def grouped(
    records: Iterable[R], key: Callable[[R], tuple[Hashable, ...]]
) -> list[tuple[tuple[Hashable, ...], list[R]]]:
    """records by their key, the keys in a stable order (by their values as text; the
    providers do not document an order)."""
    groups: dict[tuple[Hashable, ...], list[R]] = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    return sorted(groups.items(), key=lambda item: [str(part) for part in item[0]])
