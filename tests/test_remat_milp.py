"""remat-milp (formulations/remat_milp.py) against the exhaustive search, the floating DP and paper 004."""
from __future__ import annotations


import pytest

from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.baselines.remat_heuristics import store_all_schedule
from memplan.baselines.remat_rotor import floating, min_memory, persistent
from memplan.formulations.highs_driver import solve_milp
from memplan.formulations.remat_milp import build_remat_milp, schedule_from_model, solve_remat_milp, start_from_schedule
from memplan.models.chain import random_chain
from memplan.models.instance import load_chain
from memplan.models.remat import simulate_remat
from memplan.models.solution import Status

from conftest import remat_limits

MIB = 2 ** 20


def _check(chain, memory, sol):
    """The schedule replays under the limit with the reported values."""
    assert sol.schedule is not None, sol.message
    rep = simulate_remat(chain, sol.schedule, memory_limit=memory)
    assert rep.makespan == pytest.approx(sol.objective)
    assert rep.peak_memory == pytest.approx(sol.peak_memory)
    assert sol.peak_memory <= memory


def test_paper004_table2_90mib_proves_47_42ms():
    chain = load_chain("instances/paper004_table2.json")
    sol = solve_remat_milp(chain, 90 * MIB, threads=1, time_limit=30)
    assert sol.status == Status.OPTIMAL, sol.message
    _check(chain, 90 * MIB, sol)
    assert sol.objective * 1e3 == pytest.approx(47.42, abs=1e-6)
    assert sol.bound * 1e3 == pytest.approx(47.42, rel=1e-4)          # the proof: dual bound = optimum
    assert sol.predicted == pytest.approx(sol.objective, rel=1e-9)
    assert sol.peak_memory / MIB == pytest.approx(86.75, abs=0.01)       # paper: "only 86.8MB"


@pytest.mark.parametrize("L,seed", [(2, 0), (3, 1), (4, 0), (4, 3), (5, 1), (5, 5), (6, 2), (6, 3)])
def test_matches_exhaustive_and_floating(L, seed):
    chain = random_chain(L, seed)
    for memory in remat_limits(chain, (0.0, 0.2, 0.45, 0.75)):
        ex = exhaustive_remat(chain, memory)
        fl = floating(chain, memory, exact=True)
        sol = solve_remat_milp(chain, memory, threads=1, time_limit=20, mip_start=(seed % 2 == 0))
        assert ex is not None
        assert sol.status == Status.OPTIMAL, sol.message
        _check(chain, memory, sol)
        assert sol.objective == pytest.approx(ex[0], abs=1e-9)
        assert fl.objective == pytest.approx(ex[0], abs=1e-9)
        assert sol.bound == pytest.approx(ex[0], rel=1e-4)


@pytest.mark.parametrize("L,seed", [(7, 0), (7, 4), (8, 1), (8, 2)])
def test_matches_floating_dp_longer(L, seed):
    chain = random_chain(L, seed)
    for memory in remat_limits(chain, (0.05, 0.3, 0.6)):
        fl = floating(chain, memory, exact=True)
        sol = solve_remat_milp(chain, memory, threads=1, time_limit=20)
        assert sol.status == Status.OPTIMAL, sol.message
        _check(chain, memory, sol)
        assert sol.objective == pytest.approx(fl.objective, abs=1e-9)


def test_float_chain_without_start_matches_exhaustive():
    chain = random_chain(5, 11, integer=False)
    lo = min_memory(chain)
    hi = simulate_remat(chain, store_all_schedule(chain)).peak_memory
    for memory in (lo, lo + 0.3 * (hi - lo), lo + 0.7 * (hi - lo)):
        ex = exhaustive_remat(chain, memory)
        sol = solve_remat_milp(chain, memory, threads=1, time_limit=20, mip_start=False)
        _check(chain, memory, sol)
        assert sol.objective == pytest.approx(ex[0], rel=1e-9)


def test_infeasible_below_minimum_memory():
    chain = random_chain(4, 2)
    need = min_memory(chain)
    sol = solve_remat_milp(chain, need - 1, threads=1, time_limit=10)
    assert sol.status == Status.INFEASIBLE
    assert sol.schedule is None
    assert f"{need:.0f} B" in sol.message
    assert exhaustive_remat(chain, need - 1) is None
    ok = solve_remat_milp(chain, need, threads=1, time_limit=10)
    assert ok.status == Status.OPTIMAL and ok.peak_memory <= need


def test_mip_start_from_persistent_dp_is_a_feasible_point():
    """The persistent DP's sequence maps onto the variables, and fixing them gives the DP's makespan."""
    chain = random_chain(6, 7)
    memory = remat_limits(chain, (0.3,))[0]
    dp = persistent(chain, memory, exact=True)
    model = build_remat_milp(chain, memory)
    start = start_from_schedule(model, chain, dp.schedule)
    assert start is not None
    for var, value in start:
        if var.parent_component() is model.op:   # fixing the states too leaves HiGHS an empty model
            var.fix(value)
    res = solve_milp(model, threads=1, time_limit=10)
    assert res.status == Status.OPTIMAL
    assert res.objective * model.time_scale == pytest.approx(dp.objective, rel=1e-9)
    assert schedule_from_model(model).ops == dp.schedule.ops
    sol = solve_remat_milp(chain, memory, threads=1, time_limit=10)
    assert sol.details["mip_start"] == "MIP start from the persistent DP"
    assert sol.objective <= dp.objective + 1e-9


@pytest.mark.parametrize("method", ["remat-milp", "checkmate", "checkmate-lp"])
def test_dispatch_through_memplan_solve(method):
    """``memplan solve --problem remat --method <method>``: dispatch, simulator check and report."""
    import argparse

    from memplan.experiments.solve_remat import report, run_method

    chain = load_chain("instances/paper004_table2.json")
    args = argparse.Namespace(slots=500, exact=False, time_limit=20.0, gap=1e-4, threads=1, solver_log=None)
    sol = run_method(chain, 90 * MIB, method, args)
    assert sol.method == method and sol.schedule is not None
    text = report(sol, chain, args)
    assert "makespan" in text and sol.schedule.notation() in text
    if method == "remat-milp":
        assert "bound" in text and sol.objective * 1e3 == pytest.approx(47.42)
