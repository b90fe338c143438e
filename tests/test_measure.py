"""models.measure: the interval of the median against an exact binomial computation and a simulation,
and the alternation of interleaved() on contenders with known times."""
import itertools
import random

import pytest
from hypothesis import given, settings, strategies as st

from memplan.models.measure import interleaved, median_interval, paired_ratio


def _coverage(n: int, j: int) -> float:
    """P(x_(j) <= median <= x_(n+1-j)) for n continuous i.i.d. values: 1 - 2 P(Bin(n, 1/2) <= j-1),
    summed by hand from binomial coefficients (a second method to scipy's binom)."""
    from math import comb

    return 1 - 2 * sum(comb(n, i) for i in range(j)) / 2 ** n


@pytest.mark.parametrize("n", range(6, 41))
def test_interval_is_the_narrowest_with_95_percent_coverage(n):
    xs = [float(v) for v in range(1, n + 1)]
    lo, hi = median_interval(xs)
    j = int(lo)                                   # x_(j) = j here
    assert hi == n + 1 - j                        # symmetric order statistics
    assert _coverage(n, j) >= 0.95                # covers at least the level
    assert _coverage(n, j + 1) < 0.95             # and one step narrower would not


def test_interval_covers_the_true_median_in_simulation():
    rng = random.Random(3)
    n, trials, hits = 15, 4000, 0
    for _ in range(trials):
        xs = [rng.expovariate(1.0) for _ in range(n)]       # skewed, as run times are; median ln 2
        lo, hi = median_interval(xs)
        hits += lo <= 0.6931471805599453 <= hi
    assert hits / trials >= 0.95 - 0.015                   # exact coverage 96.5% at n = 15


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.001, 10.0), min_size=1, max_size=50))
def test_interval_contains_the_median_and_lies_within_the_values(xs):
    import statistics

    lo, hi = median_interval(xs)
    assert min(xs) <= lo <= statistics.median(xs) <= hi <= max(xs)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=40), st.floats(0.5, 2.0))
def test_a_contender_that_is_c_times_another_every_round_has_ratio_c_exactly(bs, c):
    # whatever the rounds do to both, a round-by-round ratio of c is c with no spread
    r = paired_ratio([c * b for b in bs], bs)
    assert r.median == pytest.approx(c) and r.low == pytest.approx(c) and r.high == pytest.approx(c)
    assert r.n == len(bs)


def test_paired_interval_separates_what_two_separate_intervals_cannot():
    # rounds slowed by a shared factor (a busy machine) and a 3% difference between the contenders:
    # the two medians' intervals overlap, the paired interval lies above 1 and covers 1.03
    rng = random.Random(5)
    slow = [rng.choice([1.0, 1.0, 1.0, 1.2, 1.5]) for _ in range(24)]
    b = [10.0 * s * (1 + rng.uniform(-0.005, 0.005)) for s in slow]
    a = [10.3 * s * (1 + rng.uniform(-0.005, 0.005)) for s in slow]
    (alo, ahi), (blo, bhi) = median_interval(a), median_interval(b)
    assert alo <= bhi                                       # unpaired: overlapping, no verdict
    r = paired_ratio(a, b)
    assert r.shown_slower and not r.shown_faster and r.low <= 1.03 <= r.high
    assert r.high - r.low < 0.015


def test_paired_ratio_covers_the_true_ratio_in_simulation():
    # a log-normal ratio of median 1.05 on top of a shared, skewed round effect
    import math

    rng = random.Random(11)
    n, trials, hits = 16, 3000, 0
    for _ in range(trials):
        shared = [rng.expovariate(1.0) + 1 for _ in range(n)]
        b = [s for s in shared]
        a = [s * 1.05 * math.exp(rng.gauss(0, 0.03)) for s in shared]
        r = paired_ratio(a, b)
        hits += r.low <= 1.05 <= r.high
    assert hits / trials >= 0.95 - 0.015                   # exact coverage 97.9% at n = 16


def test_paired_ratio_skips_rounds_without_both_times_and_refuses_none():
    r = paired_ratio([2.0, float("nan"), 3.0, 0.0], [1.0, 1.0, 1.0, 1.0])
    assert r.n == 2 and r.median == pytest.approx(2.5)
    with pytest.raises(ValueError, match="no round"):
        paired_ratio([float("nan")], [1.0])


def test_steady_contenders_stop_at_the_minimum_and_rotate():
    order = []

    def make(name, t):
        def run():
            order.append(name)
            return t
        return run

    res = interleaved({"a": make("a", 1.0), "b": make("b", 2.0), "c": make("c", 3.0)}, min_rounds=8)
    assert [len(r.times) for r in res.values()] == [8, 8, 8]
    assert res["b"].median == 2.0 and not res["b"].noisy and res["b"].rel_halfwidth == 0
    rounds = [tuple(order[i:i + 3]) for i in range(0, 24, 3)]
    assert rounds[:3] == [("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b")]     # who goes first rotates


def test_a_noisy_contender_is_run_to_the_maximum_and_marked():
    flip = itertools.cycle([1.0, 1.5])
    res = interleaved({"steady": lambda: 1.0, "noisy": lambda: next(flip)}, min_rounds=6, max_rounds=20)
    assert len(res["noisy"].times) == 20 and res["noisy"].noisy
    assert not res["steady"].noisy and len(res["steady"].times) == 20      # rounds are shared


def test_budget_stops_rounds():
    import time

    def slow():
        time.sleep(0.02)

    res = interleaved({"x": slow, "y": lambda: None}, min_rounds=6, max_rounds=1000, budget=0.1)
    assert 2 <= len(res["x"].times) < 20


class _FakeChain:
    def __init__(self, step_seconds: float):
        import numpy as np

        self.uf = np.array([0.0, step_seconds / 2])
        self.ub = np.array([0.0, step_seconds / 2])


def _case(device: str, step_seconds: float = 0.02):
    """A runtime_check Case with only what its timing needs (no model is built)."""
    from memplan.experiments.runtime_check import Case

    c = Case.__new__(Case)
    c.device, c.params, c._contenders, c.steps = device, [], {}, 1
    c.chain = _FakeChain(step_seconds)
    return c


@pytest.mark.parametrize("device, step, expected", [
    ("cpu", 0.001, 1),            # a CPU step is timed alone
    ("cuda", 0.02, 5),            # 5 x 20 ms = 0.1 s
    ("cuda", 0.03, 4),            # ceil(0.1 / 0.03)
    ("cuda", 0.25, 1),            # already longer than 0.1 s
    ("cuda", 0.0005, 10),         # at most 10
])
def test_steps_per_sample_chosen_from_the_profiled_step(device, step, expected):
    assert _case(device, step).set_steps_per_sample(None) == expected


def test_a_sample_is_the_mean_of_its_steps():
    """With a clock that advances by the step number's seconds, a sample of 3 steps reads the
    mean of 3 consecutive steps' lengths, and the function ran 3 times per sample."""
    case = _case("cpu")
    assert case.set_steps_per_sample(3) == 3
    calls = []
    now = [0.0]
    case.clock = lambda: now[0]

    def fn():
        calls.append(1)
        now[0] += len(calls)          # step k lasts k seconds

    m: dict = {}
    case._timed(fn, m, "x")
    once, got = case._contenders["x"]
    assert got is m
    assert once() == pytest.approx((1 + 2 + 3) / 3)
    assert once() == pytest.approx((4 + 5 + 6) / 3)
    assert len(calls) == 6


def test_runtime_check_counts_the_allocator_segments_a_sample_obtains(monkeypatch):
    """On CUDA each timed sample also records how many segments the caching allocator newly obtained
    from the driver during it (``segment.all.allocated`` before and after); the sample's time is
    passed through."""
    torch = pytest.importorskip("torch")
    from memplan.experiments.runtime_check import _counting_segments

    counts = iter([10, 12, 12, 12, 12, 13])
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {"segment.all.allocated": next(counts)})
    out = []
    once = _counting_segments(lambda: 0.25, "cuda", out)
    assert [once(), once(), once()] == [0.25, 0.25, 0.25]
    assert out == [2, 0, 1]
