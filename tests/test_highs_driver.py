"""The shared HiGHS driver against a knapsack solved by brute force."""
import itertools

import pyomo.environ as pyo
import pytest

from memplan.formulations.highs_driver import model_size, solve_milp
from memplan.models.solution import Status

W = [12, 7, 11, 8, 9, 5, 14, 6]
V = [24, 13, 23, 15, 16, 9, 28, 10]
CAP = 30


def knapsack():
    m = pyo.ConcreteModel()
    m.I = pyo.RangeSet(0, len(W) - 1)
    m.x = pyo.Var(m.I, domain=pyo.Binary)
    m.cap = pyo.Constraint(expr=sum(W[i] * m.x[i] for i in m.I) <= CAP)
    m.obj = pyo.Objective(expr=sum(V[i] * m.x[i] for i in m.I) + 1, sense=pyo.maximize)
    return m


def brute():
    return max(sum(V[i] for i in S) for r in range(len(W) + 1) for S in itertools.combinations(range(len(W)), r)
               if sum(W[i] for i in S) <= CAP) + 1


def test_optimum_bound_and_values():
    m = knapsack()
    res = solve_milp(m, time_limit=10, threads=1, mip_start=[(m.x[0], 1.0)])
    assert res.status == Status.OPTIMAL and res.start_accepted
    assert res.objective == pytest.approx(brute()) and res.bound == pytest.approx(brute())
    assert sum(V[i] * m.x[i].value for i in m.I) + 1 == pytest.approx(brute())   # values loaded back
    assert res.size == {"variables": 8, "integer": 8, "constraints": 1, "nonzeros": 8}
    assert model_size(m)["variables"] == 8


def test_relaxation_is_an_upper_bound():
    m = knapsack()
    lp = solve_milp(m, relax=True)
    assert lp.status == Status.OPTIMAL and lp.objective > brute()


def test_infeasible_and_fixed(tmp_path):
    m = knapsack()
    m.many = pyo.Constraint(expr=sum(m.x[i] for i in m.I) >= len(W))
    log = tmp_path / "highs.log"
    assert solve_milp(m, time_limit=10, log_file=log).status == Status.INFEASIBLE
    assert log.exists() and log.stat().st_size > 0
    m.many.deactivate()
    for i in m.I:                          # checking a complete point: everything fixed
        m.x[i].fix(1 if i in (0, 6) else 0)
    res = solve_milp(m)
    assert res.status == Status.OPTIMAL and res.objective == pytest.approx(V[0] + V[6] + 1)
    m.x[1].fix(1)                          # 12 + 14 + 7 > 30
    assert solve_milp(m).status == Status.INFEASIBLE


def test_thread_count_may_change_between_solves():
    """HiGHS sizes one process-wide thread pool at its first run; a solve with another ``threads``
    used to fail with status "Not Set" (seen when a 1-thread balance MILP preceded a 2-thread ILP)."""
    for threads in (1, 2, None, 1):
        res = solve_milp(knapsack(), time_limit=10, threads=threads)
        assert res.status == Status.OPTIMAL, (threads, res.message)
        assert res.objective == pytest.approx(brute())
