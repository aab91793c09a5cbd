"""Estimates that learn: what a Reserve holds when the caller names neither an amount nor
a shape, chosen from the job's recent settled usage, loose while the budget has room and
strict where an overshoot could pass the limit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import assert_never

from earmark import limits
from earmark.core.model import Budget, EstimatePolicy, EstimateSource
from earmark.errors import InvalidArgument

# Samples are kept per (unit, root, job, model): root is the tenant whose history it is
# (sample_root), and model "" collects all of a job's samples.
SampleKey = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class Estimate:
    amount: int
    source: EstimateSource


def sample_root(budget: Budget) -> str:
    """Whose history a hold on budget learns from and adds to: its account's, tagged
    "account ACCOUNT", when budget is an account's billing-cycle budget (so that a new
    cycle, a new budget, keeps the account's history), else the budget's own id. A hold's
    own budget, the first of its scope, is the tenant the job runs for; also_budget_ids are
    parents shared by several tenants, and keying by one would share history again. No
    budget id has a space, so an account's root is never a budget's; nor is any root '',
    under which migration 0015 kept the samples learned before, by job alone."""
    if budget.account:
        return f"account {budget.account}"
    return budget.budget_id


def near_limit(budget: Budget) -> bool:
    """used + held, holds counted, has reached limits.estimate_max_threshold_bps of the limit."""
    if budget.limit is None:
        return False
    spent = budget.used + budget.held
    return spent * limits.bps_per_unit >= budget.limit * limits.estimate_max_threshold_bps


def upper_median(samples: Sequence[int]) -> int:
    """The median, and of two middle values the larger: an estimate leans high."""
    ordered = sorted(samples)
    return ordered[len(ordered) // 2]


def p75(samples: Sequence[int]) -> int:
    """The nearest-rank 75th percentile: the smallest sample at or above 75% of them."""
    ordered = sorted(samples)
    rank = -(-3 * len(ordered) // 4)  # ceil(0.75 n), 1-based
    return ordered[rank - 1]


def estimate(budget: Budget, samples: Sequence[int], job: str) -> Estimate:
    """What to hold, and why. Without samples, the budget's default; near the limit, the
    largest sample; otherwise the policy's statistic once it has enough samples (P75 needs
    limits.estimate_p75_samples_min; before that the default, or the largest sample when
    the budget has no default). Never below 1: a hold holds something."""
    assert len(samples) <= limits.estimate_samples_max
    chosen = _choose(budget, samples, job)
    return Estimate(amount=max(1, chosen.amount), source=chosen.source)


def _choose(budget: Budget, samples: Sequence[int], job: str) -> Estimate:
    default = budget.default_estimate
    if not samples:
        if default is None:
            history = f"job {job!r} has no settled history" if job else "no job is named"
            raise InvalidArgument(
                "amount",
                f"is 0 and no shape is given, {history}, and budget {budget.budget_id!r} "
                "has no default_estimate: an amount, a shape or a default is needed",
            )
        return Estimate(default, EstimateSource.DEFAULT)
    if near_limit(budget):
        return Estimate(max(samples), EstimateSource.JOB_MAX)
    match budget.estimate_policy:
        case EstimatePolicy.MEDIAN:
            return Estimate(upper_median(samples), EstimateSource.JOB_MEDIAN)
        case EstimatePolicy.P75:
            if len(samples) >= limits.estimate_p75_samples_min:
                return Estimate(p75(samples), EstimateSource.JOB_P75)
            if default is not None:
                return Estimate(default, EstimateSource.DEFAULT)
            return Estimate(max(samples), EstimateSource.JOB_MAX)
        case _:
            assert_never(budget.estimate_policy)


def remember(samples: list[int], used: int) -> None:
    """Adds a settled usage, keeping only the most recent limits.estimate_samples_max."""
    samples.append(used)
    del samples[: -limits.estimate_samples_max]
