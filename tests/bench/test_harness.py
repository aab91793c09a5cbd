"""The benchmark's CPU accounting, which the bench's CPU-per-call figures rest on."""

from __future__ import annotations

from bench.harness import cpu_spent


def test_a_process_that_ended_between_readings_is_left_out() -> None:
    """CPU spent counts each process alive at the second reading, a new one in full, and
    never subtracts the total of one that ended meanwhile."""
    before = {1: 10.0, 2: 5.0, 3: 7.0}
    after = {1: 10.5, 2: 5.25, 4: 0.5}
    assert 1.25 == cpu_spent(before, after)
