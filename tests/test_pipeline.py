"""Pipelined model parallelism (paper 003): simulator, eager 1F1B, ILP (1)-(36), baselines, the front end
memplan.pipeline (solve, report, input checks, the whole-call time limit), CLI."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from conftest import write_chain_instance
from hypothesis import given, settings, strategies as st

import memplan
from memplan.baselines.pipeline import best_feasible, gpipe_points, min_memory_contiguous, pipedream_points
from memplan.baselines.pipeline_eager import simulate_eager
from memplan.baselines.pipeline_modular import serial_pattern
from memplan.formulations.pipeline_ilp import build_model, check_values, solve_ilp, start_values
from memplan.models.chain import Chain, random_chain
from memplan.models.pipeline import (EagerResult, InvalidPattern, Pattern, memory_lower_bound, period_lower_bound,
                                     simulate_pattern, stages_to_layer_gpu, task_data)
from memplan.models.solution import InputError, Status
from memplan.pipeline import report, solve

BW = 5.0   # bytes per time unit for the integer test chains


def unit_chain(L=2, uf=1.0, ub=2.0, a=1.0, W=0.0):
    return Chain.from_stages(uf=[uf] * L, ub=[ub] * L, wa=[a] * (L + 1), weights=[W] * L, name=f"unit{L}")


# ----------------------------------------------------------------------------- simulator
def two_gpu_pattern():
    """L = 2, layer 1 on GPU 0, layer 2 on GPU 1, free communications: F1 [0,1), F2 [1,2),
    B2 [2,4), B1 [4,6) on a period of 6 (no pipelining)."""
    return Pattern(gpu=[0, 1, 1, 0], tau=[0, 1, 2, 4], tau_c=[1, 2, 4], T=6)


def test_simulator_hand_pattern():
    c = unit_chain()
    r = simulate_pattern(two_gpu_pattern(), c, None)
    assert r.period == pytest.approx(6)
    assert r.shifts == [0, 0, 0, 0]
    # GPU 0: buffers A[1] + A[3] = 2; during B1: stored a^0 (1) + input delta^1 (1) + output delta^0 (1)
    assert r.memory[0] == pytest.approx(5)
    # GPU 1: buffers 2; during B2: stored a^1 + inputs A[2] + output A[3] = 3
    assert r.memory[1] == pytest.approx(5)


def test_simulator_pipelined_shifts_and_memory():
    """Same allocation, period 3: GPU 0 runs B1 then F1, GPU 1 runs F2 then B2 (1F1B)."""
    c = unit_chain()
    p = Pattern(gpu=[0, 1, 1, 0], tau=[2, 0, 1, 0], tau_c=[3, 1, 3], T=3)
    r = simulate_pattern(p, c, None)
    assert r.period == pytest.approx(3)
    assert r.shifts == [0, 1, 1, 2]       # F1(i), F2(i-1), B2(i-1), B1(i-2)
    # GPU 0 during B1: two copies of a^0 stored (mini-batches i-1 and i-2) + delta^1 + delta^0 + buffers 2
    assert r.memory[0] == pytest.approx(6)


@pytest.mark.parametrize("bad,reason", [
    (Pattern(gpu=[0, 1, 1, 0], tau=[0, 1, 2, 0.5], tau_c=[1, 2, 4], T=3), "overlaps"),   # F1 and B1 overlap
    (Pattern(gpu=[0, 1, 0, 0], tau=[0, 1, 2, 4], tau_c=[1, 2, 4], T=6), "different GPUs"),
    (Pattern(gpu=[0, 1, 1, 0], tau=[0, 1, 2, 4], tau_c=[1, 2, 4], T=1.5), "lasts"),
    (Pattern(gpu=[0, 1, 1, 0], tau=[0, 1], tau_c=[1], T=6), "sizes"),
])
def test_simulator_rejects(bad, reason):
    with pytest.raises(InvalidPattern, match=reason):
        simulate_pattern(bad, unit_chain(), None)


def test_simulator_rejects_link_overlap_and_gpu_count():
    c = unit_chain()
    # bandwidth 1: each transfer lasts 1; forward [1,2) and backward [1.5,2.5) share the link 0-1
    p = Pattern(gpu=[0, 1, 1, 0], tau=[0, 2, 0, 3], tau_c=[1, 2, 1.5], T=5)
    with pytest.raises(InvalidPattern, match="link"):
        simulate_pattern(p, c, 1.0)
    ok = Pattern(gpu=[0, 1, 1, 0], tau=[0, 2, 0, 3], tau_c=[1, 2, 2], T=5)
    assert simulate_pattern(ok, c, 1.0).period == pytest.approx(5)
    with pytest.raises(InvalidPattern, match="GPUs"):
        simulate_pattern(two_gpu_pattern(), c, None, gpus=1)


def test_serial_pattern_matches_contiguous_min_memory():
    c = random_chain(6, 2)
    td = task_data(c, BW)
    mem, stages = min_memory_contiguous(td, 3)
    r = simulate_pattern(serial_pattern(td, stages_to_layer_gpu(stages, c.L)), c, BW)
    assert r.peak_memory == pytest.approx(mem)
    assert mem >= memory_lower_bound(td, 3)


# ----------------------------------------------------------------------------- eager 1F1B
def test_eager_hand_computable():
    c = unit_chain()                      # stage loads 3 and 3, free communications
    r1 = simulate_eager(task_data(c, None), [(1, 1), (2, 2)], noam=1, n_batches=100)
    r2 = simulate_eager(task_data(c, None), [(1, 1), (2, 2)], noam=2, n_batches=100)
    assert r1.period == pytest.approx(6)  # one mini-batch at a time: sum of all tasks
    assert r2.period == pytest.approx(3)  # 1F1B steady state: the stage load
    assert r1.sim.memory[0] == pytest.approx(5)
    assert r2.sim.memory[0] > r1.sim.memory[0]
    # with communications (bandwidth 1: each transfer 1): NOAM 1 adds the 2 transfers to the cycle
    r3 = simulate_eager(task_data(c, 1.0), [(1, 1), (2, 2)], noam=1, n_batches=100)
    assert r3.period == pytest.approx(8)
    # steady state extracted as a pattern replays with the same period and no more memory
    for r in (r1, r2, r3):
        assert r.pattern is not None
        s = simulate_pattern(r.pattern, c, 1.0 if r is r3 else None)
        assert s.period == pytest.approx(r.period)
        assert s.peak_memory <= r.peak_memory + 1e-9


# ----------------------------------------------------------------------------- ILP
def _brute_force_no_memory(c, P):
    """Independent formulation without memory limit and with free communications: any allocation
    can run with period = its largest GPU load, so T* = min over allocations of the max load."""
    td = task_data(c, None)
    load = [td.d[l] + td.d[td.backward(l)] for l in range(1, td.L + 1)]
    best = np.inf
    for alloc in itertools.product(range(P), repeat=td.L):
        loads = np.zeros(P)
        for l, g in enumerate(alloc):
            loads[g] += load[l]
        best = min(best, loads.max())
    return best


def test_ilp_one_gpu_is_sum():
    c = random_chain(4, 0)
    pat, res, _, _ = solve_ilp(task_data(c, BW), 1, 1e9, time_limit=20, threads=1)
    assert res.status == Status.OPTIMAL
    assert pat.T == pytest.approx(task_data(c, BW).d.sum())


def test_ilp_two_gpus_homogeneous_half():
    c = unit_chain(L=4)
    pat, res, _, _ = solve_ilp(task_data(c, None), 2, None, time_limit=20, threads=1)
    assert res.status == Status.OPTIMAL
    assert pat.T == pytest.approx(task_data(c, None).d.sum() / 2)
    assert simulate_pattern(pat, c, None, gpus=2).period == pytest.approx(pat.T)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ilp_equals_brute_force_without_memory(seed):
    c = random_chain(4, seed)
    pat, res, _, _ = solve_ilp(task_data(c, None), 2, None, time_limit=20, threads=1)
    assert res.status == Status.OPTIMAL
    assert pat.T == pytest.approx(_brute_force_no_memory(c, 2))


def test_ilp_memory_model_equals_simulator():
    """(1)-(36) evaluated at a baseline pattern's values: satisfied with M = its measured peak,
    (36) violated just below; so the ILP's memory is the simulator's."""
    c = random_chain(5, 3)
    td = task_data(c, BW)
    pts = pipedream_points(td, 3, n_batches=60)
    checked = 0
    for p in pts:
        if p.pattern is None:
            continue
        r = simulate_pattern(p.pattern, c, BW)
        ilp = build_model(td, 3, r.peak_memory, Tmax=p.pattern.T * 1.01)
        assert check_values(ilp, start_values(ilp, p.pattern)) == []
        ilp = build_model(td, 3, r.peak_memory * 0.999, Tmax=p.pattern.T * 1.01)
        bad = check_values(ilp, start_values(ilp, p.pattern))
        assert bad and all(b.startswith("c36_memory") for b in bad)
        checked += 1
    assert checked >= 2


@pytest.mark.parametrize("seed,P", [(0, 2), (1, 3), (4, 2)])
def test_ilp_vs_baselines_and_replay(seed, P):
    c = random_chain(5, seed)
    td = task_data(c, BW)
    pts = pipedream_points(td, P, n_batches=60) + gpipe_points(td, P, n_batches=60)
    mems = sorted(p.memory for p in pts)
    M = mems[len(mems) // 2]
    base = best_feasible(pts, M)
    sol = solve(c, memory_model="paper", memory=M, bandwidth=BW, gpus=P, method="ilp", time_limit=20, threads=1, points=pts)
    assert sol.success
    assert sol.peak_memory <= M * (1 + 1e-6)
    assert sol.objective == pytest.approx(sol.schedule.T)
    assert sol.objective >= period_lower_bound(td, P) * (1 - 1e-9)
    assert sol.objective <= base.period * (1 + 1e-6)
    # every baseline pattern replays with its claimed period and no more than its eager memory
    for p in pts:
        if p.pattern is not None:
            r = simulate_pattern(p.pattern, c, BW, gpus=P)
            assert r.period == pytest.approx(p.period, rel=1e-6)
            assert r.peak_memory <= p.memory + 1e-9


def test_infeasible_memory_message():
    c = random_chain(4, 1)
    mlb = memory_lower_bound(task_data(c, BW), 2)
    M = mlb * 0.9
    kw = dict(bandwidth=BW, gpus=2, time_limit=10, threads=1, n_batches=40)
    for method in ("ilp", "pipedream"):
        sol = solve(c, memory_model="paper", memory=M, method=method, **kw)
        assert sol.status == Status.INFEASIBLE
        assert "minimum memory that works" in sol.message
        assert sol.details["min_memory"] >= mlb
        if method == "ilp":   # the minimum reported (min-memory ILP) works, and nothing below it
            ok = solve(c, memory_model="paper", memory=sol.details["min_memory"] * (1 + 1e-9), method="ilp", **kw)
            assert ok.success and ok.peak_memory <= sol.details["min_memory"] * (1 + 1e-9)
            below = solve(c, memory_model="paper", memory=sol.details["min_memory"] - 0.5, method="ilp", **kw)
            assert below.status == Status.INFEASIBLE


def test_where_pipedream_beats_every_pattern_the_ilp_returns_its_schedule_and_says_what_a_pattern_needs():
    """A tiny analogue of the paper's Figure 8 exception: at 63 B, PipeDream's eager schedule reaches
    period 43 while the ILP proves 48 optimal among 1-periodic patterns; the exact fixed-allocation
    model of formulations/pipeline_cyclic.py agrees that no allocation has a pattern of period 43
    within 63 B. The method ilp then returns PipeDream's schedule (never slower than a baseline), with
    status feasible (48 is optimal among patterns only), the bound valid for every schedule, the ILP's
    pattern in details['ilp'], and the least memory a pattern of its allocation needs at period 43,
    equal to the exhaustive search's value for that allocation; the report says both."""
    from memplan.baselines.pipeline_exhaustive import exhaustive_search
    from memplan.formulations.pipeline_cyclic import min_memory_at_period

    c, bw, M = random_chain(3, 9, integer=True), 1.0, 63.0
    td = task_data(c, bw)
    sol = solve(c, memory_model="paper", memory=M, bandwidth=bw, gpus=2, method="ilp", time_limit=10, threads=1)
    bb, ilp = sol.details["best_baseline"], sol.details["ilp"]
    assert sol.status == Status.FEASIBLE and sol.objective == pytest.approx(43.0) and sol.peak_memory <= M
    assert isinstance(sol.schedule, EagerResult) and sol.bound == pytest.approx(period_lower_bound(td, 2))
    assert ilp["status"] == "optimal" and ilp["period"] == pytest.approx(48.0)
    assert bb["method"] == "pipedream" and bb["period"] == pytest.approx(43.0) and bb["memory"] <= M
    for alloc in itertools.product((0, 1), repeat=2):
        r, _ = min_memory_at_period(td, (0,) + alloc, bb["period"], P=2, time_limit=10, threads=1)
        assert r.status in (Status.OPTIMAL, Status.INFEASIBLE)
        assert r.schedule is None or r.sim.peak_memory > M
    mine = exhaustive_search(td, 2, allocs=[tuple(ilp["layer_gpus"])]).front()
    need = min(m for T, m in mine if T <= bb["period"] * (1 + 1e-9))
    pm = bb["pattern_memory"]
    assert pm["status"] == "optimal" and pm["memory"] == pytest.approx(need) and pm["memory"] > M
    text = report(sol, c)
    assert "a pattern of the ILP's allocation at the baseline's period needs" in text
    assert "ILP pattern  48 s (optimal among 1-periodic patterns" in text and "eager 1F1B" in text


def test_cli_pipeline(tmp_path):
    from memplan.experiments.cli import main

    c = random_chain(4, 5, integer=False)
    inst = write_chain_instance(c, tmp_path / "c.json")
    out = tmp_path / "sol.json"
    png = tmp_path / "g.png"
    rc = main(["solve", str(inst), "--problem", "pipeline", "--gpus", "2", "--memory", "20GB",
               "--bandwidth", "10GB/s", "--method", "ilp", "--time-limit", "10", "--threads", "1",
               "--json", str(out), "--gantt", str(png)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["problem"] == "pipeline" and data["schedule"]["kind"] == "pipeline-pattern"
    assert png.stat().st_size > 1000


def test_modular_pattern_and_eager_period_bounds():
    from memplan.baselines.pipeline import partition_period
    from memplan.baselines.pipeline_modular import modular_pattern

    c = unit_chain(L=4)
    p = modular_pattern(task_data(c, 1.0), [(1, 2), (3, 4)], 6.0)
    r = simulate_pattern(p, c, 1.0)
    assert r.period == pytest.approx(6.0)
    c = random_chain(8, 3, integer=False)
    td = task_data(c, 12e9)
    pts = pipedream_points(td, 3, n_batches=120)
    for q in pts:
        Tp = partition_period(td, q.stages)
        assert q.period >= Tp * (1 - 1e-9)          # no schedule beats the busiest resource
        r = simulate_pattern(modular_pattern(td, q.stages, q.period * (1 + 1e-9)), c, 12e9)
        assert r.period == pytest.approx(q.period, rel=1e-6)


def test_ilp_literal_and_layer_allocation_agree():
    """The paper's literal model (task pairs, (4) as rows) and the layer-pair substitution give the
    same optimum, under a memory limit that binds."""
    c = random_chain(4, 1)
    td = task_data(c, BW)
    M = 0.5 * (memory_lower_bound(td, 2) + min_memory_contiguous(td, 2)[0]) + 20
    out = []
    for la in (True, False):
        pat, res, _, _ = solve_ilp(td, 2, M, time_limit=30, threads=1, layer_allocation=la)
        assert res.status == Status.OPTIMAL
        r = simulate_pattern(pat, c, BW, gpus=2)
        assert r.peak_memory <= M + 1e-9 and r.period == pytest.approx(pat.T)
        out.append(pat.T)
    assert out[0] == pytest.approx(out[1])
    unbounded, _, _, _ = solve_ilp(td, 2, None, time_limit=30, threads=1)
    assert unbounded.T <= out[0] + 1e-9


def test_zero_duration_tasks_memory_consistency():
    """Layers of zero time (frequent in profiles) still hold their input and output for an instant;
    the simulator and (36) agree on patterns where such tasks touch their neighbours."""
    from memplan.baselines.pipeline import partition_period
    from memplan.baselines.pipeline_modular import modular_pattern

    c = Chain.from_stages(uf=[2, 0, 1, 0, 3], ub=[3, 0, 2, 0, 4], wa=[4, 6, 6, 2, 2, 5],
                          weights=[1, 0, 2, 0, 3], name="zeros")
    td = task_data(c, BW)
    checked = 0
    for stages in ([(1, 2), (3, 5)], [(1, 3), (4, 5)], [(1, 1), (2, 4), (5, 5)]):
        for bf in (False, True):
            T = 1.2 * partition_period(td, stages)
            p = modular_pattern(td, stages, T, backward_first=bf)
            r = simulate_pattern(p, c, BW)
            ilp = build_model(td, 3, r.peak_memory, Tmax=p.T * 1.01)
            assert check_values(ilp, start_values(ilp, p)) == []
            ilp = build_model(td, 3, r.peak_memory - 0.5, Tmax=p.T * 1.01)
            assert check_values(ilp, start_values(ilp, p))
            checked += 1
    assert checked == 6


def test_partition_search_exhaustive_and_local():
    """partition_search's exhaustive mode equals the best modular pattern over every contiguous
    partition (enumerated here by brute force); the local-search mode returns a valid pattern within
    the limit that is no worse than the modular pattern of its seed."""
    from memplan.baselines.pipeline import count_partitions, modular_search, partition_search

    c = random_chain(7, 2)
    td = task_data(c, BW)
    P = 3
    pts = pipedream_points(td, P, n_batches=60)
    M = sorted(p.memory for p in pts)[len(pts) // 3]
    L = c.L
    assert count_partitions(L, P) == 1 + 6 + 15
    brute = []
    for S in range(1, P + 1):
        for cuts in itertools.combinations(range(1, L), S - 1):
            b = [0, *cuts, L]
            q = modular_search(td, [(b[i] + 1, b[i + 1]) for i in range(S)], M, P, steps=6)
            if q is not None:
                brute.append(q.T)
    got = partition_search(td, P, M, refine=0)
    assert got is not None and got.T == pytest.approx(min(brute), rel=1e-9)
    r = simulate_pattern(got, c, BW, gpus=P)
    assert r.peak_memory <= M * (1 + 1e-9) and r.period == pytest.approx(got.T, rel=1e-6)

    seed = [tuple(s) for s in best_feasible(pts, M).stages]
    loc = partition_search(td, P, M, [seed], exhaustive_limit=0, max_evals=40)
    own = modular_search(td, seed, M, P)
    assert loc is not None and loc.T <= own.T * (1 + 1e-9)
    assert loc.T >= got.T * (1 - 1e-3)       # cannot beat the full enumeration by more than precision
    r = simulate_pattern(loc, c, BW, gpus=P)
    assert r.peak_memory <= M * (1 + 1e-9)


def test_ilp_start_from_given_patterns_only_when_they_fit():
    """A sweep passes the patterns found at smaller limits as starts: one that replays within the
    limit becomes the MIP start (the ILP then returns at least as good); one over it is ignored."""
    c, P = random_chain(6, 3), 2
    td = task_data(c, BW)
    pts = pipedream_points(td, P, n_batches=60) + gpipe_points(td, P, n_batches=60)
    # the optimal pattern without memory limit (the ILP alone, from the period lower bound)
    q, res, _, _ = solve_ilp(td, P, None, Tmin=period_lower_bound(td, P), time_limit=30, threads=1)
    assert res.status == Status.OPTIMAL
    peak = simulate_pattern(q, td, gpus=P).peak_memory
    assert min(p.period for p in pts) > q.T * (1 + 1e-6)   # the baselines alone start worse
    kw = dict(bandwidth=BW, gpus=P, method="ilp", time_limit=2, threads=1, points=pts, refine=False, starts=[q])
    got = solve(c, memory_model="paper", memory=peak, **kw)
    assert got.details["start_period"] == pytest.approx(q.T)
    assert got.objective <= q.T * (1 + 1e-9)
    tight = solve(c, memory_model="paper", memory=peak * 0.999, **kw)
    assert tight.details["start_period"] != pytest.approx(q.T)


# ----------------------------------------------------------------------------- front end: inputs, time limit
@pytest.mark.parametrize("kwargs,names", [
    (dict(gpus=0), "gpus"), (dict(gpus=-2), "gpus"), (dict(gpus=1.5), "gpus"),
    (dict(memory=None), "memory"), (dict(memory="lots"), "memory"), (dict(memory=-5), "memory"),
    (dict(bandwidth="fast"), "bandwidth"), (dict(method="nope"), "method"),
    (dict(periodicity=0), "periodicity"), (dict(n_batches=2), "n_batches"), (dict(gap=-1), "gap"),
    (dict(threads=0), "threads"), (dict(refine="yes"), "refine"), (dict(time_limit=0), "time_limit"),
    (dict(points=[1, 2]), "points"), (dict(allocations=[[0, 5, 0, 0]]), "allocations"),
    (dict(allocations=[[0, 1]]), "allocations"), (dict(starts=["pattern"]), "starts"),
])
def test_input_errors_name_the_input(kwargs, names):
    c = random_chain(4, 1)
    args = dict(memory=1000, bandwidth=BW, gpus=2, method="pipedream", n_batches=40) | kwargs
    with pytest.raises(InputError, match=names):
        solve(c, **(dict(memory_model="paper") | args))


def test_points_of_another_chain_or_too_many_stages_are_refused():
    c = random_chain(4, 1)
    other = pipedream_points(task_data(random_chain(5, 1), BW), 2, n_batches=40)
    with pytest.raises(InputError, match=r"points\[0\].*L = 4"):
        solve(c, memory_model="paper", memory=1000, bandwidth=BW, gpus=2, method="ilp", points=other)
    four = pipedream_points(task_data(c, BW), 4, n_batches=40)
    assert any(len(p.stages) > 2 for p in four)
    with pytest.raises(InputError, match="more than gpus=2"):
        solve(c, memory_model="paper", memory=1000, bandwidth=BW, gpus=2, method="ilp", points=four)


def test_memplan_solve_dispatches_and_report_reads_the_solution():
    c = random_chain(6, 1)
    sol = memplan.solve(c, "pipeline", "lb", memory="1KiB", bandwidth=BW, gpus=2)
    td = task_data(c, BW)
    assert sol.bound == pytest.approx(td.d[1:].sum() / 2)      # 109 / 2: two GPUs share all the work
    assert sol.gpus == 2 and sol.bandwidth == BW and sol.memory_limit == 1024
    head = report(sol, c).splitlines()[0]
    assert "GPUs 2" in head and "bandwidth 5 B/s" in head and "memory limit 1.000 KiB" in head


def test_sweep_stopped_by_its_time_limit_keeps_what_it_has():
    """A sweep given no time returns no point and says it is incomplete; PipeDream's method then
    answers 'time_limit' (the limit cut it before anything was tried), never 'infeasible' (which
    would claim a proof) nor 'no_solution'."""
    c = random_chain(6, 1)
    td = task_data(c, BW)
    full = pipedream_points(td, 2, n_batches=40)
    assert full.complete and len(full) == full.candidates > 0
    cut = pipedream_points(td, 2, n_batches=40, time_limit=0.0)
    assert not cut.complete and len(cut) == 0 and cut.candidates == 0   # stopped before the first DP
    sol = solve(c, memory_model="paper", memory=10**6, bandwidth=BW, gpus=2, method="pipedream", n_batches=40, time_limit=1e-6)
    assert sol.status == Status.TIME_LIMIT and "stopped at the time limit" in sol.message
    assert sol.schedule is None and not sol.success and "fits" not in sol.message


def test_whole_call_time_limit_with_progress():
    """ILP on a chain whose ILP does not close in a few seconds: the call returns within its limit
    (plus a margin for the last replay), with the best pattern found so far, a status that says the
    limit stopped it, and a progress line per phase."""
    import time

    c = random_chain(12, 3, integer=False)
    bw, P = 12e9, 4
    pts = pipedream_points(task_data(c, bw), P, n_batches=60)
    M = sorted(p.memory for p in pts)[len(pts) // 2]
    lines: list[str] = []
    limit = 6.0
    t0 = time.monotonic()
    sol = solve(c, memory_model="paper", memory=M, bandwidth=bw, gpus=P, method="ilp", time_limit=limit, threads=1, n_batches=60,
                progress=lines.append)
    wall = time.monotonic() - t0
    assert wall <= limit + 2.0 and sol.times["total"] <= limit + 2.0
    assert sol.status == Status.TIME_LIMIT and sol.success
    r = simulate_pattern(sol.schedule, c, bw, gpus=P)
    assert r.peak_memory <= M * (1 + 1e-9) and sol.objective == pytest.approx(r.period)
    assert sol.objective <= best_feasible(pts, M).period * (1 + 1e-9)      # at least as good as PipeDream
    text = "\n".join(lines)
    for phase in ("pipedream:", "gpipe:", "start:", "refine:", "ILP:"):
        assert phase in text, (phase, text)


def test_ilp_not_built_when_it_cannot_fit_returns_the_best_start(monkeypatch):
    """When building the ILP would not fit in what is left of the limit, the answer is the best start
    pattern (replayed), with status time_limit and a message that says the ILP did not run."""
    import memplan.pipeline as front

    c = random_chain(6, 1)
    td = task_data(c, BW)
    opt, res, _, _ = solve_ilp(td, 2, 127, time_limit=30, threads=1)     # the ILP itself, run directly
    assert res.status == Status.OPTIMAL
    pd = best_feasible(pipedream_points(td, 2, n_batches=60), 127)
    monkeypatch.setattr(front, "_BUILD_S_PER_ROW", 1.0)            # every ILP now 'takes' hours to build
    sol = solve(c, memory_model="paper", memory=127, bandwidth=BW, gpus=2, method="ilp", time_limit=30, threads=1, n_batches=60)
    assert sol.status == Status.TIME_LIMIT and "the ILP was not run" in sol.message
    assert "build" not in sol.times and sol.schedule is not None
    r = simulate_pattern(sol.schedule, c, BW, gpus=2)
    assert sol.objective == pytest.approx(r.period) and r.peak_memory <= 127
    # a pattern: no faster than the ILP's optimum, no slower than PipeDream's best point here
    assert opt.T * (1 - 1e-9) <= sol.objective <= pd.period * (1 + 1e-9)


@pytest.mark.parametrize("method", ["ilp", "cyclic", "pipedream"])
def test_task_data_is_built_once_per_solve(monkeypatch, method):
    """Issue 17: the task data of (chain, bandwidth) is built once per call and passed down."""
    import memplan.models.pipeline as definition
    import memplan.pipeline as front

    calls = []
    real = definition.task_data

    def counting(chain, bandwidth, memory_model="paper"):
        calls.append(bandwidth)
        return real(chain, bandwidth, memory_model)

    monkeypatch.setattr(definition, "task_data", counting)
    monkeypatch.setattr(front, "task_data", counting)
    sol = solve(random_chain(5, 0), memory=10**4, bandwidth=BW, gpus=2, method=method, time_limit=20, threads=1,
                n_batches=40)
    assert sol.success and calls == [BW]


@pytest.mark.parametrize("method", ["ilp", pytest.param(None, marks=pytest.mark.long)])
def test_ilp_pattern_the_simulator_rejects_is_never_reported(monkeypatch, method):
    """Transfers of 1e6 s beside computations of 1e-3 s (100 MB at 5 B/s) are beyond HiGHS's tolerances:
    the ILP's optimal pattern replays over the limit. The call must not raise nor report that pattern.
    The pattern the ILP returns inside the call is captured and replayed here: it really is over the
    limit (so the case exercises the rejection), and the Solution then has no schedule, status ERROR
    and a message with the replayed memory and the reason; the default method (the ILP) the same
    (marked long: benchmarks/long_checks.sh)."""
    import memplan
    from memplan import pipeline as front
    from memplan.baselines.pipeline_modular import snap_period
    from memplan.models.pipeline import simulate_pattern, task_data
    from memplan.models.units import fmt_memory

    captured = []

    def spy(*args, **kw):
        out = solve_ilp(*args, **kw)
        captured.append(out[0])
        return out

    monkeypatch.setattr(front, "solve_ilp", spy)
    c = random_chain(6, 1, integer=False)
    M = 942956035.9005135
    td = task_data(c, 5, "paper")
    for method in (method,):
        captured.clear()
        sol = memplan.pipeline.solve(c, memory=M, bandwidth=5, gpus=2, method=method, memory_model="paper",
                                     n_batches=60, threads=1, time_limit=60)
        assert len(captured) == 1 and captured[0] is not None
        # the front end judges the ILP's pattern with its period snapped to the bound it reports
        sim = simulate_pattern(snap_period(captured[0], td, sol.bound, memory=M, gpus=2), td, gpus=2)
        assert sim.peak_memory > M * (1 + 1e-6)
        assert sol.status == Status.ERROR and sol.schedule is None and sol.objective is None
        assert f"replays with {fmt_memory(sim.peak_memory)} per GPU, over the limit" in sol.message
        assert "tolerances" in sol.message


# ------------------------------------------------------------------ PipeDream's planner DP, brute force
def _planner_cost(td, stages, noam, target):
    """The planner's objective of a contiguous partition (inf when a stage breaks its memory estimate):
    the slowest stage's compute, or twice the busier direction of a boundary's link."""
    from memplan.baselines import pipeline as bp
    worst = 0.0
    for s, (a, b) in enumerate(stages):
        act = sum(bp._planner_activation(td, l) for l in range(a, b + 1)) + bp._planner_stage_input(td, a)
        if max(1, noam - s) * (act + sum(td.W[a:b + 1])) > target:
            return math.inf
        comp = sum(td.d[l] + td.d[td.backward(l)] for l in range(a, b + 1))
        comm = 2 * max(td.dc[a - 1], td.dc[td.n - a + 1]) if a > 1 else 0.0
        worst = max(worst, comp, comm)
    return worst


@settings(max_examples=60, deadline=None)
@given(L=st.integers(1, 7), seed=st.integers(0, 10_000), P=st.integers(1, 4), noam=st.integers(1, 6),
       frac=st.floats(0.02, 2.0), model=st.sampled_from(["paper", "autograd"]))
def test_pipedream_partition_is_the_best_contiguous_partition(L, seed, P, noam, frac, model):
    """The planner DP (vectorized over the previous boundary) against every contiguous partition into
    at most P stages: the same optimum, None exactly when none meets the memory estimate."""
    from memplan.baselines.pipeline import pipedream_partition
    c = random_chain(L, seed)
    td = task_data(c, 2.0, model)
    target = frac * (3 * sum(td.W) + sum(td.wa) + sum(td.S))
    best = math.inf
    for k in range(1, min(P, L) + 1):
        for cuts in itertools.combinations(range(1, L), k - 1):
            bounds = [0, *cuts, L]
            stages = [(bounds[s] + 1, bounds[s + 1]) for s in range(k)]
            best = min(best, _planner_cost(td, stages, noam, target))
    got = pipedream_partition(td, P, target, noam)
    if math.isinf(best):
        assert got is None
    else:
        assert got is not None and len(got) <= P
        assert _planner_cost(td, got, noam, target) == pytest.approx(best, rel=1e-12)


def test_below_the_memory_lower_bound_the_ilp_answers_at_once():
    """No baseline point, no start pattern and a limit under memory_lower_bound: INFEASIBLE without
    building the ILP (ResNet-18 on 4 GPUs at half the bound took 58 s of a 60 s limit), stating the
    proven bound and the serial pattern's memory, which replays within it."""
    import time as _time
    from memplan.baselines.pipeline import min_memory_contiguous
    chain = memplan.load_instance("resnet18-b8-224-cpu")[0]
    td = task_data(chain, 12e9, "autograd")
    mlb = memory_lower_bound(td, 4)
    t0 = _time.monotonic()
    sol = solve(chain, memory=0.5 * mlb, bandwidth=12e9, gpus=4, method="ilp", time_limit=60)
    assert _time.monotonic() - t0 < 15
    assert sol.status == Status.INFEASIBLE and "build" not in sol.times
    ub, stages = min_memory_contiguous(td, 4)
    assert sol.details["memory_lower_bound"] == mlb and sol.details["min_memory"] == ub
    pat = serial_pattern(td, stages_to_layer_gpu(stages, td.L))
    assert simulate_pattern(pat, td, gpus=4).peak_memory <= ub * (1 + 1e-9)
