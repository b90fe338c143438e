"""Theorem 1 of paper 001: the 3-partition reduction, solved exactly by the MILP.

Reading of the (garbled) construction, with paper indices F_0..F_{5m-1} (so L = 5m - 1 here):
``|x_i| = u_i`` for ``i < 3m`` (produced by zero-time operations), ``x_{3m} = 0``; for ``k < m``,
``F_{3m+2k}`` lasts 1 and outputs ``x_{3m+2k+1} = 0``, ``F_{3m+2k+1}`` lasts 0 and outputs
``x_{3m+2k+2}`` of size V; every ``B_i`` lasts 0 except ``B_{3m}`` (m); all y and ex are 0;
``beta = V``, ``M = mV``, ``T = 2m``. The proof's schedule (S_k offloaded during F_{3m+2k}, everything
prefetched during B_{3m}) is valid exactly when the u_i split into m triples of sum V.
"""
import pytest

from memplan.baselines.offload import greedy
from memplan.formulations.offload_milp import solve_offload_milp
from memplan.models.chain import Chain
from memplan.models.offload import OffloadSchedule, validate_offload
from memplan.models.solution import Status


def reduction(u, m, V):
    L = 5 * m - 1
    x = [0.0] * (L + 2)
    uF, uB = [0.0] * (L + 1), [0.0] * (L + 1)
    for i in range(3 * m):
        x[i] = float(u[i])
    for k in range(m):
        uF[3 * m + 2 * k] = 1.0
        x[3 * m + 2 * k + 2] = float(V)
    uB[3 * m] = float(m)
    return Chain.from_stages(uf=uF[:L], ub=uB[:L], wa=x[:L + 1], wd=[0] * (L + 1), of=[0] * L, ob=[0] * L,
                             loss={"uf": uF[L], "ub": uB[L], "wa": x[L + 1], "wabar": x[L + 1]},
                             name="3-partition")


def proof_schedule(u, m, V, triples):
    """The schedule of the proof of Theorem 1 for a yes-instance."""
    L = 5 * m - 1
    tF = [0.0] * (L + 1)
    for k in range(m):
        tF[3 * m + 2 * k] = float(k)
        tF[3 * m + 2 * k + 1] = float(k + 1)
    tB = [float(2 * m)] * (L + 1)
    for i in range(3 * m, L + 1):
        tB[i] = float(m)
    off, pre = {}, {}
    t = 0.0
    for S in triples:
        for i in S:
            off[i] = t
            t += u[i] / V
    t = float(m)
    for S in triples:
        for i in S:
            pre[i] = t
            t += u[i] / V
    return OffloadSchedule(tF=tF, tB=tB, offload=off, prefetch=pre, bandwidth=V)


def test_yes_instance_reaches_2m():
    u, m, V = [5, 5, 5, 4, 5, 6], 2, 15
    ch = reduction(u, m, V)
    r = validate_offload(ch, proof_schedule(u, m, V, [(0, 1, 2), (3, 4, 5)]), m * V)
    assert r.makespan == pytest.approx(2 * m)
    sol = solve_offload_milp(ch, m * V, V, threads=1, time_limit=60)
    assert sol.status == Status.OPTIMAL
    assert sol.objective == pytest.approx(2 * m, abs=1e-6)


def test_no_instance_exceeds_2m():
    u, m, V = [4, 4, 4, 6, 6, 6], 2, 15       # no triple sums to 15
    ch = reduction(u, m, V)
    start = greedy(ch, m * V, V)            # a MIP start, as `memplan solve --method milp` does
    sol = solve_offload_milp(ch, m * V, V, start=start.schedule, threads=1, time_limit=60)
    assert sol.status == Status.OPTIMAL
    assert sol.objective > 2 * m + 1e-6
