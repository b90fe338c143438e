"""``memplan solve --problem pipeline``: pipelined model parallelism (paper 003).

Methods:
  ilp        the ILP (1)-(36) solved by HiGHS, MIP start = best feasible baseline pattern
  pipedream  PipeDream's planner swept over memory targets and NOAM, eager 1F1B simulated; the best
             point whose measured memory fits
  gpipe      time-balanced contiguous partitions (1..P stages), eager 1F1B, NOAM 1..S
  cyclic     K-periodic schedules (``--periodicity K`` mini-batches per period, default 2; beyond the
             paper's patterns, see formulations/pipeline_cyclic.py) of the best allocations known
             (the best pattern found for the MIP start, the best PipeDream and GPipe partitions),
             bisection on the average period below the best of those
  lb         the period lower bound only (no schedule)

Every schedule is replayed by :mod:`models.pipeline` before it is reported: ``objective`` is the
measured period and ``peak_memory`` the measured memory (the simulator is the judge).
"""
from __future__ import annotations

from functools import partial
from typing import Any

from memplan.models.chain import Chain, Platform
from memplan.models.pipeline import CyclicSchedule, EagerResult, Pattern, simulate_pattern, task_data
from memplan.models.solution import Solution, Status
from memplan.models.units import fmt_bandwidth, fmt_memory, fmt_time

METHODS = ["ilp", "pipedream", "gpipe", "cyclic", "lb"]
DEFAULT_METHOD = "ilp"
PROBLEM = "pipeline"


def _infeasible_message(chain, bandwidth, P, memory, what: str, found_min: float | None = None,
                        found_label: str = ""):
    """The message of an INFEASIBLE answer. For a baseline (``found_min`` given) the minimum memory
    that works for that method is its smallest simulated point; for the ILP it lies between the
    memory lower bound and the memory of the serial pattern of the memory-smallest contiguous
    partition (which always works). Returns (message, minimum known to work, lower bound)."""
    from memplan.baselines.pipeline import memory_lower_bound, min_memory_contiguous

    lb = memory_lower_bound(chain, bandwidth, P)
    ub, stages = min_memory_contiguous(chain, bandwidth, P)
    head = f"{what} within {fmt_memory(memory)} per GPU on {P} GPU(s)"
    tail = (f"the serial pattern of stages {stages} needs {fmt_memory(ub)}; no pattern exists below "
            f"{fmt_memory(lb)}")
    if found_min is not None:
        return (f"{head}; minimum memory that works for {found_label}: {fmt_memory(found_min)} "
                f"(its smallest point); {tail}", found_min, lb)
    return (f"{head}; minimum memory that works: between {fmt_memory(lb)} and {fmt_memory(ub)} "
            f"({tail})", ub, lb)


def _baseline_solution(chain, bandwidth, P, memory, method, points, lb, times) -> Solution:
    from memplan.baselines.pipeline import best_feasible

    best = best_feasible(points, memory)
    if best is None:
        found = min((p.memory for p in points), default=None)
        msg, minimum, mlb = _infeasible_message(chain, bandwidth, P, memory, f"no {method} point fits",
                                                 found, method)
        return Solution(PROBLEM, method, Status.INFEASIBLE, memory_limit=memory, message=msg,
                        times=times, details={"min_memory": minimum, "memory_lower_bound": mlb,
                                              "points": len(points)})
    sched: Any = best.pattern if best.pattern is not None else best.result
    objective, peak = best.period, best.memory
    mem_per_gpu = best.result.sim.memory
    if best.pattern is not None:
        r = simulate_pattern(best.pattern, chain, bandwidth, gpus=P)
        objective, peak, mem_per_gpu = r.period, r.peak_memory, r.memory
    return Solution(PROBLEM, method, Status.FEASIBLE, objective=objective, peak_memory=peak, schedule=sched,
                    bound=lb, memory_limit=memory, predicted=best.period,
                    message=f"best of {len(points)} simulated (partition, NOAM) points; "
                            f"stages {best.stages}, NOAM {best.noam}",
                    times=times, details={"stages": [list(s) for s in best.stages], "noam": best.noam,
                                          "memory_per_gpu": {str(g): v for g, v in mem_per_gpu.items()},
                                          "eager_period": best.period, "eager_memory": best.memory,
                                          "target": best.target, "points": len(points)})


def run_method(chain: Chain, bandwidth: float | None, P: int, memory: float | None, method: str, *,
               time_limit: float | None = 60.0, gap: float | None = None, threads: int | None = None,
               log_file=None, n_batches: int = 500, points=None, periodicity: int = 2,
               allocations=(), refine: bool = True, starts=()) -> Solution:
    """Run one method; ``points`` may pass precomputed baseline points (PipeDream + GPipe);
    ``allocations`` (layer -> GPU lists) and ``periodicity`` are for ``cyclic``; with ``refine`` the
    ILP's MIP start is improved by :func:`baselines.pipeline.exact_refine` on its allocation and on the
    best PipeDream and GPipe partitions; ``starts`` are more candidate patterns for the ILP's start
    (a sweep passes the patterns found at smaller limits), used when they replay within ``memory``."""
    import time

    from memplan.baselines.pipeline import best_feasible, gpipe_points, period_lower_bound, pipedream_points, start_pattern

    if method not in METHODS:
        raise ValueError(f"unknown pipeline method {method!r}; choose from {', '.join(METHODS)}")
    t0 = time.perf_counter()
    times: dict[str, float] = {}
    P = int(P or 1)
    lb = period_lower_bound(chain, bandwidth, P)
    if method == "lb":
        return Solution(PROBLEM, "lb", Status.NO_SOLUTION, bound=lb, memory_limit=memory,
                        message="period lower bound max(sum d / P, max_l u_F^l + u_B^l); no schedule",
                        times={"total": time.perf_counter() - t0})
    if method == "pipedream":
        pts = points if points is not None else pipedream_points(chain, bandwidth, P, n_batches=n_batches)
        pts = [p for p in pts if p.method == "pipedream"]
        times["total"] = time.perf_counter() - t0
        return _baseline_solution(chain, bandwidth, P, memory, "pipedream", pts, lb, times)
    if method == "gpipe":
        pts = points if points is not None else gpipe_points(chain, bandwidth, P, n_batches=n_batches)
        pts = [p for p in pts if p.method == "gpipe"]
        times["total"] = time.perf_counter() - t0
        return _baseline_solution(chain, bandwidth, P, memory, "gpipe", pts, lb, times)

    if points is None:
        points = (pipedream_points(chain, bandwidth, P, n_batches=n_batches)
                  + gpipe_points(chain, bandwidth, P, n_batches=n_batches))
    start = start_pattern(chain, bandwidth, P, memory, points)
    bb = best_feasible(points, memory)     # the best baseline point at this memory
    for q in starts:
        if q is not None and (start is None or q.T < start.T * (1 - 1e-9)):
            r = simulate_pattern(q, chain, bandwidth, gpus=P)
            if memory is None or r.peak_memory <= memory * (1 + 1e-9):
                start = q
    times["baselines"] = time.perf_counter() - t0
    if method == "cyclic":
        return _cyclic_solution(chain, bandwidth, P, memory, points, start, lb, times, t0, periodicity,
                                allocations, time_limit, threads)

    # ------------------------------------------------------------------ ILP
    from memplan.formulations.pipeline_ilp import solve_ilp

    refined = None
    if refine and start is not None:
        # the best pattern of the start's allocation and of the best baseline partitions (exact
        # 1-periodic MILP, fixed allocation): a better MIP start than the modular patterns
        from memplan.baselines.pipeline import exact_refine

        t_ref = time.perf_counter()
        goal = bb.period if bb is not None else None
        refined = exact_refine(chain, bandwidth, P, memory,
                               _known_allocations(chain, points, memory, start, bandwidth=bandwidth, P=P,
                                                  threads=threads, goal=goal),
                               start, steps=8, threads=threads, time_limit=min(30.0, time_limit or 30.0),
                               goal=goal)
        times["refine"] = time.perf_counter() - t_ref
        if refined is not None:
            start = refined

    pattern, res, ilp, t = solve_ilp(chain, bandwidth, P, memory, start=start, Tmin=lb, time_limit=time_limit,
                                     gap=gap, threads=threads, log_file=log_file)
    times.update(t)
    details: dict[str, Any] = {"model_size": res.size, "start": start.meta if start is not None else None,
                               "start_refined": refined is not None,
                               "start_period": start.T if start is not None else None,
                               "start_accepted": res.start_accepted, "Tmax": ilp.Tmax}
    bound = max(lb, res.bound) if res.bound is not None else lb
    if pattern is None:
        times["total"] = time.perf_counter() - t0
        if res.status == Status.INFEASIBLE:
            msg, minimum, mlb = _infeasible_message(chain, bandwidth, P, memory, "the ILP proves no valid pattern")
            mm = _min_memory(chain, bandwidth, P, time_limit, threads)
            if mm is not None:
                minimum, proven, mbound = mm
                msg = (f"the ILP proves no valid pattern within {fmt_memory(memory)} per GPU on {P} GPU(s); "
                       + (f"minimum memory that works: {fmt_memory(minimum)} (proven by the min-memory ILP)"
                          if proven else f"minimum memory that works: between {fmt_memory(max(mlb, mbound))} "
                          f"and {fmt_memory(minimum)} (min-memory ILP stopped at its time limit)"))
            details.update(min_memory=minimum, memory_lower_bound=mlb)
            return Solution(PROBLEM, "ilp", Status.INFEASIBLE, memory_limit=memory, message=msg, times=times,
                            details=details)
        return Solution(PROBLEM, "ilp", res.status, memory_limit=memory, bound=bound, message=res.message,
                        times=times, details=details)
    from memplan.models.pipeline import snap_period

    pattern = snap_period(pattern, chain, bandwidth, bound, memory=memory, gpus=P)   # the ILP's bound
    sim = simulate_pattern(pattern, chain, bandwidth, gpus=P)
    if memory is not None and sim.peak_memory > memory * (1 + 1e-6):
        raise RuntimeError(f"ILP pattern replays with {sim.peak_memory} B > limit {memory} B")
    if abs(sim.period - pattern.T) > 1e-6 * pattern.T:
        raise RuntimeError(f"ILP pattern replays with period {sim.period} != T = {pattern.T}")
    if bb is not None:
        details["best_baseline"] = {"method": bb.method, "period": bb.period, "memory": bb.memory,
                                    "stages": [list(x) for x in bb.stages], "noam": bb.noam}
        if sim.period > bb.period * (1 + 1e-9):
            details["best_baseline"]["pattern_memory"] = _memory_at_period(
                chain, bandwidth, P, pattern.layer_gpus(), bb.period, time_limit, threads)
    details["memory_per_gpu"] = {str(g): v for g, v in sim.memory.items()}
    details["shifts"] = sim.shifts
    details["contiguous"] = pattern.is_contiguous()
    times["total"] = time.perf_counter() - t0
    return Solution(PROBLEM, "ilp", res.status, objective=sim.period, peak_memory=sim.peak_memory,
                    schedule=pattern, bound=bound, memory_limit=memory, predicted=res.objective,
                    message=res.message, times=times, details=details)


def _memory_at_period(chain, bandwidth, P, layer_gpu, T, time_limit, threads) -> dict[str, Any]:
    """Where a baseline beats the ILP: the least memory a pattern of the ILP's allocation needs at the
    baseline's period (:func:`formulations.pipeline_cyclic.min_memory_at_period`, about a second),
    so the report can say how far the paper's patterns are from the baseline there."""
    from memplan.formulations.pipeline_cyclic import min_memory_at_period

    r, bound = min_memory_at_period(chain, bandwidth, layer_gpu, T, P=P, time_limit=min(30.0, time_limit or 30.0),
                                    threads=threads)
    return {"memory": r.sim.peak_memory if r.schedule is not None else None, "bound": bound,
            "status": str(r.status)}


def _known_allocations(chain, points, memory, start, extra=(), *, bandwidth=None, P=None,
                       threads=None, goal=None) -> list[tuple[int, ...]]:
    """Layer -> GPU lists, without repeats: ``extra``, the start pattern's, those of the best
    PipeDream and GPipe points that fit in ``memory``, and (given ``P``) the nearly load-balanced,
    possibly non-contiguous allocations of :func:`formulations.pipeline_balance.balanced_allocation`
    whose load is below the start's period: the one that only fits weights and buffers (the paper's
    "abundant memory" case) and, given the period to beat ``goal`` and a limit, the one that also
    fits the average activations of a pattern of period ``goal`` (the tight-memory case)."""
    from memplan.baselines.pipeline import best_feasible
    from memplan.models.pipeline import stages_to_layer_gpu

    cands = [tuple(int(g) for g in a) for a in extra]
    if start is not None:
        cands.append(tuple(start.layer_gpus()))
    for meth in ("pipedream", "gpipe"):
        bb = best_feasible([p for p in points if p.method == meth], memory)
        if bb is not None:
            cands.append(tuple(stages_to_layer_gpu(bb.stages, chain.L)))
    if P is not None and P > 1:
        from memplan.formulations.pipeline_balance import balanced_allocation

        periods = [None] + ([goal] if goal is not None and memory is not None else [])
        for period in periods:
            bal = balanced_allocation(chain, bandwidth, P, memory, period=period, threads=threads)
            if bal is not None and (start is None or bal[1] < start.T * (1 - 1e-9)):
                cands.append(tuple(bal[0]))
    return list(dict.fromkeys(cands))


def _cyclic_solution(chain, bandwidth, P, memory, points, start, lb, times, t0, K, allocations, time_limit,
                     threads) -> Solution:
    """Method ``cyclic``: bisection with :func:`formulations.pipeline_cyclic.cyclic_search` on each
    candidate allocation, below the best period known (pattern or eager schedule) at this memory."""
    import time

    from memplan.baselines.pipeline import best_feasible
    from memplan.formulations.pipeline_cyclic import cyclic_search

    K = int(K)
    if K < 1:
        raise ValueError(f"--periodicity must be at least 1, got {K}")
    fitting = best_feasible(points, memory)
    known = ([fitting.period] if fitting is not None else []) + ([start.T] if start is not None else [])
    cands = _known_allocations(chain, points, memory, start, allocations)
    if not known or not cands:
        msg, minimum, mlb = _infeasible_message(chain, bandwidth, P, memory,
                                                "no allocation known to fit (no pattern or baseline point)")
        return Solution(PROBLEM, "cyclic", Status.NO_SOLUTION, memory_limit=memory, bound=lb, message=msg,
                        times=times, details={"min_memory": minimum, "memory_lower_bound": mlb})
    hi = min(known)
    per_solve = max(15.0, (time_limit or 60.0) / (2 * len(cands)))   # one MILP; a search runs <= 2 x 8 of them
    best = None
    with_t = time.perf_counter()
    for lg in cands:
        r = cyclic_search(chain, bandwidth, lg, memory, K, hi=hi, P=P, steps=6, time_limit=per_solve,
                          threads=threads)
        if r is not None and (best is None or r.schedule.T < best.schedule.T):
            best = r
    times["cyclic"] = time.perf_counter() - with_t
    times["total"] = time.perf_counter() - t0
    details = {"periodicity": K, "allocations_tried": len(cands), "best_known_period": hi}
    if best is None:
        return Solution(PROBLEM, "cyclic", Status.NO_SOLUTION, memory_limit=memory, bound=lb, times=times,
                        message=f"no {K}-periodic schedule found at or below {fmt_time(hi)} on "
                                f"{len(cands)} allocation(s)", details=details)
    sched, sim = best.schedule, best.sim
    details.update(memory_per_gpu={str(g): v for g, v in sim.memory.items()}, contiguous=sched.is_contiguous(),
                   memory_model=sched.meta.get("memory_model"),
                   copy_caps={str(g): c for g, c in (sched.meta.get("copy_caps") or {}).items()})
    return Solution(PROBLEM, "cyclic", Status.FEASIBLE, objective=sim.period, peak_memory=sim.peak_memory,
                    schedule=sched, bound=lb, memory_limit=memory, predicted=sched.T,
                    message=f"{sched.K}-periodic schedule ({sched.K} mini-batch(es) per "
                            f"{fmt_time(sched.K * sched.T)}; searched K = 1 and {K}), best of {len(cands)} "
                            f"allocation(s), bisection below {fmt_time(hi)}",
                    times=times, details=details)


def _min_memory(chain, bandwidth, P, time_limit, threads):
    """(smallest memory of a replayed pattern, proven?, bound) from the min-memory ILP, or None."""
    from memplan.baselines.pipeline import min_memory_contiguous
    from memplan.formulations.pipeline_ilp import solve_min_memory
    from memplan.models.pipeline import serial_pattern, stages_to_layer_gpu

    _, stages = min_memory_contiguous(chain, bandwidth, P)
    start = serial_pattern(chain, bandwidth, stages_to_layer_gpu(stages, chain.L))
    pat, res = solve_min_memory(chain, bandwidth, P, start=start, threads=threads,
                                time_limit=min(30.0, time_limit or 30.0))
    if pat is None:
        return None
    peak = simulate_pattern(pat, chain, bandwidth, gpus=P).peak_memory
    return peak, res.status == Status.OPTIMAL, res.bound or 0.0


def solve(chain: Chain, platform: Platform | None, args) -> Solution:
    P = getattr(args, "gpus", None) or (platform.gpus if platform is not None else None) or 1
    return run_method(chain, getattr(args, "bandwidth", None), P, getattr(args, "memory", None), args.method,
                      time_limit=getattr(args, "time_limit", 60.0), gap=getattr(args, "gap", None),
                      threads=getattr(args, "threads", None), log_file=getattr(args, "solver_log", None),
                      n_batches=getattr(args, "n_batches", 500) or 500,
                      periodicity=getattr(args, "periodicity", 2) or 2)


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


def report(sol: Solution, chain: Chain, args=None) -> str:
    P = getattr(args, "gpus", None)
    # periods and memories with enough digits to compare methods that differ by 0.1%
    _t, _m = partial(fmt_time, digits=6), partial(fmt_memory, digits=3)
    bw = getattr(args, "bandwidth", None)
    lines = [f"{chain.name}: L = {chain.L}, problem pipeline, method {sol.method}, GPUs {P}, "
             f"memory limit {_m(sol.memory_limit)}, bandwidth {fmt_bandwidth(bw)}",
             f"status       {sol.status}: {sol.message}"]
    if sol.bound is not None:
        lines.append(f"lower bound  {_t(sol.bound)} per period")
    if sol.objective is not None:
        B = _batch(chain)
        thr = f"  throughput {B / sol.objective:.4g} samples/s (batch {B:g})" if B else \
              f"  throughput {1 / sol.objective:.4g} mini-batches/s"
        lines.append(f"period       {_t(sol.objective)}{thr}")
        if sol.gap is not None and sol.bound is not None:
            lines.append(f"gap          {sol.gap * 100:.2f}% (vs bound {_t(sol.bound)})")
        if sol.predicted is not None and sol.method == "ilp":
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
                             f"{fmt_time(sched.K * sched.T)}; memory model {sol.details.get('memory_model')}"
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
    gantt_file = getattr(args, "gantt", None) if args is not None else None
    if gantt_file and isinstance(sol.schedule, Pattern):
        gantt(sol.schedule, chain, bw, gantt_file)
        lines.append(f"Gantt chart  {gantt_file}")
    elif gantt_file:
        lines.append("Gantt chart  not drawn: the schedule is not a periodic pattern")
    return "\n".join(lines)


def gantt(pattern: Pattern, chain: Chain, bandwidth: float | None, path, periods: int = 3) -> None:
    """Gantt chart of ``periods`` periods of a pattern's steady state: one row per GPU and per used
    link, tasks labelled F_l / B_l with their mini-batch index (Lemma 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from memplan.models.pipeline import _link, batch_shifts

    td = task_data(chain, bandwidth)
    n, L = td.n, td.L
    h, hc = batch_shifts(pattern, td)
    T = pattern.T
    K = int(max(h.max(), hc.max())) + 1   # first period in steady state
    rows = [f"GPU {g}" for g in pattern.gpus_used()]
    links = sorted({_link(pattern.gpu[m - 1], pattern.gpu[m]) for m in range(1, n)
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
            a, b = _link(pattern.gpu[m - 1], pattern.gpu[m])
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
