"""The re-materialization MILPs with each forward's own overhead (``of_all`` for F_all, ``of_ng`` for
F_ck / F_none): remat-milp's optimum is the exhaustive search's (the independent oracle, which charges
wabar + of_all for F_all and wa + of_ng for the no-grad forwards), and Checkmate's converted plan
replays within the limit, never below that optimum."""
from __future__ import annotations

import pytest

from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.formulations.remat_checkmate import ChainGraph, solve_checkmate
from memplan.formulations.remat_milp import build_remat_milp, solve_remat_milp, up_dominated
from memplan.models.chain import Chain, random_chain
from memplan.models.remat import simulate_remat
from memplan.models.solution import Status

from conftest import remat_limits


def _milp_equals_oracle(chain, memory):
    """remat-milp against the exhaustive search at one limit: both infeasible, or the MILP proves the
    oracle's optimum and its schedule replays within the limit with that makespan. Returns the optimum."""
    ex = exhaustive_remat(chain, memory)
    sol = solve_remat_milp(chain, memory, threads=1, time_limit=5)
    if ex is None:
        assert sol.status == Status.INFEASIBLE and sol.schedule is None, sol.message
        return None
    assert sol.status == Status.OPTIMAL, sol.message
    assert sol.objective == pytest.approx(ex[0], abs=1e-9)
    rep = simulate_remat(chain, sol.schedule, memory_limit=memory)
    assert rep.makespan == pytest.approx(ex[0], abs=1e-9) and rep.peak_memory <= memory
    return ex[0]


@pytest.mark.parametrize("L,seed", [(2, 3), (3, 1), (4, 2), (4, 113), pytest.param(5, 0, marks=pytest.mark.long),
                                    (5, 95)])
def test_milps_on_own_overheads_against_the_exhaustive_search(L, seed):
    chain = random_chain(L, seed, own_overheads=True)
    assert (chain.of_all != chain.of_ng).any()          # the two forwards' overheads really differ
    limits = remat_limits(chain, (0.0, 0.3, 0.7))
    feasible = 0
    for memory in [limits[0] - 1] + limits:             # 1 B below the least feasible memory, then up
        opt = _milp_equals_oracle(chain, memory)
        if opt is None:
            continue
        feasible += 1
        cm = solve_checkmate(chain, memory, threads=1, time_limit=5)
        if cm.schedule is None:                         # below the floor of Checkmate's memory model
            assert cm.status == Status.INFEASIBLE, cm.message
            continue
        assert not cm.details["limit_exceeded"], cm.message
        rep = simulate_remat(chain, cm.schedule, memory_limit=memory)
        assert rep.makespan == pytest.approx(cm.objective) and rep.peak_memory <= memory
        assert cm.objective >= opt - 1e-9
    assert feasible == 3          # the least feasible memory (conftest's min_memory) fits, 1 B less does not


@pytest.mark.parametrize("L,seed,memory", [(4, 113, 32), (5, 111, 42), (5, 111, 51)])
def test_own_overheads_beat_the_one_overhead_optimum(L, seed, memory):
    """Not vacuous: on these chains and limits each forward's own overhead admits a faster sequence than
    the papers' one o_f (the larger of the two) for both, by the oracle; the MILP finds both optima."""
    chain = random_chain(L, seed, own_overheads=True)
    one = chain.one_overhead()
    own_opt = exhaustive_remat(chain, memory)[0]
    one_ex = exhaustive_remat(one, memory)
    assert one_ex is not None and own_opt < one_ex[0]
    assert _milp_equals_oracle(chain, memory) == pytest.approx(own_opt)
    assert _milp_equals_oracle(one, memory) == pytest.approx(one_ex[0])


def _up_chain(of_all, of_ng):
    """Two stages; at stage 1 ``wabar > wa`` and wd^0 + o_b^1 = 2 + 1 = 3, o_f^1 = 6."""
    return Chain.from_stages(uf=[3, 2], ub=[4, 3], wa=[2, 3, 4], wabar=[2, 5, 6], ob=[1, 2], of=[6, 1],
                             of_all=[of_all, 1], of_ng=[of_ng, 1], name=f"up {of_all}/{of_ng}")


def test_up_dominance_uses_f_all_s_own_overhead():
    """The dominance rule trades an ``up`` (an F_all) for an F_all before B^j, so it asks for
    o_f_all^j <= wd^{j-1} + o_b^j whatever o_f_ng^j is; the pruned MILP keeps the oracle's optimum
    (which tries ``up``) at every limit from the least feasible to store-all."""
    small_all, large_all = _up_chain(2, 6), _up_chain(6, 2)
    assert up_dominated(small_all, 1) and not up_dominated(large_all, 1)
    assert 1 not in build_remat_milp(small_all, 100).up_stages
    assert 1 in build_remat_milp(large_all, 100).up_stages
    for chain in (small_all, large_all):
        for memory in remat_limits(chain, (0.0, 0.25, 0.5, 1.0)):
            assert _milp_equals_oracle(chain, memory) is not None


def test_checkmate_charges_f_all_s_own_overhead():
    """Every forward node of Checkmate's model is an F_all (its value is charged as abar^l), charged
    F_all's own overhead, raised where a no-grad forward the conversion may make of it needs more:
    wabar + charge >= max(wabar + of_all, wa + of_ng), with equality."""
    chain = random_chain(4, 2, own_overheads=True)
    g = ChainGraph(chain)
    raised = 0
    for l in range(1, chain.L + 2):
        need = max(chain.wabar[l] + chain.of_all[l], chain.wa[l] + chain.of_ng[l])
        assert chain.wabar[l] + g.over[g.F(l)] == need and g.over[g.B(l)] == chain.ob[l]
        assert g.over[g.F(l)] <= chain.of[l] + max(0.0, chain.wa[l] - chain.wabar[l])
        raised += g.over[g.F(l)] > chain.of_all[l]
    assert raised          # the case exists on this chain
