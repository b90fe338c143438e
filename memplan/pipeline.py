"""Pipelined model parallelism: the layers of a chain on P GPUs, a periodic 1F1B schedule (paper 003).

Paper 003 (Beaumont, Eyraud-Dubois, Shilova, "An Integer Linear Programming Approach for Pipelined
Model Parallelism", RR-9452, 2022). Each layer is placed on one of P GPUs (its forward and backward
task together, the allocation may be non-contiguous), every pair of GPUs has a link of the given
bandwidth, and mini-batches flow through the pipeline; the goal is the smallest *period* (time
between two mini-batches, the inverse of the throughput) such that every GPU's memory (three copies
of its weights, communication buffers, stored activations of the mini-batches in flight) stays
within ``memory``. The definition and the simulator that replays every schedule are in
:mod:`memplan.models.pipeline`; ``objective`` is the replayed period and ``peak_memory`` the replayed
memory of the busiest GPU.

=============  ==========================================================================  ============
method         what it computes                                                            cost
=============  ==========================================================================  ============
``ilp``        the ILP (1)-(36) of section 4 over periodic patterns (Definition 1), with   MILP
               the best start found by the baselines, modular patterns, a partition
               search and an exact refinement on known and load-balanced allocations;
               a baseline's eager schedule instead where it beats every pattern found
``pipedream``  PipeDream's planner swept over memory targets x NOAM (section 5), every     O(n_targets
               partition run as eager 1F1B; the best point whose measured memory fits      P^2 L^2 + ...)
``gpipe``      time-balanced contiguous partitions into 1..P stages, eager 1F1B, NOAM      O(P^3 L^2)
               1..S
``cyclic``     K-periodic schedules (``periodicity`` mini-batches per period; beyond the   MILPs
               paper's patterns, :mod:`memplan.formulations.pipeline_cyclic`) of the best
               allocations known, bisection on the period below the best known
``lb``         the period lower bound ``max(sum d / P, max_l (u_F^l + u_B^l))`` only       O(L)
=============  ==========================================================================  ============

The whole call, every phase included, runs within ``time_limit``: for ``ilp`` the baselines take at
most a quarter of it, the start search and the refinement shares of what is left, and the ILP the
rest; a phase that runs out keeps what it has, and the status says what was proven (``optimal``:
the ILP closed its gap; ``time_limit``: the best pattern found, with the bound; ``feasible``: a
heuristic's answer).

Examples
--------
A random chain of 6 layers (integer times and sizes) on 2 GPUs, links of 5 bytes per second, 127
bytes per GPU. PipeDream's best point runs layers 1-3 and 4-6 with two mini-batches in flight; the
ILP proves a non-contiguous allocation faster. Its period lies between the period lower bound (half
of all the work here, 109 / 2) and PipeDream's, both replayed by the simulator.

>>> import memplan
>>> chain = memplan.random_chain(6, seed=1)
>>> pd = memplan.pipeline.solve(chain, memory=127, bandwidth=5, gpus=2, method="pipedream", n_batches=60,
...                             memory_model="paper")
>>> ilp = memplan.pipeline.solve(chain, memory=127, bandwidth=5, gpus=2, method="ilp", time_limit=20,
...                              threads=1, n_batches=60, memory_model="paper")
>>> work = float(chain.uf.sum() + chain.ub.sum())
>>> work / 2 <= ilp.objective <= pd.objective, ilp.peak_memory <= 127 and pd.peak_memory <= 127
(True, True)
>>> str(pd.status), pd.details["stages"], float(pd.objective), str(ilp.status), round(ilp.objective, 6)
('feasible', [[1, 3], [4, 6]], 58.0, 'optimal', 55.0)
>>> ilp.schedule.layer_gpus(), ilp.schedule.is_contiguous()
([0, 0, 1, 1, 0, 1], False)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

from memplan import _frontend
from memplan._pipeline_search import (cyclic_search, deadline_of, exact_refine, expired, known_allocations, left,
                                      memory_at_period, min_memory_pattern, phase, quiet)
from memplan.formulations.pipeline_cyclic import build_seconds
from memplan.baselines.pipeline import (Point, Points, best_feasible, gpipe_points, min_memory_contiguous,
                                        min_memory_contiguous_seconds, pipedream_points, start_pattern)
from memplan.baselines.pipeline_dag import MAX_STATES, DagPoint, DagPoints, dag_points
from memplan.baselines.pipeline_modular import snap_period
from memplan.formulations.highs_driver import pyomo_ready
from memplan.formulations.pipeline_ilp import solve_ilp
from memplan.models.budget import Budget, ProgressFn
from memplan.models.chain import Chain
from memplan.models.cost_graph import CostGraph, chain_of
from memplan.models.pipeline import (CyclicSchedule, EagerResult, InvalidPattern, Pattern, TaskData, batch_shifts,
                                     link_key, memory_lower_bound, period_lower_bound, simulate_pattern,
                                     stages_to_layer_gpu, task_data, MEMORY_MODELS)
from memplan.models.solution import InputError, Solution, Status
from memplan.models.units import UnitError, fmt_bandwidth, fmt_memory, fmt_time, is_free_link, parse_bandwidth

__all__ = ["PROBLEM", "METHODS", "DEFAULT_METHOD", "GRAPH_METHODS", "solve", "solve_graph", "report", "gantt",
           "baseline_points"]

PROBLEM = "pipeline"
METHODS = ["ilp", "pipedream", "gpipe", "cyclic", "lb"]
DEFAULT_METHOD = "ilp"
#: the tuning options of :func:`solve` each method reads (the others it ignores; see
#: :data:`memplan.remat.OPTIONS_USED`): HiGHS's for the ILP, the period K and the MILPs' threads for
#: ``cyclic``; the baselines and the bound take none
OPTIONS_USED: dict[str, frozenset[str]] = {
    "ilp": frozenset({"gap", "threads", "solver_log"}),
    "cyclic": frozenset({"periodicity", "threads"}),
    **{m: frozenset() for m in ("pipedream", "gpipe", "lb")},
}

# shares of the whole-call budget (of what is left when the phase starts)
_SHARE_PIPEDREAM = 0.20     # PipeDream's sweep (methods ilp and cyclic)
_SHARE_GPIPE = 0.10         # GPipe's points
_SHARE_START = 0.15         # the start pattern search (modular patterns, partition search)
_SHARE_REFINE = 0.35        # the exact refinement of the ILP's start
#: the baselines' shares when the ILP cannot be built in the call anyway (DenseNet-121, L = 79, 4 GPUs
#: at 1 s: with 0.2 and 0.1 neither sweep simulated a point, and the serial pattern, 3.7x slower than
#: GPipe's alone at 1 s, was the answer); GPipe's sweep first then (random_chain(300, 1) at 1 s: with
#: PipeDream's first at 0.4 and GPipe's at 0.5 neither had a point and the serial pattern, 4x slower
#: than GPipe's alone, was the answer with 0.4 s unused; random_chain(1000, 1) at 5 s: 15835 against
#: GPipe's 7911). Still short of each baseline run alone with the whole limit where a sweep needs most
#: of it (10555 against 7911 there): the sweeps are not resumable
_SHARE_PIPEDREAM_NO_ILP = 0.6
_SHARE_GPIPE_NO_ILP = 0.7
_REFINE_MILP_CAP = 30.0     # seconds per MILP of the refinement and of the last checks
#: below the memory lower bound, the exact minimum memory is looked for on chains of at most this many
#: layers, with at most this share of the time left and this many seconds (_exact_min_memory)
_EXACT_MIN_MAX_L, _EXACT_MIN_SHARE, _EXACT_MIN_CAP = 8, 0.25, 8.0
#: seconds per row of the ILP to build (Pyomo) and compile it, measured on a loaded 2-core machine
#: (ResNet-18, L = 23: 42,000 rows in 3.5 s; DenseNet-121, L = 77: 643,000 rows in 39 s)
_BUILD_S_PER_ROW = 7e-5
_MIN_N_BATCHES = 8
#: the most mini-batches an eager 1F1B run simulates: its start times are arrays of stages x n_batches
#: (4 of float64: 1e9 asked 15 GB, the OOM killer ended the sweep); the default 500 measures the period
_MAX_N_BATCHES = 100_000


@dataclass
class _Call:
    """One ``solve`` call: the inputs, checked, and the task data built once."""

    chain: Chain
    td: TaskData
    P: int
    memory: float
    bandwidth: float | None
    b: Budget
    time_limit: float | None
    gap: float | None
    threads: int | None
    solver_log: Any
    periodicity: int
    n_batches: int
    points: list[Point] | None
    allocations: list[tuple[int, ...]]
    refine: bool
    starts: list[Pattern]


# ----------------------------------------------------------------------------- helpers
def _ilp_rows(L: int) -> int:
    """Rows of the ILP (1)-(36) with the layer-pair allocation, to within a few percent."""
    n = 2 * L
    return 3 * math.comb(L, 3) + 7 * n * (n - 1) + 10 * (n - 1) * (n - 2) + 2 * n * L + 12 * n


def _ilp_build_seconds(L: int) -> float:
    """A (generous) estimate of the seconds to build and compile the ILP of L layers."""
    return _BUILD_S_PER_ROW * _ilp_rows(L)


def _infeasible_message(c: _Call, what: str, found_min: float | None = None,
                        found_label: str = "") -> tuple[str, float, float]:
    """The message of an INFEASIBLE answer. For a baseline (``found_min`` given) the minimum memory
    that works for that method is its smallest simulated point; for the ILP it lies between the
    memory lower bound and the memory of the serial pattern of the memory-smallest contiguous
    partition (which always works). Returns (message, minimum known to work, lower bound). That
    partition's search is skipped when it would not fit in what is left of the time limit (O(L^2):
    39 s at L = 20000); the minimum known to work is then None."""
    lb = memory_lower_bound(c.td, c.P)
    head = f"{what} within {fmt_memory(c.memory)} per GPU on {c.P} GPU(s)"
    if c.b.time_limit is not None and min_memory_contiguous_seconds(c.td.L, c.P) > c.b.remaining():
        tail = f"no pattern exists below {fmt_memory(lb)}"
        if found_min is not None:
            return (f"{head}; minimum memory that works for {found_label}: {fmt_memory(found_min)} "
                    f"(its smallest point); {tail}", found_min, lb)
        return (f"{head}; {tail} (the memory that surely works, the serial pattern's, was not computed: "
                f"no time left)", None, lb)
    ub, stages = min_memory_contiguous(c.td, c.P)
    tail = (f"the serial pattern of stages {stages} needs {fmt_memory(ub)}; no pattern exists below "
            f"{fmt_memory(lb)}")
    if found_min is not None:
        return (f"{head}; minimum memory that works for {found_label}: {fmt_memory(found_min)} "
                f"(its smallest point); {tail}", found_min, lb)
    return (f"{head}; minimum memory that works: between {fmt_memory(lb)} and {fmt_memory(ub)} "
            f"({tail})", ub, lb)


def _sweep(c: _Call, methods: Sequence[str], shares: dict[str, float | None]) -> tuple[list[Point], str]:
    """The baseline points of ``methods`` (those passed in ``points`` when given), each sweep within
    its share of the budget; returns the points and a note when a sweep was cut short."""
    if c.points is not None:
        return [p for p in c.points if p.method in methods], ""
    out: list[Point] = []
    notes = []
    for meth in methods:
        if meth == "pipedream-dag":      # given by solve_graph only: a chain alone has no antichain DAG
            continue
        t0 = time.perf_counter()
        tl = c.b.limit(None, shares[meth]) if shares.get(meth) is not None else c.b.limit()
        if meth == "pipedream":
            pts = pipedream_points(c.td, c.P, n_batches=c.n_batches, time_limit=tl)
        else:
            pts = gpipe_points(c.td, c.P, n_batches=c.n_batches, time_limit=tl)
        cut = "" if pts.complete else f" (of {pts.candidates}; stopped at its share of the time limit)"
        if cut:
            notes.append(f"the {meth} sweep stopped at the time limit after {len(pts)} of {pts.candidates} points")
        c.b.log(f"{meth}: {len(pts)} simulated (partition, NOAM) points{cut}, {time.perf_counter() - t0:.1f}s")
        out += pts
    return out, "; ".join(notes)


def _replayed(c: _Call, q: Pattern, what: str):
    """Replay a pattern given by the caller (``starts``); an invalid one is an input error."""
    try:
        return simulate_pattern(q, c.td, gpus=c.P)
    except InvalidPattern as e:
        raise InputError(f"{PROBLEM}: {what} is not a valid pattern of this chain on {c.P} GPU(s): {e}") from None


def _fits(c: _Call, peak: float) -> bool:
    return peak <= c.memory * (1 + 1e-9)


# ----------------------------------------------------------------------------- methods
def _lb(c: _Call) -> Solution:
    lb = period_lower_bound(c.td, c.P)
    return Solution(PROBLEM, "lb", Status.NO_SOLUTION, bound=lb, memory_limit=c.memory,
                    message="period lower bound max(sum d / P, max_l u_F^l + u_B^l); no schedule",
                    times={})


def _baseline(c: _Call, method: str) -> Solution:
    t0 = time.perf_counter()
    lb = period_lower_bound(c.td, c.P)
    pts, note = _sweep(c, [method], {method: None})
    times = {"total": time.perf_counter() - t0}
    best = best_feasible(pts, c.memory)
    if best is None:
        return _no_point(c, method, pts, note, times)
    return _point_solution(c, method, best, Status.FEASIBLE if not note else Status.TIME_LIMIT, lb,
                           f"best of {len(pts)} simulated (partition, NOAM) points; stages {best.stages}, "
                           f"NOAM {best.noam}" + (f" ({note})" if note else ""), times, {"points": len(pts)})


def _no_point(c: _Call, method: str, pts: Sequence[Point], note: str, times: dict,
              details: dict | None = None) -> Solution:
    """A baseline none of whose points fits ``memory``, its sweep run to the end: the minimum memory
    that works for it (its smallest point); INFEASIBLE only below the memory lower bound of every
    schedule, else NO_SOLUTION (other schedules may fit: the ILP's, the serial pattern's; PipeDream
    said "infeasible" at 51 B on a 5-layer chain where the ILP's pattern fits in 51 B). TIME_LIMIT
    (:func:`_sweep_cut`) when the limit cut the sweep."""
    if note:
        return _sweep_cut(c, method, pts, note, times, details)
    found = min((p.memory for p in pts), default=None)
    msg, minimum, mlb = _infeasible_message(c, f"no {method} point fits", found, method)
    status = Status.INFEASIBLE if c.memory < mlb * (1 - 1e-12) else Status.NO_SOLUTION
    return Solution(PROBLEM, method, status, memory_limit=c.memory, message=msg, times=times,
                    details={**(details or {}), "min_memory": minimum, "memory_lower_bound": mlb,
                             "points": len(pts)})


def _sweep_cut(c: _Call, method: str, pts: Sequence[Point], note: str, times: dict,
               details: dict | None = None) -> Solution:
    """A baseline whose sweep the time limit stopped before any point fitting ``memory`` was found:
    status TIME_LIMIT, not INFEASIBLE (the points not simulated may fit: nothing is proven) nor
    NO_SOLUTION; nothing more is computed (the minimum-memory bounds of :func:`_infeasible_message`
    would be work after the limit)."""
    found = min((p.memory for p in pts), default=None)
    seen = (f"; the {len(pts)} simulated need at least {fmt_memory(found)}" if found is not None else "")
    return Solution(PROBLEM, method, Status.TIME_LIMIT, memory_limit=c.memory,
                    message=f"no {method} point within {fmt_memory(c.memory)} per GPU on {c.P} GPU(s) found "
                            f"before the time limit ({note}){seen}",
                    times=times, details={**(details or {}), "points": len(pts)})


def _point_solution(c: _Call, method: str, best: Point, status: Status, bound: float, message: str,
                    times: dict, details: dict) -> Solution:
    """The answer that is a baseline point's schedule: its 1-periodic pattern when it has one (replayed
    by the pattern simulator), else the eager 1F1B run as measured."""
    sched: Any = best.pattern if best.pattern is not None else best.result
    objective, peak = best.period, best.memory
    mem_per_gpu = best.result.sim.memory
    if best.pattern is not None:
        r = simulate_pattern(best.pattern, c.td, gpus=c.P)
        objective, peak, mem_per_gpu = r.period, r.peak_memory, r.memory
    return Solution(PROBLEM, method, status, objective=objective, peak_memory=peak, schedule=sched, bound=bound,
                    memory_limit=c.memory, predicted=best.period, message=message, times=times,
                    details={**details, "stages": [list(s) for s in best.stages], "noam": best.noam,
                             "memory_per_gpu": {str(g): v for g, v in mem_per_gpu.items()},
                             "eager_period": best.period, "eager_memory": best.memory, "target": best.target})


def _pipedream(c: _Call) -> Solution:
    return _baseline(c, "pipedream")


def _gpipe(c: _Call) -> Solution:
    return _baseline(c, "gpipe")


def _points_and_start(c: _Call, times: dict[str, float]) -> tuple[list[Point], Pattern | None, str]:
    """Methods ilp and cyclic: the baseline points, then the best start pattern within the memory
    (heuristic searches, then the caller's ``starts`` that replay within the limit)."""
    t0 = time.perf_counter()
    left = c.b.remaining()
    no_ilp = math.isfinite(left) and _ilp_build_seconds(c.td.L) > 0.5 * left
    # without the ILP, GPipe's sweep first (its points come sooner than PipeDream's DP: at L = 300 with
    # 1 s it has all 10 in 0.75 s, PipeDream none), then PipeDream's with what is left
    points, note = _sweep(c, ["gpipe", "pipedream", "pipedream-dag"] if no_ilp else ["pipedream", "pipedream-dag", "gpipe"],
                          {"pipedream": _SHARE_PIPEDREAM_NO_ILP if no_ilp else _SHARE_PIPEDREAM,
                           "gpipe": _SHARE_GPIPE_NO_ILP if no_ilp else _SHARE_GPIPE})
    t1 = time.perf_counter()
    start = start_pattern(c.td, c.P, c.memory, points, time_limit=c.b.limit(None, _SHARE_START))
    for i, q in enumerate(c.starts):
        if start is None or q.T < start.T * (1 - 1e-9):
            if _fits(c, _replayed(c, q, f"starts[{i}]").peak_memory):
                start = q
    times["baselines"] = time.perf_counter() - t0
    c.b.log("start: " + ("no pattern fits" if start is None else
                         f"period {fmt_time(start.T, digits=6)} ({start.meta.get('method', 'given')})")
            + f", {time.perf_counter() - t1:.1f}s")
    return points, start, note


def _ilp(c: _Call) -> Solution:
    """Method ``ilp``: the best 1-periodic pattern (:func:`_ilp_pattern`), or the best baseline point's
    schedule when that one is faster. The baselines run eager 1F1B, which need not be 1-periodic in
    steady state, so the ILP's patterns do not cover them: a baseline can be faster than every
    pattern the ILP found (seen on PipeDream's ResNet-18 on 8 GPUs, by 1%), even than the ILP's proven
    optimum among patterns. The method then returns the baseline's schedule, never a slower answer
    than a baseline of the same call; its status is ``feasible`` (``time_limit`` if the ILP was cut),
    its bound the one valid for every schedule (``max(sum d / P, max_l u_F^l + u_B^l)``), and the
    message and ``details["ilp"]`` say what the ILP found and proved among patterns."""
    sol, bb, lb = _ilp_pattern(c)
    if bb is None or (sol.objective is not None and not bb.period < sol.objective * (1 - 1e-9)):
        return sol
    found = ("no pattern" if sol.objective is None else
             f"{'an optimal' if sol.status == Status.OPTIMAL else 'a'} 1-periodic pattern of period "
             f"{fmt_time(sol.objective, digits=6)}")
    status = Status.TIME_LIMIT if sol.status in (Status.TIME_LIMIT, Status.NO_SOLUTION) else Status.FEASIBLE
    details = {k: v for k, v in sol.details.items() if k not in ("memory_per_gpu", "shifts", "contiguous")}
    details["ilp"] = {"status": str(sol.status), "period": sol.objective, "bound": sol.bound,
                      "message": sol.message,
                      "layer_gpus": list(sol.schedule.layer_gpus()) if isinstance(sol.schedule, Pattern) else None}
    msg = (f"{bb.method}'s eager 1F1B schedule (stages {bb.stages}, NOAM {bb.noam}) is faster than what the "
           f"ILP found among 1-periodic patterns ({found}; {sol.status}: {sol.message})")
    return _point_solution(c, "ilp", bb, status, lb, msg, sol.times, details)


def _ilp_pattern(c: _Call) -> tuple[Solution, Point | None, float]:
    """The ILP's answer among 1-periodic patterns, the best baseline point at this memory and the
    period lower bound."""
    b, td, P, memory = c.b, c.td, c.P, c.memory
    times: dict[str, float] = {}
    lb = period_lower_bound(td, P)
    points, start, note = _points_and_start(c, times)
    bb = best_feasible(points, memory)     # the best baseline point at this memory
    if start is None and bb is None and memory < memory_lower_bound(td, P) * (1 - 1e-12):
        # proven at once: the refinement, the ILP and the min-memory ILP would only confirm it (ResNet-18
        # at half the bound on 4 GPUs: 58 s of a 60 s limit, and the minimum still not exact)
        msg, minimum, mlb = _infeasible_message(c, "no pattern fits (below the memory lower bound)")
        exact = _exact_min_memory(c, times)
        if exact is not None:
            minimum = exact
            msg = (f"no pattern fits (below the memory lower bound {fmt_memory(mlb)}) within "
                   f"{fmt_memory(memory)} per GPU on {P} GPU(s); minimum memory that works: "
                   f"{fmt_memory(exact)} (proven by the min-memory ILP)")
        return (Solution(PROBLEM, "ilp", Status.INFEASIBLE, memory_limit=memory, message=msg, times=times,
                         details={"min_memory": minimum, "memory_lower_bound": mlb}), None, lb)
    need = _ilp_build_seconds(td.L)
    reserve = min(max(1.0, 0.05 * c.time_limit), 10.0) if c.time_limit is not None else 0.0

    def ilp_fits() -> bool:
        return b.time_limit is None or need <= 0.5 * max(0.0, b.remaining() - reserve)

    refined = None
    if c.refine and start is not None and not b.expired():
        # the best pattern of the start's allocation and of the best baseline partitions (exact
        # 1-periodic MILP, fixed allocation): a better MIP start than the modular patterns. When
        # the ILP cannot be built in the time left anyway, the refinement gets all of it.
        t_ref = time.perf_counter()
        goal = bb.period if bb is not None else None
        if ilp_fits():
            deadline = deadline_of(b, None, _SHARE_REFINE)
        else:
            deadline = b.deadline - reserve
            b.log(f"refine: building the ILP would take about {need:.0f}s (L = {td.L}), more than the time "
                  f"left allows: the refinement gets that time instead")
        cap = min(_REFINE_MILP_CAP, c.time_limit or _REFINE_MILP_CAP)
        # the phase's MILPs are Pyomo models: the first of a process imports Pyomo, which no time
        # limit interrupts (2-4 s beside two busy loops on 2 cores, where the phase had 1.5 s: the
        # call took up to 4.5 s for 3 s). pyomo_ready measures it against the phase's end instead.
        if not pyomo_ready(deadline):
            times["refine"] = time.perf_counter() - t_ref
            note = "; ".join(x for x in (note, "refinement skipped: Pyomo's import had not ended by the "
                                                   "refinement's deadline") if x)
            b.log(f"refine: skipped, Pyomo's import (not interruptible) had not ended by the phase's end, "
                  f"{times['refine']:.1f}s")
        else:
            with phase(b, deadline, report=False):     # every MILP of the phase ends by its deadline
                allocs = known_allocations(td, points, memory, start, P=P, threads=c.threads, goal=goal,
                                           deadline=deadline)
                refined = exact_refine(td, P, memory, allocs, start, steps=8, threads=c.threads, time_limit=cap,
                                       goal=goal, deadline=deadline)
            times["refine"] = time.perf_counter() - t_ref
            if refined is not None:
                start = refined
            b.log(f"refine: {len(allocs)} allocation(s), "
                  + (f"period {fmt_time(refined.T, digits=6)}" if refined is not None else "no faster pattern")
                  + f", {times['refine']:.1f}s")

    details: dict[str, Any] = {"start": start.meta if start is not None else None,
                               "start_refined": refined is not None,
                               "start_period": start.T if start is not None else None}
    if bb is not None:
        details["best_baseline"] = {"method": bb.method, "period": bb.period, "memory": bb.memory,
                                    "stages": [list(x) for x in bb.stages], "noam": bb.noam}

    # ------------------------------------------------------------------ the ILP
    if not ilp_fits():
        why = (f"the ILP was not run: building it (about {need:.0f}s for L = {td.L}) does not fit in what "
               f"is left of the time limit ({b.remaining():.0f}s)")
        b.log(why)
        return (_start_only(c, start, lb, why, details, times, note), bb, lb)
    if not pyomo_ready(b.deadline - reserve - need):
        why = "the ILP was not run: Pyomo's import had not ended in time to build it"
        b.log(why)
        return (_start_only(c, start, lb, why, details, times, note), bb, lb)
    b.log(f"ILP: (1)-(36) on {P} GPU(s), MIP start period "
          + (fmt_time(start.T, digits=6) if start is not None else "none"))
    with phase(b, b.deadline - reserve):
        pattern, res, ilp, t = solve_ilp(td, P, memory, start=start, Tmin=lb, time_limit=None,
                                         gap=c.gap, threads=c.threads, log_file=c.solver_log)
    times.update(t)
    details.update(model_size=res.size, start_accepted=res.start_accepted, Tmax=ilp.Tmax)
    bound = max(lb, res.bound) if res.bound is not None else lb
    b.log(f"ILP: {res.status} ({res.message})")
    if pattern is not None and start is not None and pattern.T > start.T * (1 + 1e-9):
        pattern = None                       # the MIP start was not kept: it is the better answer
    if pattern is None:
        if start is not None:
            why = f"the ILP found nothing better than its MIP start ({res.message})"
            if res.status == Status.OPTIMAL:
                why = _among_patterns(details, why)
            return (_start_only(c, start, bound, why, details, times, note,
                               status=Status.OPTIMAL if res.status == Status.OPTIMAL else None), bb, lb)
        if res.status == Status.INFEASIBLE:
            return (_ilp_infeasible(c, details, times), bb, lb)
        # HiGHS stopped at the time limit before any incumbent: a time-out (TIME_LIMIT), nothing proven
        status = Status.TIME_LIMIT if res.status == Status.NO_SOLUTION else res.status
        return (Solution(PROBLEM, "ilp", status, memory_limit=memory, bound=bound,
                        message=res.message + (f" ({note})" if note else ""), times=times, details=details), bb, lb)
    pattern = snap_period(pattern, td, bound, memory=memory, gpus=P)   # the ILP's bound
    try:
        sim = simulate_pattern(pattern, td, gpus=P)
        bad = (f"replays with {fmt_memory(sim.peak_memory)} per GPU, over the limit"
               if sim.peak_memory > memory * (1 + 1e-6) else
               f"replays with period {sim.period!r}, not its T = {pattern.T!r}"
               if abs(sim.period - pattern.T) > 1e-6 * pattern.T else None)
    except InvalidPattern as e:
        bad = f"does not replay ({e})"
    if bad is not None:
        # the simulator is the judge: a pattern it rejects is never reported. This happens when the
        # instance's times span more orders of magnitude than HiGHS's tolerances resolve (e.g. transfers
        # of 1e6 s beside computations of 1e-3 s), so that the ILP's task order is not the simulator's.
        why = (f"the ILP's pattern {bad}: the instance's times span more than the solver's tolerances "
               f"resolve ({res.message})")
        b.log(f"ILP: {why}")
        if start is not None:
            return (_start_only(c, start, bound, why, details, times, note), bb, lb)
        return (Solution(PROBLEM, "ilp", Status.ERROR, memory_limit=memory, bound=bound, message=why,
                        times=times, details=details), bb, lb)
    if bb is not None and sim.period > bb.period * (1 + 1e-9):
        details["best_baseline"]["pattern_memory"] = _pattern_memory(c, pattern.layer_gpus(), bb.period)
    details["memory_per_gpu"] = {str(g): v for g, v in sim.memory.items()}
    details["shifts"] = sim.shifts
    details["contiguous"] = pattern.is_contiguous()
    msg = res.message + (f" ({note})" if note else "")
    if res.status == Status.OPTIMAL:
        msg = _among_patterns(details, msg)
    return (Solution(PROBLEM, "ilp", res.status, objective=sim.period, peak_memory=sim.peak_memory,
                    schedule=pattern, bound=bound, memory_limit=memory, predicted=res.objective,
                    message=msg, times=times, details=details), bb, lb)


#: the class of schedules the ILP's optimum and bound are about (paper 003's problem)
_PATTERNS = "1-periodic patterns (paper 003's problem; K-periodic schedules, method cyclic, can be faster)"


def _among_patterns(details: dict, message: str) -> str:
    """An ILP's OPTIMAL says what it is about: proven among 1-periodic patterns (paper 003's problem),
    where a 2-periodic schedule of method cyclic can be faster and the ILP's bound holds among patterns
    only. Records it in ``details`` and returns the message so prefixed."""
    details["optimal_within"] = _PATTERNS
    return f"optimal among {_PATTERNS}: {message}"


def _pattern_memory(c: _Call, layer_gpu: Sequence[int], T: float) -> dict[str, Any]:
    """What a pattern of the ILP's allocation needs at the baseline's period (if time is left)."""
    tl = c.b.limit(min(_REFINE_MILP_CAP, c.time_limit or _REFINE_MILP_CAP))
    if tl is not None and tl <= 0.05:
        return {"memory": None, "bound": None, "status": str(Status.NO_SOLUTION)}
    with quiet(c.b):
        return memory_at_period(c.td, c.P, layer_gpu, T, time_limit=tl, threads=c.threads)


def _start_only(c: _Call, start: Pattern | None, bound: float, why: str, details: dict, times: dict,
                note: str, status: Status | None = None, method: str = "ilp") -> Solution:
    """The answer when the ILP did not improve on (or did not run from) the best start pattern."""
    if start is None:
        # the ILP did not run for lack of time and no heuristic found a pattern: a time-out, not a
        # claim that nothing fits
        msg, minimum, mlb = _infeasible_message(c, "no pattern found (the ILP did not run)")
        details.update(min_memory=minimum, memory_lower_bound=mlb)
        return Solution(PROBLEM, "ilp", Status.TIME_LIMIT, memory_limit=c.memory, bound=bound,
                        message=f"{why}; {msg}" + (f" ({note})" if note else ""), times=times, details=details)
    sim = simulate_pattern(start, c.td, gpus=c.P)
    details.update(memory_per_gpu={str(g): v for g, v in sim.memory.items()}, shifts=sim.shifts,
                   contiguous=start.is_contiguous())
    source = start.meta.get("method", "given")
    msg = f"{why}; returning the best start pattern ({source})" + (f" ({note})" if note else "")
    return Solution(PROBLEM, method, status or Status.TIME_LIMIT, objective=sim.period,
                    peak_memory=sim.peak_memory, schedule=start, bound=bound, memory_limit=c.memory,
                    message=msg, times=times, details=details)


def _exact_min_memory(c: _Call, times: dict) -> float | None:
    """The minimum memory of any pattern, proven by the min-memory ILP, where the chain is small enough
    for that to take a few seconds (L <= _EXACT_MIN_MAX_L: 4 s on 6 layers) and the time limit leaves
    room (at most _EXACT_MIN_SHARE of what is left, _EXACT_MIN_CAP seconds); None otherwise or when
    it is not proven in that time (ResNet-18 on 4 GPUs was not in 58 s)."""
    if c.td.L > _EXACT_MIN_MAX_L:
        return None
    tl = min(_EXACT_MIN_CAP, _EXACT_MIN_SHARE * c.b.remaining()) if c.b.time_limit is not None else _EXACT_MIN_CAP
    if tl < 1.0 + 0.5 * _ilp_build_seconds(c.td.L):
        return None
    t0 = time.perf_counter()
    with quiet(c.b):
        mm = min_memory_pattern(c.td, c.P, time_limit=tl, threads=c.threads)
    times["min_memory"] = time.perf_counter() - t0
    return mm[0] if mm is not None and mm[1] else None


def _ilp_infeasible(c: _Call, details: dict, times: dict) -> Solution:
    """The ILP proved that no pattern fits: say what the minimum memory is (min-memory ILP)."""
    msg, minimum, mlb = _infeasible_message(c, "the ILP proves no valid pattern")
    tl = c.b.limit(min(_REFINE_MILP_CAP, c.time_limit or _REFINE_MILP_CAP))
    mm = None
    if tl is None or tl > 0.5 * _ilp_build_seconds(c.td.L) + 0.5:
        c.b.log("ILP: infeasible; the min-memory ILP looks for the minimum memory")
        with quiet(c.b):
            mm = min_memory_pattern(c.td, c.P, time_limit=tl, threads=c.threads)
    if mm is not None:
        minimum, proven, mbound = mm
        msg = (f"the ILP proves no valid pattern within {fmt_memory(c.memory)} per GPU on {c.P} GPU(s); "
               + (f"minimum memory that works: {fmt_memory(minimum)} (proven by the min-memory ILP)"
                  if proven else f"minimum memory that works: between {fmt_memory(max(mlb, mbound))} "
                  f"and {fmt_memory(minimum)} (min-memory ILP stopped at its time limit)"))
    details.update(min_memory=minimum, memory_lower_bound=mlb)
    return Solution(PROBLEM, "ilp", Status.INFEASIBLE, memory_limit=c.memory, message=msg, times=times,
                    details=details)


def _cyclic(c: _Call) -> Solution:
    """Method ``cyclic``: bisection with ``cyclic_search`` on each candidate allocation, below the
    best period known (pattern or eager schedule) at this memory."""
    b, td, P, memory, K = c.b, c.td, c.P, c.memory, c.periodicity
    times: dict[str, float] = {}
    lb = period_lower_bound(td, P)
    points, start, note = _points_and_start(c, times)
    fitting = best_feasible(points, memory)
    known = ([fitting.period] if fitting is not None else []) + ([start.T] if start is not None else [])
    # the balancing MILPs and the searches are Pyomo models: not where Pyomo's import (not interruptible)
    # has not ended by the call's end; the allocations known without a MILP are kept, none is searched
    ready = pyomo_ready(b.deadline)
    # the load-balanced allocations too (P given), as the ILP's refinement searches: on the start's,
    # PipeDream's and GPipe's alone cyclic returned 84 s where the ILP proved 77 s among 1-periodic
    # patterns (random_chain(8, 5), 2 GPUs), though its K = 1 search covers those patterns
    cands = known_allocations(td, points, memory, start, c.allocations, P=P, threads=c.threads,
                              goal=min(known) if known else None, deadline=deadline_of(b) if ready else 0.0)
    if not known or not cands:
        msg, minimum, mlb = _infeasible_message(c, "no allocation known to fit (no pattern or baseline point)")
        return Solution(PROBLEM, "cyclic", Status.TIME_LIMIT if note or b.expired() else Status.NO_SOLUTION,
                        memory_limit=memory, bound=lb, message=msg + (f" ({note})" if note else ""),
                        times=times, details={"min_memory": minimum, "memory_lower_bound": mlb})
    hi = min(known)
    per_solve = max(15.0, (c.time_limit or 60.0) / (2 * len(cands)))   # one MILP; a search runs <= 2 x 8
    best = None
    t_cyc = time.perf_counter()
    deadline = deadline_of(b) if ready else 0.0
    tried = 0
    with quiet(b):
        for lg in cands:
            if expired(deadline):
                break
            tried += 1
            r = cyclic_search(td, lg, memory, K, hi=hi, P=P, steps=6, time_limit=per_solve, threads=c.threads,
                              deadline=deadline)
            if r is not None and (best is None or r.schedule.T < best.schedule.T):
                best = r
    times["cyclic"] = time.perf_counter() - t_cyc
    # cut short: an allocation not tried, or too little time left for another model's build (the
    # searches skip a build that would end past the deadline, solve_cyclic)
    cut = tried < len(cands) or expired(deadline) or left(deadline, math.inf) < build_seconds(td.L, K)
    b.log(f"cyclic: {tried} of {len(cands)} allocation(s) searched, "
          + (f"period {fmt_time(best.schedule.T, digits=6)}" if best is not None else "nothing found")
          + f", {times['cyclic']:.1f}s")
    details = {"periodicity": K, "allocations_tried": tried, "best_known_period": hi}
    stopped = " (stopped at the time limit)" if cut else ""
    if best is None:
        # never worse than what the call already has: the best known schedule at this memory (the start
        # pattern, or a baseline's eager 1F1B run), which the search did not beat. It answered "no
        # schedule found" (NO_SOLUTION) before, beside a pattern that fits
        why = f"no {K}-periodic schedule found below {fmt_time(hi)} on {tried} allocation(s){stopped}"
        status = Status.TIME_LIMIT if cut else Status.FEASIBLE
        if start is not None and (fitting is None or start.T <= fitting.period * (1 + 1e-9)):
            return _start_only(c, start, lb, why, details, times, "", status=status, method="cyclic")
        return _point_solution(c, "cyclic", fitting, status, lb,
                               f"{why}; returning {fitting.method}'s eager 1F1B schedule (stages {fitting.stages}, "
                               f"NOAM {fitting.noam})", times, details)
    sched, sim = best.schedule, best.sim
    details.update(memory_per_gpu={str(g): v for g, v in sim.memory.items()}, contiguous=sched.is_contiguous(),
                   cyclic_memory=sched.meta.get("memory_model"),
                   copy_caps={str(g): cp for g, cp in (sched.meta.get("copy_caps") or {}).items()})
    return Solution(PROBLEM, "cyclic", Status.TIME_LIMIT if cut else Status.FEASIBLE, objective=sim.period,
                    peak_memory=sim.peak_memory, schedule=sched, bound=lb, memory_limit=memory, predicted=sched.T,
                    message=f"{sched.K}-periodic schedule ({sched.K} mini-batch(es) per "
                            f"{fmt_time(sched.K * sched.T)}; searched K = 1 and {K}), best of {tried} "
                            f"allocation(s), bisection below {fmt_time(hi)}{stopped}"
                            + (f" ({note})" if note else ""),
                    times=times, details=details)


_RUNNERS: dict[str, Callable[[_Call], Solution]] = {
    "ilp": _ilp, "pipedream": _pipedream, "gpipe": _gpipe, "cyclic": _cyclic, "lb": _lb,
}
assert list(_RUNNERS) == METHODS


# ----------------------------------------------------------------------------- input checks
def _bandwidth_arg(bandwidth: Any, P: int) -> float | None:
    """The links' bandwidth in bytes/s; None for free communications, which must be asked for
    explicitly (``bandwidth="inf"`` or ``math.inf``). On P > 1 GPUs a missing bandwidth is refused
    like ``offload`` refuses one it needs: assuming free links would silently change the answer (the
    toy at 600 MiB on 2 GPUs: 18.77 ms free, 23.19 ms at 1 GB/s). One GPU sends nothing, so it needs
    none. A bandwidth of 0 is refused too: here it would be links that carry nothing (``remat-offload``
    reads 0 as "no link", which for a pipeline is ``gpus=1``), not free ones."""
    if is_free_link(bandwidth):
        return None
    free = "bandwidth='inf' (--bandwidth inf) for free communications"
    try:
        zero = bandwidth is not None and not isinstance(bandwidth, bool) and float(
            parse_bandwidth(bandwidth) if isinstance(bandwidth, str) else bandwidth) == 0
    except (UnitError, TypeError, ValueError):
        zero = False                 # bandwidth_arg below says what is wrong
    if zero:
        raise InputError(f"{PROBLEM}: bandwidth={bandwidth!r} would let no data cross between GPUs; give the "
                         f"links' bandwidth (e.g. '12GB/s'), {free}, or gpus=1")
    bw = _frontend.bandwidth_arg(bandwidth, PROBLEM)
    if bw is None and P > 1:
        raise InputError(f"{PROBLEM}: bandwidth is required on gpus={P} (it sets the time of every transfer "
                         f"between two GPUs): give bandwidth, e.g. bandwidth='12GB/s' (or --bandwidth, or a "
                         f"platform bandwidth in the instance file), or {free}")
    return bw


def _fmt_bandwidth(bandwidth: float | None, P: int | None) -> str:
    """The bandwidth as reports print it: None on several GPUs is the explicit ``inf``."""
    return "inf (free communications)" if bandwidth is None and (P or 1) > 1 else fmt_bandwidth(bandwidth)


def _check_times(chain: Chain, td: TaskData) -> None:
    """Refuse a chain whose every task takes 0 s (``u_f = u_b = 0`` for every layer). Its period lower
    bound is 0 and every schedule that keeps all layers on one GPU has period 0: there is no
    computation to pipeline, and the period searches (modular patterns, bisection between the load
    bound and the serial period, the MILPs scaled by the period) are undefined at a period of 0. Such
    a profile is almost always a measurement that did not happen, so it is refused rather than
    answered with a degenerate schedule. (A chain whose sizes are all 0 is a real problem, free
    memory and free transfers, and is solved.)"""
    if not float(td.d[1:].sum()) > 0:
        raise InputError(f"{PROBLEM}: every layer of {chain.name} takes 0 s (u_f = u_b = 0 for all {chain.L} "
                         f"layers): there is no computation to pipeline and no period to minimize; give the "
                         f"layers' measured forward and backward times (u_f, u_b) in the instance")


def _memory_model_arg(memory_model: Any) -> str:
    if memory_model not in MEMORY_MODELS:
        raise InputError(f"{PROBLEM}: memory_model={memory_model!r} is not a memory model; choose 'autograd' "
                         f"(what autograd keeps for each layer, a stage input saved on both sides of a GPU boundary counted on both GPUs; the default) or 'paper' (paper 003's "
                         f"model: each layer keeps only its input)")
    return memory_model


def _points_arg(points: Any, L: int, P: int, memory_model: str = "paper") -> list[Point] | None:
    if points is None:
        return None
    try:
        pts = list(points)
    except TypeError:
        raise InputError(f"{PROBLEM}: points must be a list of baseline points (memplan.pipeline."
                         f"baseline_points(...)), got {type(points).__name__}") from None
    for i, p in enumerate(pts):
        if not isinstance(p, Point):
            raise InputError(f"{PROBLEM}: points[{i}] is a {type(p).__name__}, not a baseline point "
                             f"(memplan.pipeline.baseline_points(...) makes them)")
        try:
            lg = stages_to_layer_gpu(p.stages, L)
        except ValueError as e:
            raise InputError(f"{PROBLEM}: points[{i}] does not belong to this chain of L = {L} layers ({e})") from None
        if max(lg) >= P:
            raise InputError(f"{PROBLEM}: points[{i}] has {len(p.stages)} stages, more than gpus={P}")
        if p.memory_model != memory_model:
            raise InputError(f"{PROBLEM}: points[{i}] was measured with memory_model={p.memory_model!r}, this "
                             f"call uses {memory_model!r}; compute the points with baseline_points(..., "
                             f"memory_model={memory_model!r})")
    return pts


def _allocations_arg(allocations: Any, L: int, P: int) -> list[tuple[int, ...]]:
    out = []
    for i, a in enumerate(allocations or ()):
        try:
            lg = tuple(int(g) for g in a)
        except (TypeError, ValueError):
            raise InputError(f"{PROBLEM}: allocations[{i}] must list the GPU of every layer (ints)") from None
        if len(lg) != L or not all(0 <= g < P for g in lg):
            raise InputError(f"{PROBLEM}: allocations[{i}] must give each of the L = {L} layers a GPU in "
                             f"0..{P - 1}, got {list(lg)}")
        out.append(lg)
    return out


def _starts_arg(starts: Any, L: int) -> list[Pattern]:
    out = []
    for i, q in enumerate(starts or ()):
        if q is None:
            continue
        if not isinstance(q, Pattern):
            raise InputError(f"{PROBLEM}: starts[{i}] is a {type(q).__name__}, not a Pattern (a previous "
                             f"solution's schedule)")
        if len(q.gpu) != 2 * L:
            raise InputError(f"{PROBLEM}: starts[{i}] has {len(q.gpu)} tasks; this chain needs 2L = {2 * L}")
        out.append(q)
    return out


# ----------------------------------------------------------------------------- public API
@_frontend.records_chain
def solve(chain: Chain, *, memory: float | str, bandwidth: float | str | None = None, gpus: int = 1,
          method: str | None = None, time_limit: float | None = 60.0, gap: float | None = None,
          threads: int | None = None, solver_log: str | Path | None = None, progress: ProgressFn | None = None,
          periodicity: int = 2, n_batches: int = 500, points: Sequence[Point] | None = None,
          allocations: Sequence[Sequence[int]] = (), refine: bool = True,
          starts: Sequence[Pattern] = (), memory_model: str = "autograd") -> Solution:
    """Fastest pipelined schedule of ``chain`` on ``gpus`` GPUs within ``memory`` per GPU (paper 003).

    Runs ``method`` (see the module's table). For ``ilp`` it computes the baseline points (PipeDream's
    sweep and GPipe's partitions, eager 1F1B), the best start pattern they lead to (their 1-periodic
    steady states, modular 1F1B patterns, a search over contiguous partitions), refines it with the
    exact fixed-allocation MILP on the start's allocation, the best baseline partitions and
    load-balanced (possibly non-contiguous) allocations, gives the ILP (1)-(36) that MIP start and
    the period lower bound, snaps the period onto the bound where they differ by solver noise, and
    replays the pattern. When no pattern fits it reports the minimum memory (min-memory ILP). When a
    baseline beats the ILP's pattern, ``details["best_baseline"]["pattern_memory"]`` says how much
    memory a pattern of the ILP's allocation needs at the baseline's period.

    Parameters
    ----------
    chain : Chain
        The chain (``memplan.load_instance(name)[0]``, ``memplan.random_chain(...)``).
    memory : float or str
        Memory limit per GPU: bytes, or a string with units (``"600MiB"``).
    bandwidth : float or str
        Bandwidth of every link between two GPUs (bytes/s or ``"12GB/s"``); required when ``gpus`` > 1
        (``"inf"`` or ``math.inf``: free communications, asked for explicitly; see :func:`_bandwidth_arg`).
    gpus : int
        Number of GPUs P (at least 1). More than the chain's L layers are solved on L (no stage is
        replicated, so the others would stay idle; ``details["gpus_given"]`` keeps the number given)
        unless ``allocations`` or ``starts`` name GPUs.
    method : str, optional
        One of :data:`METHODS`; :data:`DEFAULT_METHOD` (``"ilp"``) when None.
    time_limit : float or None
        Seconds for the whole call, every phase included (None: no limit). ``ilp``: the baselines
        take at most about a quarter, the start search and the refinement shares of what is left, the
        ILP the rest (it is skipped, and the best start returned, when building it would not fit).
    gap : float or None
        Relative gap at which the ILP stops.
    threads : int, optional
        HiGHS threads.
    solver_log : str or Path, optional
        File for the ILP's HiGHS log.
    progress : callable, optional
        Receives one line per phase and per improving ILP incumbent.
    periodicity : int
        ``cyclic``: mini-batches per period K (K = 1 and K are searched).
    n_batches : int
        Mini-batches of each eager 1F1B simulation (500 as in the paper).
    points : list of Point, optional
        Baseline points computed beforehand (:func:`baseline_points`), e.g. once per sweep over
        memory limits; used instead of computing them. Points of PipeDream's planner over an
        antichain DAG (method ``pipedream-dag``, :func:`solve_graph`) are used by ``ilp`` and
        ``cyclic`` like the others when their stages are layer ranges of ``chain``.
    allocations : list of lists of int
        ``cyclic``: more candidate allocations (GPU of layer l at index l-1).
    refine : bool
        ``ilp``: refine the MIP start with the exact fixed-allocation MILP.
    starts : list of Pattern
        ``ilp``: more candidate MIP starts (e.g. the patterns found at smaller limits of a sweep),
        used when they replay within ``memory``.

    Returns
    -------
    Solution
        ``objective`` (period, s) and ``peak_memory`` (bytes, busiest GPU) as replayed by
        :func:`memplan.models.pipeline.simulate_pattern` (``Pattern``), :func:`~memplan.models.
        pipeline.simulate_cyclic` (``CyclicSchedule``) or measured on the eager run
        (``EagerResult``); ``bound`` the best lower bound on the period (ILP's dual bound, a bound
        among 1-periodic patterns, or the period lower bound, one for every schedule); ``status``
        OPTIMAL (the ILP proved its pattern optimal among 1-periodic patterns, paper 003's problem;
        ``details["optimal_within"]`` says so: a K-periodic schedule of method ``cyclic`` with
        ``periodicity`` K >= 2 can be faster, 30.0 against 32.0 s on ``random_chain(4, 22)``, 3 GPUs),
        TIME_LIMIT (stopped by the time limit, with the best schedule found, or with none when the
        limit came before anything within ``memory`` was found: a time-out proves nothing), FEASIBLE
        (a heuristic's answer), INFEASIBLE (``details["min_memory"]`` and the message give the memory
        that works), NO_SOLUTION (``lb``, or a search that ran to its end and found nothing);
        ``gpus`` and ``bandwidth`` as used (None with several GPUs: ``"inf"``, free communications).

    Raises
    ------
    InputError
        Missing or malformed memory, bandwidth (missing on several GPUs, or 0), gpus < 1, unknown
        method, bad points, allocations or starts; a chain whose every layer takes 0 s
        (:func:`_check_times`).

    Examples
    --------
    The period lower bound: two GPUs share all the work (no layer's forward and backward exceed
    half of it here).

    >>> import memplan
    >>> chain = memplan.random_chain(6, seed=1)
    >>> lb = memplan.pipeline.solve(chain, memory="1KiB", bandwidth=5, gpus=2, method="lb")
    >>> str(lb.status), float(lb.bound), float(chain.uf.sum() + chain.ub.sum()) / 2
    ('no_solution', 54.5, 54.5)
    >>> memplan.pipeline.solve(chain, memory=1000, gpus=0)
    Traceback (most recent call last):
    ...
    memplan.models.solution.InputError: pipeline: gpus=0 is out of range; give a whole number >= 1
    """
    chain = _frontend.chain_arg(chain, PROBLEM)
    memory = _frontend.memory_arg(memory, PROBLEM)
    P = _frontend.count_arg(gpus, "gpus", PROBLEM, required=False) or 1
    bandwidth = _bandwidth_arg(bandwidth, P)
    method = _frontend.method_arg(method, METHODS, DEFAULT_METHOD, PROBLEM)
    memory_model = _memory_model_arg(memory_model)
    if not isinstance(refine, bool):
        raise InputError(f"{PROBLEM}: refine={refine!r} must be True or False")
    b = _frontend.budget(time_limit, progress, PROBLEM)
    td = task_data(chain, bandwidth, memory_model)
    _check_times(chain, td)
    given = P
    if P > chain.L and not allocations and not starts:
        # every layer is on one GPU and no stage is replicated (paper 003's model, and the baselines'
        # here), so at most L of identical GPUs on links of one bandwidth ever hold a layer: the answer
        # on L GPUs is the answer on P, and the models on P are larger (ILP (1)-(36) on 6 layers: 11 s
        # on 100 GPUs, 5 s on 6, the same period)
        P = chain.L
    c = _Call(chain=chain, td=td, P=P, memory=memory, bandwidth=bandwidth, b=b,
              time_limit=b.time_limit, gap=_frontend.gap_arg(gap, PROBLEM),
              threads=_frontend.count_arg(threads, "threads", PROBLEM, required=False),
              solver_log=_frontend.solver_log_arg(solver_log, PROBLEM),
              periodicity=_frontend.count_arg(periodicity, "periodicity", PROBLEM),
              n_batches=_frontend.count_arg(n_batches, "n_batches", PROBLEM, minimum=_MIN_N_BATCHES,
                                            maximum=_MAX_N_BATCHES),
              points=_points_arg(points, chain.L, P, memory_model), allocations=_allocations_arg(allocations, chain.L, P),
              refine=refine, starts=_starts_arg(starts, chain.L))
    with b.active():
        if given > P:
            b.log(f"pipeline: {given} GPUs given for {chain.L} layers: solved on {P} (no stage is replicated, "
                  f"so the other {given - P} would stay idle)")
        b.log(f"pipeline: {method} on {chain.name} (L = {chain.L}), {P} GPU(s), memory limit "
              f"{fmt_memory(memory)} per GPU, bandwidth {_fmt_bandwidth(bandwidth, P)}, memory model {memory_model}")
        sol = _RUNNERS[method](c)
        sol.details["memory_model"] = memory_model
        if given > P:
            sol.details["gpus_given"] = given
            note = (f"{given} GPUs given, {P} used: a chain of {chain.L} layers without stage replication "
                    f"holds a layer on at most {chain.L} GPUs")
            sol.message = f"{sol.message}; {note}" if sol.message else note
        b.log(f"pipeline: {sol.status}" + ("" if sol.objective is None else
                                           f", period {fmt_time(sol.objective, digits=6)}, "
                                           f"peak {fmt_memory(sol.peak_memory, digits=3)}"))
    return _frontend.finish(sol, b, memory=memory, bandwidth=bandwidth, gpus=P)


def baseline_points(chain: Chain, *, bandwidth: float | str | None = None, gpus: int = 1, n_batches: int = 500,
                    methods: Sequence[str] = ("pipedream", "gpipe"), time_limit: float | None = None,
                    progress: ProgressFn | None = None, memory_model: str = "autograd") -> list[Point]:
    """The simulated (partition, NOAM) points of PipeDream's sweep and of GPipe's partitions, for a
    sweep over memory limits to compute once and pass to :func:`solve` as ``points``.

    Every point is an eager 1F1B run (``n_batches`` mini-batches) with its measured ``period`` and
    ``memory`` (busiest GPU); ``pattern`` is its steady state when that is 1-periodic.

    Examples
    --------
    >>> import memplan
    >>> chain = memplan.random_chain(6, seed=1)
    >>> pts = memplan.pipeline.baseline_points(chain, bandwidth=5, gpus=2, n_batches=60, memory_model="paper")
    >>> sorted({p.method for p in pts}), all(p.period >= float(chain.uf.sum() + chain.ub.sum()) / 2 for p in pts)
    (['gpipe', 'pipedream'], True)
    >>> sol = memplan.pipeline.solve(chain, memory=127, bandwidth=5, gpus=2, method="pipedream", points=pts,
    ...                              memory_model="paper")
    >>> float(sol.objective)
    58.0
    """
    chain = _frontend.chain_arg(chain, PROBLEM)
    P = _frontend.count_arg(gpus, "gpus", PROBLEM, required=False) or 1
    bw = _bandwidth_arg(bandwidth, P)
    nb = _frontend.count_arg(n_batches, "n_batches", PROBLEM, minimum=_MIN_N_BATCHES, maximum=_MAX_N_BATCHES)
    memory_model = _memory_model_arg(memory_model)
    unknown = [m for m in methods if m not in ("pipedream", "gpipe")]
    if unknown:
        raise InputError(f"{PROBLEM}: methods={list(methods)!r}: choose from 'pipedream', 'gpipe'")
    b = _frontend.budget(time_limit, progress, PROBLEM)
    td = task_data(chain, bw, memory_model)
    _check_times(chain, td)
    out: list[Point] = []
    with b.active():
        for m in methods:
            fn = pipedream_points if m == "pipedream" else gpipe_points
            pts = fn(td, P, n_batches=nb, time_limit=b.limit())
            b.log(f"{m}: {len(pts)} points" + ("" if pts.complete else " (stopped at the time limit)"))
            out += pts
    return out


# ---------------------------------------------------------------------------------------- graphs
#: methods of :func:`solve_graph`
GRAPH_METHODS = ["ilp", "pipedream-dag", "pipedream"]
_SHARE_DAG = 0.20           # solve_graph: PipeDream's sweep over the antichain DAG
_SHARE_CHAIN = 0.10         # solve_graph: PipeDream's sweep on the base chain C0
_SHARE_STAR = 0.10          # solve_graph: PipeDream's and GPipe's sweeps on the ILP's chain


def _graph_call(chain: Chain, td: TaskData, P: int, memory: float, bandwidth: float | None, b: Budget,
                n_batches: int) -> _Call:
    return _Call(chain=chain, td=td, P=P, memory=memory, bandwidth=bandwidth, b=b, time_limit=b.time_limit,
                 gap=None, threads=None, solver_log=None, periodicity=1, n_batches=n_batches, points=None,
                 allocations=[], refine=True, starts=[])


@_frontend.records_chain
def solve_graph(graph: CostGraph, *, memory: float | str, bandwidth: float | str | None = None, gpus: int = 1,
                method: str | None = None, time_limit: float | None = 60.0, gap: float | None = None,
                threads: int | None = None, solver_log: str | Path | None = None,
                progress: ProgressFn | None = None, n_batches: int = 500, memory_model: str = "autograd",
                max_states: int = MAX_STATES) -> tuple[Solution, Chain]:
    """Pipelined schedule of a network given as a DAG (a :class:`~memplan.models.cost_graph.CostGraph`,
    e.g. :func:`memplan.models.pipedream.cost_graph` of a PipeDream profile): the ILP of paper 003
    on a chain of the graph, never slower than PipeDream's planner over the antichain DAG nor than
    PipeDream's planner on the graph's base chain (issue 30) or on its other chains (``graph.chains``:
    a PipeDream profile's single-tensor chain). Returns ``(solution, chain)``: the
    schedule's layers are those of ``chain``.

    Methods (:data:`GRAPH_METHODS`):

    - ``pipedream-dag``: PipeDream's planner over the antichain DAG (:func:`memplan.baselines.
      pipeline_dag.dag_points`: memory targets x NOAM, every partition simulated with eager 1F1B on
      the base chain cut again at its antichains); the best point that fits.
    - ``pipedream``: PipeDream's planner on the base chain C0 (``graph.base_groups``), contiguous
      partitions only (:func:`memplan.baselines.pipeline.pipedream_points`).
    - ``ilp`` (default): both sweeps, then the chain for the ILP, then :func:`solve` on it.

    Why the ILP's chain is chosen this way. A chain fixes the cuts a schedule may use: the ILP
    places whole layers, and the antichains PipeDream's planner cuts at need not be cuts of C0 (nor
    of any one chain: the partitions of different targets may cut at antichains that no single
    topological order contains together). So the ILP cannot be given "every cut"; it is given the
    chain that contains the cuts of the **best baseline point at this memory**, of any sweep (a
    tie goes to the antichain point, whose chain may be C0 itself; a point of PipeDream's planner on
    one of ``graph.chains``: that chain): the
    point's own chain (C0 cut again at its antichains, :func:`memplan.models.cost_graph.refine`; C0
    itself for a contiguous partition of C0). On that chain the point is a contiguous partition, so
    it is handed to :func:`solve` as a baseline point beside that chain's own PipeDream and GPipe
    points, and :func:`solve`'s ``ilp`` returns a baseline's eager schedule whenever no pattern it
    found is faster. Hence the answer is **never slower than the best point of either sweep run in
    this call** (both replayed by the simulator on the chain of the answer), and it keeps every
    freedom of that chain (its fine cuts, non-contiguous allocations, periodic patterns). What is
    *not* claimed: a status ``optimal`` means optimal among the 1-periodic patterns of that chain,
    not over every chain of the graph; and a sweep cut short by the time limit is compared as it
    stood (the message says so). Evaluating every baseline point's chain with its own ILP would
    multiply the ILP's cost by the number of chains; one chain, the one of the point to beat, is
    what the guarantee needs.

    ``time_limit`` bounds the whole call: the antichain sweep takes at most a fifth of it, the base
    chain's sweep a tenth of what is left, the other chains' sweeps another tenth, the sweeps on the ILP's chain another tenth, and
    :func:`solve` the rest. Other parameters as :func:`solve`; ``max_states`` caps the antichain
    DAG's states (:func:`memplan.baselines.pipeline_dag.antichain_states`). Raises
    :class:`~memplan.models.solution.InputError` for a graph that is not a CostGraph and for the
    inputs :func:`solve` refuses.

    ``details["graph"]``: the states planned over (how many, ``exact`` or the beam), the best point
    of each sweep at this memory (period, memory, stages, NOAM), which one gave the ILP its chain,
    and that chain's groups.

    Examples
    --------
    Two branches of two layers each between an input and a join (the fast branch b1-b2, 3 s per
    layer forward and backward, the slow one c1-c2, 6 s per layer). Cut at the antichain {b1, c1},
    the two GPUs get 9 s each; the base chain (one topological order, b1 b2 c1 c2 j) only offers
    cuts giving at best 6 s against 12 s. The ILP runs on the base chain cut again at {b1, c1}.

    >>> import networkx as nx
    >>> from memplan.models.cost_graph import CostGraph
    >>> H = nx.DiGraph([("x", "b1"), ("b1", "b2"), ("x", "c1"), ("c1", "c2"), ("b2", "j"), ("c2", "j")])
    >>> for v, (f, b) in {"x": (0, 0), "b1": (1, 2), "b2": (1, 2), "c1": (2, 4), "c2": (2, 4), "j": (0, 0)}.items():
    ...     H.nodes[v].update(uf=f, ub=b, out_bytes=1.0)
    >>> cg = CostGraph(H, "x", "j", [["b1"], ["b2"], ["c1"], ["c2"], ["j"]])
    >>> dag, _ = solve_graph(cg, memory=100, bandwidth="inf", gpus=2, method="pipedream-dag", n_batches=40)
    >>> chain_pd, _ = solve_graph(cg, memory=100, bandwidth="inf", gpus=2, method="pipedream", n_batches=40)
    >>> ilp, chain = solve_graph(cg, memory=100, bandwidth="inf", gpus=2, time_limit=30, threads=1, n_batches=40)
    >>> float(chain_pd.objective), float(dag.objective), float(ilp.objective)
    (12.0, 9.0, 9.0)
    >>> chain.provenance["groups"], ilp.details["graph"]["ilp_chain"]
    ([['b1'], ['c1'], ['b2'], ['c2'], ['j']], 'pipedream-dag')
    """
    if not isinstance(graph, CostGraph):
        raise InputError(f"{PROBLEM}: graph must be a CostGraph (memplan.models.pipedream.cost_graph(...), "
                         f"memplan.models.cost_graph.from_linearized(...)), got {type(graph).__name__}")
    memory = _frontend.memory_arg(memory, PROBLEM)
    P = _frontend.count_arg(gpus, "gpus", PROBLEM, required=False) or 1
    bw = _bandwidth_arg(bandwidth, P)
    method = _frontend.method_arg(method, GRAPH_METHODS, "ilp", PROBLEM)
    memory_model = _memory_model_arg(memory_model)
    nb = _frontend.count_arg(n_batches, "n_batches", PROBLEM, minimum=_MIN_N_BATCHES, maximum=_MAX_N_BATCHES)
    if isinstance(max_states, bool) or not isinstance(max_states, int) or max_states < 1:
        raise InputError(f"{PROBLEM}: max_states={max_states!r}; give a whole number >= 1")
    b = _frontend.budget(time_limit, progress, PROBLEM)
    with b.active():
        t0 = time.perf_counter()
        base = chain_of(graph, graph.base_groups)
        td0 = task_data(base, bw, memory_model)
        _check_times(base, td0)
        b.log(f"pipeline over a graph: {method} on {graph.name} ({graph.H.number_of_nodes()} nodes, base chain "
              f"L = {base.L}), {P} GPU(s), memory limit {fmt_memory(memory)} per GPU")
        dag: DagPoints = DagPoints()
        chain_pts: Points = Points()
        if method in ("ilp", "pipedream-dag"):
            dag = dag_points(graph, P, bandwidth=bw, memory_model=memory_model, n_batches=nb, max_states=max_states,
                             time_limit=b.limit(None, _SHARE_DAG if method == "ilp" else 1.0))
            st = dag.states
            b.log(f"pipedream-dag: {len(st)} states ({'every downset' if st.exact else f'beam {st.beam}'}), "
                  f"{len(dag)} simulated points" + ("" if dag.complete else " (stopped at the time limit)"))
        if method in ("ilp", "pipedream"):
            chain_pts = pipedream_points(td0, P, n_batches=nb,
                                         time_limit=b.limit(None, _SHARE_CHAIN if method == "ilp" else 1.0))
        alt: list[tuple[Chain, Points]] = []       # the graph's other chains and PipeDream's points on each
        if method == "ilp":
            for other in graph.chains:
                alt.append((other, pipedream_points(task_data(other, bw, memory_model), P, n_batches=nb,
                                                    time_limit=b.limit(None, _SHARE_CHAIN / len(graph.chains)))))
        info: dict[str, Any] = {}
        if dag.states is not None:
            info["states"] = len(dag.states)
            info["exact"] = dag.states.exact
            info["beam"] = dag.states.beam
        best_dag = best_feasible(dag, memory)
        best_chain = best_feasible(chain_pts, memory)
        for key, bp in (("pipedream_dag", best_dag), ("pipedream", best_chain)):
            info[key] = None if bp is None else {"period": bp.period, "memory": bp.memory, "noam": bp.noam,
                                                  "stages": [list(x) for x in bp.stages]}
        best_alt = [(c, best_feasible(pts, memory), pts) for c, pts in alt]
        best_alt = [(c, bp, pts) for c, bp, pts in best_alt if bp is not None]
        if alt:
            info["pipedream_other_chains"] = [None if bp is None else {
                "L": c.L, "period": bp.period, "memory": bp.memory, "noam": bp.noam, "stages": [list(x) for x in bp.stages]}
                for c, bp in ((c, best_feasible(pts, memory)) for c, pts in alt)]
        cut = [m for m, pts in (("pipedream-dag", dag), ("pipedream", chain_pts)) + tuple(
            (f"pipedream (chain L = {c.L})", pts) for c, pts in alt) if pts and not pts.complete]
        note = f"the {' and '.join(cut)} sweep(s) stopped at the time limit" if cut else ""
        if method != "ilp":
            pts = dag if method == "pipedream-dag" else chain_pts
            bp = best_dag if method == "pipedream-dag" else best_chain
            chain = bp.chain if isinstance(bp, DagPoint) else base
            c = _graph_call(chain, task_data(chain, bw, memory_model), P, memory, bw, b, nb)
            times = {"total": time.perf_counter() - t0}
            if bp is None:
                sol = _no_point(c, method, pts, note, times, {"graph": info})
            else:
                sol = _point_solution(c, method, bp, Status.FEASIBLE if not note else Status.TIME_LIMIT,
                                      period_lower_bound(c.td, P),
                                      f"best of {len(pts)} simulated (partition, NOAM) points; stages {bp.stages}, "
                                      f"NOAM {bp.noam}" + (f" ({note})" if note else ""), times,
                                      {"points": len(pts), "graph": info})
            sol.details["memory_model"] = memory_model
            info["groups"] = [list(g) for g in (chain.provenance or {}).get("groups", [])]
            return _frontend.finish(sol, b, memory=memory, bandwidth=bw, gpus=P), chain
        # the ILP's chain: the one holding the cuts of the best point of any sweep
        cands = [p for p in (best_dag, best_chain) if p is not None] + [bp for _, bp, _ in best_alt]
        top = min(cands, key=lambda p: (p.period, p.memory)) if cands else None
        own = next(((c, pts) for c, bp, pts in best_alt if bp is top), None)
        if isinstance(top, DagPoint):
            chain, star = top.chain, [top]
            info["ilp_chain"] = "pipedream-dag"
        elif own is not None:          # a chain of its own: its PipeDream points, GPipe's below
            chain, star = own[0], list(own[1])
            info["ilp_chain"] = f"pipedream on the graph's chain of L = {chain.L}"
        else:
            chain, star = base, list(chain_pts)
            info["ilp_chain"] = "pipedream" if top is not None else "base"
        groups = (chain.provenance or {}).get("groups")
        star += [p for p in dag if p is not top and [[str(v) for v in g] for g in p.groups] == groups]
        td = task_data(chain, bw, memory_model)
        meths = ["gpipe"] if chain is base or own is not None else ["pipedream", "gpipe"]
        for m in meths:
            fn = pipedream_points if m == "pipedream" else gpipe_points
            star += fn(td, P, n_batches=nb, time_limit=b.limit(None, _SHARE_STAR / len(meths)))
        info["groups"] = groups
        b.log(f"ILP chain: L = {chain.L} (" + ("the base chain" if chain is base else
                                               "the graph's other chain, of PipeDream's best point" if own is not None
                                               else "the base chain cut again at the best antichain partition's cuts")
              + (f"; best baseline {top.method} {fmt_time(top.period, digits=6)}" if top is not None else "") + ")")
        left = b.remaining()
        if b.time_limit is not None and left < 0.5:
            sol = Solution(PROBLEM, "ilp", Status.NO_SOLUTION, memory_limit=memory,
                           message="the time limit ran out before the ILP's phase", times={})
            if top is not None:
                c = _graph_call(chain, td, P, memory, bw, b, nb)
                sol = _point_solution(c, "ilp", top, Status.TIME_LIMIT, period_lower_bound(td, P),
                                      f"the time limit ran out before the ILP's phase; returning {top.method}'s "
                                      f"eager 1F1B schedule", {}, {})
        else:
            sol = solve(chain, memory=memory, bandwidth=math.inf if bw is None else bw, gpus=P, method="ilp",
                        time_limit=None if b.time_limit is None else left, gap=gap, threads=threads,
                        solver_log=solver_log, progress=progress, n_batches=nb, points=star,
                        memory_model=memory_model)
        if sol.status == Status.OPTIMAL:
            sol.message += " (optimal among the 1-periodic patterns of this chain of the graph)"
        if note:
            sol.message += f" ({note})"
        sol.details["graph"] = info
        sol.details["memory_model"] = memory_model
        return _frontend.finish(sol, b, memory=memory, bandwidth=bw, gpus=P), chain


# ---------------------------------------------------------------------------------------- report
def _ranges(ls: list[int]) -> str:
    out, i = [], 0
    while i < len(ls):
        j = i
        while j + 1 < len(ls) and ls[j + 1] == ls[j] + 1:
            j += 1
        out.append(f"{ls[i]}" if i == j else f"{ls[i]}-{ls[j]}")
        i = j + 1
    return ",".join(out)


def _batch(chain: Chain) -> float | None:
    prov = chain.provenance or {}
    for k in ("batch", "batch_size", "mini_batch"):
        v = prov.get(k)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return None


def report(solution: Solution, chain: Chain) -> str:
    """The text ``memplan solve --problem pipeline`` prints: status, bound, period and throughput, gap,
    the ILP's value and the best baseline at the same memory, peak memory and the layers and memory
    of every GPU, the kind of schedule, and the times of the phases.

    Examples
    --------
    >>> import memplan
    >>> chain = memplan.random_chain(6, seed=1)
    >>> sol = memplan.pipeline.solve(chain, memory=127, bandwidth=5, gpus=2, method="pipedream", n_batches=60,
    ...                              memory_model="paper")
    >>> print(report(sol, chain))  # doctest: +ELLIPSIS
    random-L6-seed1: L = 6, problem pipeline, method pipedream, GPUs 2, memory limit 127 B, bandwidth 5 B/s, memory model paper
    status       feasible: best of 7 simulated (partition, NOAM) points; stages [(1, 3), (4, 6)], NOAM 2
    lower bound  54.5 s per period
    period       58 s  throughput 0.01724 mini-batches/s
    gap          6.03% (vs bound 54.5 s)
    peak memory  127 B
      GPU 0: layers 1-3                  memory 127 B
      GPU 1: layers 4-6                  memory 101 B
    allocation   contiguous
    NOAM         2
    time         total ...s
    """
    solution, chain = _frontend.solution_arg(solution, chain, PROBLEM, "report")
    sol = solution
    P = sol.gpus
    # periods and memories with enough digits to compare methods that differ by 0.1%
    _t, _m = partial(fmt_time, digits=6), partial(fmt_memory, digits=3)
    lines = [f"{chain.name}: L = {chain.L}, problem pipeline, method {sol.method}, GPUs {P}, "
             f"memory limit {_m(sol.memory_limit)}, bandwidth {_fmt_bandwidth(sol.bandwidth, P)}, "
             f"memory model {sol.details.get('memory_model', 'paper')}",
             f"status       {sol.status}: {sol.message}"]
    if sol.bound is not None:
        lines.append(f"lower bound  {_t(sol.bound)} per period")
    if sol.objective is not None:
        B = _batch(chain)
        thr = ("" if not sol.objective > 0 else      # (solve refuses chains with no work: never 0 there)
               f"  throughput {B / sol.objective:.4g} samples/s (batch {B:g})" if B else
               f"  throughput {1 / sol.objective:.4g} mini-batches/s")
        lines.append(f"period       {_t(sol.objective)}{thr}")
        if sol.gap is not None and sol.bound is not None:
            lines.append(f"gap          {sol.gap * 100:.2f}% (vs bound {_t(sol.bound)})")
        if sol.method == "ilp":
            ilp = sol.details.get("ilp")
            if ilp:                  # a baseline's eager schedule beat every pattern the ILP found
                lines.append("ILP pattern  " + ("none" if ilp["period"] is None else _t(ilp["period"]))
                             + f" ({ilp['status']} among 1-periodic patterns"
                             + (f", bound {_t(ilp['bound'])})" if ilp["bound"] is not None else ")"))
            elif sol.predicted is not None:
                lines.append(f"ILP value    {_t(sol.predicted)}")
            bb = sol.details.get("best_baseline")
            if bb:
                lines.append(f"baseline     {bb['method']} {_t(bb['period'])} at {_m(bb['memory'])} "
                             f"(stages {bb['stages']}, NOAM {bb['noam']}; ILP/baseline = "
                             f"{sol.objective / bb['period']:.4f})")
                pm = bb.get("pattern_memory")
                if pm is not None:
                    if pm["status"] == str(Status.OPTIMAL):
                        need = f"needs {_m(pm['memory'])}"
                    elif pm["memory"] is not None:
                        need = f"needs between {_m(pm['bound'])} and {_m(pm['memory'])}"
                    elif pm["status"] == str(Status.INFEASIBLE):
                        need = "has none"
                    else:
                        need = "was not found within the time limit"
                    lines.append(f"             a pattern of the ILP's allocation at the baseline's period {need}")
        lines.append(f"peak memory  {_m(sol.peak_memory)}")
        mem = sol.details.get("memory_per_gpu", {})
        sched = sol.schedule
        if isinstance(sched, (Pattern, CyclicSchedule)):
            for g in sched.gpus_used():
                lines.append(f"  GPU {g}: layers {_ranges(sched.layers_on(g)):<20} memory "
                             f"{fmt_memory(mem.get(str(g)))}")
            lines.append(f"allocation   {'contiguous' if sched.is_contiguous() else 'non-contiguous'}")
            if isinstance(sched, CyclicSchedule):
                caps = sol.details.get("copy_caps")
                lines.append(f"schedule     {sched.K}-periodic: {sched.K} mini-batch(es) every "
                             f"{fmt_time(sched.K * sched.T)}; MILP memory rows {sol.details.get('cyclic_memory')}"
                             + (f", stored copies per GPU at most {caps}" if caps else ""))
        elif isinstance(sched, EagerResult):
            for g, (a, b) in enumerate(sched.stages):
                lines.append(f"  GPU {g}: layers {_ranges(list(range(a, b + 1))):<20} memory "
                             f"{fmt_memory(sched.sim.memory.get(g))}")
            lines.append("schedule     eager 1F1B (not 1-periodic in steady state)")
        if "noam" in sol.details:
            lines.append(f"NOAM         {sol.details['noam']}")
    if sol.times:
        lines.append("time         " + ", ".join(f"{k} {v:.3g}s" for k, v in sol.times.items()))
    return "\n".join(lines)


def gantt(solution: Solution, chain: Chain, path: str | Path, periods: int = 3) -> str | None:
    """Gantt chart of ``periods`` periods of a pattern's steady state: one row per GPU and per used
    link, tasks labelled F_l / B_l with their mini-batch index (Lemma 1). Returns None when drawn,
    else a note saying why not (only periodic patterns are drawn).

    Examples
    --------
    >>> import memplan, os, tempfile
    >>> chain = memplan.random_chain(6, seed=1)
    >>> sol = memplan.pipeline.solve(chain, memory=127, bandwidth=5, gpus=2, method="pipedream", n_batches=60)
    >>> path = os.path.join(tempfile.mkdtemp(), "g.png")
    >>> gantt(sol, chain, path) is None and os.path.getsize(path) > 1000
    True
    """
    solution, chain = _frontend.solution_arg(solution, chain, PROBLEM, "gantt")
    pattern = solution.schedule
    if not isinstance(pattern, Pattern):
        return "not drawn: the schedule is not a periodic pattern"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    td = task_data(chain, solution.bandwidth, solution.details.get("memory_model", "paper"))
    n, L = td.n, td.L
    h, hc = batch_shifts(pattern, td)
    T = pattern.T
    K = int(max(h.max(), hc.max())) + 1   # first period in steady state
    rows = [f"GPU {g}" for g in pattern.gpus_used()]
    links = sorted({link_key(pattern.gpu[m - 1], pattern.gpu[m]) for m in range(1, n)
                    if pattern.gpu[m - 1] != pattern.gpu[m]})
    rows += [f"link {a}-{b}" for a, b in links]
    ypos = {r: i for i, r in enumerate(rows)}
    cmap = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(max(8, 3 * periods), 0.6 * len(rows) + 1.5))
    for k in range(K, K + periods):
        for m in range(1, n + 1):
            l = td.layer(m)
            s = pattern.tau[m - 1] + k * T
            y = ypos[f"GPU {pattern.gpu[m - 1]}"]
            ax.barh(y, td.d[m], left=s, color=cmap((l - 1) % 20), alpha=1.0 if m <= L else 0.6,
                    edgecolor="black", linewidth=0.4)
            ax.text(s + td.d[m] / 2, y, f"{'F' if m <= L else 'B'}{l}\n{k - h[m]}", ha="center",
                    va="center", fontsize=6)
        for m in range(1, n):
            if pattern.gpu[m - 1] == pattern.gpu[m]:
                continue
            a, b = link_key(pattern.gpu[m - 1], pattern.gpu[m])
            s = pattern.tau_c[m - 1] + k * T
            y = ypos[f"link {a}-{b}"]
            ax.barh(y, td.dc[m], left=s, color="lightgray", edgecolor="black", linewidth=0.4)
            ax.text(s + td.dc[m] / 2, y, f"c{m}\n{k - hc[m]}", ha="center", va="center", fontsize=5)
    for k in range(K, K + periods + 1):
        ax.axvline(k * T, color="red", linewidth=0.6, linestyle="--")
    ax.set_yticks(range(len(rows)), rows)
    ax.invert_yaxis()
    ax.set_xlabel("time (s)")
    ax.set_title(f"{chain.name}: period {fmt_time(T)}, {len(pattern.gpus_used())} GPU(s) "
                 f"(labels: task, mini-batch)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
