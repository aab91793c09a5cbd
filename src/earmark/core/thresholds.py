"""Threshold notices' rule (issue 34): which of a budget's thresholds a change of its spend
crossed. A budget's spend here is what its basis measures (issue 43): used plus held, or
used alone (measured), against its limit; a threshold is a
share of the limit in basis points (8000: 80%). A change crosses a threshold when the
spend was below its level and is at or above it; a rise of spend reaches every threshold
at or below it (core.notices notices each once a period, so that a threshold a lowered
limit put behind the spend is noticed at its next rise): the admission or settle that did
so writes the notice in its own transaction, at most one per budget, period and threshold
(the store's unique key), so that a spend that falls back and rises again in the same
period is not told twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from earmark import limits
from earmark.core.model import ThresholdBasis


class BadThresholds(ValueError):
    """threshold_bps that are not distinct shares from 1 bp to limits.threshold_bps_max,
    at most limits.thresholds_max of them; the message names the field."""


def checked(thresholds_bps: Sequence[int]) -> tuple[int, ...]:
    """The thresholds, sorted, or BadThresholds naming threshold_bps."""
    if len(thresholds_bps) > limits.thresholds_max:
        raise BadThresholds(f"threshold_bps: at most {limits.thresholds_max} thresholds")
    if len(set(thresholds_bps)) != len(thresholds_bps):
        raise BadThresholds("threshold_bps: each threshold at most once")
    for bps in thresholds_bps:
        if not 1 <= bps <= limits.threshold_bps_max:
            raise BadThresholds(f"threshold_bps: {bps} is not from 1 to {limits.threshold_bps_max}")
    return tuple(sorted(thresholds_bps))


def measured(basis: ThresholdBasis, used: int, held: int) -> int:
    """What a budget's thresholds are shares of: COMMITTED, used + held (spent, and held for
    calls still running, which may yet be spent); USED, settled spend alone."""
    return used if basis is ThresholdBasis.USED else used + held


def level(limit: int, bps: int) -> int:
    """The spend at which a threshold is reached: its share of the limit, rounded up, so
    that 80% of 999 is reached at 800, not at 799."""
    return -(-limit * bps // limits.bps_per_unit)


def crossed(limit: int | None, before: int, after: int, thresholds_bps: Sequence[int]) -> list[int]:
    """The thresholds the spend crossed going from before to after, lowest first; none for
    an unlimited budget or a spend that did not rise."""
    if limit is None or after <= before:
        return []
    return [bps for bps in sorted(thresholds_bps) if before < level(limit, bps) <= after]


def reached(limit: int, spend: int, thresholds_bps: Sequence[int]) -> list[int]:
    """The thresholds a spend is at or past, lowest first."""
    return [bps for bps in sorted(thresholds_bps) if level(limit, bps) <= spend]


def exceeded(limit: int | None, before: int, after: int) -> bool:
    """The spend went past the limit (a SOFT budget admitting over it: budget.exceeded)."""
    return limit is not None and before <= limit < after
