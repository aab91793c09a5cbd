"""The pacer runs a long conversion in slices and lets the event loop serve other calls
between them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from earmark.pacing import Pacer


async def test_a_paced_conversion_keeps_order_and_yields_between_slices() -> None:
    """35 items in slices of 10 come back converted and in order, and a task that runs
    whenever the loop is free gets a turn between every two slices."""
    trace: list[str] = []
    pacer = Pacer(share=0.5, slice_items=10)

    def convert(item: int) -> int:
        trace.append("item")
        return item * 2

    async def other() -> None:
        while True:
            trace.append("other")
            await asyncio.sleep(0)

    ticking = asyncio.create_task(other())
    try:
        converted = await pacer.map(convert, list(range(35)))
    finally:
        ticking.cancel()
    slices = [run for run in "".join("i" if t == "item" else "." for t in trace).split(".") if run]
    assert [i * 2 for i in range(35)] == converted
    assert [10, 10, 10, 5] == [len(run) for run in slices]


async def test_two_paced_conversions_take_turns_by_slice() -> None:
    """Two conversions at once run one slice at a time, in turn, never both at once."""
    trace: list[str] = []
    pacer = Pacer(share=0.5, slice_items=2)

    def tag(name: str) -> Callable[[int], int]:
        def convert(item: int) -> int:
            trace.append(name)
            return item

        return convert

    a, b = await asyncio.gather(
        pacer.map(tag("a"), [1, 2, 3, 4]), pacer.map(tag("b"), [5, 6, 7, 8])
    )
    assert ([1, 2, 3, 4], [5, 6, 7, 8]) == (a, b)
    assert list("aabbaabb") == trace
