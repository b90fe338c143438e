"""Rotor's persistent DP with a variant per stage (memplan.baselines.remat_variants): with one variant
it is rotor's persistent DP; with several, its value is the least over every assignment of variants of
rotor on the mixed chain (brute force); its sequence replays on the mixed chain at that value."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memplan.baselines.remat_min_memory import min_memory
from memplan.baselines.remat_rotor import _dp
from memplan.baselines.remat_variants import mixed_chain, persistent_variants
from memplan.models.chain import random_chain
from memplan.models.remat import simulate_remat


def _variant(c, seed):
    """A variant of ``c``'s stages as a lower partitioner budget makes one: F_all saves less (wabar down
    to wa at most), B recomputes more (u_b and o_b up), F_all a little slower and its transient o_f
    up or down; outputs unchanged."""
    rng = np.random.default_rng(seed)
    n = c.L + 2
    wabar = np.maximum(c.wa, c.wabar - rng.integers(0, 6, n))
    ub = c.ub + rng.integers(0, 4, n)
    ob = c.ob + rng.integers(0, 3, n)
    uf = c.uf + rng.integers(0, 2, n)
    of = np.maximum(0, c.of + rng.integers(-2, 3, n))      # F_all's transient may move either way
    return dataclasses.replace(c, wabar=wabar.astype(float), ub=ub.astype(float), ob=ob.astype(float),
                               uf=uf.astype(float), of=of.astype(float))


def _rotor(chain, memory, slots):
    v, _, _ = _dp(chain, memory, "persistent", slots, False, "up")
    return v


@pytest.mark.parametrize("seed", range(6))
def test_one_variant_is_rotor(seed):
    c = random_chain(4 + seed % 3, seed)
    lo = min_memory(c)
    hi = simulate_remat(c, [("F_all", l) for l in range(1, c.L + 2)] + [("B", l) for l in range(c.L + 1, 0, -1)]).peak_memory
    for f in (0.0, 0.3, 0.7, 1.0):
        mem = float(lo + f * (hi - lo)) + 1
        plan = persistent_variants([c], mem, slots=60)
        ref = _rotor(c, mem, 60)
        assert (plan is None) == (ref is None)
        if plan is not None:
            assert plan.value == ref
            assert plan.makespan == pytest.approx(ref, rel=1e-12)


def test_variants_equal_the_best_assignment_by_brute_force():
    """Integer chains with one slot per byte (no rounding): L = 3, three variants, 3^4 assignments."""
    checked = 0
    for seed in range(40):
        c = random_chain(3, seed)
        chains = [c, _variant(c, 100 + seed), _variant(c, 200 + seed)]
        L = c.L
        sa = [("F_all", l) for l in range(1, L + 2)] + [("B", l) for l in range(L + 1, 0, -1)]
        lo = min(min_memory(mixed_chain(chains, [v] * (L + 2))) for v in range(3))
        hi = max(simulate_remat(mixed_chain(chains, [v] * (L + 2)), sa).peak_memory for v in range(3))
        if hi - lo < 4:
            continue
        for f in (0.0, 0.4, 0.8):
            mem = float(int(lo + f * (hi - lo)))
            best = None
            for assign in itertools.product(range(3), repeat=L + 1):
                v = _rotor(mixed_chain(chains, (0,) + assign), mem, int(mem))
                if v is not None and (best is None or v < best):
                    best = v
            plan = persistent_variants(chains, mem, slots=int(mem))
            assert (plan is None) == (best is None), (seed, f)
            if plan is None:
                continue
            assert plan.value == pytest.approx(best, rel=1e-12), (seed, f)
            # its own assignment's rotor value is the DP's, and the sequence replays there at that value
            assert _rotor(plan.chain, mem, int(mem)) == pytest.approx(plan.value, rel=1e-12)
            rep = simulate_remat(plan.chain, plan.schedule, memory_limit=mem)
            assert rep.makespan == pytest.approx(plan.value, rel=1e-9) and rep.peak_memory <= mem
            checked += 1
        if checked >= 12:
            break
    assert checked >= 12


@settings(max_examples=30, deadline=None)
@given(L=st.integers(2, 7), seed=st.integers(0, 10_000), f=st.floats(0.0, 1.0))
def test_never_slower_than_any_single_variant(L, seed, f):
    c = random_chain(L, seed)
    chains = [c, _variant(c, seed + 1)]
    lo = min(min_memory(mixed_chain(chains, [v] * (L + 2))) for v in range(2))
    hi = max(simulate_remat(ch, [("F_all", l) for l in range(1, L + 2)] + [("B", l) for l in range(L + 1, 0, -1)]
                            ).peak_memory for ch in chains)
    mem = float(lo + f * (hi - lo)) + 1
    plan = persistent_variants(chains, mem, slots=50)
    for v in range(2):
        single = _rotor(mixed_chain(chains, [v] * (L + 2)), mem, 50)
        if single is not None:
            assert plan is not None and plan.value <= single * (1 + 1e-12)
    if plan is not None:
        assert plan.peak_memory <= mem and len(plan.assign) == L + 2
