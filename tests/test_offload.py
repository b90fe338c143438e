"""Activation offloading (paper 001): validator, no-wait builder, bounds, heuristics and the exact MILP."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memplan.baselines import offload as B
from memplan.formulations.offload_milp import solve_offload_milp
from memplan.models.chain import Chain, random_chain
from memplan.models.offload import (InvalidOffloadSchedule, NoWaitInfeasible, OffloadSchedule, lower_bound_value,
                                    min_feasible_memory, no_wait_schedule, peak_memory_no_offload, validate_offload)
from memplan.models.solution import InfeasibleError, Status

HEURISTICS = [B.greedy, B.dynprog, B.vdnn, B.tflms, B.autoswap]


def cases(Ls, seeds, fracs=(0.0, 0.5), betas=(0.5, 2.0)):
    for L, seed in itertools.product(Ls, seeds):
        c = random_chain(L, seed)
        mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
        for f, beta in itertools.product(fracs, betas):
            yield c, mf + f * (mp - mf), beta


def hand_chain():
    """x = (4, 1, 1, 0), ex^B_1 = 6, unit times, y = 0: M_peak = 12 (during B_1)."""
    return Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[4, 1, 1], wd=[0, 0, 0], of=[0, 0], ob=[0, 6])


def start_accepted_or_proven(m):
    """HiGHS accepted the MIP start, or the start was proven optimal before the MIP ran: it reaches the
    bound (Proposition 3's or the fractional relaxation's optimum, whichever is larger)."""
    if m.details.get("stopped"):
        return (m.details["start_accepted"] is None and m.objective == pytest.approx(m.bound, rel=1e-6)
                and m.bound >= (m.details["fractional_bound"] or 0.0))
    return bool(m.details["start_accepted"])


# ------------------------------------------------------------------------------------------ model
def test_peak_without_offloading_is_m_peak():
    for seed in range(5):
        c = random_chain(5, seed)
        s = no_wait_schedule(c, 1e9, 1.0, [])
        r = validate_offload(c, s, None)
        assert r.peak_memory == pytest.approx(peak_memory_no_offload(c))
        assert r.makespan == pytest.approx(c.store_all_time())


def test_hand_chain_values():
    c = hand_chain()
    assert peak_memory_no_offload(c) == 12 and min_feasible_memory(c) == 8
    # Prop. 3: max(4, 2 * 3 / 1) = 6; fractional optimum (Theorem 2): send 3 of x_0 before B_1 can
    # start (t = 3), B_1 [3, 4), 3 back [4, 7), B_0 [7, 8); whole x_0: 4 + 1 + 4 + 1 = 10.
    assert lower_bound_value(c, 9, 1.0) == 6
    assert B.fractional_makespan(c, 9, 1.0) == pytest.approx(8.0, abs=1e-6)
    g = B.greedy(c, 9, 1.0)
    assert g.objective == pytest.approx(10.0) and g.details["fractional"] == pytest.approx(8.0, abs=1e-6)
    m = solve_offload_milp(c, 9, 1.0, threads=1, time_limit=10)
    assert m.status == Status.OPTIMAL and m.objective == pytest.approx(10.0)


def _valid_example():
    c = hand_chain()
    s = no_wait_schedule(c, 9, 1.0, [0])
    validate_offload(c, s, 9)
    return c, s


@pytest.mark.parametrize("edit, reason", [
    (lambda s: s.tF.__setitem__(1, 0.5), "before F_0 ends"),
    (lambda s: s.offload.__setitem__(0, -1.0), "before x_0 exists|< 0"),
    (lambda s: s.prefetch.__setitem__(0, 2.0), "before its offload ends"),
    (lambda s: s.prefetch.__setitem__(0, s.tB[0] - 1.0), "after B_0 starts"),
    (lambda s: s.prefetch.pop(0), "without a prefetch"),
    (lambda s: s.tB.__setitem__(1, s.tB[1] - 2.0), "before B_2 ends"),
])
def test_validator_rejects(edit, reason):
    c, s = _valid_example()
    edit(s)
    with pytest.raises(InvalidOffloadSchedule, match=reason):
        validate_offload(c, s, 9)


def test_validator_memory_and_link():
    c = hand_chain()
    # no offloading under 9 B: B_1 needs 12
    with pytest.raises(InvalidOffloadSchedule, match="exceeds the limit 9"):
        validate_offload(c, no_wait_schedule(c, 100, 1.0, []), 9)
    # release only at the end of the offload: B_1 may not start before x_0 is fully sent (t = 4)
    s = OffloadSchedule(tF=[0, 1, 2], tB=[9, 3, 2], offload={0: 0.0}, prefetch={0: 5.0}, bandwidth=1.0)
    with pytest.raises(InvalidOffloadSchedule, match="exceeds the limit"):
        validate_offload(c, s, 9)
    # two transfers at once
    c2 = random_chain(3, 0)
    s2 = no_wait_schedule(c2, 1e9, 1.0, [0, 1])
    s2.offload[1] = s2.offload[0]
    with pytest.raises(InvalidOffloadSchedule, match="one transfer at a time|before x_1 exists"):
        validate_offload(c2, s2, None)


def test_reservation_at_prefetch_start():
    c = hand_chain()
    s = no_wait_schedule(c, 9, 1.0, [0])
    # starting the prefetch during B_1 (x_1, x_2, ex^B_1 = 8 B) reserves 4 more: 12 > 9
    s.prefetch[0] = s.tB[1]
    s.tB[0] = max(s.tB[0], s.prefetch[0] + 4)
    with pytest.raises(InvalidOffloadSchedule, match="prefetch of x_0 is reserved"):
        validate_offload(c, s, 9)


# ------------------------------------------------------------------------------ bounds & methods
def test_min_feasible_memory_is_tight():
    for seed in range(6):
        c = random_chain(5, seed)
        mf = min_feasible_memory(c)
        assert B.greedy(c, mf, 1.0).success
        with pytest.raises(InfeasibleError) as e:
            B.greedy(c, mf - 0.5, 1.0)
        assert e.value.minimum == mf


def test_fractional_value_theorem2():
    """Theorem 2: the eager ordered schedule offloading M_peak - M is optimal for the fractional
    relaxation, so offloading more never helps (Lemma 2); LB <= fractional <= GREEDY."""
    for c, M, beta in cases([3, 5], range(4)):
        Q = peak_memory_no_offload(c) - M
        if Q <= 0:
            continue
        fr = B.fractional_makespan(c, M, beta)
        g = B.greedy(c, M, beta)
        assert g.details["fractional"] == pytest.approx(fr)
        assert lower_bound_value(c, M, beta) <= fr * (1 + 1e-9)
        assert fr <= g.objective * (1 + 1e-9)
        total = c.wabar[:c.L + 1].sum()
        for extra in np.linspace(0, total - Q, 4)[1:]:
            assert B.fractional_makespan(c, M, beta, Q + extra) >= fr * (1 - 1e-6)


def test_every_heuristic_schedule_is_valid():
    for c, M, beta in cases([4, 6], range(3)):
        for h in HEURISTICS:
            s = h(c, M, beta)
            if s.success:
                r = validate_offload(c, s.schedule, M)
                assert s.objective == pytest.approx(r.makespan) and r.peak_memory <= M * (1 + 1e-9)


def test_milp_equals_exhaustive_small():
    """MIP optimum = best no-wait schedule over all offloaded sets and transfer orders (L <= 3)."""
    n = 0
    for c, M, beta in cases([2, 3], range(3), fracs=(0.0, 0.4), betas=(0.5, 2.0)):
        hs = [h(c, M, beta) for h in HEURISTICS]
        ok = [h for h in hs if h.success]
        start = min(ok, key=lambda h: h.objective).schedule if ok else None
        ex = B.exhaustive(c, M, beta)
        m = solve_offload_milp(c, M, beta, start=start, threads=1, time_limit=20)
        assert m.status == Status.OPTIMAL
        assert start is None or start_accepted_or_proven(m)
        assert m.objective == pytest.approx(ex.objective, rel=1e-6)
        lb = lower_bound_value(c, M, beta)
        assert lb <= m.objective * (1 + 1e-9)
        assert m.objective <= min(h.objective for h in ok) * (1 + 1e-9)
        n += 1
    assert n == 24


def test_milp_between_bound_and_heuristics():
    """LB <= fractional <= MIP <= min(GREEDY, DYNPROG, vDNN, TFLMS, AutoSwap) for L = 4..6."""
    for c, M, beta in [(random_chain(L, s), None, b) for L, s, b in [(4, 11, 0.5), (5, 12, 1.0), (6, 13, 2.0)]]:
        mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
        M = mf + 0.3 * (mp - mf)
        hs = [h(c, M, beta) for h in HEURISTICS]
        ok = [h for h in hs if h.success]
        best = min(h.objective for h in ok)
        m = solve_offload_milp(c, M, beta, start=min(ok, key=lambda h: h.objective).schedule, threads=1,
                               time_limit=15)
        assert m.success and start_accepted_or_proven(m)
        validate_offload(c, m.schedule, M, tol=1e-6)
        assert m.objective <= best * (1 + 1e-9)
        assert lower_bound_value(c, M, beta) <= m.objective * (1 + 1e-9)
        assert B.fractional_makespan(c, M, beta) <= m.objective * (1 + 1e-6)
        assert m.bound is None or m.bound <= m.objective * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_dynprog_exact_and_rounded_agree_on_integer_chain(seed):
    """Integer sizes and times, an integer limit M and beta in {0.5, 1, 2}: every quantity Algorithm 1
    merges states on (M_F, Delta_F, Delta_B; eqs. (2)-(8), idle-link credit u * beta, clamp -M) is a
    multiple of 1/2 byte. A grid of M/500 < 1/2 B then puts two states in one cell exactly when their
    values are equal, which is what exact mode merges: the two runs keep the same states and return
    the same schedule. (A coarser grid merges more: the state counts then differ.)"""
    c = random_chain(6, seed)
    mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
    for frac in (0.2, 0.4, 0.7):
        M = float(math.floor(mf + frac * (mp - mf)))
        assert mf <= M and M / 500 < 0.5
        for beta in (0.5, 1.0, 2.0):
            a = B.dynprog(c, M, beta, exact=True)
            b = B.dynprog(c, M, beta, slots=500)
            assert a.success and b.success
            assert a.details["dp_states"] == b.details["dp_states"]
            assert a.objective == b.objective
            assert sorted(a.schedule.offloaded) == sorted(b.schedule.offloaded)
            for sol in (a, b):
                r = validate_offload(c, sol.schedule, M)
                assert sol.objective == pytest.approx(r.makespan) and r.peak_memory <= M
                assert lower_bound_value(c, M, beta) <= sol.objective * (1 + 1e-9)


def test_no_wait_infeasible_is_reported():
    c = hand_chain()
    with pytest.raises(NoWaitInfeasible):
        no_wait_schedule(c, 9, 1.0, [])


def test_milp_equals_exhaustive_L4():
    c = random_chain(4, 0)
    M = min_feasible_memory(c)
    ex = B.exhaustive(c, M, 2.0)
    m = solve_offload_milp(c, M, 2.0, start=B.greedy(c, M, 2.0).schedule, threads=1, time_limit=30)
    assert m.status == Status.OPTIMAL and m.objective == pytest.approx(ex.objective, rel=1e-6)


def test_strong_model_has_the_reference_models_optimum():
    """The strengthened model (time windows, cumulative prefetch windows, running sums in the prefetch
    memory rows, link-work cuts) against the original Pyomo model of the same module, both solved to
    optimality on small random chains, with and without a MIP start: same optimum; a given start is
    accepted by the strong model (its rows keep every valid schedule)."""
    tight = {"mip_feasibility_tolerance": 1e-9, "primal_feasibility_tolerance": 1e-9}
    n = 0
    for c, M, beta in cases([4, 5], [1], fracs=(0.0, 0.4), betas=(0.5, 2.0)):
        ok = [s for s in (h(c, M, beta) for h in HEURISTICS) if s.success]
        for start in (None, min(ok, key=lambda h: h.objective).schedule):
            a = solve_offload_milp(c, M, beta, start=start, threads=1, time_limit=20)
            b = solve_offload_milp(c, M, beta, start=start, threads=1, time_limit=20, formulation="reference",
                                   options=tight)
            assert a.status == b.status == Status.OPTIMAL
            assert a.objective == pytest.approx(b.objective, rel=1e-6)
            assert start is None or start_accepted_or_proven(a)
            n += 1
    assert n == 16


def test_fractional_bound_never_exceeds_the_proven_optimum():
    """Theorem 2's fractional makespan is reported as a bound (issue 21): on random chains solved to
    proven optimality by the reference model, it never exceeds the optimum, and it is strictly above
    Proposition 3's bound on some of them (so it adds something)."""
    from memplan.formulations.offload_milp import fractional_bound

    tight = {"mip_feasibility_tolerance": 1e-9, "primal_feasibility_tolerance": 1e-9}
    above = n = 0
    for c, M, beta in cases([3, 4], [2, 3], fracs=(0.1, 0.5), betas=(0.5, 2.0)):
        opt = solve_offload_milp(c, M, beta, threads=1, time_limit=20, formulation="reference", options=tight)
        assert opt.status == Status.OPTIMAL
        fb = fractional_bound(c, M, beta)
        if M >= peak_memory_no_offload(c):          # nothing to offload: no fractional bound
            assert fb is None and opt.objective == pytest.approx(c.store_all_time())
            continue
        assert fb is not None and fb <= opt.objective * (1 + 1e-9)
        above += fb > lower_bound_value(c, M, beta) * (1 + 1e-6)
        s = solve_offload_milp(c, M, beta, threads=1, time_limit=20)
        assert s.bound <= opt.objective * (1 + 1e-9) and s.bound >= fb
        n += 1
    assert n >= 10 and above >= 2


def test_neighbourhood_search_keeps_valid_schedules_and_reaches_the_optimum():
    """The neighbourhood search (issue 21) inside the MILP: started from GREEDY's schedule, (a) the set
    search alone never worsens it and returns what the validator measures; (b) with a window covering
    every activation the single sub-MIP is the full model, so it reaches the full model's optimum; (c)
    with small windows and then the full MIP, the call returns the same optimum as without it."""
    import time as _time

    import memplan.formulations.offload_milp as OM
    from memplan.models.offload import OffloadData

    # instances where GREEDY is worse than the optimum and the optimum is above the fractional bound
    # (so the search runs and has something to find)
    for L, seed, frac, beta in ((5, 4, 0.4, 0.5), (6, 0, 0.2, 1.0), (6, 5, 0.4, 0.5)):
        c = random_chain(L, seed)
        mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
        M = mf + frac * (mp - mf)
        g = B.greedy(c, M, beta)
        ref = solve_offload_milp(c, M, beta, start=g.schedule, threads=1, time_limit=20)
        assert ref.status == Status.OPTIMAL and ref.objective < g.objective * (1 - 1e-3)
        sc, v, n = OM._set_search(c, M, beta, g.schedule, g.objective, _time.monotonic() + 5)
        assert n > 0 and v <= g.objective and validate_offload(c, sc, M).makespan == pytest.approx(v)
        assert v >= ref.objective * (1 - 1e-6)
        mdl, info = OM.build_offload_arrays(c, M, beta, horizon=g.objective)
        d = OffloadData.of(c)
        sx = OM._start_values(mdl, info, d, g.schedule)
        sched, val, _, stats = OM._lns(c, M, beta, mdl, info, d, start_x=sx, incumbent=g.schedule,
                                       value=g.objective, deadline=_time.monotonic() + 20, threads=1,
                                       window=L + 1)
        assert val == pytest.approx(ref.objective, rel=1e-6)
        assert validate_offload(c, sched, M, tol=1e-6).makespan == pytest.approx(val)
        s = solve_offload_milp(c, M, beta, start=g.schedule, threads=1, time_limit=20, lns=0.5)
        assert s.objective == pytest.approx(ref.objective, rel=1e-6) and "lns" in s.details


def _minimal_covering_sets(c, need):
    """Brute force: the sets S of x_0..x_L (x_j > 0) with x(S) >= need > x(S) - |x_{max S}|."""
    from memplan.models.offload import OffloadData

    d = OffloadData.of(c)
    J = [j for j in range(d.L + 1) if d.x[j] > 0]
    out = []
    for r in range(1, len(J) + 1):
        for S in itertools.combinations(J, r):
            tot = float(sum(d.x[j] for j in S))
            if tot >= need and tot - d.x[S[-1]] < need:
                out.append((list(S), tot - need))
    return out


def test_covering_sets_are_the_minimal_covering_sets():
    """The enumeration of the set search (issue 21) against brute force over every subset: without an
    excess filter it yields exactly the sets reaching M_peak - M that are minimal in index order, each
    once; with one it yields exactly those within the excess; a stop ends it early."""
    import memplan.formulations.offload_milp as OM
    from memplan.models.offload import OffloadData

    n = 0
    for L, seed in itertools.product((4, 6, 8), (0, 1, 2)):
        c = random_chain(L, seed)
        d = OffloadData.of(c)
        for frac in (0.1, 0.5):
            mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
            need = mp - (mf + frac * (mp - mf))
            ref = _minimal_covering_sets(c, need)
            got = list(OM._covering_sets(d, need, lambda: math.inf, lambda: False))
            assert sorted(got) == sorted(S for S, _ in ref) and len(got) == len(set(map(tuple, got)))
            cap = float(np.median([e for _, e in ref]))
            got = list(OM._covering_sets(d, need, lambda: cap, lambda: False))
            assert sorted(got) == sorted(S for S, e in ref if e <= cap)
            n += len(ref)
    assert n > 100
    c = random_chain(40, 0)
    d = OffloadData.of(c)
    need = 0.3 * float(d.x.sum())
    many = sum(1 for _ in itertools.islice(OM._covering_sets(d, need, lambda: math.inf, lambda: False), 5000))
    stopped = sum(1 for _ in OM._covering_sets(d, need, lambda: math.inf, lambda: True))
    assert many == 5000 and stopped < 1024        # stop is asked every 1024 nodes


def test_cover_search_finds_the_best_no_wait_set_and_the_milp_keeps_its_optimum():
    """The set search of the MILP (issue 21) on random chains: (a) without the excess filter it returns
    the best no-wait schedule over all minimal covering sets (brute force), never worse than its start,
    as the validator measures it; (b) the model solved with ``y`` fixed to the optimal schedule's set
    reproduces the proven optimum; (c) the MILP with the search first returns the same optimum."""
    import time as _time

    import memplan.formulations.offload_milp as OM
    from memplan.models.offload import OffloadData

    found = ran = 0
    for L, seed, frac, beta in ((5, 4, 0.4, 0.5), (6, 0, 0.2, 1.0), (6, 5, 0.4, 0.5), (7, 3, 0.3, 1.0)):
        c = random_chain(L, seed)
        mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
        M = mf + frac * (mp - mf)
        g = B.greedy(c, M, beta)
        best = g.objective
        for S, _ in _minimal_covering_sets(c, mp - M):
            try:
                best = min(best, validate_offload(c, no_wait_schedule(c, M, beta, S), M).makespan)
            except (NoWaitInfeasible, InvalidOffloadSchedule):
                pass
        sc, v, stats = OM._cover_search(c, M, beta, g.schedule, g.objective, -math.inf, _time.monotonic() + 30)
        assert stats["complete"] and v == pytest.approx(best, rel=1e-12)
        assert validate_offload(c, sc, M).makespan == pytest.approx(v, rel=1e-12)
        found += v < g.objective * (1 - 1e-6)
        ref = solve_offload_milp(c, M, beta, start=g.schedule, threads=1, time_limit=20)
        assert ref.status == Status.OPTIMAL and ref.objective <= v * (1 + 1e-9)
        S_opt = sorted(ref.schedule.offload)
        d = OffloadData.of(c)
        mdl, info = OM.build_offload_arrays(c, M, beta, horizon=g.objective)
        solver = OM._SetSolver(c, M, beta, mdl, info, d, 1)
        sched, val, runs = OM._polish_sets(solver, [(g.objective, S_opt, g.schedule)], g.schedule,
                                           g.objective * (1 + 1e-6), _time.monotonic() + 20, sub_limit=20)
        assert runs[0][1] == "optimal" and val == pytest.approx(ref.objective, rel=1e-6)
        assert validate_offload(c, sched, M, tol=1e-6).makespan == pytest.approx(val)
        s = solve_offload_milp(c, M, beta, start=g.schedule, threads=1, time_limit=20, cover=0.3)
        assert s.status == Status.OPTIMAL and s.objective == pytest.approx(ref.objective, rel=1e-6)
        # the search runs unless the start is already within the gap of the fractional bound
        assert "cover" in s.details or g.objective <= s.bound * (1 + 1e-6)
        ran += "cover" in s.details
    assert found >= 2 and ran >= 2


def test_split_bound_never_exceeds_the_optimum_and_often_reaches_it():
    """The split relaxation (whole transfers; :mod:`baselines.offload_bound`) against proven optima of
    the MILP on random chains: at every split computation, with and without relaxed (instant)
    activations, it is a lower bound; at the default split it is often the optimum itself, and above
    the fractional bound of Theorem 2 on some instances (so it bounds what that one cannot). With a
    cutoff equal to the optimum it never goes above it. Restricted to the optimal schedule's set it is a
    lower bound of that set's best schedule, that is the optimum."""
    from memplan.baselines.offload_bound import SplitRelaxation, split_bound
    from memplan.formulations.offload_milp import fractional_bound

    n = tight = above = 0
    for L, seed, frac, beta in itertools.product((3, 5, 6), (0, 1, 2), (0.0, 0.4), (0.4, 2.0)):
        c = random_chain(L, seed)
        mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
        M = mf + frac * (mp - mf)
        opt = solve_offload_milp(c, M, beta, start=B.greedy(c, M, beta).schedule, threads=1, time_limit=30)
        assert opt.status == Status.OPTIMAL
        v = opt.objective
        if M >= mp:                                  # nothing to offload: no bound to give
            assert split_bound(c, M, beta) is None
            continue
        for q in range(2 * L + 2):
            for mi in (22, 2):
                assert split_bound(c, M, beta, split=q, max_items=mi).value <= v * (1 + 1e-9)
        assert split_bound(c, M, beta, cutoff=v).value <= v
        sb = split_bound(c, M, beta)
        tight += sb.value >= v * (1 - 1e-9)
        above += sb.value > (fractional_bound(c, M, beta) or 0.0) * (1 + 1e-6)
        S = sorted(opt.schedule.offload)
        assert SplitRelaxation(c, M, beta).bound(S).value <= v * (1 + 1e-9)
        n += 1
    assert n >= 30 and tight >= 0.7 * n and above >= 5


def test_split_bound_on_a_hand_instance():
    """By hand: x = (4, 1, 1, 0), ex^B_1 = 6, unit times, M = 8 (the minimum). B_1 needs 12 - 8 = 4 bytes
    away, which only x_0 (4 bytes) gives, so x_0 is offloaded from time 0 (c_0 = 4 / beta), B_1 waits for
    that offload to end, x_0 comes back after B_1 (its memory must stay away during B_1) and before B_0:
    the optimum is max(c_0, u(F_0) + u(F_1)) + u(B_1) + c_0 + u(B_0), and the split bound, which sees
    both whole transfers, is exactly that."""
    from memplan.baselines.offload_bound import split_bound

    c = hand_chain()
    mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
    assert (mf, mp) == (8.0, 12.0)
    for beta in (1.0, 4.0):
        opt = solve_offload_milp(c, mf, beta, threads=1, time_limit=20)
        sb = split_bound(c, mf, beta)
        want = max(4 / beta, 2) + 1 + 4 / beta + 1
        assert opt.status == Status.OPTIMAL and opt.objective == pytest.approx(want, rel=1e-9)
        assert sb.value == pytest.approx(want, rel=1e-9) and sb.absent == [0]


def test_set_descent_reaches_the_optimum_from_a_worse_set():
    """The set descent of the MILP (issue 21) started from GREEDY's schedule on random chains where
    that is not optimal: it never returns worse than its start, every schedule replays, and on these
    small chains it ends at the proven optimum (the optimal set is within a few moves)."""
    import time as _time

    import memplan.formulations.offload_milp as OM
    from memplan.baselines.offload_bound import SplitRelaxation
    from memplan.models.offload import OffloadData

    reached = 0
    for L, seed, frac, beta in ((5, 4, 0.4, 0.5), (6, 0, 0.2, 1.0), (6, 5, 0.4, 0.5), (7, 3, 0.3, 1.0)):
        c = random_chain(L, seed)
        mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
        M = mf + frac * (mp - mf)
        g = B.greedy(c, M, beta)
        ref = solve_offload_milp(c, M, beta, start=g.schedule, threads=1, time_limit=20)
        d = OffloadData.of(c)
        mdl, info = OM.build_offload_arrays(c, M, beta, horizon=g.objective)
        solver = OM._SetSolver(c, M, beta, mdl, info, d, 1)
        rel = SplitRelaxation(c, M, beta)
        sched, val, stats = OM._set_descent(solver, lambda S, cut: rel.bound(S, cutoff=cut).value, g.schedule,
                                            g.objective, _time.monotonic() + 30)
        assert val <= g.objective and validate_offload(c, sched, M, tol=1e-6).makespan == pytest.approx(val)
        assert val >= ref.objective * (1 - 1e-6)
        reached += val <= ref.objective * (1 + 1e-6)
    assert reached >= 3


def test_front_end_milp_reports_the_split_bound():
    """``memplan.offload.solve(method="milp")`` takes the split relaxation as its bound: on a random chain
    where it is above the fractional bound, the Solution's bound is at least it, and the status is
    optimal once the best schedule reaches it."""
    from memplan import offload
    from memplan.baselines.offload_bound import split_bound
    from memplan.formulations.offload_milp import fractional_bound

    seen = 0
    for L, seed, frac, beta in itertools.product((4, 5), (0, 1, 2, 3), (0.0, 0.4), (0.4, 2.0)):
        c = random_chain(L, seed)
        mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
        M = mf + frac * (mp - mf)
        if M >= mp:
            continue
        sb = split_bound(c, M, beta)
        if not sb.value > (fractional_bound(c, M, beta) or 0.0) * (1 + 1e-6):
            continue
        sol = offload.solve(c, memory=M, bandwidth=beta, method="milp", time_limit=20, threads=1)
        assert sol.bound >= sb.value * (1 - 1e-9) and sol.objective >= sol.bound * (1 - 1e-9)
        assert sol.status == Status.OPTIMAL
        assert sol.details["split_bound"]["value"] <= sb.value * (1 + 1e-9)      # cut off at the optimum
        seen += 1
        if seen == 4:
            break
    assert seen == 4


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 20), st.integers(-5, 20), st.integers(0, 9)), max_size=12),
       st.lists(st.integers(-8, 25), min_size=1, max_size=20))
def test_memory_profile_sums_equal_the_dense_comparison(intervals, instants):
    """fractional_makespan's memory profile (sorted endpoints and prefix sums) against the dense
    comparison of every interval with every instant it replaced: sum_j w_j [a_j <= t < b_j] (empty
    intervals weigh nothing) and a burst's bytes sent by t, sum_j max(0, min(t, b_j) - a_j)."""
    from memplan.models.offload import _interval_sum, _ramp_sum

    a = np.array([float(i[0]) for i in intervals])
    b = np.array([float(i[1]) for i in intervals])
    w = np.array([float(i[2]) for i in intervals])
    t = np.array(instants, dtype=float)
    dense = [sum(wj for aj, bj, wj in zip(a, b, w) if aj <= tk < bj) for tk in t]
    assert _interval_sum(a, b, w, t).tolist() == pytest.approx(dense, abs=1e-12)
    bursts = [(aj, bj) for aj, bj in zip(a, b) if aj <= bj]
    A = np.array([p for p, _ in bursts]); Bb = np.array([q for _, q in bursts])
    sent = [sum(max(0.0, min(tk, q) - p) for p, q in bursts) for tk in t]
    assert (_ramp_sum(A, t) - _ramp_sum(Bb, t)).tolist() == pytest.approx(sent, abs=1e-12)

