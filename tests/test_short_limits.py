"""Short time limits and fixed costs (session 28): what the guards added for them must not change
an answer, and the pieces rewritten for speed must compute what the direct formulas compute."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import memplan
from memplan.baselines import offload as B
from memplan.formulations import highs_driver
from memplan.models.chain import random_chain
from memplan.models.offload import OffloadData, min_feasible_memory, peak_memory_no_offload, validate_offload
from memplan.models.solution import InputError, Status


def _direct_scores(chain, memory, bandwidth):
    """AutoSwap's scores by their definition: for each candidate, its absence and the excess over the
    limit of every computation overlapping it, interval by interval (O(L^2))."""
    d = OffloadData.of(chain)
    L = d.L
    b_out, b_in = (bandwidth, bandwidth) if not isinstance(bandwidth, tuple) else bandwidth
    t, comps = 0.0, []
    fwd_end = []
    for i in range(L + 1):
        mF = d.exF[i] + sum(d.x[:i + 2])
        comps.append((t, t + d.uF[i], max(0.0, mF - memory)))
        t += d.uF[i]
        fwd_end.append(t)
    b_start = [0.0] * (L + 1)
    for i in range(L, -1, -1):
        mB = d.exB[i] + d.y[i] + d.y[i + 1] + sum(d.x[:i + 2])
        comps.append((t, t + d.uB[i], max(0.0, mB - memory)))
        b_start[i] = t
        t += d.uB[i]
    rows = []
    for j in range(L + 1):
        a, b = fwd_end[j], b_start[j]
        doa = max(0.0, b - a)
        w = sum(ex * max(0.0, min(e, b) - max(s, a)) for s, e, ex in comps)
        rt = d.x[j] / b_out + d.x[j] / b_in if d.x[j] > 0 else 0.0
        rows.append([doa, d.x[j] * doa, w, w * (min(1.0, doa / rt) if rt > 0 else 1.0)])
    S = np.array(rows)
    mx = S.max(axis=0)
    mx[mx == 0] = 1.0
    return S / mx


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 25), seed=st.integers(0, 10_000), frac=st.floats(0.05, 1.2),
       beta=st.sampled_from([0.5, 3.0, 1e3, (2.0, 5.0)]))
def test_autoswap_scores_match_their_definition(L, seed, frac, beta):
    """The vectorized scores (prefix integral of the excess) equal the interval-by-interval sums."""
    c = random_chain(L, seed)
    M = peak_memory_no_offload(c) * frac
    got = B.autoswap_scores(c, M, beta)
    want = _direct_scores(c, M, beta)
    assert np.allclose(got, want, rtol=1e-9, atol=1e-12), (got, want)


# -------------------------------------------------------------------------- HiGHS's set-up guard
def _offload_case(L=12, seed=3, frac=0.1):
    """A case where the offload MILP's full model runs (no bound proves a heuristic optimal first)."""
    c = random_chain(L, seed)
    mf, mp = min_feasible_memory(c), peak_memory_no_offload(c)
    return c, mf + frac * (mp - mf)


def _record_options(monkeypatch):
    """The options every HiGHS run of the call is given, as a list of dicts."""
    seen = []
    real = highs_driver._new_highs

    def new():
        h = real()
        opts = {}
        seen.append(opts)
        set_option = h.setOptionValue

        def record(name, value):
            opts[name] = value
            return set_option(name, value)
        h.setOptionValue = record
        return h
    monkeypatch.setattr(highs_driver, "_new_highs", new)
    return seen


def test_a_mip_whose_setup_cannot_end_in_time_is_not_started(monkeypatch):
    """HiGHS's presolve and root set-up do not watch its time limit (0.57 M nonzeros: 2.6-5 s
    whatever the limit): a MIP whose set-up estimate exceeds what is left is not handed to HiGHS; the
    call still answers, with its best heuristic's schedule, within its limit."""
    c, M = _offload_case()
    monkeypatch.setattr(highs_driver, "SETUP_SECONDS_PER_NNZ", 1e3)      # every model 'needs' hours
    seen = _record_options(monkeypatch)
    t0 = time.monotonic()
    sol = memplan.offload.solve(c, memory=M, bandwidth=1.0, method="milp", time_limit=3, threads=1)
    assert time.monotonic() - t0 < 3.5
    assert seen == []                                                     # HiGHS never ran
    best = min(s.objective for s in (B.greedy(c, M, 1.0), B.dynprog(c, M, 1.0), B.autoswap(c, M, 1.0)) if s.success)
    assert sol.status == Status.TIME_LIMIT and "set-up of this model" in sol.message, sol.message
    assert sol.schedule is not None and sol.objective <= best * (1 + 1e-9)
    assert validate_offload(c, sol.schedule, M).makespan == pytest.approx(sol.objective, rel=1e-12)


def test_presolve_off_under_a_short_limit_gives_the_same_optimum(monkeypatch):
    """Below SLOW_SETUP_SECONDS_PER_NNZ per nonzero of what is left, presolve and feasibility jump
    are off: the optimum found is the same (checked against the default run)."""
    c, M = _offload_case()
    seen = _record_options(monkeypatch)
    ref = memplan.offload.solve(c, memory=M, bandwidth=1.0, method="milp", time_limit=30, threads=1)
    assert seen and all("presolve" not in o for o in seen)
    seen.clear()
    monkeypatch.setattr(highs_driver, "SLOW_SETUP_SECONDS_PER_NNZ", 1e3)
    off = memplan.offload.solve(c, memory=M, bandwidth=1.0, method="milp", time_limit=30, threads=1)
    assert seen and all(o.get("presolve") == "off" and o.get("mip_heuristic_run_feasibility_jump") is False
                        for o in seen)
    assert ref.status == off.status == Status.OPTIMAL
    assert off.objective == pytest.approx(ref.objective, rel=1e-6)


# ----------------------------------------------------------------------- report/gantt of a problem
@pytest.mark.parametrize("module", ["offload", "pipeline", "remat_offload"])
def test_report_of_another_problems_solution_is_refused(module):
    chain = random_chain(6, seed=1)
    sol = memplan.remat.solve(chain, memory=1e12, method="rotor")
    with pytest.raises(InputError, match=r"this Solution is of problem 'remat': use memplan\.remat\.report"):
        getattr(memplan, module).report(sol, chain)


def test_gantt_of_a_problem_without_one_says_so(tmp_path):
    chain = random_chain(6, seed=1)
    sol = memplan.remat.solve(chain, memory=1e12, method="rotor")
    with pytest.raises(InputError, match=r"draws offload schedules only \(memplan\.remat has no gantt\)"):
        memplan.offload.gantt(sol, chain, tmp_path / "g.png")
    with pytest.raises(InputError, match="report takes a Solution"):
        memplan.remat.report("rotor", chain)


# ------------------------------------------------------------------ heuristics' fixed costs, bounded
def test_dynprog_stops_between_levels_and_falls_back_on_greedy():
    """Algorithm 1 costs about 3 ms per level at 20,000 states: past its deadline it stops between
    two levels, and DYNPROG answers with GREEDY's schedule, saying why."""
    c, M = _offload_case(L=40, seed=1, frac=0.3)
    sets, info = B.dynprog_sets(c, M, 1.0, slots=500, deadline=time.monotonic() - 1.0)
    assert sets == [] and info["stopped"] and info["levels"] == 0
    full, info_full = B.dynprog_sets(c, M, 1.0, slots=500)
    assert full and not info_full.get("stopped")
    sol = B.dynprog(c, M, 1.0, time_limit=0.0)
    g = B.greedy(c, M, 1.0)
    assert sol.success and g.success and sol.objective == pytest.approx(g.objective, rel=1e-12)
    assert "Algorithm 1 stopped at the time limit before its last level" in sol.message, sol.message
    given = B.dynprog(c, M, 1.0, slots=500, time_limit=0.0)
    assert given.objective == pytest.approx(g.objective, rel=1e-12)
    assert "stopped at the time limit after 0 of its 41 levels; GREEDY's set is used" in given.message


def _forward_fits_direct(d, M, beta, n):
    """TFLMS's forward-phase check, operation by operation (the definition the vectorized check follows)."""
    tF = np.concatenate([[0.0], np.cumsum(d.uF)[:-1]])
    eF = tF + d.uF
    link, rel = 0.0, []
    for j in range(min(n, d.L + 1)):
        link = max(link, 0.0 if j == 0 else eF[j - 1]) + d.x[j] / beta
        rel.append((max(link, eF[j]), d.x[j]))
    for i in range(d.L + 1):
        freed = sum(sz for t, sz in rel if t <= tF[i])
        if sum(d.x[:i + 2]) + d.exF[i] - freed > M + 1e-9 * max(1.0, M):
            return False
    return True


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 20), seed=st.integers(0, 10_000), frac=st.floats(0.1, 1.1), beta=st.sampled_from([0.3, 2.0, 50.0]))
def test_tflms_forward_check_matches_its_definition(L, seed, frac, beta):
    c = random_chain(L, seed)
    d = OffloadData.of(c)
    M = peak_memory_no_offload(c) * frac
    for n in range(L + 2):
        assert B._tflms_forward_fits(d, M, beta, n) == _forward_fits_direct(d, M, beta, n), n


def _least_memory_transfers_by_scan(chain, bandwidth, ops):
    """The least-memory schedule's transfers and release times by its definition: before each
    operation, every stored value (k = 0..L) on the device that it does not read goes to the host,
    then the values it reads come back; a scan of all L + 1 values per operation (O(L^2), as the
    schedule was first written)."""
    from memplan.baselines.remat_offload_min_memory import _A, _AB

    L = chain.L
    wa, wab = chain.wa, chain.wabar
    state, host = [0] * (L + 2), [False] * (L + 2)
    state[0] = _A
    total = float(chain.uf.sum() + chain.ub.sum()) + 2 * float(np.maximum(wa, wab)[:L + 1].sum()) / bandwidth
    gap = max(1e-6 * total, 1e-9)
    t, release, moves = 0.0, [], []
    for op, l in ops:
        reads = (l, l - 1) if op == "B" else (l - 1,)
        for k in range(L + 1):
            size = wab[k] if state[k] == _AB else wa[k] if state[k] == _A else 0.0
            if state[k] and not host[k] and k not in reads and k != l and size > 0:
                moves.append(("offload", k, float(size), t))
                t += size / bandwidth + gap
                host[k] = True
        for k in reads:
            if k <= L and host[k]:
                size = wab[k] if state[k] == _AB else wa[k]
                moves.append(("prefetch", k, float(size), t))
                t += size / bandwidth + gap
                host[k] = False
        release.append(t)
        t += (chain.ub[l] if op == "B" else chain.uf[l]) + gap
        if op == "B":
            state[l] = 0
            if state[l - 1] == _A:
                state[l - 1] = 0
        else:
            state[l] = _AB if op == "F_all" else max(state[l], _A)
            if op == "F_none":
                state[l - 1] = 0
    return release, moves


@settings(max_examples=60, deadline=None)
@given(L=st.integers(1, 30), seed=st.integers(0, 10_000), integer=st.booleans(),
       bandwidth=st.sampled_from([1.0, 1e3, 1e10]))
def test_least_memory_schedule_matches_the_scan_of_every_value(L, seed, integer, bandwidth):
    """The least-memory schedule of remat + offloading keeps the few values on the device in a set
    (O(L)); its transfers and release times are the full scan's, exactly."""
    from memplan.baselines.remat_offload_min_memory import min_memory_schedule

    c = random_chain(L, seed, integer=integer)
    got = min_memory_schedule(c, bandwidth)
    release, moves = _least_memory_transfers_by_scan(c, bandwidth, got.ops)
    assert list(got.release) == release
    assert [(m.kind, m.index, m.nbytes, m.release) for m in got.transfers] == moves


def test_the_least_memory_candidate_is_not_made_where_it_cannot_win():
    """remat-offload's portfolio: where a candidate already takes the compute time alone (no schedule
    is faster), the least-memory schedule is not made, and the candidates say so; the answer is the
    same optimum. Where nothing fits, it still states the least memory."""
    c = random_chain(12, 3)
    hi = memplan.remat.memory_range(c)[1]
    sol = memplan.remat_offload.solve(c, memory=0.8 * hi, bandwidth=1e12, time_limit=30)
    assert sol.status == Status.OPTIMAL and sol.objective == pytest.approx(float(c.store_all_time()), rel=1e-9)
    assert sol.details["candidates"]["least-memory schedule"].startswith("not made: a candidate already takes")
    from memplan.baselines.remat_offload_min_memory import min_memory

    need = min_memory(c, 1e3)
    low = memplan.remat_offload.solve(c, memory=need.lower * 0.5, bandwidth=1e3, time_limit=30)
    assert low.status == Status.INFEASIBLE and low.details["min_memory"] == need.value


@settings(max_examples=40, deadline=None)
@given(L=st.integers(2, 40), seed=st.integers(0, 10_000), P=st.integers(2, 4), data=st.data())
def test_partition_load_bound_from_prefix_sums_is_partition_period(L, seed, P, data):
    """The exhaustive partition search orders partitions by a load bound from prefix sums (O(P) a
    partition; the direct sums took 4.5 s for L = 3000 on 2 GPUs): it is partition_period's value."""
    import itertools

    from memplan.baselines.pipeline import (_cuts_to_stages, _link_time, _load_bound, _stage_times,
                                            partition_period)
    from memplan.models.pipeline import task_data

    td = task_data(random_chain(L, seed), float(data.draw(st.sampled_from([1.0, 1e3, 1e9]))))
    cum = _stage_times(td)
    links = [0.0] + [_link_time(td, b) for b in range(1, L)]
    S = data.draw(st.integers(1, min(P, L)))
    cuts = tuple(sorted(data.draw(st.sampled_from(list(itertools.combinations(range(1, L), S - 1))))))
    assert _load_bound(cum, links, cuts, L) == pytest.approx(partition_period(td, _cuts_to_stages(cuts, L)), rel=1e-12)


def test_a_cyclic_model_that_cannot_be_built_in_time_is_not_built(monkeypatch):
    """The pipeline's cyclic MILP is built only where its estimated build ends before the deadline; else
    NO_SOLUTION, saying so, and nothing is built (a 5 s cyclic call on 100 layers took 9.4 s)."""
    from memplan.formulations import pipeline_cyclic as pc
    from memplan.models.pipeline import task_data

    td = task_data(random_chain(100, 1), 1e10)
    built = []
    monkeypatch.setattr(pc, "build_cyclic_model", lambda *a, **k: built.append(1) or (_ for _ in ()).throw(AssertionError))
    layer_gpu = [1] * 50 + [2] * 50
    T = float(td.d[1:].sum())
    r = pc.solve_cyclic(td, layer_gpu, T, 2, None, P=2, deadline=time.monotonic() + 0.5 * pc.build_seconds(100, 2))
    assert r.schedule is None and r.status == Status.NO_SOLUTION and "not built" in r.message and not built


def test_a_milp_whose_root_would_overrun_the_call_is_not_started():
    """A MILP known to run past HiGHS's limit in its root (``root_overrun`` seconds per nonzero) gets
    the call's time less that overrun, and is not started where nothing would be left."""
    from memplan.models.budget import Budget
    from memplan.formulations.highs_driver import solve_milp
    import pyomo.environ as pyo

    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(10), domain=pyo.NonNegativeIntegers, bounds=(0, 3))
    m.c = pyo.Constraint(expr=sum(m.x[j] for j in range(10)) <= 20.5)      # integers: at most 20
    m.o = pyo.Objective(expr=sum(m.x[j] for j in range(10)), sense=pyo.maximize)
    with Budget(time_limit=1.0).active():
        got = solve_milp(m, time_limit=10, root_overrun=1.0)     # 10 nonzeros: 2.5 s (the cap) > 1 s left
    assert got.status == Status.NO_SOLUTION and "root" in got.message and "solve" not in got.times
    with Budget(time_limit=30.0).active():
        ok = solve_milp(m, time_limit=10, root_overrun=1e-6)
    assert ok.status == Status.OPTIMAL and ok.objective == pytest.approx(20.0)


def test_the_joint_dp_is_not_started_where_it_cannot_end_in_time(monkeypatch):
    """remat-offload's portfolio, slots of its own choosing, a candidate in hand: the joint DP whose
    estimate exceeds the time left is not started (at L = 3000 it was started with no time left and
    took 0.9 s to stop, 3.2 s for a 1 s call); the answer is the best candidate, TIME_LIMIT saying so."""
    import memplan.remat_offload as ro

    monkeypatch.setattr(ro, "_DP_SECONDS", 1.0)          # every DP run estimated far beyond the limit
    c = random_chain(12, 3)
    hi = memplan.remat.memory_range(c)[1]
    t0 = time.monotonic()
    sol = ro.solve(c, memory=0.5 * hi, bandwidth=0.1, time_limit=5)
    assert time.monotonic() - t0 < 5
    assert sol.status == Status.TIME_LIMIT and sol.success and "was not run, it would not end in time" in sol.message
    assert not sol.details["candidate"].startswith("joint DP")
    assert "would not end within the time limit" in str(sol.details["candidates"])


# ------------------------------------------------- what a time limit cannot interrupt
def test_pace_is_wall_time_per_second_of_cpu_the_call_got():
    """Budget.pace: a call that did not get the CPU (here: asleep, as a process on a loaded machine
    waits for a core) runs at the cap, one that computed all along at about 1; 1 before 50 ms have
    passed and without a time limit."""
    from memplan.models import budget as B

    b = B.Budget(10.0)
    assert b.pace() == 1.0                                 # too early to tell
    time.sleep(0.3)
    assert b.pace() == B.PACE_MAX                          # 0.3 s of wall time, next to no CPU
    assert B.Budget(None).pace() == 1.0
    busy = B.Budget(10.0)
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        pass
    assert 1.0 <= busy.pace() < B.PACE_MAX                 # it got its CPU: below the cap, where sleep is


def test_a_model_whose_compilation_cannot_end_in_time_is_not_compiled():
    """solve_milp's ``build_seconds``: Pyomo's compilation into a matrix (about 0.6 x the build, not
    bounded by HiGHS's limit) is not started where the call's time left would not cover it."""
    import pyomo.environ as pyo

    from memplan.formulations.highs_driver import solve_milp
    from memplan.models.budget import Budget

    m = pyo.ConcreteModel()
    m.x = pyo.Var(range(10), domain=pyo.NonNegativeIntegers, bounds=(0, 3))
    m.c = pyo.Constraint(expr=sum(m.x[j] for j in range(10)) <= 20.5)
    m.o = pyo.Objective(expr=sum(m.x[j] for j in range(10)), sense=pyo.maximize)
    with Budget(time_limit=2.0).active():
        got = solve_milp(m, time_limit=10, build_seconds=5.0)       # 3 s of compilation > 2 s left
    assert got.status == Status.NO_SOLUTION and "compiling the model" in got.message and "compile" not in got.times
    with Budget(time_limit=30.0).active():
        ok = solve_milp(m, time_limit=10, build_seconds=0.01)
    assert ok.status == Status.OPTIMAL and ok.objective == pytest.approx(20.0)


class _CountingClock:
    """A build clock whose deadline passes after ``n`` questions."""

    def __init__(self, n):
        self.n, self.asked = n, 0

    def out(self):
        self.asked += 1
        return self.asked > self.n

    def check(self):
        from memplan.formulations.highs_driver import BuildInterrupted

        if self.out():
            raise BuildInterrupted("the call's time limit was reached while the model was being built")


def test_remat_milp_stops_building_at_the_deadline(monkeypatch):
    """The Pyomo rules of remat-milp's model add no row once the clock's deadline has passed, and the
    build stops at the end of that family (build and compilation used to run to their end: 7.2 s for a
    3 s call at L = 45 beside two busy loops); the answer is NO_SOLUTION, saying why (memplan.remat.solve
    then returns the MIP start)."""
    from memplan.formulations import highs_driver
    from memplan.formulations import remat_milp as rm

    chain = random_chain(20, 2)
    clock = _CountingClock(30)
    with pytest.raises(highs_driver.BuildInterrupted):
        rm.build_remat_milp(chain, 1e12, clock=clock)
    # the first family (c_t1_one_op: 231 rows) asked once per row, then the check between families
    assert clock.asked == 21 * 22 // 2 + 1
    full = rm.build_remat_milp(chain, 1e12, clock=_CountingClock(10 ** 9))
    assert len(full.c_d34_memory_backward) == 21
    monkeypatch.setattr(rm, "BuildClock", lambda: _CountingClock(0))
    sol = rm.solve_remat_milp(chain, 1e12, time_limit=20, threads=1)
    assert sol.status == Status.NO_SOLUTION and sol.details["interrupted"] == "build"


_SLOW_PYOMO = r'''
import importlib.abc, json, sys, time

class SlowPyomo(importlib.abc.MetaPathFinder):
    """pyomo.environ's import made 8 s slower (a loaded machine at its worst): it sleeps, as an
    import that no time limit interrupts would run, then the ordinary finders load it."""
    def find_spec(self, name, path=None, target=None):
        if name == "pyomo.environ":
            time.sleep(8.0)
        return None

sys.meta_path.insert(0, SlowPyomo())
import memplan
from memplan.baselines.pipeline import min_memory_contiguous
from memplan.models.pipeline import task_data
chain = memplan.random_chain(15, seed=1, integer=False)
memory = 1.3 * min_memory_contiguous(task_data(chain, 1e9), 2)[0]
pd = memplan.solve(chain, "pipeline", "pipedream", memory=memory, gpus=2, bandwidth=1e9, time_limit=3)
t0 = time.monotonic()
sol = memplan.solve(chain, "pipeline", "ilp", memory=memory, gpus=2, bandwidth=1e9, time_limit=3, threads=1)
wall = time.monotonic() - t0
print(json.dumps({"wall": wall, "status": str(sol.status), "objective": sol.objective,
                  "pipedream": pd.objective, "message": sol.message,
                  "pyomo_loaded": "pyomo.environ" in sys.modules}))
'''


def test_pipeline_ilp_does_not_wait_for_a_slow_pyomo_import(tmp_path):
    """The ILP's refinement builds Pyomo models, and the first of a process imports Pyomo, which no
    time limit interrupts (2-4 s beside busy loops on 2 cores: the 3 s call took 4.5 s). A fresh
    process whose Pyomo import takes 8 s: the call returns at its refinement's deadline (3 s less the
    1 s reserve) with the start pattern, status time_limit, never worse than PipeDream's partition.
    Before, it waited for the import (over 8 s). The bound of 4.5 s leaves a loaded machine 2.5 s."""
    import json
    import subprocess
    import sys

    script = tmp_path / "slow_pyomo.py"
    script.write_text(_SLOW_PYOMO)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["wall"] < 4.5, r
    assert r["status"] == "time_limit", r
    assert "refinement skipped: Pyomo's import had not ended" in r["message"], r
    assert r["objective"] is not None and r["pipedream"] is not None
    assert r["objective"] <= r["pipedream"] * (1 + 1e-9), r


def test_refinement_skipped_for_pyomo_returns_the_start_never_worse_than_pipedream(monkeypatch):
    """Deterministic: Pyomo not imported by the refinement's deadline (pyomo_ready False) -> no model
    is built (the refinement's searches and the ILP fail the test if called) and the answer is the
    best start pattern or PipeDream's schedule, whichever is faster, with status time_limit."""
    import memplan.pipeline as pl
    from memplan.baselines.pipeline import min_memory_contiguous
    from memplan.models.pipeline import task_data

    asked = []

    def not_ready(deadline=None):
        asked.append(deadline)
        return False

    def no_model(*a, **k):
        raise AssertionError("a Pyomo model was built although Pyomo's import had not ended")

    monkeypatch.setattr(pl, "pyomo_ready", not_ready)
    for name in ("known_allocations", "exact_refine", "solve_ilp"):
        monkeypatch.setattr(pl, name, no_model)
    chain = random_chain(15, seed=1, integer=False)     # PipeDream fits there (check_time_limits.py's case)
    memory = 1.3 * min_memory_contiguous(task_data(chain, 1e9), 2)[0]
    pd = memplan.solve(chain, "pipeline", "pipedream", memory=memory, gpus=2, bandwidth=1e9, time_limit=60)
    sol = memplan.solve(chain, "pipeline", "ilp", memory=memory, gpus=2, bandwidth=1e9, time_limit=60, threads=1)
    assert asked and all(d is not None and math.isfinite(d) for d in asked)
    assert sol.status == Status.TIME_LIMIT
    assert sol.objective is not None and sol.objective <= pd.objective * (1 + 1e-9)
    assert "Pyomo's import had not ended" in sol.message


def test_pyomo_ready_measures_the_import_against_the_deadline():
    """In this process Pyomo is imported already (or is imported by the first call): ready at once,
    even with a deadline in the past."""
    assert highs_driver.pyomo_ready(None)
    t0 = time.monotonic()
    assert highs_driver.pyomo_ready(time.monotonic() - 1.0)
    assert time.monotonic() - t0 < 0.5
    assert highs_driver.pyomo_first_use_seconds() <= highs_driver.PYOMO_FIRST_COMPILE_SECONDS


def test_cyclic_without_pyomo_in_time_returns_the_best_known_schedule(monkeypatch):
    """Method cyclic, Pyomo not imported by the call's end (pyomo_ready False): no search is built
    (cyclic_search fails the test if called) and the answer, status time_limit, is the best known
    schedule, never slower than PipeDream's."""
    import memplan.pipeline as pl
    from memplan.baselines.pipeline import min_memory_contiguous
    from memplan.models.pipeline import task_data

    def no_model(*a, **k):
        raise AssertionError("a Pyomo model was built although Pyomo's import had not ended")

    monkeypatch.setattr(pl, "pyomo_ready", lambda deadline=None: False)
    monkeypatch.setattr(pl, "cyclic_search", no_model)
    import memplan._pipeline_search as ps
    monkeypatch.setattr(ps, "balanced_allocation", no_model)
    chain = random_chain(15, seed=1, integer=False)
    memory = 1.3 * min_memory_contiguous(task_data(chain, 1e9), 2)[0]
    pd = memplan.solve(chain, "pipeline", "pipedream", memory=memory, gpus=2, bandwidth=1e9, time_limit=60)
    sol = memplan.solve(chain, "pipeline", "cyclic", memory=memory, gpus=2, bandwidth=1e9, time_limit=60, threads=1)
    assert sol.status == Status.TIME_LIMIT
    assert sol.objective is not None and sol.objective <= pd.objective * (1 + 1e-9)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_fork_during_the_background_pyomo_import_does_not_deadlock_the_child():
    """pyomo_ready's thread imports Pyomo in the background; a fork while it holds pyomo.environ's
    module lock left the child a lock no thread of it would release: the child's own ``import pyomo``
    waited forever (a multiprocessing pool started after a pipeline call that returned early). The fork
    now waits for the import to end. The import is made slow by a finder that sleeps while the lock is
    held, in the parent only; a fresh process, so that Pyomo is not imported yet."""
    script = textwrap.dedent('''
        import os, sys, time
        import memplan.formulations.highs_driver as hd

        class Slow:
            def find_spec(self, name, path=None, target=None):
                if name == "pyomo.environ" and os.getpid() == PARENT:
                    time.sleep(1.5)
                return None

        PARENT = os.getpid()
        sys.meta_path.insert(0, Slow())
        assert not hd.pyomo_ready(time.monotonic() + 0.3)      # still importing: the fork comes now
        pid = os.fork()
        if pid == 0:
            import pyomo.environ  # noqa: F401
            print("child imported pyomo", flush=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        print("child status", status, flush=True)
    ''')
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                             cwd=str(Path(__file__).resolve().parents[1]))
    except subprocess.TimeoutExpired:
        pytest.fail("the forked child waited forever on Pyomo's import lock")
    assert out.returncode == 0, out.stderr
    assert "child imported pyomo" in out.stdout and "child status 0" in out.stdout, out.stdout
