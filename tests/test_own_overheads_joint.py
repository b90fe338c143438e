"""Each forward's own overhead in the joint re-materialization + offloading solvers (paper 000).

The joint DP (:mod:`memplan.baselines.remat_offload_dp`), the least memory
(:mod:`memplan.baselines.remat_offload_min_memory`) and the exhaustive search
(:mod:`memplan.baselines.remat_offload_exhaustive`, the oracle) charge ``of_all`` during F_all and
``of_ng`` during F_ck / F_none, as :func:`memplan.models.remat_offload.simulate_remat_offload` does.

Chains: ``random_chain(L, seed, max_size=4, max_time=2, own_overheads=True)`` (one of the two own
overheads is ``of``, the other is drawn below it), most with the three forward-overhead arrays
multiplied by ``k = 4``: a random chain's forward overhead is at most half an activation, so a
backward step nearly always sets the peak and the own overheads rarely change anything (on L = 2..5,
50 seeds each, with the default sizes, they changed no store-all peak and no least memory). The
one-overhead twin of a chain is ``Chain.one_overhead()``: ``of_all = of_ng = of`` (the papers' model).

The DP plans over a restricted space (persistent sequences, top-level inputs offloaded, transfers in
slot parts), so it is not the optimum of every instance (``tests/test_remat_offload_exhaustive.py``
measures its gap); the cases below are ones where its space loses nothing, so its value must be the
oracle's. Every value compared is the oracle's (the exhaustive search on the own-overhead chain or on
its twin), never one taken from the DP.
"""
from __future__ import annotations

import math

import pytest

from memplan.baselines.remat_offload_dp import solve_remat_offload_dp
from memplan.baselines.remat_offload_exhaustive import solve_exhaustive
from memplan.baselines.remat_offload_min_memory import min_memory as ro_min_memory
from memplan.baselines.remat_offload_min_memory import necessary_memory
from memplan.models.chain import random_chain
from memplan.models.remat_offload import simulate_remat_offload
from memplan.models.solution import Status

INF = math.inf


def _chain(L, seed, k=4):
    c = random_chain(L, seed, max_size=4, max_time=2, own_overheads=True, forward_overhead_scale=k)
    assert (c.of_all != c.of_ng).any()          # the forwards' own overheads differ somewhere
    return c


def _default_chain(L, seed):
    """``random_chain`` with its default sizes (1..10) and short times."""
    return random_chain(L, seed, max_time=2, own_overheads=True)


def _value(sol):
    return sol.objective if sol.objective is not None else INF


def _check_dp(c, M, beta):
    """The DP's schedule replays within M with the makespan it claims; returns the solution."""
    j = solve_remat_offload_dp(c, M, beta, exact=True)
    assert j.objective is not None, j.message
    rep = simulate_remat_offload(c, j.schedule, beta, M)         # raises above the limit
    assert rep.peak_memory <= M
    assert rep.makespan == pytest.approx(j.objective, rel=1e-12) == pytest.approx(j.predicted, rel=1e-12)
    return j


# (chain, memory limit, bandwidth): the DP's value is the optimum of the exhaustive search.
# L <= 3: the search runs to its optimum; L >= 4: it searches below the DP's makespan and proves
# nothing faster exists (the DP's schedule, replayed, reaches it).
EQUAL = [
    (("own", 2, 2), 12, 0.0), (("own", 2, 2), 12, 1.0), (("own", 2, 2), 14, 0.5),
    (("own", 2, 27), 9, 1.0), (("own", 2, 27), 10, 0.5),
    (("own", 3, 9), 23, 1.0), (("own", 3, 9), 24, 0.5), (("own", 3, 9), 25, 0.0), (("own", 3, 9), 26, 1.0),
    (("own", 3, 36), 13, 1.0), (("own", 3, 36), 17, 1.0),
    (("own1", 3, 38), 9, 0.5), (("own1", 3, 38), 11, 1.0),
    (("default", 2, 3), 22, 1.0), (("default", 2, 0), 41, 0.5),
    (("own", 4, 2), 19, 1.0), (("own", 4, 38), 13, 1.0), (("own", 4, 38), 15, 1.0),
    (("own", 5, 5), 18, 1.0), (("own", 5, 14), 20, 1.0),
]


def _make(spec):
    kind, L, seed = spec
    return _default_chain(L, seed) if kind == "default" else _chain(L, seed, 1 if kind == "own1" else 4)


@pytest.mark.parametrize("spec, M, beta", EQUAL, ids=[f"{s[0]}-L{s[1]}-s{s[2]}-M{m}-b{b}" for s, m, b in EQUAL])
def test_joint_dp_is_the_exhaustive_optimum(spec, M, beta):
    c = _make(spec)
    j = _check_dp(c, M, beta)
    if c.L <= 3:
        e = solve_exhaustive(c, M, beta, time_limit=30)
        assert e.status == Status.OPTIMAL, e.message
        # the oracle's schedule replays within the limit at its makespan, each forward with its own overhead
        rep = simulate_remat_offload(c, e.schedule, beta, M)
        assert rep.makespan == pytest.approx(e.objective, rel=1e-12)
        assert j.objective == pytest.approx(e.objective, rel=1e-12)
    else:
        e = solve_exhaustive(c, M, beta, upper_bound=j.objective, time_limit=30)
        assert e.status == Status.OPTIMAL and e.details.get("proven_optimal_at_upper_bound"), e.message
    # planning with the larger one overhead never does better
    assert j.objective <= _value(solve_remat_offload_dp(c.one_overhead(), M, beta, exact=True)) + 1e-9


# (chain, memory limit, bandwidth) where each forward's own overhead makes the optimum strictly
# shorter than the papers' one overhead allows (or makes a limit feasible), by the oracle on both
STRICT = [
    (("own", 2, 2), 12, 0.5), (("own", 2, 2), 13, 1.0), (("own", 2, 27), 10, 0.0),
    (("own", 3, 9), 23, 0.5), (("own", 3, 36), 17, 1.0), (("own1", 3, 38), 9, 1.0),
    (("own", 4, 2), 17, 1.0), (("own", 5, 5), 18, 1.0),
]


@pytest.mark.parametrize("spec, M, beta", STRICT, ids=[f"{s[0]}-L{s[1]}-s{s[2]}-M{m}-b{b}" for s, m, b in STRICT])
def test_own_overheads_lower_the_optimum_and_the_dp_finds_it(spec, M, beta):
    c = _make(spec)
    twin = c.one_overhead()
    j = _check_dp(c, M, beta)
    j1 = solve_remat_offload_dp(twin, M, beta, exact=True)
    if c.L <= 3:
        e = solve_exhaustive(c, M, beta, time_limit=30)
        e1 = solve_exhaustive(twin, M, beta, time_limit=30)
        assert e.status == Status.OPTIMAL and e1.status in (Status.OPTIMAL, Status.INFEASIBLE)
        assert simulate_remat_offload(c, e.schedule, beta, M).makespan == pytest.approx(e.objective, rel=1e-12)
        if e1.schedule is not None:
            assert simulate_remat_offload(twin, e1.schedule, beta, M).makespan == pytest.approx(e1.objective,
                                                                                                rel=1e-12)
        assert e.objective < _value(e1)                           # the oracle: strictly shorter
        assert j.objective == pytest.approx(e.objective, rel=1e-12)
        assert _value(j1) >= _value(e1)
    else:
        # integer times and a 1 B/s link: the grid is 1 s. Nothing on the chain beats the DP, and
        # nothing on the twin reaches it (no schedule under the DP's makespan + 1 s)
        assert beta == 1.0
        e = solve_exhaustive(c, M, beta, upper_bound=j.objective, time_limit=30)
        assert e.status == Status.OPTIMAL and e.details.get("proven_optimal_at_upper_bound"), e.message
        e1 = solve_exhaustive(twin, M, beta, upper_bound=j.objective + 1.0, time_limit=30)
        assert e1.status == Status.OPTIMAL and e1.details.get("proven_optimal_at_upper_bound"), e1.message
        assert e1.details["grid"] == 1.0
    assert j.objective < _value(j1)


# (chain, bandwidth): the joint least memory is the exhaustive least memory; on all but the last
# the own overheads lower it (the twin's search finds nothing there)
LEAST = [(("own", 2, 27), 1.0, True), (("own", 2, 19), 0.5, True), (("own1", 3, 38), 1.0, True),
         (("own", 3, 36), 1.0, True), (("own", 2, 27), 0.0, True), (("own", 3, 9), 1.0, False)]


@pytest.mark.parametrize("spec, beta, lower", LEAST, ids=[f"{s[0]}-L{s[1]}-s{s[2]}-b{b}" for s, b, _ in LEAST])
def test_joint_least_memory_is_the_exhaustive_least_memory(spec, beta, lower):
    c = _make(spec)
    mm = ro_min_memory(c, beta)
    assert mm.exact
    M = mm.value
    assert M == int(M)
    assert simulate_remat_offload(c, mm.schedule, beta or None, M).peak_memory == pytest.approx(M)
    # the oracle: a schedule at M, none 1 B below
    at = solve_exhaustive(c, M, beta, time_limit=30)
    assert at.status == Status.OPTIMAL
    assert simulate_remat_offload(c, at.schedule, beta or None, M).makespan == pytest.approx(at.objective, rel=1e-12)
    below = solve_exhaustive(c, M - 1, beta, time_limit=30)
    assert below.status == Status.INFEASIBLE, below.message
    assert necessary_memory(c) <= M
    # the DP says INFEASIBLE below it, with that minimum
    dp_below = solve_remat_offload_dp(c, M - 1, beta, exact=True)
    assert dp_below.status == Status.INFEASIBLE and dp_below.details["min_memory"] == M
    # the twin needs at least as much, strictly more where the own overheads matter
    twin = c.one_overhead()
    assert ro_min_memory(twin, beta).value >= M
    if lower:
        assert solve_exhaustive(twin, M, beta, time_limit=30).status == Status.INFEASIBLE
