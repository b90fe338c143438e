"""Each forward's own overhead in the re-materialization solvers (Chain.of_all for F_all, Chain.of_ng for
F_ck / F_none): rotor's DPs, the least-memory DPs, the step-function bound, the variant DP and the
compiled replay of the simple schedules, against the exhaustive search (which charges each forward its
own overhead, written independently of the DPs) on chains where the two overheads differ."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memplan.baselines import remat_bound as B
from memplan.baselines import remat_heuristics as H
from memplan.baselines import remat_rotor as rotor
from memplan.baselines.remat_exhaustive import exhaustive_min_memory, exhaustive_remat
from memplan.baselines.remat_min_memory import min_memory_of, necessary_memory
from memplan.baselines.remat_variants import mixed_chain, persistent_variants
from memplan.models.chain import Chain, random_chain
from memplan.models.remat import RematSchedule, simulate_remat

CASES = [(2 + seed % 4, seed) for seed in range(12)]


def _chain(L: int, seed: int, scale: float = 5.0) -> Chain:
    """A random chain whose forwards have their own overheads, ``scale`` times random_chain's (up to
    25 units where the sizes are 1..10: large enough to bind, as an attention block's no-grad forward
    does on GPT-2)."""
    return random_chain(L, seed, own_overheads=True, forward_overhead_scale=scale)


def _one(c: Chain) -> Chain:
    """The same chain in the papers' model: one overhead, of, for every forward."""
    one = c.one_overhead()
    assert np.array_equal(one.of_all, c.of) and np.array_equal(one.of_ng, c.of) and one.own_overhead_stages == 0
    return one


def _limits(c: Chain) -> list[int]:
    lo, hi = exhaustive_min_memory(c)[0], H.store_all(c).peak_memory
    return sorted({int(lo), int(lo) + 1, int((2 * lo + hi) / 3), int((lo + hi) / 2), int(hi)})


def test_random_chains_with_own_overheads_keep_the_other_arrays():
    c, d = random_chain(6, 4), random_chain(6, 4, own_overheads=True)
    for f in ("uf", "ub", "wa", "wabar", "wd", "of", "ob"):
        assert np.array_equal(getattr(c, f), getattr(d, f))
    assert np.all(np.maximum(d.of_all, d.of_ng) == d.of)        # one of the two is of, as profiled
    assert np.any(d.of_all < d.of) and np.any(d.of_ng < d.of)
    e = random_chain(6, 4, own_overheads=True, forward_overhead_scale=3)
    for f in ("uf", "ub", "wa", "wabar", "wd", "ob"):
        assert np.array_equal(getattr(d, f), getattr(e, f))
    for f in ("of", "of_all", "of_ng"):                        # the three scaled, nothing else
        assert np.array_equal(getattr(e, f), 3 * getattr(d, f))


@pytest.mark.parametrize("L, seed", CASES)
def test_dps_against_exhaustive_with_own_overheads(L, seed):
    c = _chain(L, seed)
    for M in _limits(c):
        opt, seq = exhaustive_remat(c, M)
        assert simulate_remat(c, seq, M).makespan == pytest.approx(opt)
        fl = rotor.floating(c, M, exact=True)
        pe = rotor.persistent(c, M, exact=True)
        assert fl.objective == pytest.approx(opt)          # Theorem 4.7 + Lemma 4.4, own overheads
        assert pe.objective >= opt - 1e-9
        for sol in (fl, pe):
            rep = simulate_remat(c, sol.schedule, M)
            assert rep.makespan == pytest.approx(sol.objective) and rep.peak_memory <= M
        for sol in (rotor.revolve(c, M, exact=True), H.sequential(c, M), H.store_all(c, M)):
            if sol.success:
                assert sol.objective >= opt - 1e-9
                assert simulate_remat(c, sol.schedule, M).makespan == pytest.approx(sol.objective)
        # the step-function bound: a lower bound of the optimum, the optimum itself where the
        # relaxation of rule 3 changes nothing
        bd = B.floating_bound(c, M)
        assert bd.value <= opt + 1e-9
        if B.relaxed_chain(B.equal_gradient_sizes(c)) is c:
            assert bd.value == pytest.approx(opt)


def test_own_overheads_reach_plans_the_one_overhead_model_cannot():
    """Not vacuous: on some chain and limit the optimum with each forward's own overhead is faster
    than the papers' model's, or fits where it has nothing; never the other way round."""
    faster = 0
    for L, seed in CASES:
        c = _chain(L, seed)
        for M in _limits(_one(c)) + _limits(c):
            own = exhaustive_remat(c, M)
            one = exhaustive_remat(_one(c), M)
            if one is None:
                faster += own is not None
                continue
            assert own[0] <= one[0] + 1e-9
            faster += own[0] < one[0] - 1e-9
            assert rotor.floating(c, M, exact=True).objective == pytest.approx(own[0])
    assert faster >= 3


@pytest.mark.parametrize("L, seed", CASES[:8])
def test_least_memory_with_own_overheads(L, seed):
    c = _chain(L, seed)
    peak, seq = exhaustive_min_memory(c)
    assert min_memory_of(c, "all").value == pytest.approx(peak)
    assert exhaustive_remat(c, peak * (1 - 1e-6)) is None
    assert necessary_memory(c) <= peak + 1e-9
    for kind in ("persistent", "revolve"):
        mm = min_memory_of(c, kind)
        assert mm.value >= peak - 1e-9
        assert simulate_remat(c, mm.schedule).peak_memory == pytest.approx(mm.value)
    # the cache keys on the own overheads: the one-overhead chain gets its own answer
    assert min_memory_of(_one(c), "all").value == pytest.approx(exhaustive_min_memory(_one(c))[0])


def test_sequential_points_replay_each_forward_own_overhead():
    c = _chain(9, 3)
    for s, t, p in H.sequential_points(c):
        rep = simulate_remat(c, H.sequential_schedule(c.L, s))
        assert (t, p) == (pytest.approx(rep.makespan), pytest.approx(rep.peak_memory))


def test_variants_charge_the_chosen_variant_f_all_overhead():
    """Two variants whose F_all overheads differ: the mixed chain charges the chosen variant's own
    F_all overhead and the larger no-grad one; with one variant the DP is rotor's persistent DP."""
    a = random_chain(5, 8, own_overheads=True)
    b = dataclasses.replace(a, of_all=np.zeros_like(a.of), wabar=a.wabar + 1)
    m = mixed_chain([a, b], [0, 1, 0, 1, 0, 1, 0])
    assert list(m.of_all) == [0, 0, a.of_all[2], 0, a.of_all[4], 0, a.of_all[6]]
    assert np.array_equal(m.of_ng, np.r_[np.maximum(a.of_ng, b.of_ng)[:6], 0])
    lo, hi = rotor.min_memory(a), H.store_all(a).peak_memory
    for M in (lo, (lo + hi) / 2, hi):
        one = persistent_variants([a], M, slots=200)
        ref = rotor.persistent(a, M, slots=200)
        assert (one is None) == (not ref.success)
        if one is not None:
            assert one.makespan == pytest.approx(ref.objective)
            assert simulate_remat(one.chain, one.schedule, M).peak_memory <= M


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000), st.integers(0, 3))
def test_replay_with_own_overheads_is_below_the_one_overhead_replay(L, seed, segments):
    """Every valid sequence: each operation's memory with the own overheads is at most the papers'
    one-overhead replay's, the same after every operation, equal where the F_all/no-grad forward's own
    overhead is of; and the makespan does not depend on the overheads."""
    c = _chain(L, seed, 1 + seed % 5)
    seq = H.sequential_schedule(c.L, min(segments, c.L) or 1)
    seq = seq if isinstance(seq, RematSchedule) else RematSchedule(seq)
    own, one = simulate_remat(c, seq), simulate_remat(c, seq, one_overhead=True)
    assert own.makespan == one.makespan and own.memory_after == one.memory_after
    for (op, l), a, b in zip(seq.ops, own.memory_during, one.memory_during):
        gap = 0.0 if op == "B" else c.of[l] - (c.of_all[l] if op == "F_all" else c.of_ng[l])
        assert b - a == pytest.approx(gap)
    assert simulate_remat(_one(c), seq).memory_during == one.memory_during


def test_offload_problem_charges_f_all_own_overhead():
    """Paper 001's problem runs every forward with autograd (each keeps its abar): its ex^F is F_all's
    own overhead. Without offloading its peak is store-all's replay in the re-materialization model,
    an independent implementation, and the exact MIP equals the exhaustive search on such a chain."""
    from memplan.baselines import offload as OB
    from memplan.formulations.offload_milp import solve_offload_milp
    from memplan.models.offload import min_feasible_memory, peak_memory_no_offload
    from memplan.models.remat import store_all_ops

    for seed in range(4):
        c = _chain(4, seed)
        assert peak_memory_no_offload(c) == pytest.approx(simulate_remat(c, store_all_ops(c.L)).peak_memory)
        assert peak_memory_no_offload(c) <= peak_memory_no_offload(_one(c))
    c = _chain(2, 2)
    mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
    assert mf < min_feasible_memory(_one(c))           # F_all's own overhead is what binds here
    for M in (mf, (mf + mp) / 2):
        ex = OB.exhaustive(c, M, 1.0)
        m = solve_offload_milp(c, M, 1.0, threads=1, time_limit=20)
        assert m.objective == pytest.approx(ex.objective, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(0, 10_000), st.integers(1, 5), st.floats(0.0, 1.0))
def test_own_overheads_never_slower_nor_need_more_memory(L, seed, scale, frac):
    """On every chain, at every limit: the floating DP's optimum with each forward's own overhead is at
    most its optimum in the papers' one-overhead model (every one-overhead plan is valid with the own
    overheads, which are at most o_f), and so is the least memory; the plan replays within the limit."""
    c = _chain(L, seed, scale)
    lo_one, hi = min_memory_of(_one(c), "all").value, H.store_all(_one(c)).peak_memory
    assert min_memory_of(c, "all").value <= lo_one + 1e-9
    M = int(lo_one + frac * (hi - lo_one))
    own, one = rotor.floating(c, M, exact=True), rotor.floating(_one(c), M, exact=True)
    if one.success:
        assert own.success and own.objective <= one.objective + 1e-9
    if own.success:
        assert simulate_remat(c, own.schedule, M).makespan == pytest.approx(own.objective)


def test_the_report_says_which_overheads_the_plan_was_made_with():
    import memplan
    from memplan.models.units import fmt_memory

    c = _chain(5, 2)
    lo, hi = rotor.min_memory(c), H.store_all(c).peak_memory
    sol = memplan.remat.solve(c, memory=float(int((lo + hi) / 2)), time_limit=20)
    text = memplan.remat.report(sol, c)
    own = int(np.sum((c.of_all != c.of) | (c.of_ng != c.of)))
    one = simulate_remat(c, sol.schedule, one_overhead=True).peak_memory
    assert own > 0 and f"each forward's own at {own} stage(s)" in text
    assert f"would put this schedule's peak at {fmt_memory(one)}" in text and one >= sol.peak_memory
    assert "overheads" not in memplan.remat.report(memplan.remat.solve(_one(c), memory=sol.memory_limit), _one(c))


def test_every_report_names_the_overheads_and_the_one_overhead_peak():
    """remat, offload and remat-offload: the line where the chain has each forward's own overhead, with
    the peak the one-overhead replay gives the same schedule; no line on a one-overhead chain."""
    import memplan
    from memplan.models.offload import validate_offload
    from memplan.models.remat_offload import simulate_remat_offload
    from memplan.models.units import fmt_memory

    c = _chain(4, 0)
    assert c.own_overhead_stages == int(np.sum((c.of_all[1:] != c.of[1:]) | (c.of_ng[1:] != c.of[1:]))) > 0
    assert c.one_overhead().own_overhead_stages == 0
    hi = H.store_all(c).peak_memory
    runs = {
        "remat": (lambda ch: memplan.remat.solve(ch, memory=hi * 0.8), memplan.remat.report,
                  lambda s: simulate_remat(c, s.schedule, one_overhead=True).peak_memory),
        "offload": (lambda ch: memplan.offload.solve(ch, memory=hi * 0.8, bandwidth=1.0), memplan.offload.report,
                    lambda s: validate_offload(_one(c), s.schedule).peak_memory),
        "remat-offload": (lambda ch: memplan.remat_offload.solve(ch, memory=hi * 0.8, bandwidth=1.0),
                          memplan.remat_offload.report,
                          lambda s: simulate_remat_offload(_one(c), s.schedule, 1.0).peak_memory),
    }
    for problem, (solve, report, one_peak) in runs.items():
        sol = solve(c)
        assert sol.success, (problem, sol.message)
        text = report(sol, c)
        assert f"each forward's own at {c.own_overhead_stages} stage(s)" in text, problem
        assert f"this schedule's peak at {fmt_memory(one_peak(sol))}" in text, problem
        assert "overheads" not in report(solve(_one(c)), _one(c)), problem
