"""Checkmate (formulations/remat_checkmate.py): the ILP and its LP rounding, converted and replayed."""
from __future__ import annotations


import numpy as np
import pytest

from memplan.baselines.remat_exhaustive import exhaustive_remat
from memplan.baselines.remat_heuristics import store_all_schedule
from memplan.formulations.remat_checkmate import (ChainGraph, events_from_rs, round_two_phase, sequence_from_events,
                                    solve_checkmate, solve_checkmate_lp)
from memplan.formulations.remat_milp import solve_remat_milp
from memplan.models.chain import random_chain
from memplan.models.instance import load_chain
from memplan.models.remat import simulate_remat
from memplan.models.solution import Status

from conftest import remat_limits

MIB = 2 ** 20


def _replays(chain, memory, sol):
    """Objective/peak come from the replay; over the limit only when the result says so."""
    rep = simulate_remat(chain, sol.schedule)
    assert rep.makespan == pytest.approx(sol.objective)
    assert rep.peak_memory == pytest.approx(sol.peak_memory)
    if sol.details["limit_exceeded"]:
        assert sol.status == Status.LIMIT_EXCEEDED and not sol.success and rep.peak_memory > memory
        assert "more than the limit" in sol.message
    else:
        assert rep.peak_memory <= memory
        simulate_remat(chain, sol.schedule, memory_limit=memory)


def test_graph_of_the_chain():
    g = ChainGraph(random_chain(3, 0))
    assert g.n == 8
    # B^2 (node 2L+3-2 = 7) needs F^1 (a^1), F^2 (abar^2) and B^3 (delta^2)
    assert g.deps[g.B(2)] == sorted([g.F(1), g.F(2), g.B(3)])
    assert g.deps[g.B(1)] == sorted([g.F(1), g.B(2)])        # a^0 is an input, not a node
    assert g.deps[g.F(1)] == []
    assert g.users[g.F(2)] == sorted([g.F(3), g.B(2), g.B(3)])


def test_store_all_plan_converts_to_store_all_sequence():
    chain = random_chain(4, 1)
    g = ChainGraph(chain)
    events = list(range(1, g.n + 1))             # each node once, in topological order
    assert sequence_from_events(chain, g, events).ops == store_all_schedule(chain).ops


def checkmate_memory_floor(chain) -> float:
    """Least memory any plan of Checkmate's model needs, from its constraints alone: in the stage that
    computes node k (``R[t,t] = 1``), each input i of k is computed earlier in the stage or kept
    (``c_dep``) and is not freed before k runs (``FREE[t,i,k'] = 0`` while a later user k is
    computed), so ``c_u_budget`` at k asks for static + sum of the inputs' sizes + size(k) + o_k <= M.
    Sizes are Checkmate's: a forward value costs abar (module docstring)."""
    g = ChainGraph(chain)
    return max(g.static + sum(g.size[i] for i in g.deps[k]) + g.size[k] + g.over[k] for k in range(1, g.n + 1))


@pytest.mark.parametrize("L,seed", [(2, 0), (3, 2), (4, 1), (5, 3)])
def test_checkmate_at_least_the_optimum_and_replays(L, seed):
    chain = random_chain(L, seed)
    floor = checkmate_memory_floor(chain)
    for memory in remat_limits(chain, (0.1, 0.4, 0.8)):
        best = exhaustive_remat(chain, memory)
        assert best is not None                # paper 004's model has a sequence at every limit tested
        opt = best[0]
        milp = solve_remat_milp(chain, memory, threads=1, time_limit=20)
        assert milp.objective == pytest.approx(opt)
        cm = solve_checkmate(chain, memory, threads=1, time_limit=20)
        lp = solve_checkmate_lp(chain, memory, threads=1, time_limit=20)
        assert lp.status == (Status.LIMIT_EXCEEDED if lp.details["limit_exceeded"] else Status.FEASIBLE)
        assert lp.bound is None
        _replays(chain, memory, lp)
        if not lp.details["limit_exceeded"]:
            assert lp.objective >= opt - 1e-9
        if memory < floor:
            # Checkmate charges every kept forward value as abar: below its floor the MILP must prove
            # that its model has no plan (not stop without one), although a valid sequence exists
            assert cm.status == Status.INFEASIBLE and cm.schedule is None and cm.objective is None
            assert "Checkmate's model has no schedule" in cm.message
            continue
        assert cm.schedule is not None, cm.message
        _replays(chain, memory, cm)
        if not cm.details["limit_exceeded"]:
            assert cm.objective >= opt - 1e-9
        assert lp.details["lp_bound"] <= cm.predicted + 1e-9     # relaxation bound <= ILP optimum


def test_checkmate_floor_is_where_its_model_becomes_feasible():
    """The floor above is exact on these chains: Checkmate's MILP is infeasible 1 B below it and finds
    a plan at it (the exhaustive search says a sequence of paper 004 exists at both)."""
    n_below = 0
    for L, seed in [(3, 2), (5, 3), (4, 0)]:
        chain = random_chain(L, seed)
        floor = checkmate_memory_floor(chain)
        below = solve_checkmate(chain, floor - 1, threads=1, time_limit=20)
        at = solve_checkmate(chain, floor, threads=1, time_limit=20)
        assert below.status == Status.INFEASIBLE and below.schedule is None
        assert at.schedule is not None and at.predicted is not None
        n_below += exhaustive_remat(chain, floor - 1) is not None
    assert n_below >= 1        # at least one chain where Checkmate misses sequences that exist


def test_paper004_table2_checkmate_pays_for_not_seeing_abar():
    chain = load_chain("instances/paper004_table2.json")
    cm = solve_checkmate(chain, 90 * MIB, threads=1, time_limit=30)
    _replays(chain, 90 * MIB, cm)
    assert cm.objective * 1e3 >= 47.42 - 1e-6          # never better than the optimum of paper 004
    # Checkmate's plan keeps F^3's value from the forward phase to B^3; in paper 004's model B^4
    # frees a plain a^3, so the conversion recomputes it (inserted F_all^3): more time than predicted
    assert cm.predicted * 1e3 == pytest.approx(42.78, abs=1e-6)
    assert cm.objective > cm.predicted


def test_two_phase_rounding_respects_dependencies():
    chain = random_chain(5, 4)
    g = ChainGraph(chain)
    rng = np.random.default_rng(0)
    S = rng.random((g.n + 2, g.n + 2))
    R, Sr = round_two_phase(g, S, 0.5)
    for t in range(1, g.n + 1):
        assert R[t, t] == 1
        for j in range(1, t + 1):
            if R[t, j]:
                assert all(R[t, i] or Sr[t, i] for i in g.deps[j])
        for i in range(1, t):
            if Sr[t + 1, i] if t + 1 <= g.n else False:
                assert R[t, i] or Sr[t, i]


@pytest.mark.parametrize("L,seed", [(3, 0), (6, 1)])
def test_any_rounding_converts_into_a_valid_sequence(L, seed):
    """Arbitrary fractional S, randomized rounding: the converted sequence always replays."""
    chain = random_chain(L, seed)
    g = ChainGraph(chain)
    rng = np.random.default_rng(seed)
    for _ in range(40):
        S = rng.random((g.n + 2, g.n + 2)) * rng.random()
        R, _ = round_two_phase(g, S, None, rng)
        sched = sequence_from_events(chain, g, events_from_rs(g, R))
        simulate_remat(chain, sched)          # raises InvalidSequence if the conversion were wrong


@pytest.mark.parametrize("method", ["checkmate", "checkmate-lp"])
def test_below_the_minimum_every_method_says_infeasible(method):
    """Paper 004's toy at 80 MiB, below its minimum 82.12 MiB (exhaustive search: tests/test_minimum_memory):
    Checkmate's methods answer infeasible with that minimum, as the others do, instead of no_solution
    (the MILP) or an over-limit rounding (the LP)."""
    import memplan

    chain = memplan.load_instance("paper004_table2").chain
    sol = memplan.solve(chain, "remat", method, memory=80 * MIB, time_limit=20, threads=1)
    assert sol.status == Status.INFEASIBLE and not sol.success
    assert sol.details["min_memory"] == pytest.approx(memplan.solve(chain, "remat", "rotor", memory=80 * MIB)
                                                      .details["min_memory"])
    assert round(sol.details["min_memory"] / MIB, 2) == 82.12
