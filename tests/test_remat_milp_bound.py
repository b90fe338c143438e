"""The floating DP on step functions (issue 31): a lower bound that equals the dense floating DP on the
same integer sizes, is never above the exhaustive optimum, equals it on integer chains, and proves
remat-milp's answer (alone, or as the MILP's objective cut)."""
import math
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memplan import remat
from memplan.baselines import remat_bound as B
from memplan.baselines import remat_rotor as R
from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.formulations.remat_milp import solve_remat_milp
from memplan.models.chain import random_chain
from memplan.models.remat import RematSchedule, simulate_remat
from memplan.models.solution import Status

from conftest import MiB, fig4


def _limits(c, fracs=(0.0, 0.15, 0.4, 0.8)):
    lo, hi = remat.memory_range(c)
    return [lo + f * (hi - lo) for f in fracs] + [lo * 0.97]


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("L", [3, 6, 9])
def test_equals_the_dense_floating_dp_on_the_same_sizes(L, integer):
    """Same rounded-down sizes, same recurrences: the step functions give the dense table's entry."""
    for seed in range(3):
        c = random_chain(L, seed, integer=integer)
        for M in _limits(c):
            for S in (37, 160):
                d = R.Discretization(c, M, S, False, "down")
                dense = R._dp(c, M, "all", S, False, "down")[0]
                sparse = B.bound_of_sizes(c, d.wa, d.wab, d.wd, d.ofa, d.ofn, d.ob, d.budget).value
                assert sparse == (math.inf if dense is None else dense)


@pytest.mark.parametrize("integer", [True, False])
@pytest.mark.parametrize("L", [2, 3, 5])
def test_against_exhaustive(L, integer):
    """Never above the optimum over all sequences; equal to it where the relaxation of rule 3 changes
    nothing (most of these chains), with exact sizes (integer chains) and also with 2^32 units (float
    chains: a rounding rule that lost whole items would miss)."""
    for seed in range(3):
        c = random_chain(L, seed, integer=integer)
        for M in _limits(c):
            if integer:
                M = math.floor(M)
            ex = exhaustive_remat(c, M)
            opt = math.inf if ex is None else ex[0]
            res = B.floating_bound(c, M, plan=integer)
            assert res.complete and res.exact == integer
            assert res.value <= opt * (1 + 1e-12)
            if not res.relaxed:     # the chain itself (``up`` dominated everywhere): the bound is tight
                assert res.value == pytest.approx(opt, rel=1e-12) if math.isfinite(opt) else res.value == math.inf
            if not math.isfinite(opt):
                continue
            if integer and not res.relaxed:   # exact sizes: the rebuilt sequence is optimal
                rep = simulate_remat(c, RematSchedule(res.ops), memory_limit=M)
                assert rep.makespan == pytest.approx(opt, rel=1e-12)
            else:              # sizes rounded up: a valid plan (not better than the optimum, of course)
                plan = B.floating_plan(c, M)
                if plan.ops is not None:
                    rep = simulate_remat(c, RematSchedule(plan.ops), memory_limit=M)
                    assert rep.makespan == pytest.approx(plan.value, rel=1e-12)
                    assert rep.makespan >= opt * (1 - 1e-12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(L=st.integers(1, 5), seed=st.integers(0, 10_000), frac=st.floats(-0.1, 1.1), integer=st.booleans())
def test_property_bound_never_above_exhaustive(L, seed, frac, integer):
    c = random_chain(L, seed, integer=integer)
    lo, hi = remat.memory_range(c)
    M = max(1.0, lo + frac * (hi - lo))
    if integer:
        M = float(math.floor(M))
    ex = exhaustive_remat(c, M)
    res = B.floating_bound(c, M)
    if ex is not None:
        assert res.value <= ex[0] * (1 + 1e-12)
    elif integer:
        assert res.value == math.inf       # exact sizes: nothing fits for the DP either


def test_fine_units_never_exceed_the_real_share_of_the_limit():
    """Rule 2 of the module docstring: floor(x / q) <= x / q, so any set of sizes summing to at most M
    maps to at most the budget, whatever the rounding of the division."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        L = 12
        c = random_chain(L, int(rng.integers(1000)), integer=False)
        M = float(rng.uniform(0.5, 3.0) * c.wa.sum())
        wa, wab, wd, ofa, ofn, ob, budget, exact = B.fine_units(c, M)
        assert not exact and budget == B.FINE_UNITS
        for real, units in ((c.wa, wa), (c.wabar, wab), (c.wd, wd), (c.of_all, ofa), (c.of_ng, ofn),
                            (c.ob, ob)):
            assert np.all(units.astype(float) <= np.asarray(real) * budget / M)
        # the worst case: all sizes at once (when they fit), computed in exact integers
        if c.wa.sum() + c.wabar.sum() <= M:
            assert int(wa.sum()) + int(wab.sum()) <= budget


def test_deadline_stops_before_the_work():
    c = random_chain(12, 1, integer=False)
    lo, hi = remat.memory_range(c)
    res = B.floating_bound(c, (lo + hi) / 2, deadline=time.perf_counter() - 1.0)
    assert res.value is None and not res.complete



def test_a_run_that_cannot_fit_is_not_started(monkeypatch, toy_chain):
    """The index tables are (L+2)^3 cells each: on 1000 stages 21.5 GB, allocated before the first
    deadline check (remat-milp with a 5 s limit took 42 s, paging). A run is not started when even
    the fastest rate seen, (L+2)^5 * 3e-11 s, overruns the deadline, or when its tables would take
    more than a quarter of the machine's memory; ``note`` says which, and remat-milp reports it."""
    c = random_chain(300, 1, integer=False)
    lo, hi = remat.memory_range(c)
    t0 = time.perf_counter()
    res = B.floating_bound(c, (lo + hi) / 2, deadline=t0 + 60)     # 302^5 * 3e-11 s = 75 s > 60 s
    assert res.value is None and not res.complete
    assert res.note.startswith("not started: it would take at least 75") and "L = 300" in res.note
    # its tables: two (L+2)^3 index arrays and the offsets of C's and G's rows, 8 bytes each
    assert B.table_bytes(300) == 8 * (2 * 302 ** 3 + 2 * 301 * 302 * 303 // 6 + 2 * 300 * 301 * 302 // 6)
    monkeypatch.setattr(B, "_physical_memory", lambda: 4 * B.table_bytes(toy_chain.L) - 4)
    small = B.floating_bound(toy_chain, 90 * MiB)
    assert not small.complete and "its tables would need" in small.note and "L = 6" in small.note
    sol = remat.solve(toy_chain, memory=90 * MiB, method="remat-milp", time_limit=30, threads=1)
    assert sol.details["dp_bound_note"] == small.note and sol.details["proved_by"] != "dp bound"
    assert sol.objective == pytest.approx(47.42e-3)       # the MILP proves it without the bound
    monkeypatch.setattr(B, "_physical_memory", lambda: 4 * B.table_bytes(toy_chain.L))
    assert B.floating_bound(toy_chain, 90 * MiB).value == pytest.approx(47.42e-3)

def test_remat_milp_proven_by_the_dp_bound(toy_chain):
    """Paper 004's toy chain at 90 MiB: 47.42 ms (the paper's number), proven by the DP bound alone."""
    sol = remat.solve(toy_chain, memory=90 * MiB, method="remat-milp", time_limit=30, threads=1)
    assert sol.status == Status.OPTIMAL
    assert sol.objective == pytest.approx(47.42e-3)
    assert sol.details["proved_by"] == "dp bound"
    assert sol.bound == pytest.approx(47.42e-3, rel=1e-9) and sol.gap <= 1e-4


def test_remat_milp_takes_the_dp_sequence_when_the_persistent_start_is_not_optimal():
    """Paper 004, Figure 4 (n = 6, M = 15): the persistent start takes 3n - 2 = 16, every sequence at
    least 2n + 2 = 14 (the paper's numbers); the DP's own (non-persistent) sequence reaches 14."""
    n = 6
    c = fig4(n)
    sol = remat.solve(c, memory=15, method="remat-milp", time_limit=30, threads=1)
    assert sol.status == Status.OPTIMAL and sol.objective == 2 * n + 2
    assert sol.details["dp_bound"] == 2 * n + 2 and sol.details["dp_plan"] == 2 * n + 2
    assert sol.details["proved_by"] == "dp bound"
    assert "floating DP" in sol.details["mip_start"]


def test_milp_with_the_bound_as_cut_reaches_the_optimum():
    """The cut ``makespan >= bound`` keeps the optimum: from the persistent start (16) the MILP finds
    14 and its dual bound starts at the cut."""
    n = 6
    c = fig4(n)
    start = R.persistent(c, 15, exact=True)
    assert start.objective == 3 * n - 2
    sol = solve_remat_milp(c, 15, time_limit=30, threads=1, start=start.schedule, lower_bound=2 * n + 2)
    assert sol.status == Status.OPTIMAL and sol.objective == 2 * n + 2
    assert sol.bound >= (2 * n + 2) * (1 - 1e-8)


def _up_helps_chain():
    """A chain whose optimum needs ``up`` (F_all^3 over a stored plain a^3): forward overheads larger
    than wd^{l-1} + o_b^l, so the MILP's dominance conditions fail (random_chain(5, 39) with drawn
    overheads and gradient sizes)."""
    import dataclasses

    L, seed = 5, 39
    c = random_chain(L, seed)
    rng = np.random.default_rng(seed)
    of, wd = c.of.copy(), c.wd.copy()
    for j in range(1, L + 1):
        of[j] = float(rng.integers(0, 4 * int(max(c.wa) + 1)))
        wd[j] = float(rng.integers(1, 3 * int(max(c.wa) + 1)))
    return dataclasses.replace(c, of=of, wd=wd, of_all=of.copy(), of_ng=of.copy())   # one o_f for both


def test_the_relaxation_keeps_the_bound_valid_where_up_helps():
    """Rule 3 of remat_bound's docstring: on the chain as given the DP (no ``up``) stays above the
    optimum of the exhaustive search (which has ``up``), so it is no bound; on the relaxed chain it is."""
    c = _up_helps_chain()
    lo, hi = remat.memory_range(c)
    M = math.floor(lo)
    opt, _ = exhaustive_remat(c, M)
    wa, wab, wd, ofa, ofn, ob, budget, exact = B.fine_units(c, M)
    raw = B.bound_of_sizes(c, wa, wab, wd, ofa, ofn, ob, budget, exact).value
    assert raw > opt                             # without the relaxation: not a bound here
    res = B.floating_bound(c, M)
    assert res.relaxed and res.value <= opt
    sol = remat.solve(c, memory=M, method="remat-milp", time_limit=30, threads=1)
    assert sol.objective == pytest.approx(opt) and sol.bound <= opt * (1 + 1e-12)


def _drawn_chain(seed):
    """random_chain with drawn forward overheads (up to 4x the largest activation), gradient sizes
    drawn apart from the activations' and backward overheads of 0-2 (seed % 4 == 2) or as drawn
    (seed % 4 == 1): chains where ``up`` helps and neither dominance condition holds everywhere."""
    import dataclasses

    rng = np.random.default_rng(seed + 200000)
    L = int(rng.integers(2, 7))
    c = random_chain(L, seed)
    of, wd, ob = c.of.copy(), c.wd.copy(), c.ob.copy()
    for j in range(1, L + 1):
        of[j] = float(rng.integers(0, 4 * int(max(c.wa) + 1)))
        wd[j] = float(rng.integers(1, 3 * int(max(c.wa) + 1)))
        if seed % 4 == 2:
            ob[j] = float(rng.integers(0, 3))
    return dataclasses.replace(c, of=of, wd=wd, ob=ob, of_all=of.copy(), of_ng=of.copy())   # one o_f for both


@pytest.mark.parametrize("seed, M", [(14, 81), (209, 72)])
def test_the_second_rewriting_of_up_is_valid_and_tight(seed, M):
    """Rule 3's rewritings, checked by brute force: every sequence of the chain (``up`` included)
    has a sequence without ``up`` on the relaxed chain that is as fast, so the exhaustive optimum
    without ``up`` on relaxed_chain is at most the exhaustive optimum with ``up`` on the chain. On
    these two chains ``up`` helps (without it the optimum is higher) and the relaxation is exactly
    tight, where the first rewriting alone (o_f^j lowered to wd^{j-1} + o_b^j) is not."""
    import dataclasses

    c = _drawn_chain(seed)
    opt = exhaustive_remat(c, M)[0]
    assert exhaustive_remat(c, M, up=False)[0] > opt          # up helps here
    rc = B.relaxed_chain(c)
    relaxed = exhaustive_remat(rc, M, up=False)[0]
    assert relaxed == opt                                      # valid (<=) and tight (==)
    # the relaxation lowers F_all's own overhead (the up and its replacement are F_all)
    first_only = np.minimum(c.of_all, np.r_[np.inf, c.wd[:-1] + c.ob[1:]])
    old = dataclasses.replace(rc, of_all=np.minimum(rc.of_all, first_only))
    assert exhaustive_remat(old, M, up=False)[0] < opt         # the first rewriting alone: weaker


def test_the_second_rewriting_never_cuts_below_the_optimum():
    """The same claim on 13 drawn chains and 4 limits each (brute force on both sides; seed 6 is one
    where ``up`` helps)."""
    checked = helps = 0
    for seed in range(13):
        c = _drawn_chain(seed)
        rc = B.relaxed_chain(c)
        lo, hi = remat.memory_range(c)
        for f in (0.0, 0.1, 0.3, 0.6):
            M = math.floor(lo + f * (hi - lo))
            ex = exhaustive_remat(c, M)
            rel = exhaustive_remat(rc, M, up=False)
            if ex is None:
                continue
            assert rel is not None and rel[0] <= ex[0]
            checked += 1
            noup = exhaustive_remat(c, M, up=False)
            helps += noup is None or noup[0] > ex[0]
    assert checked >= 40 and helps >= 1


def test_resnet50_h200_at_10pct_proven_by_the_dp_bound():
    """Issue 31's last case: the H200 ResNet-50 (b32) at 10% of the range. The bound on the relaxed
    chain of rule 3 meets the floating DP's schedule, replayed by the simulator; with o_f^5 lowered
    as far as the first rewriting needs (to wd^4 + o_b^5) the bound is 0.5% lower."""
    import dataclasses

    from memplan.models.instance import load_instance

    c, _ = load_instance("resnet50-b32-224-h200")
    lo, hi = remat.memory_range(c)
    M = lo + 0.1 * (hi - lo)
    plan = B.floating_plan(c, M)
    mk = simulate_remat(c, RematSchedule(plan.ops), memory_limit=M).makespan
    bound = B.floating_bound(c, M).value
    assert mk * (1 - 1e-4) <= bound <= mk * (1 + 1e-12)
    rc = B.relaxed_chain(c)
    first_only = dataclasses.replace(rc, of_all=np.minimum(rc.of_all, np.r_[np.inf, c.wd[:-1] + c.ob[1:]]))
    wa, wab, wd, ofa, ofn, ob, budget, exact = B.fine_units(first_only, M)
    old = B.bound_of_sizes(first_only, wa, wab, wd, ofa, ofn, ob, budget, exact).value
    assert old < mk * (1 - 4e-3)


def _wd_apart_chain():
    """A 6-stage chain whose gradients are much larger than its activations (found by
    benchmarks/check_remat_bound_bruteforce.py): the floating DP gives 106, the exhaustive search 102."""
    import dataclasses

    f = lambda *v: np.array(v, dtype=float)  # noqa: E731
    of = f(0, 0, 21, 33, 24, 5, 43, 0)
    return dataclasses.replace(
        random_chain(6, 230), name="wd-apart",
        wa=f(6, 1, 9, 6, 2, 10, 1, 0), wabar=f(6, 5, 13, 6, 12, 14, 11, 0), wd=f(6, 22, 31, 28, 31, 21, 29, 0),
        of=of, of_all=of.copy(), of_ng=of.copy(), ob=f(0, 0, 1, 1, 0, 1, 2, 0),   # one o_f for both forwards
        uf=f(0, 4, 3, 1, 4, 8, 4, 0), ub=f(0, 8, 10, 8, 5, 16, 4, 0))


def test_gradient_sizes_apart_from_activations_claim_nothing_false():
    """On a chain with wd != wa the floating DP is not the optimum over all sequences (106 against the
    exhaustive search's 102). The bound runs on wd = wa = min(wa, wd) and stays below 102;
    rotor-floating returns its sequence without claiming optimality; remat-milp proves 102, also with
    the persistent DP's sequence as MIP start and the bound as cut, where HiGHS 1.16 returned its MIP
    start's values (106) beside its incumbent's objective (102) and the driver solves again."""
    c, M = _wd_apart_chain(), 84
    opt, _ = exhaustive_remat(c, M)
    assert opt == 102
    assert R.floating(c, M, exact=True).objective == 106
    assert not R.floating_is_exact(c)
    assert B.floating_bound(c, M).value <= opt
    fl = remat.solve(c, memory=M, method="rotor-floating")
    assert fl.status == Status.FEASIBLE and fl.objective == 106 and fl.bound is None
    assert "not proven optimal" in fl.message
    start = R.persistent(c, M, exact=True).schedule
    direct = solve_remat_milp(c, M, threads=1, time_limit=30, start=start, start_source="persistent DP",
                              lower_bound=B.floating_bound(c, M).value)
    assert direct.objective == pytest.approx(102) and direct.status == Status.OPTIMAL
    sol = remat.solve(c, memory=M, method="remat-milp", threads=1, time_limit=30)
    assert sol.objective == pytest.approx(102) and sol.status == Status.OPTIMAL
    assert simulate_remat(c, sol.schedule, memory_limit=M).makespan == pytest.approx(102)
