"""Issue 18, item 3: the minimum feasible memory of each problem is a true minimum.

Re-materialization (:mod:`memplan.baselines.remat_min_memory`), offloading
(:func:`memplan.models.offload.min_feasible_memory`) and both (:mod:`memplan.baselines.
remat_offload_min_memory`) are compared with exhaustive searches on small chains, large forward and
backward overheads (up to 10x the activation sizes) included.
"""
from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from memplan import offload, remat, remat_offload
from memplan.baselines import offload as off_baselines
from memplan.baselines import remat_rotor as rotor
from memplan.baselines.remat_exhaustive import exhaustive_min_memory, exhaustive_remat
from memplan.baselines.remat_heuristics import recompute_all_schedule, store_all_schedule
from memplan.baselines.remat_min_memory import min_memory, min_memory_of, necessary_memory
from memplan.baselines.remat_offload_exhaustive import solve_exhaustive
from memplan.baselines.remat_offload_min_memory import min_memory as ro_min_memory
from memplan.models.chain import Chain, random_chain
from memplan.models.offload import min_feasible_memory, peak_memory_no_offload, validate_offload
from memplan.models.remat import simulate_remat
from memplan.models.remat_offload import simulate_remat_offload
from memplan.models.solution import Status


def two_stage():
    """Issue 18's chain: u = 1, a = abar = delta = 1, o_f^2 = 20 B. Store-all peaks at 23 B (F_all^2
    with the seed gradient of the loss, 0 B), recompute-all at 24 B (F^2 recomputed with delta^2)."""
    return Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[1, 1, 1], of=[0, 20])


def heavy(L, seed, integer=True):
    """A random chain with forward and backward overheads up to 10x the activation sizes."""
    c = random_chain(L, seed, integer=integer, max_size=6)
    rng = np.random.default_rng(1000 + seed)
    top = 10 * float(c.wa.max())
    draw = (lambda n: rng.integers(0, int(top) + 1, n).astype(float)) if integer else (lambda n: rng.uniform(0, top, n))
    of, ob = draw(L + 2), draw(L + 2)
    of[0] = ob[0] = of[L + 1] = ob[L + 1] = 0.0
    return Chain(uf=c.uf, ub=c.ub, wa=c.wa, wabar=c.wabar, wd=c.wd, of=of, ob=ob, weights=c.weights,
                 name=f"heavy-{L}-{seed}")


CHAINS = ([("random", L, s) for L in (1, 2, 3, 4) for s in range(4)]
          + [("heavy", L, s) for L in (1, 2, 3, 4, 5) for s in range(6)])


def _chain(kind, L, seed):
    return random_chain(L, seed) if kind == "random" else heavy(L, seed)


# ----------------------------------------------------------------------------- re-materialization
def test_the_two_stage_chain_of_the_issue():
    c = two_stage()
    assert simulate_remat(c, store_all_schedule(c)).peak_memory == 23
    assert simulate_remat(c, recompute_all_schedule(c)).peak_memory == 24
    assert min_memory(c) == 23 == exhaustive_min_memory(c)[0]
    assert remat.memory_range(c)[0] == 23


@pytest.mark.parametrize("method", ["rotor", "rotor-floating", "sequential", "store-all", "remat-milp"])
def test_the_two_stage_chain_solves_at_23_bytes(method):
    c = two_stage()
    sol = remat.solve(c, memory=23, method=method, threads=1, time_limit=20)
    assert sol.success and sol.peak_memory <= 23 and sol.objective == 4.0
    below = remat.solve(c, memory=22, method=method, threads=1, time_limit=20)
    assert below.status == Status.INFEASIBLE and below.details["min_memory"] == 23
    assert "23 B" in below.message and "24 B" not in below.message


@pytest.mark.parametrize("method", ["revolve", "recompute-all"])
def test_restricted_methods_say_the_true_minimum(method):
    """revolve (the AD model) and recompute-all cannot fit 23 B (their least memory is 24 B), and
    say so without calling 24 B the minimum feasible memory: each message names 23 B (store-all's
    peak, by hand in two_stage's docstring) as what any sequence needs, and 24 B only as its own need."""
    c = two_stage()
    sol = remat.solve(c, memory=23, method=method)
    assert sol.status == Status.NO_SOLUTION and sol.details["min_memory"] == 23
    # each method words it its own way; the pattern is the phrase that gives the true minimum
    true_min = {"revolve": r"need at least 24 B \(24 B\); other sequences fit from 23 B \(23 B\)",
                "recompute-all": r"needs 24 B > limit 23 B \(minimum feasible memory for any sequence: 23 B\)"}
    assert re.search(true_min[method], sol.message), sol.message
    assert not re.search(r"minimum[^;()]*24 B", sol.message), sol.message


@pytest.mark.parametrize("method", ["rotor-floating", "rotor", "revolve"])
def test_a_bracketed_minimum_is_said_as_a_bracket(method):
    """Six stages and a gradient larger than its activation: the least memory is only bracketed (none
    below a proven 23 B, a sequence at 25 B; the exhaustive search finds none in 24 B). At 24 B the
    DPs found nothing and said "all valid sequences need at least 25 B; other sequences fit from 25 B
    (or less): use method 'rotor-floating'" (rotor-floating itself included), pointing at a method
    that cannot do better. Now: what fits, what is proven, and that 24 B is not known either way."""
    chain = Chain.from_stages(uf=[2.0] * 6, ub=[2.0] * 6, wa=[6, 6, 5, 3, 4, 3, 6], wabar=[6, 9, 6, 3, 4, 4, 7],
                              wd=[0, 0, 0, 0, 8, 0, 0], of=[2, 0, 2, 4, 0, 2], ob=[2, 5, 2, 0, 1, 0])
    assert exhaustive_remat(chain, 24) is None and exhaustive_remat(chain, 25) is not None
    sol = remat.solve(chain, memory=24, method=method)
    assert sol.status == Status.NO_SOLUTION and sol.details["min_memory"] == 25
    assert sol.details["min_memory_bound"] == 23
    assert "use method" not in sol.message, sol.message
    assert re.search(r"one fits in 25 B .*none below 23 B .*not known: give at least 25 B", sol.message), sol.message
    assert remat.solve(chain, memory=25, method=method).success


@pytest.mark.parametrize("kind, L, seed", CHAINS)
def test_min_memory_is_the_exhaustive_minimum(kind, L, seed):
    c = _chain(kind, L, seed)
    peak, seq = exhaustive_min_memory(c)
    assert simulate_remat(c, seq).peak_memory == pytest.approx(peak)
    mm = min_memory_of(c, "all")
    assert mm.exact and mm.value == pytest.approx(peak, rel=1e-12)
    assert simulate_remat(c, mm.schedule, memory_limit=mm.value).peak_memory <= mm.value
    assert exhaustive_remat(c, peak * (1 - 1e-6)) is None               # really nothing below
    assert necessary_memory(c) <= peak * (1 + 1e-12)
    # the classes: persistent (rotor) and the AD model (revolve) need at least as much, and their
    # exact DPs find a sequence exactly from their minimum on
    per, rev = min_memory_of(c, "persistent").value, min_memory_of(c, "revolve").value
    assert peak <= per * (1 + 1e-12) <= rev * (1 + 1e-12)
    assert rotor.persistent(c, per, exact=True).success and not rotor.persistent(c, per - 1, exact=True).success
    assert rotor.revolve(c, rev, exact=True).success and not rotor.revolve(c, rev - 1, exact=True).success
    assert rotor.floating(c, peak, exact=True).success


def test_large_overheads_make_recompute_all_not_the_minimum():
    """The issue counted 174 of 300 random chains with a large o_f where recompute-all is not the
    minimum; the exact minimum is below it on such chains and equals the exhaustive one."""
    below = 0
    for seed in range(40):
        c = heavy(3, seed)
        ra = simulate_remat(c, recompute_all_schedule(c)).peak_memory
        assert min_memory(c) <= ra
        below += min_memory(c) < ra
    assert below >= 10


def test_float_chain_min_memory_against_exhaustive():
    for seed in range(6):
        c = heavy(3, seed, integer=False)
        assert min_memory(c) == pytest.approx(exhaustive_min_memory(c)[0], rel=1e-12)


def test_a_gradient_larger_than_its_activation_is_settled_by_the_search():
    """The simulator also accepts F_all^l over a stored a^l (it replaces a^l by abar^l), which is
    not an operation of paper 004's Table 1: with delta^1 larger than a^1 it saves memory here,
    below the DP's minimum. min_memory then falls back on the exhaustive search (L <= 5)."""
    c = Chain.from_stages(uf=[0.086354, 0.0], ub=[0.725305, 0.542405],
                          wa=[0.241797, 0.436885, 0.045710], wabar=[0.503900, 1.161643, 0.067291],
                          wd=[0.125186, 0.662549, 0.012989], of=[2.705812, 3.388357], ob=[1.457191, 0.0],
                          loss=dict(wa=0.485256, wabar=1.405345, wd=0.653661, of=0.396874, ob=1.528516))
    ex = exhaustive_min_memory(c)
    mm = min_memory_of(c, "all")
    assert mm.dp_value > ex[0] * (1 + 1e-6)                       # the DP's operations do not reach it
    assert mm.value == pytest.approx(ex[0], rel=1e-12) and mm.exact
    assert ("F_all", 1) in ex[1].ops[ex[1].ops.index(("F_all", 2)):]  # abar^1 made after abar^2


# ----------------------------------------------------------------------------- offloading
def _some_no_wait_schedule_fits(c, M, beta):
    """The exhaustive search's loop (every offloaded set, offload order and prefetch order), without
    its refusal of limits below min_feasible_memory: does any no-wait schedule fit in M?"""
    cand = range(c.L + 1)
    return any(off_baselines._try(c, M, beta, S, oo, po) is not None
               for k in range(c.L + 2) for S in itertools.combinations(cand, k)
               for oo in itertools.permutations(S) for po in itertools.permutations(S))


@pytest.mark.parametrize("kind, L, seed", [c for c in CHAINS if c[1] <= 3])
def test_offload_min_feasible_memory_is_reached(kind, L, seed):
    """At the minimum feasible memory the exhaustive search (every offloaded set and transfer orders)
    and DYNPROG find a schedule; its peak is the minimum: every operation holds its own inputs,
    outputs and overhead, so no schedule peaks lower; the search over every offloaded set and
    transfer orders, run 1 B below without the minimum's check, finds nothing. On 14 of these 30
    chains offloading saves nothing (the minimum is the no-offload peak): the same checks hold there."""
    c = _chain(kind, L, seed)
    mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
    assert mf <= mp
    assert not _some_no_wait_schedule_fits(c, mf - 1, 1.0)
    for beta in (1.0, 0.25):
        ex = off_baselines.exhaustive(c, mf, beta)
        assert ex.success and validate_offload(c, ex.schedule, mf).peak_memory == pytest.approx(mf)
        dp = offload.solve(c, memory=mf, bandwidth=beta, method="dynprog")
        assert dp.success and dp.peak_memory <= mf * (1 + 1e-9)
        below = offload.solve(c, memory=mf - 1, bandwidth=beta)
        assert below.status == Status.INFEASIBLE and below.details["min_memory"] == mf


# ----------------------------------------------------------------------------- re-materialization + offloading
def _exhaustive_ro_min(c, beta, lo, hi):
    """The least integer limit for which the exhaustive search finds a schedule, in [lo - 1, hi]."""
    for M in range(int(math.floor(lo)) - 1, int(math.ceil(hi)) + 1):
        s = solve_exhaustive(c, M, beta, time_limit=60)
        assert s.status in (Status.OPTIMAL, Status.INFEASIBLE), s.message
        if s.schedule is not None:
            return M
    return None


def _own_overheads(L, seed, k):
    """A small random chain whose forwards have their own overheads (``of_all``, ``of_ng``), all three
    forward-overhead arrays multiplied by ``k`` (so that forwards, not only backward steps, can set
    the least memory)."""
    return random_chain(L, seed, max_size=4, max_time=2, own_overheads=True, forward_overhead_scale=k)


@pytest.mark.parametrize("kind, L, seed", [("random", 1, 0), ("random", 2, 1), pytest.param("random", 3, 2, marks=pytest.mark.long),
                                           ("heavy", 1, 3), pytest.param("heavy", 2, 4, marks=pytest.mark.long),
                                           pytest.param("heavy", 2, 5, marks=pytest.mark.long),
                                           pytest.param("heavy", 3, 1, marks=pytest.mark.long),
                                           ("own", 1, 11), ("own", 2, 27),
                                           pytest.param("own", 3, 21, marks=pytest.mark.long),
                                           ("own1", 3, 38)])      # own1's only case: stays
def test_remat_offload_min_memory_is_the_exhaustive_minimum(kind, L, seed):
    if kind in ("own", "own1"):                      # each forward's own overhead: of_all, of_ng
        c = _own_overheads(L, seed, 4 if kind == "own" else 1)
        assert (c.of_all != c.of_ng).any()
    else:
        c = random_chain(L, seed, max_size=4, max_time=2) if kind == "random" else heavy(L, seed)
    if kind == "heavy":                              # keep the search small: sizes <= 4, times <= 2
        c = Chain(uf=np.minimum(c.uf, 2), ub=np.minimum(c.ub, 2), wa=np.minimum(c.wa, 4),
                  wabar=np.minimum(c.wabar, 4), wd=np.minimum(c.wd, 4), of=np.minimum(c.of, 40),
                  ob=np.minimum(c.ob, 40), weights=c.weights)
    mm = ro_min_memory(c, 1.0)
    assert mm.exact
    rep = simulate_remat_offload(c, mm.schedule, 1.0, mm.value)
    assert rep.peak_memory == pytest.approx(mm.value)
    assert _exhaustive_ro_min(c, 1.0, mm.lower, mm.value) == mm.value
    # through the front end: at the minimum a schedule, below it INFEASIBLE with that minimum
    at = remat_offload.solve(c, memory=mm.value, bandwidth=1.0)
    assert at.success and at.peak_memory <= mm.value
    below = remat_offload.solve(c, memory=mm.value - 1, bandwidth=1.0)
    assert below.status == Status.INFEASIBLE and below.details["min_memory"] == mm.value
    if kind in ("own", "own1"):
        # the papers' one overhead (of_all = of_ng = of) needs more: nothing fits at this minimum
        twin = c.one_overhead()
        assert solve_exhaustive(twin, mm.value, 1.0, time_limit=60).status == Status.INFEASIBLE


def test_remat_offload_min_memory_on_the_shipped_instances_is_exact():
    import glob

    import memplan
    from conftest import ROOT

    for path in sorted(glob.glob(str(ROOT / "instances" / "*.json"))):
        c, _ = memplan.load_instance(path)
        mm = ro_min_memory(c, 3e9)
        assert mm.exact, path
        assert mm.value <= min_memory(c) * (1 + 1e-12)           # offloading never needs more
        assert simulate_remat_offload(c, mm.schedule, 3e9, mm.value).peak_memory <= mm.value * (1 + 1e-9)
