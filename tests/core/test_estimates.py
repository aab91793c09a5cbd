"""Estimates from a job's samples, and priced decisions in group admission, as pure rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from earmark.core import estimates
from earmark.core.batch import BatchState, decide_batch, sample_keys
from earmark.core.model import (
    Budget,
    EstimatePolicy,
    EstimateSource,
    HoldState,
    LedgerKind,
    Outcome,
)
from earmark.core.ops import ChargeOp, ChargeResult, ReserveOp, ReserveResult, SettleOp
from earmark.core.prices import Price, PriceBook, Shape, Usage
from earmark.errors import FailedPrecondition, InvalidArgument

NOW = datetime(2026, 8, 15, 12, tzinfo=UTC)
LEASE = timedelta(minutes=5)


def budget(limit: int | None = 1_000_000, **extra: object) -> Budget:
    return Budget("b", limit, "usd_micros", **extra)  # type: ignore[arg-type]


def test_median_leans_high_and_p75_is_nearest_rank() -> None:
    """Of two middle values the median takes the larger; p75 of 1..8 is 6."""
    assert 3 == estimates.upper_median([4, 1, 3, 2])
    assert 6 == estimates.p75(list(range(1, 9)))
    assert 4 == estimates.p75([1, 2, 3, 4, 5])


def test_near_limit_counts_holds() -> None:
    """80% of the limit is reached by used and held together."""
    assert estimates.near_limit(budget(used=500_000, held=300_000))
    assert not estimates.near_limit(budget(used=500_000, held=299_999))
    assert not estimates.near_limit(budget(limit=None, used=10**9))


@pytest.mark.parametrize(
    ("policy", "samples", "expected"),
    [
        (EstimatePolicy.MEDIAN, [], (100, EstimateSource.DEFAULT)),
        (EstimatePolicy.MEDIAN, [7], (7, EstimateSource.JOB_MEDIAN)),
        (EstimatePolicy.P75, [7, 9, 8, 6], (100, EstimateSource.DEFAULT)),
        (EstimatePolicy.P75, [7, 9, 8, 6, 5], (8, EstimateSource.JOB_P75)),
        (EstimatePolicy.MEDIAN, [0], (1, EstimateSource.JOB_MEDIAN)),
    ],
)
def test_estimate_by_policy(
    policy: EstimatePolicy, samples: list[int], expected: tuple[int, EstimateSource]
) -> None:
    """Default until the policy has its samples, then the policy's statistic, never 0."""
    chosen = estimates.estimate(budget(default_estimate=100, estimate_policy=policy), samples, "j")
    assert expected == (chosen.amount, chosen.source)


def test_p75_without_a_default_seeds_with_the_largest() -> None:
    """With fewer than 5 samples and no default, P75 holds the largest sample."""
    chosen = estimates.estimate(budget(estimate_policy=EstimatePolicy.P75), [3, 9], "j")
    assert (9, EstimateSource.JOB_MAX) == (chosen.amount, chosen.source)


def test_no_samples_and_no_default_is_invalid() -> None:
    """Neither amount, shape, history nor default: the error names amount."""
    with pytest.raises(InvalidArgument) as caught:
        estimates.estimate(budget(), [], "research")
    assert "amount" == caught.value.field


def test_samples_keep_the_most_recent_hundred() -> None:
    """remember() drops the oldest sample past the bound."""
    samples = list(range(100))
    estimates.remember(samples, 1_000)
    assert (100, 1, 1_000) == (len(samples), samples[0], samples[-1])


def price(version: int, at: datetime, input_rate: int, output_rate: int) -> Price:
    return Price("openai", "gpt-4o", version, at, None, input_rate, output_rate)


def state_with(book: PriceBook, limit: int = 1_000_000) -> BatchState:
    return BatchState(budget_id="b", budget=budget(limit), prices=book)


def reserve_shape(rid: str) -> ReserveOp:
    shape = Shape("openai", "gpt-4o", 10_000, 2_000)
    return ReserveOp("b", f"k-{rid}", 0, LEASE, rid, shape=shape)


def test_shape_is_priced_and_the_hold_keeps_its_version() -> None:
    """A shaped Reserve holds the ceiling at the price in effect, and says so."""
    state = state_with(PriceBook([price(1, NOW, 2_500_000, 10_000_000)]))
    (result,) = decide_batch(state, [reserve_shape("r1")], NOW).results
    assert isinstance(result, ReserveResult)
    assert (45_000, EstimateSource.SHAPE, 1) == (
        result.amount,
        result.source,
        result.price_version,
    )
    assert 1 == state.holds_by_id["r1"].price_version


def test_no_price_names_provider_model_and_time() -> None:
    """A shape with no price in effect is FAILED_PRECONDITION naming what is missing."""
    (result,) = decide_batch(state_with(PriceBook()), [reserve_shape("r1")], NOW).results
    assert isinstance(result, FailedPrecondition)
    assert "'openai' model 'gpt-4o'" in str(result)
    assert NOW.isoformat() in str(result)


def test_first_charge_reprices_down_and_up_when_there_is_room() -> None:
    """A newer price reprices an uncharged shaped hold at its first Charge, down or up,
    writing the difference to the ledger."""
    old = price(1, NOW - timedelta(days=1), 2_500_000, 10_000_000)
    state = state_with(PriceBook([old]))
    decide_batch(state, [reserve_shape("r1")], NOW)
    state.prices = PriceBook([old, price(2, NOW, 5_000_000, 20_000_000)])
    decision = decide_batch(state, [ChargeOp("r1", "c1", 1)], NOW)
    (charged,) = decision.results
    assert isinstance(charged, ChargeResult)
    assert (1, 2, 89_999) == (charged.charged, charged.price_version, charged.hold_remaining)
    assert [(LedgerKind.REPRICE, 45_000), (LedgerKind.CHARGE, -1)] == [
        (e.kind, e.held_delta) for e in decision.ledger
    ]


def test_a_reprice_without_room_charges_nothing() -> None:
    """When the new ceiling does not fit, the first Charge is capped at 0 and the hold is
    left at its old price: the worker must not dispatch."""
    old = price(1, NOW - timedelta(days=1), 2_500_000, 10_000_000)
    state = state_with(PriceBook([old]), limit=60_000)
    decide_batch(state, [reserve_shape("r1")], NOW)
    state.prices = PriceBook([old, price(2, NOW, 5_000_000, 20_000_000)])
    (charged,) = decide_batch(state, [ChargeOp("r1", "c1", 1)], NOW).results
    hold = state.holds_by_id["r1"]
    assert isinstance(charged, ChargeResult)
    assert (0, True) == (charged.charged, charged.capped)
    assert (45_000, 1, HoldState.HELD) == (hold.amount, hold.price_version, hold.state)


def test_settled_usage_teaches_the_job() -> None:
    """A SUCCEEDED settle of a job's hold adds its usage to the job's samples, per model
    and for the whole job, and the next estimate in the same batch sees it."""
    book = PriceBook([price(1, NOW, 2_500_000, 10_000_000)])
    state = state_with(book)
    state.budget = budget(default_estimate=100_000)
    first = ReserveOp("b", "k1", 0, LEASE, "r1", job="research")
    decide_batch(state, [first], NOW)
    settle = SettleOp(
        "r1", 0, Outcome.SUCCEEDED, usage=Usage(10_000, 2_000, provider="openai", model="gpt-4o")
    )
    second = ReserveOp("b", "k2", 0, LEASE, "r2", job="research")
    keys = sample_keys(state, [settle, second])
    state.samples = {key: [] for key in keys}
    results = decide_batch(state, [settle, second], NOW).results
    assert {
        ("usd_micros", "b", "research", ""),
        ("usd_micros", "b", "research", "openai/gpt-4o"),
    } == keys
    assert isinstance(results[1], ReserveResult)
    assert (45_000, EstimateSource.JOB_MEDIAN) == (results[1].amount, results[1].source)


def test_samples_are_keyed_by_the_tenants_root() -> None:
    """An account's cycle budgets share the root "account ACCOUNT"; any other budget is its
    own root, whatever parents a hold also names."""
    cycle = Budget("acme/tokens/2026-11-15", 100, "tokens", account="acme", feature="tokens")
    keys = sample_keys(
        BatchState(budget_id="b", budget=budget()),
        [ReserveOp("b", "k1", 0, LEASE, "r1", job="j", also_budget_ids=("org",))],
    )
    assert "account acme" == estimates.sample_root(cycle)
    assert "b" == estimates.sample_root(budget())
    assert {("usd_micros", "b", "j", "")} == keys


def test_one_tenants_settles_do_not_teach_another() -> None:
    """Budget a's settled usage of job j is a's alone: budget b's Reserve of j in the same
    batch holds b's default, and a's next Reserve holds a's median."""
    budgets = {
        name: Budget(name, 1_000_000, "usd_micros", default_estimate=default)
        for name, default in (("a", 100), ("b", 70))
    }
    states = {
        name: BatchState(budget_id=name, budget=b, budgets=budgets, prices=PriceBook([]))
        for name, b in budgets.items()
    }
    decide_batch(states["a"], [ReserveOp("a", "k1", 0, LEASE, "r1", job="j")], NOW)
    settle = SettleOp("r1", 40, Outcome.SUCCEEDED)
    again = ReserveOp("a", "k2", 0, LEASE, "r2", job="j")
    other = ReserveOp("b", "k3", 0, LEASE, "r3", job="j")
    keys = sample_keys(states["a"], [settle, again]) | sample_keys(states["b"], [other])
    samples: dict[estimates.SampleKey, list[int]] = {key: [] for key in keys}
    for state in states.values():
        state.samples = samples
    taught = decide_batch(states["a"], [settle, again], NOW).results[1]
    untaught = decide_batch(states["b"], [other], NOW).results[0]
    assert isinstance(taught, ReserveResult)
    assert isinstance(untaught, ReserveResult)
    assert (40, EstimateSource.JOB_MEDIAN) == (taught.amount, taught.source)
    assert (70, EstimateSource.DEFAULT) == (untaught.amount, untaught.source)
    assert {("usd_micros", "a", "j", ""): [40], ("usd_micros", "b", "j", ""): []} == samples
