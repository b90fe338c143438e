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


# ------------------------------------------------------------------ the arrays HiGHS is given
def _canonical(terms, lo, hi):
    """A row ``lo <= sum terms <= hi`` with its first coefficient positive, rounded: the same row
    whichever side each writer put its terms on."""
    items = sorted((k, v) for k, v in terms.items() if v != 0)
    if items and items[0][1] < 0:
        items, lo, hi = [(k, -v) for k, v in items], -hi, -lo
    r = lambda x: x if not np.isfinite(x) else round(float(x), 9)    # noqa: E731
    return tuple((k, round(float(v), 9)) for k, v in items), r(lo), r(hi)


def _pyomo_rows(model):
    """Rows, objective (by column name), offset and column bounds of the Pyomo model, as its compiler
    writes them (fixed variables substituted)."""
    from pyomo.repn.plugins.standard_form import LinearStandardFormCompiler

    info = LinearStandardFormCompiler().write(model, mixed_form=True, set_sense=None)
    names = [v.name for v in info.columns]
    A = info.A.tocsr()
    rows = []
    for r, row in enumerate(info.rows):
        lo = info.rhs[r] if row.bound_type <= 0 else -np.inf
        hi = info.rhs[r] if row.bound_type >= 0 else np.inf
        s, e = A.indptr[r], A.indptr[r + 1]
        rows.append(_canonical(dict(zip((names[c] for c in A.indices[s:e]), A.data[s:e])), lo, hi))
    c = np.asarray(info.c.toarray()).ravel()
    obj = {names[j]: round(float(c[j]), 10) for j in range(len(names)) if c[j] != 0}
    cols = {n: (float(v.lb), float(v.ub) if v.ub is not None else np.inf, v.is_binary())
            for n, v in zip(names, info.columns)}
    return sorted(rows), obj, float(np.asarray(info.c_offset).ravel()[0]), cols


def _array_rows(arr):
    names = arr.column_names()
    A = arr.A.tocsr()
    rows = []
    for r in range(A.shape[0]):
        s, e = A.indptr[r], A.indptr[r + 1]
        rows.append(_canonical(dict(zip((names[c] for c in A.indices[s:e]), A.data[s:e])),
                               arr.row_lo[r], arr.row_hi[r]))
    obj = {names[j]: round(float(arr.cost[j]), 10) for j in range(len(names)) if arr.cost[j] != 0}
    cols = {n: (float(arr.lower[j]), float(arr.upper[j]), bool(arr.integer[j])) for j, n in enumerate(names)}
    return sorted(rows), obj, arr.offset, cols


@pytest.mark.parametrize("L,seed,integer,frac", [(2, 0, True, 0.3), (5, 3, True, 0.6), (8, 1, False, 0.9)])
def test_the_arrays_are_the_pyomo_model_row_for_row(L, seed, integer, frac):
    """The solvers hand HiGHS arrays built with numpy (build_checkmate_arrays): the same rows, bounds,
    integrality and objective as the Pyomo model written from the paper (build_checkmate), compiled by
    Pyomo; a mistake in one index of one family would change a row."""
    from memplan.formulations.remat_checkmate import build_checkmate, build_checkmate_arrays

    chain = random_chain(L, seed, integer=integer)
    memory = frac * simulate_remat(chain, store_all_schedule(chain)).peak_memory
    want_rows, want_obj, want_off, want_cols = _pyomo_rows(build_checkmate(chain, memory))
    arr = build_checkmate_arrays(chain, memory)
    rows, obj, off, cols = _array_rows(arr)
    assert len(rows) == len(want_rows) and rows == want_rows
    assert obj == want_obj and off == pytest.approx(want_off, rel=1e-12)
    assert cols == want_cols
    assert arr.A.nnz == sum(len(r[0]) for r in want_rows)
    assert set(arr.families) == {"c_dep", "c_keep", "c_free_lo", "c_free_hi", "c_u_init", "c_u_next", "c_u_budget"}


# ------------------------------------------------------------------ the call's time limit
def _best_baseline(chain, memory):
    """The fastest of store-all, checkpoint_sequential's best cut, recompute-all and recursive
    bisection that fits, by the baselines' own functions."""
    from memplan.baselines import remat_heuristics as H

    fits = [s.objective for s in (H.store_all(chain, memory), H.sequential(chain, memory),
                                  H.recompute_all(chain, memory)) if s.success]
    bis = H.best_bisection(chain, memory)
    return min(fits + ([bis[1]] if bis else []))


@pytest.mark.parametrize("how", ["build interrupted", "HiGHS not started"])
def test_out_of_time_before_a_plan_returns_the_best_baseline(monkeypatch, how):
    """When the call's time runs out before Checkmate has a plan (its build interrupted at the deadline;
    or HiGHS, which runs past its limit on a large model, not started), memplan.remat.solve returns the
    fastest baseline that fits, status time_limit, naming it, instead of no schedule."""
    import memplan
    from memplan.formulations import highs_driver
    from memplan.formulations import remat_checkmate as rc

    chain = random_chain(12, 3)
    memory = remat_limits(chain, (0.5,))[0]
    if how == "build interrupted":
        monkeypatch.setattr(rc, "BuildClock", lambda: highs_driver.BuildClock(deadline=0.0))   # long past
    else:
        monkeypatch.setattr(rc, "ROOT_SECONDS_PER_NNZ", 1e3)
    want = _best_baseline(chain, memory)
    for method in ("checkmate", "checkmate-lp"):
        sol = memplan.remat.solve(chain, memory=memory, method=method, time_limit=20, threads=1)
        assert sol.status == Status.TIME_LIMIT and sol.success, sol.message
        assert sol.details["returned"] == "baseline" and "returning the best baseline" in sol.message
        assert sol.objective == pytest.approx(want, rel=1e-12)
        rep = simulate_remat(chain, sol.schedule, memory_limit=memory)
        assert rep.makespan == pytest.approx(sol.objective) and rep.peak_memory <= memory
        if how == "build interrupted":
            assert sol.details["interrupted"] == "build"
        else:
            assert "past its time limit" in sol.message


def test_a_plan_checkmate_finished_is_kept_even_where_a_baseline_is_faster():
    """Checkmate's own answer (optimal in its model, HiGHS not stopped) is its answer: the baselines
    replace only what the time limit cut short. random_chain(3, 4) at 56 B: Checkmate's converted plan
    takes 77 where checkpoint_sequential's best cut takes 68; it is reported as Checkmate's."""
    import memplan

    chain = random_chain(3, 4)
    sol = memplan.remat.solve(chain, memory=56, method="checkmate", time_limit=30, threads=1)
    assert sol.details["milp_status"] == "optimal" and not sol.details["stopped_by_time"]
    assert sol.status == Status.FEASIBLE and "returned" not in sol.details
    assert sol.objective == pytest.approx(77) and _best_baseline(chain, 56) == pytest.approx(68)


def test_checkmate_answers_within_its_limit_on_sixty_stages():
    """A generous wall-clock check (the limit plus 1 s, for a loaded machine): 60 stages, 0.2 M
    nonzeros; before the arrays, the Pyomo model's build and compilation alone took 3 s here (7.6 s
    and 3 s beside two busy loops), none of it interruptible. Whatever HiGHS reaches, the answer is
    never slower than the best baseline."""
    import time

    import memplan

    chain = random_chain(60, 1, integer=False)
    memory = 0.6 * simulate_remat(chain, store_all_schedule(chain)).peak_memory
    want = _best_baseline(chain, memory)
    for method in ("checkmate", "checkmate-lp"):
        t0 = time.monotonic()
        sol = memplan.remat.solve(chain, memory=memory, method=method, time_limit=2, threads=1)
        assert time.monotonic() - t0 < 2 + 1.0, (method, sol.times)
        assert sol.schedule is not None, sol.message
        if sol.status == Status.TIME_LIMIT:
            assert sol.success and sol.objective <= want * (1 + 1e-12)
