"""Activation offloading: which activations to send to the host during training, and when (paper 001).

Paper 001: O. Beaumont, L. Eyraud-Dubois, A. Shilova, *Optimal GPU-CPU Offloading Strategies for Deep
Neural Network Training*, Euro-Par 2020. The forward activations ``x_0..x_L`` of a chain may each be
*offloaded* to the host over one link (bandwidth ``beta``, one transfer at a time) and *prefetched*
back before the backward operation that reads them; the makespan of one training iteration is
minimised under a device memory limit ``M_GPU`` (the activation budget, as in the paper; parameters
are not counted). Problem 1 (whole, non-interruptible transfers) is strongly NP-complete (Theorem 1).
The model, the simulator that replays every schedule, and the bounds are in
:mod:`memplan.models.offload`.

Methods (:data:`METHODS`):

============  ======================================================================================
``lb``        Proposition 3: ``max(sum_i (u_{F_i} + u_{B_i}), 2 (M_peak - M_GPU) / beta)``, a bound,
              no schedule. O(L).
``greedy``    section 4: offload ``x_0..x_k``, the smallest prefix holding ``M_peak - M_GPU`` bytes
              (Theorem 2 rounded up); the report also shows the fractional optimum. O(L^2).
``dynprog``   section 5.3, Algorithm 1 (optimal for interruptible transfers, Problem 2) used as a
              heuristic; states merged on a grid of ``M_GPU / slots`` bytes, or (``slots`` None,
              default) the best of several grids, exact values and GREEDY's schedule.
``vdnn``      section 6, vDNN(++): thresholds on ``u_{F_i} / |x_i|``, all or every second candidate.
``tflms``     section 6, TFLMS: the first ``n`` activations, a prefetch distance.
``autoswap``  section 6, AutoSwap: priority scores, weights found by a seeded random search.
``milp``      exact MILP of Problem 1 (:mod:`memplan.formulations.offload_milp`), any transfer order,
              started from the best of the five heuristics above. Exponential in the worst case.
============  ======================================================================================

Every schedule is a no-wait schedule (Proposition 1) or the MILP's, and is replayed by
:func:`memplan.models.offload.validate_offload` before it is returned: ``objective`` (the makespan)
and ``peak_memory`` are the replayed values.

Examples
--------
>>> import memplan
>>> chain, platform = memplan.load_instance("paper004_table2")
>>> sol = memplan.offload.solve(chain, memory="80MiB", bandwidth="1GB/s", method="greedy")
>>> sol.status, sol.schedule.offloaded, round(sol.objective * 1e3, 2)
(<Status.FEASIBLE: 'feasible'>, [0, 1, 2], 79.03)
>>> sol.details["fractional"] <= sol.objective       # Theorem 2's fractional optimum <= GREEDY
True
"""
from __future__ import annotations

import math
import time
from pathlib import Path

from memplan import _frontend
from memplan.baselines import offload as _heuristics
from memplan.baselines.offload_bound import milp_bounds
from memplan.formulations.offload_milp import solve_offload_milp
from memplan.models.budget import Budget, ProgressFn
from memplan.models.chain import Chain
from memplan.models.offload import (PROBLEM, OffloadData, link_speeds, lower_bound_value, make_solution, min_feasible_memory,
                                    no_wait_schedule, peak_memory_no_offload, timeline, validate_offload)
from memplan.models.solution import InputError, Solution, Status
from memplan.models.units import fmt_bandwidth, fmt_bytes, fmt_memory, fmt_time

__all__ = ["PROBLEM", "METHODS", "DEFAULT_METHOD", "OPTIONS_USED", "HEURISTICS", "solve", "report", "gantt"]

#: the methods of :func:`solve` (``lb`` gives a bound, the others a schedule)
METHODS = ["lb", "greedy", "dynprog", "vdnn", "tflms", "autoswap", "milp"]
DEFAULT_METHOD = "dynprog"
#: the tuning options of :func:`solve` each method reads (the others it ignores; see
#: :data:`memplan.remat.OPTIONS_USED`)
OPTIONS_USED: dict[str, frozenset[str]] = {
    **{m: frozenset() for m in ("lb", "greedy", "vdnn", "tflms", "autoswap")},
    "dynprog": frozenset({"slots", "exact"}),
    "milp": frozenset({"slots", "exact", "gap", "threads", "solver_log"}),
}
#: the heuristics whose best schedule starts the MILP
HEURISTICS = ["greedy", "dynprog", "vdnn", "tflms", "autoswap"]
#: with ``method="milp"`` on chains of at least ``LNS_MIN_STAGES`` stages, the share of the MILP's time
#: spent in the neighbourhood search around the best heuristic's schedule (see
#: :func:`formulations.offload_milp.solve_offload_milp`); smaller chains go straight to the full MIP
LNS_SHARE = 0.4
LNS_MIN_STAGES = 40
#: with ``method="milp"``, the share of the MILP's time spent first on the offloaded set: enumerating
#: sets, then solving the model with the set fixed for the best of them and for the neighbours of the
#: best set (issue 21); on chains of at least ``LNS_MIN_STAGES`` stages the smaller share leaves room
#: for the neighbourhood search
COVER_SHARE = 0.75
COVER_SHARE_LARGE = 0.25
#: with ``method="milp"``, each heuristic but DYNPROG may use this share of what is left of the call's
#: time limit. DYNPROG runs first, with the whole limit, as ``method="dynprog"`` would (it stops by
#: itself once a finer grid stops paying, 0.35-0.6 s on the toy chain repeated to 60 stages, 0.9-1.5 s
#: on an H200 ResNet-101 for 3 s): the MILP then starts from DYNPROG's own answer and is never worse
#: than it. With 30% of the time (until 2026-11-29) it was cut short on a loaded CPU and the MILP,
#: left no time for HiGHS's set-up, returned a start 0.03% slower than DYNPROG alone.
HEURISTIC_SHARE = 0.1
#: tolerance (relative) of the final replay; the MILP's schedules are read back from floating point
REPLAY_TOL = 1e-6


# ------------------------------------------------------------------------------------------ inputs


def _infeasible(method: str, memory: float, mf: float) -> Solution:
    return Solution(PROBLEM, method, Status.INFEASIBLE, memory_limit=memory, details={"min_memory": mf},
                    message=f"memory limit {fmt_memory(memory)} is below the minimum feasible memory "
                            f"{fmt_memory(mf)} ({mf:.0f} B): some operation needs its inputs, outputs and "
                            "temporary memory at once, even with everything else offloaded")


# ------------------------------------------------------------------------------------------ solve
@_frontend.records_chain
def solve(chain: Chain, *, memory: float | str, bandwidth: float | str | tuple | None = None, method: str | None = None,
          time_limit: float | None = 60.0, gap: float | None = 1e-4, threads: int | None = None,
          slots: int | None = None, exact: bool = False, solver_log: str | Path | None = None,
          progress: ProgressFn | None = None) -> Solution:
    """Plan the offloading of activations for one training iteration of ``chain`` (paper 001).

    Parameters
    ----------
    chain : Chain
        The chain (stages ``1..L`` and the loss; paper 001's ``F_0..F_L``, see
        :mod:`memplan.models.offload` for the mapping).
    memory : float or str
        Device memory for activations (``M_GPU``): bytes, or a string with units (``"80MiB"``).
    bandwidth : float, str or a pair, optional
        Link bandwidth ``beta``: bytes/s or a string (``"12GB/s"``). Needed when offloading is
        (``memory`` below ``M_peak``, the peak without offloading). Two speeds, to the host then to the
        device (a pair, or ``"49GB/s:56GB/s"``): offloads and prefetches then last what each direction
        allows (:func:`memplan.models.offload.link_speeds`); every method takes them (``milp``'s
        bound is then HiGHS's and Proposition 3's: the fractional and split relaxations are proven for
        one speed).
    method : str, optional
        One of :data:`METHODS`; :data:`DEFAULT_METHOD` (``"dynprog"``) when None.
    time_limit : float or None
        Seconds for the whole call (None: no limit). With ``milp``, DYNPROG first, as
        ``method="dynprog"`` runs it, then each other heuristic computing the MIP start gets
        :data:`HEURISTIC_SHARE` of what is left; the model is built and solved in the rest; the best
        schedule found so far is returned when time runs out.
    gap : float, optional
        Relative gap at which the MILP stops (``milp`` only).
    threads : int, optional
        HiGHS threads (``milp`` only; None: HiGHS decides).
    slots : int, optional
        DYNPROG merges states on a grid of ``memory / slots`` bytes, as given. None (default): it
        tries the grids of :data:`memplan.baselines.offload.AUTO_GRIDS` and exact values while time
        allows and keeps the best schedule, GREEDY's included (never worse than GREEDY).
    exact : bool
        DYNPROG keeps exact state values instead (exact for integer sizes).
    solver_log : str or Path, optional
        Write HiGHS's log to this file (``milp`` only).
    progress : callable, optional
        Receives one line per phase (heuristics, MILP build, incumbents), e.g. ``progress=print``.

    Returns
    -------
    Solution
        ``objective`` is the makespan (seconds) and ``peak_memory`` the peak (bytes), both as replayed
        by :func:`memplan.models.offload.validate_offload`; ``bound`` is Proposition 3's lower bound
        (GREEDY: the fractional optimum of Theorem 2; MILP: its dual bound); ``schedule`` an
        :class:`~memplan.models.offload.OffloadSchedule`. ``method="lb"`` gives the bound and no
        schedule (status ``no_solution``, as the pipeline's ``lb``). A memory limit below the minimum feasible memory gives ``Status.INFEASIBLE`` with
        ``details["min_memory"]`` (bytes).

    Raises
    ------
    InputError
        A missing or malformed ``memory``, a ``bandwidth`` that is not positive (or missing while
        offloading is needed), an unknown method, ``slots``/``threads``/``gap``/``time_limit`` out of
        range.

    Examples
    --------
    The toy chain of paper 004 (Table 2) needs 107 MiB without offloading; at 80 MiB and 1 GB/s,
    DYNPROG offloads the first three activations:

    >>> import memplan
    >>> from memplan.models.offload import lower_bound_value, validate_offload
    >>> chain, platform = memplan.load_instance("paper004_table2")
    >>> sol = memplan.offload.solve(chain, memory="80MiB", bandwidth="1GB/s", method="dynprog")
    >>> sol.success, sol.schedule.offloaded, round(sol.objective * 1e3, 2)
    (True, [0, 1, 2], 79.03)
    >>> replay = validate_offload(chain, sol.schedule, 80 * 2**20)   # raises if the schedule breaks a rule
    >>> replay.makespan == sol.objective and sol.peak_memory == replay.peak_memory <= 80 * 2**20
    True
    >>> lb = lower_bound_value(chain, 80 * 2**20, 1e9)   # Proposition 3: 2 (106.99 - 80) MiB / (1 GB/s)
    >>> round(lb * 1e3, 2), sol.objective >= lb, sol.bound == lb
    (56.6, True, True)

    Below the minimum feasible memory no schedule exists; the Solution says how much would do:

    >>> bad = memplan.offload.solve(chain, memory="50MiB", bandwidth="1GB/s")
    >>> bad.status, round(bad.details["min_memory"] / 2**20, 2)  # B_2: x_2, x_3, y_2, y_3 and ex^B_2
    (<Status.INFEASIBLE: 'infeasible'>, 74.49)
    >>> memplan.offload.solve(chain, memory="80MiB", bandwidth="0GB/s")
    Traceback (most recent call last):
    ...
    memplan.models.solution.InputError: offload: bandwidth='0GB/s' must be a positive, finite quantity, e.g. '12GB/s'
    """
    if not isinstance(chain, Chain):
        raise InputError(f"{PROBLEM}: chain must be a Chain (e.g. memplan.load_instance(name)[0] or "
                         f"memplan.random_chain(L)), got {type(chain).__name__}")
    if memory is None:
        raise InputError(f"{PROBLEM}: memory is required (e.g. memory='90MiB', bytes as a number, or a platform "
                         f"in the instance file); this chain needs at least {fmt_memory(min_feasible_memory(chain))}")
    M = _frontend.memory_arg(memory, PROBLEM)
    beta = _frontend.link_arg(bandwidth, PROBLEM)
    method = _frontend.method_arg(method, METHODS, DEFAULT_METHOD, PROBLEM)
    slots = _frontend.count_arg(slots, "slots", PROBLEM, required=False)
    threads = _frontend.count_arg(threads, "threads", PROBLEM, required=False)
    gap = _frontend.gap_arg(gap, PROBLEM)
    solver_log = _frontend.solver_log_arg(solver_log, PROBLEM)
    if isinstance(exact, str) or exact not in (0, 1):       # True, False, 0, 1 (numpy's bools too)
        # bool(exact) had taken exact='no' (any non-empty string, 2, ...) for True, silently
        raise InputError(f"{PROBLEM}: exact={exact!r} must be True or False")
    if chain.resident:
        return _frontend.solve_without_resident(solve, chain, M, dict(
            bandwidth=beta, method=method, time_limit=time_limit, gap=gap, threads=threads, slots=slots,
            exact=exact, solver_log=solver_log, progress=progress))
    b = _frontend.budget(time_limit, progress, PROBLEM)
    with b.active():
        mf = min_feasible_memory(chain)
        if M < mf * (1 - 1e-12):
            sol = _infeasible(method, M, mf)
            b.log(f"infeasible: the minimum feasible memory is {fmt_memory(mf)}")
        else:
            mp = peak_memory_no_offload(chain)
            if M < mp and beta is None:
                raise InputError(f"{PROBLEM}: offloading is needed (M_peak = {fmt_memory(mp)} > memory "
                                 f"{fmt_memory(M)}) but no bandwidth is given: give bandwidth, e.g. "
                                 "bandwidth='12.5GB/s' (or --bandwidth, or a platform bandwidth in the "
                                 "instance file)")
            sol = _run(chain, M, beta, method, b, gap=gap, threads=threads,
                       slots=slots, exact=bool(exact), solver_log=solver_log)
    return _frontend.finish(sol, b, memory=M, bandwidth=beta)


def _heuristic(chain: Chain, memory: float, bandwidth: float, name: str, *, time_limit: float | None,
               slots: int | None, exact: bool) -> Solution:
    """One heuristic of :data:`HEURISTICS`, its searches stopped after ``time_limit`` seconds."""
    if name == "greedy":
        return _heuristics.greedy(chain, memory, bandwidth)
    if name == "dynprog":
        return _heuristics.dynprog(chain, memory, bandwidth, slots=slots, exact=exact, time_limit=time_limit)
    if name == "vdnn":
        return _heuristics.vdnn(chain, memory, bandwidth, time_limit=time_limit)
    if name == "tflms":
        return _heuristics.tflms(chain, memory, bandwidth, time_limit=time_limit)
    if name == "autoswap":
        return _heuristics.autoswap(chain, memory, bandwidth, time_limit=time_limit)
    raise AssertionError(name)   # pragma: no cover - the method was checked


def _run(chain: Chain, memory: float, bandwidth: float | None, method: str, b: Budget, *, gap: float | None,
         threads: int | None, slots: int | None, exact: bool, solver_log) -> Solution:
    """Run ``method`` (inputs checked, ``memory`` feasible) and replay its schedule."""
    if method == "lb":
        sol = _heuristics.lower_bound(chain, memory, bandwidth)
        b.log(f"lower bound {fmt_time(sol.bound)}")
        return sol
    lb = lower_bound_value(chain, memory, bandwidth)
    if memory >= peak_memory_no_offload(chain):
        sched = no_wait_schedule(chain, memory, bandwidth or math.inf, [])
        sol = make_solution(chain, method, sched, memory, bound=lb, message="M_peak fits: nothing to offload",
                            status=Status.OPTIMAL)
    elif method == "milp":
        sol = _milp(chain, memory, bandwidth, b, gap=gap, threads=threads, slots=slots, exact=exact,
                    solver_log=solver_log)
    else:
        sol = _heuristic(chain, memory, bandwidth, method, time_limit=b.limit(), slots=slots, exact=exact)
        b.log(f"{method}: " + (f"makespan {fmt_time(sol.objective)}" if sol.success else sol.message))
    if sol.schedule is not None:   # the final replay: what is reported is what the simulator measured
        rep = validate_offload(chain, sol.schedule, memory, tol=REPLAY_TOL)
        if abs(rep.makespan - sol.objective) > 1e-9 * max(1.0, rep.makespan):
            raise RuntimeError(f"{method}: the validator measures a makespan of {rep.makespan!r}, the method "
                               f"reported {sol.objective!r}")
        sol.objective, sol.peak_memory = rep.makespan, rep.peak_memory
        if rep.peak_memory > memory * (1 + OVER_LIMIT_REL):
            sol = _within_limit(chain, memory, bandwidth, sol, b, slots=slots, exact=exact)
    return sol


#: a replayed peak above the limit by more than this (relative) is over it, not rounding: the replay
#: accepts :data:`REPLAY_TOL`, but a reported peak must not exceed the limit
OVER_LIMIT_REL = 1e-12


def _within_limit(chain: Chain, memory: float, bandwidth, sol: Solution, b: Budget, *, slots, exact) -> Solution:
    """``sol``'s schedule replays above ``memory`` within the replay's tolerance (DYNPROG and vDNN at
    GPT-2 small's least feasible memory: 4 bytes over 823 MB, offloading a^L next to the 4-byte loss):
    the fastest heuristic schedule that replays within the limit instead, status FEASIBLE and
    ``details["candidate"]`` naming it, or no schedule (NO_SOLUTION) where none does."""
    over = sol.peak_memory - memory
    best = None
    for name in HEURISTICS:
        if name == sol.method:
            continue
        h = _heuristic(chain, memory, bandwidth, name, time_limit=b.limit(share=HEURISTIC_SHARE), slots=slots,
                       exact=exact)
        if h.schedule is None:
            continue
        rep = validate_offload(chain, h.schedule, memory, tol=REPLAY_TOL)
        if rep.peak_memory <= memory * (1 + OVER_LIMIT_REL) and (best is None or rep.makespan < best[0]):
            best = (rep.makespan, rep.peak_memory, name, h)
    why = (f"{sol.method}'s schedule replays {fmt_bytes(over)} B over the limit ({fmt_bytes(sol.peak_memory)} B "
           f"against {fmt_bytes(memory)} B)")
    if best is None:
        return Solution(PROBLEM, sol.method, Status.NO_SOLUTION, memory_limit=memory, bandwidth=sol.bandwidth,
                        message=f"{why}, and no other heuristic's fits", details={**sol.details, "over_limit": over},
                        times=sol.times)
    makespan, peak, name, h = best
    h.method, h.status = sol.method, Status.FEASIBLE
    h.objective, h.peak_memory = makespan, peak
    h.details = {**h.details, "candidate": name, "over_limit": over}
    h.message = f"{why}; {name}'s, which fits, is returned"
    return h


def _milp(chain: Chain, memory: float, bandwidth: float, b: Budget, *, gap, threads, slots, exact,
          solver_log) -> Solution:
    """The exact MILP, started from the best heuristic; never worse than that heuristic."""
    t0 = time.perf_counter()
    heur = []
    for name in ["dynprog"] + [n for n in HEURISTICS if n != "dynprog"]:
        if b.expired() and any(h.success for h in heur):
            b.log(f"{name}: not run (the time limit is reached and a start is known)")
            continue
        # DYNPROG as method="dynprog" runs it (the whole limit): never worse than that baseline
        limit = b.limit() if name == "dynprog" else b.limit(share=HEURISTIC_SHARE)
        h = _heuristic(chain, memory, bandwidth, name, time_limit=limit, slots=slots, exact=exact)
        b.log(f"{name}: " + (f"makespan {fmt_time(h.objective)}" if h.success else h.message))
        heur.append(h)
    t_heur = time.perf_counter() - t0
    ok = [h for h in heur if h.success]
    start = min(ok, key=lambda h: h.objective) if ok else None
    b.log("MILP: " + (f"start {start.method} ({fmt_time(start.objective)})" if start else "no start"))
    # first the offloaded set: enumeration, then the model solved with the set fixed for the best sets
    # and the best set's neighbours (75% of what is left; 25% on large chains, issue 21: ResNet-101,
    # L = 73, where 40% then goes to the neighbourhood search around the best schedule: offloaded-set
    # moves, then sub-MIPs over windows of activations); the full MIP gets the rest
    # the split relaxation (whole transfers): the MILP's bound, and the filter of its set descent
    # the split relaxation is proven for one link speed: with two, the MILP's own bound and LB only
    bound, set_bound = (milp_bounds(chain, memory, bandwidth) if not isinstance(bandwidth, tuple)
                        else (None, None))
    sol = solve_offload_milp(chain, memory, bandwidth, start=start.schedule if start else None,
                             time_limit=b.limit(), gap=gap, threads=threads, log_file=solver_log,
                             lns=LNS_SHARE if chain.L >= LNS_MIN_STAGES and start is not None else 0.0,
                             cover=(0.0 if start is None else
                                    COVER_SHARE_LARGE if chain.L >= LNS_MIN_STAGES else COVER_SHARE),
                             bound=bound, set_bound=set_bound)
    b.log(f"MILP: {sol.status}" + (f", makespan {fmt_time(sol.objective)}" if sol.objective is not None else ""))
    details = dict(sol.details)
    details["start_method"] = start.method if start else None
    details["heuristics"] = {h.method: h.objective for h in heur}
    times = {"heuristics": t_heur, **sol.times}
    if start is not None and (sol.schedule is None or sol.objective > start.objective * (1 + 1e-9)):
        # the MILP stopped (time limit, or its schedule was rejected) without beating its start
        status = Status.TIME_LIMIT if sol.status in (Status.TIME_LIMIT, Status.NO_SOLUTION) else Status.FEASIBLE
        sol = make_solution(chain, "milp", start.schedule, memory,
                            bound=sol.bound if sol.bound is not None else lower_bound_value(chain, memory, bandwidth),
                            predicted=sol.predicted, status=status, times=times, details=details,
                            message=f"{sol.message}; the MIP start ({start.method}) is kept", tol=REPLAY_TOL)
    else:
        sol.details, sol.times = details, times
    return sol


# ------------------------------------------------------------------------------------------ report
def _fmt_link(bw) -> str:
    """One bandwidth, or two as 'A to the host, B to the device'."""
    if isinstance(bw, (tuple, list)):
        return f"{fmt_bandwidth(bw[0])} to the host, {fmt_bandwidth(bw[1])} to the device"
    return fmt_bandwidth(bw)


def report(solution: Solution, chain: Chain) -> str:
    """The text report of ``memplan solve --problem offload``.

    Parameters
    ----------
    solution : Solution
        A result of :func:`solve` (its ``memory_limit``, ``bandwidth`` and ``details`` are read).
    chain : Chain
        The chain it was computed for.

    Returns
    -------
    str
        Limits and ``M_peak``, status, Proposition 3's bound, the makespan and its ratio to the bound,
        the peak, what was offloaded, the link order and a text timeline.

    Examples
    --------
    >>> import memplan
    >>> chain, _ = memplan.load_instance("paper004_table2")
    >>> sol = memplan.offload.solve(chain, memory="80MiB", bandwidth="1GB/s")
    >>> print(memplan.offload.report(sol, chain))        # doctest: +ELLIPSIS
    paper004-table2: L = 6 (+ loss), problem offload (paper 001), method dynprog
    memory limit 80.0 MiB  (M_peak without offloading 107.0 MiB, minimum feasible 74.5 MiB), bandwidth 1.0 GB/s
    ...
    makespan     79 ms  (ratio to LB 1.3962)
    peak memory  79.1 MiB
    offloaded    3 activations, 27.8 MiB: x_0 (input, 7.6 MiB), ...
    link order   O0 O1 O2 P2 P1 P0   (O = offload, P = prefetch of x_j)
    ...
    """
    solution, chain = _frontend.solution_arg(solution, chain, PROBLEM, "report")
    sol = solution
    d = OffloadData.of(chain)
    bw = sol.bandwidth
    if bw is None:
        bw = sol.details.get("bandwidth")
    if bw is None and sol.schedule is not None and all(map(math.isfinite, link_speeds(sol.schedule.bandwidth))):
        bw = sol.schedule.bandwidth
    M = sol.memory_limit
    mp = peak_memory_no_offload(chain)
    lb = lower_bound_value(chain, M, bw) if M is not None else None
    lines = [f"{chain.name}: L = {chain.L} (+ loss), problem offload (paper 001), method {sol.method}",
             f"memory limit {fmt_memory(M)}  (M_peak without offloading {fmt_memory(mp)}, minimum feasible "
             f"{fmt_memory(min_feasible_memory(chain))}), bandwidth {_fmt_link(bw)}",
             f"status       {sol.status}: {sol.message}",
             f"lower bound  {fmt_time(lb)}  (Proposition 3; compute alone {fmt_time(d.uF.sum() + d.uB.sum())})"]
    if "fractional" in sol.details:
        lines.append(f"fractional   {fmt_time(sol.details['fractional'])}  "
                     + ("(Theorem 2: optimum when activations may be split)" if not isinstance(bw, (tuple, list))
                        else "(the relaxation with activations split; Theorem 2 proves it a bound for one link "
                             "speed only)"))
    if sol.objective is not None:
        ratio = sol.objective / lb if lb else math.nan
        lines += [f"makespan     {fmt_time(sol.objective)}  (ratio to LB {ratio:.4f})",
                  f"peak memory  {fmt_memory(sol.peak_memory)}"]
        # ex^F is F_all's own overhead here (every forward keeps abar)
        lines += _frontend.overheads_line(chain, lambda: validate_offload(chain.one_overhead(), sol.schedule).peak_memory)
        if sol.bound is not None and sol.method == "milp":
            gap = sol.gap
            lines.append(f"bound        {fmt_time(sol.bound)}" + (f"  (gap {gap * 100:.3f}%)" if gap is not None else ""))
        off = sol.schedule.offloaded
        names = chain.stage_names
        desc = ", ".join(f"x_{j} ({names[j]}, {fmt_memory(d.x[j])})" for j in off) or "nothing"
        lines.append(f"offloaded    {len(off)} activations, {fmt_memory(sum(d.x[j] for j in off))}: {desc}")
        lines.append("link order   " + (" ".join(f"{k}{j}" for k, j in sol.schedule.link_order()) or "-")
                     + "   (O = offload, P = prefetch of x_j)")
        lines.append("timeline")
        lines.append(timeline(chain, sol.schedule))
    elif sol.method == "lb" and M is not None:
        lines.append(f"to offload   at least {fmt_memory(max(0.0, mp - M))} (Proposition 2)")
    if sol.times:
        lines.append("time         " + ", ".join(f"{k} {v:.3g}s" for k, v in sol.times.items()))
    return "\n".join(lines)


def gantt(solution: Solution, chain: Chain, path: str | Path) -> None:
    """Draw the schedule as a Gantt chart (computations, link, memory over time) into an image file.

    Parameters
    ----------
    solution : Solution
        A result of :func:`solve` with a schedule.
    chain : Chain
        The chain it was computed for.
    path : str or Path
        Image file (the format follows the suffix, e.g. ``.png``).

    Examples
    --------
    >>> import memplan, tempfile, os
    >>> chain, _ = memplan.load_instance("paper004_table2")
    >>> sol = memplan.offload.solve(chain, memory="80MiB", bandwidth="1GB/s")
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     memplan.offload.gantt(sol, chain, os.path.join(tmp, "offload.png"))
    ...     os.path.getsize(os.path.join(tmp, "offload.png")) > 10_000
    True
    """
    solution, chain = _frontend.solution_arg(solution, chain, PROBLEM, "gantt")
    if solution.schedule is None:
        raise InputError(f"{PROBLEM}: gantt needs a solution with a schedule (status {solution.status}, method "
                         f"{solution.method})")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sol = solution
    d = OffloadData.of(chain)
    s = sol.schedule
    fig, (ax, axm) = plt.subplots(2, 1, figsize=(11, 4.5), sharex=True, gridspec_kw={"height_ratios": [1.2, 1]})
    for i in range(d.L + 1):
        ax.broken_barh([(s.tF[i], d.uF[i])], (1, 0.8), color="tab:blue", edgecolor="k", lw=0.3)
        ax.broken_barh([(s.tB[i], d.uB[i])], (1, 0.8), color="tab:orange", edgecolor="k", lw=0.3)
    b_out, b_in = link_speeds(s.bandwidth)
    for j in s.offloaded:
        c, ci = d.x[j] / b_out, d.x[j] / b_in
        ax.broken_barh([(s.offload[j], c)], (0, 0.8), color="tab:green", edgecolor="k", lw=0.3)
        ax.broken_barh([(s.prefetch[j], ci)], (0, 0.8), color="tab:red", edgecolor="k", lw=0.3)
        ax.text(s.offload[j] + c / 2, 0.4, str(j), ha="center", va="center", fontsize=6)
        ax.text(s.prefetch[j] + ci / 2, 0.4, str(j), ha="center", va="center", fontsize=6)
    ax.set_yticks([0.4, 1.4], ["link", "device"])
    ax.set_title(f"{chain.name}: {sol.method}, makespan {fmt_time(sol.objective)}")
    trace: list = []
    validate_offload(chain, s, None, trace=trace, tol=REPLAY_TOL)
    last = {}
    for t, mem in trace:           # memory once every event of an instant is applied
        last[t] = mem
    ts = sorted(last)
    axm.step(ts, [last[t] / 2**20 for t in ts], where="post", color="tab:purple", lw=1)
    if sol.memory_limit is not None:
        axm.axhline(sol.memory_limit / 2**20, color="k", ls="--", lw=0.8)
    axm.set_ylabel("memory (MiB)")
    axm.set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
