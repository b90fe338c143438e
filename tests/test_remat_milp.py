"""remat-milp (formulations/remat_milp.py) against the exhaustive search, the floating DP and paper 004."""
from __future__ import annotations


import pytest

from memplan import remat
from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.baselines.remat_heuristics import store_all_schedule
from memplan.baselines.remat_rotor import floating, min_memory, persistent
from memplan.formulations.highs_driver import solve_milp
from memplan.formulations.remat_milp import build_remat_milp, schedule_from_model, solve_remat_milp, start_from_schedule
from memplan.models.chain import Chain, random_chain
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


def _dp_start(chain, memory):
    """The MIP start memplan.remat gives remat-milp on small integer chains: the exact persistent DP."""
    dp = persistent(chain, memory, exact=True)
    assert dp.success, dp.message
    return dp.schedule


@pytest.mark.parametrize("L,seed", [(2, 0), (3, 1), (4, 0), (4, 3), (5, 1), (5, 5), (6, 2),
                                    pytest.param(6, 3, marks=pytest.mark.long)])
def test_matches_exhaustive_and_floating(L, seed):
    chain = random_chain(L, seed)
    for memory in remat_limits(chain, (0.0, 0.2, 0.45, 0.75)):
        ex = exhaustive_remat(chain, memory)
        fl = floating(chain, memory, exact=True)
        start = _dp_start(chain, memory) if seed % 2 == 0 else None
        sol = solve_remat_milp(chain, memory, threads=1, time_limit=20, start=start)
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
        sol = solve_remat_milp(chain, memory, threads=1, time_limit=20, start=_dp_start(chain, memory))
        assert sol.status == Status.OPTIMAL, sol.message
        _check(chain, memory, sol)
        assert sol.objective == pytest.approx(fl.objective, abs=1e-9)


def test_float_chain_without_start_matches_exhaustive():
    chain = random_chain(5, 11, integer=False)
    lo = min_memory(chain)
    hi = simulate_remat(chain, store_all_schedule(chain)).peak_memory
    for memory in (lo, lo + 0.3 * (hi - lo), lo + 0.7 * (hi - lo)):
        ex = exhaustive_remat(chain, memory)
        sol = solve_remat_milp(chain, memory, threads=1, time_limit=20)
        assert sol.details["mip_start"] == "no MIP start"
        _check(chain, memory, sol)
        assert sol.objective == pytest.approx(ex[0], rel=1e-9)


def test_infeasible_below_minimum_memory():
    chain = random_chain(4, 2)
    need = min_memory(chain)
    sol = solve_remat_milp(chain, need - 1, threads=1, time_limit=10, min_memory=need)
    assert sol.status == Status.INFEASIBLE
    assert sol.schedule is None
    assert f"{need:.0f} B" in sol.message and sol.details["min_memory"] == need
    assert exhaustive_remat(chain, need - 1) is None
    ok = solve_remat_milp(chain, need, threads=1, time_limit=10)
    assert ok.status == Status.OPTIMAL and ok.peak_memory <= need
    # through the front end: the minimum is computed there and the result is a Solution, not an error
    fe = remat.solve(chain, memory=need - 1, method="remat-milp", threads=1, time_limit=10)
    assert fe.status == Status.INFEASIBLE and fe.details["min_memory"] == need and f"{need:.0f} B" in fe.message



def test_unproven_minimum_is_not_reported_as_the_minimum():
    """Six stages and a gradient larger than its activation (wd^4 > wa^4): the least memory is only
    bracketed (a proven 23 B, a sequence at 25 B; the exhaustive search finds none below 25). The
    MILP finds nothing in 24 B, which is not proven infeasible: details["min_memory"] is a limit where
    a sequence fits (it had been the 23 B bound, with "the minimum feasible memory is 23 B, and e.g.
    rotor-floating finds a sequence")."""
    chain = Chain.from_stages(uf=[2.0] * 6, ub=[2.0] * 6, wa=[6, 6, 5, 3, 4, 3, 6], wabar=[6, 9, 6, 3, 4, 4, 7],
                              wd=[0, 0, 0, 0, 8, 0, 0], of=[2, 0, 2, 4, 0, 2], ob=[2, 5, 2, 0, 1, 0])
    assert exhaustive_remat(chain, 24) is None and exhaustive_remat(chain, 25) is not None
    sol = remat.solve(chain, memory=24, method="remat-milp", threads=1, time_limit=10)
    assert sol.schedule is None and sol.status in (Status.INFEASIBLE, Status.NO_SOLUTION)
    need = sol.details["min_memory"]
    assert exhaustive_remat(chain, need) is not None        # a sequence fits at the reported minimum
    assert sol.details.get("min_memory_bound", need) <= 24

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
    # HiGHS accepts it (memplan.remat.solve may not run the MILP at all: the DP bound proves the start)
    sol = solve_remat_milp(chain, memory, threads=1, time_limit=10, start=dp.schedule,
                           start_source="the persistent DP")
    assert sol.details["mip_start"] == "MIP start from the persistent DP"
    assert sol.details["start_accepted"] is True
    assert sol.objective <= dp.objective + 1e-9
    front = remat.solve(chain, memory=memory, method="remat-milp", threads=1, time_limit=10)
    assert front.details["mip_start"] == "MIP start from the persistent DP"
    assert front.objective <= dp.objective + 1e-9 and front.status == Status.OPTIMAL
    # a sequence that is not of the sweep shape (B^l not right after its phase's sweep) is skipped
    other = solve_remat_milp(chain, memory, threads=1, time_limit=10,
                             start=[("F_all", 1), ("F_ck", 1)] + list(dp.schedule.ops), start_source="junk")
    assert other.details["mip_start"] == "MIP start skipped (sequence not of the sweep shape)"


@pytest.mark.parametrize("method", ["remat-milp", "checkmate", "checkmate-lp"])
def test_dispatch_through_memplan_solve(method):
    """``memplan solve --problem remat --method <method>``: dispatch, simulator check and report."""
    chain = load_chain("instances/paper004_table2.json")
    sol = remat.solve(chain, memory=90 * MIB, method=method, time_limit=20.0, gap=1e-4, threads=1)
    assert sol.method == method and sol.schedule is not None
    text = remat.report(sol, chain)
    assert "makespan" in text and sol.schedule.notation() in text
    if method == "remat-milp":
        assert "bound" in text and sol.objective * 1e3 == pytest.approx(47.42)
        assert sol.details["mip_start"] == "MIP start from the persistent DP"


# --- issue 21: the dominated ``up`` operations (F_all^j over a stored a^j) are left out ----------------
def _abar_smaller(L, seed):
    """random_chain(L, seed) with abar^j < a^j at the odd stages (as for stage 4 of paper 004's Table 2),
    where ``up`` is not dominated and must stay in the model."""
    c = random_chain(L, seed)
    wab = [float(c.wa[j] - 1 if j % 2 and c.wa[j] > 1 else c.wabar[j]) for j in range(L + 1)]
    return Chain.from_stages(uf=c.uf[1:L + 1], ub=c.ub[1:L + 1], wa=c.wa[:L + 1], wabar=wab, wd=c.wd[:L + 1],
                             of=c.of[1:L + 1], ob=c.ob[1:L + 1], name=f"abar<a {L} {seed}")


def test_up_kept_where_not_dominated_in_paper004_table2():
    """Table 2 of paper 004: abar^4 (11177820.16 B) < a^4 (11198791.68 B), so only stage 4 keeps ``up``;
    every other stage has abar^j = a^j and no forward overhead (o_f = 0), so ``up`` is dominated there."""
    chain = load_chain("instances/paper004_table2.json")
    assert chain.wabar[4] < chain.wa[4]
    assert build_remat_milp(chain, 90 * MIB).up_stages == [4]
    assert build_remat_milp(chain, 90 * MIB, prune_up=False).up_stages == list(range(1, chain.L + 1))


@pytest.mark.parametrize("make,L,seed", [(random_chain, 5, 1), pytest.param(random_chain, 6, 3, marks=pytest.mark.long),
                                         (_abar_smaller, 5, 2), (_abar_smaller, 6, 4)])
def test_prune_up_keeps_the_optimum(make, L, seed):
    """With and without the dominated ``up``: both MILPs reach the exhaustive search's optimum (which tries
    every operation the simulator accepts, F_all over a stored a^j included), also at the minimum memory."""
    chain = make(L, seed)
    kept = build_remat_milp(chain, 1e9).up_stages
    assert len(kept) < L                        # something is left out: the test is not vacuous
    if make is _abar_smaller:                   # abar^j < a^j: not dominated
        assert {j for j in range(1, L + 1, 2) if chain.wa[j] > 1} <= set(kept)
    for memory in remat_limits(chain, (0.0, 0.1, 0.3, 0.6)):
        ex = exhaustive_remat(chain, memory)
        a = solve_remat_milp(chain, memory, threads=1, time_limit=20)
        b = solve_remat_milp(chain, memory, threads=1, time_limit=20, prune_up=False)
        assert a.status == b.status == Status.OPTIMAL, (a.message, b.message)
        _check(chain, memory, a)
        assert a.objective == pytest.approx(ex[0], abs=1e-9)
        assert b.objective == pytest.approx(ex[0], abs=1e-9)
