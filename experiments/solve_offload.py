"""``memplan solve --problem offload``: method dispatch and the report (paper 001, activation offloading).

Methods: ``lb`` (Proposition 3, a bound, no schedule), ``greedy`` (Theorem 2 rounded up; the report
also shows its fractional optimum), ``dynprog`` (Algorithm 1 as a heuristic), the peers ``vdnn``,
``tflms``, ``autoswap`` (section 6), and ``milp`` (exact Problem 1, started from the best heuristic).
Every schedule is replayed by :func:`models.offload.validate_offload` before it is reported.

Memory is the activation budget of the paper (``M_GPU``); the bandwidth comes from ``--bandwidth`` or
the instance's platform.
"""
from __future__ import annotations

import argparse
import math

from memplan.models.chain import Chain, Platform
from memplan.models.offload import (OffloadData, min_feasible_memory, peak_memory_no_offload, timeline,
                            validate_offload)
from memplan.models.solution import InfeasibleError, Solution, Status
from memplan.models.units import UnitError, fmt_bandwidth, fmt_memory, fmt_time

METHODS = ["lb", "greedy", "dynprog", "vdnn", "tflms", "autoswap", "milp"]
DEFAULT_METHOD = "dynprog"
HEURISTICS = ["greedy", "dynprog", "vdnn", "tflms", "autoswap"]


def _defaults(args) -> argparse.Namespace:
    base = dict(memory=None, bandwidth=None, slots=200, exact=False, time_limit=60.0, gap=1e-4, threads=None,
                solver_log=None, json=None, gantt=None, verbose=False, method=DEFAULT_METHOD)
    if args is not None:
        base.update({k: v for k, v in vars(args).items() if v is not None or k not in base})
    return argparse.Namespace(**base)


def check_inputs(chain: Chain, memory: float | None, bandwidth: float | None) -> None:
    """Clear errors for a missing/infeasible memory limit or a missing bandwidth."""
    mf = min_feasible_memory(chain)
    if memory is None:
        raise InfeasibleError(f"--memory is required for --problem offload (or a platform memory in the "
                              f"instance); the minimum feasible memory is {fmt_memory(mf)}", minimum=mf)
    if memory < mf * (1 - 1e-12):
        raise InfeasibleError(f"memory limit {fmt_memory(memory)} is below the minimum feasible memory "
                              f"{fmt_memory(mf)} ({mf:.0f} B): some operation needs its inputs, outputs and "
                              "temporary memory at once, even with everything else offloaded", minimum=mf)
    mp = peak_memory_no_offload(chain)
    if memory < mp and not (bandwidth and bandwidth > 0 and math.isfinite(bandwidth)):
        raise UnitError(f"offloading is needed (M_peak = {fmt_memory(mp)} > {fmt_memory(memory)}) but no "
                        "bandwidth is known: give --bandwidth, e.g. 12.5GB/s, or a platform bandwidth in "
                        "the instance file")


def run_method(chain: Chain, memory: float, bandwidth: float | None, method: str, args=None) -> Solution:
    """Run one method (see :data:`METHODS`) and check its schedule with the validator."""
    from memplan.baselines import offload as B

    args = _defaults(args)
    if method not in METHODS:
        raise ValueError(f"unknown offload method {method!r}; choose from {', '.join(METHODS)}")
    check_inputs(chain, memory, bandwidth)
    beta = bandwidth if bandwidth else math.inf
    if method == "lb":
        return B.lower_bound(chain, memory, bandwidth)
    if memory >= peak_memory_no_offload(chain):
        from memplan.models.offload import no_wait_schedule

        sched = no_wait_schedule(chain, bandwidth or math.inf, memory, [])
        return B.make_solution(chain, method, sched, memory, bound=B.lower_bound_value(chain, memory, bandwidth),
                               message="M_peak fits: nothing to offload", status=Status.OPTIMAL)
    if method == "greedy":
        sol = B.greedy(chain, memory, beta)
    elif method == "dynprog":
        sol = B.dynprog(chain, memory, beta, slots=args.slots or 200, exact=bool(args.exact))
    elif method == "vdnn":
        sol = B.vdnn(chain, memory, beta)
    elif method == "tflms":
        sol = B.tflms(chain, memory, beta)
    elif method == "autoswap":
        sol = B.autoswap(chain, memory, beta)
    else:
        from memplan.formulations.offload_milp import solve_offload_milp

        heur = [run_method(chain, memory, bandwidth, h, args) for h in HEURISTICS]
        ok = [h for h in heur if h.success]
        start = min(ok, key=lambda h: h.objective) if ok else None
        sol = solve_offload_milp(chain, memory, beta, start=start.schedule if start else None,
                                 time_limit=args.time_limit, gap=args.gap, threads=args.threads,
                                 log_file=args.solver_log, verbose=bool(args.verbose))
        sol.details["start_method"] = start.method if start else None
    if sol.schedule is not None:
        rep = validate_offload(chain, sol.schedule, memory, tol=1e-6)
        if abs(rep.makespan - sol.objective) > 1e-9 * max(1.0, rep.makespan):
            raise RuntimeError(f"{method}: the validator does not confirm the makespan")
    return sol


def solve(chain: Chain, platform: Platform | None, args) -> Solution:
    args = _defaults(args)
    memory = args.memory
    if memory is None and platform is not None:
        memory = platform.memory
    bandwidth = args.bandwidth
    if bandwidth is None and platform is not None:
        bandwidth = platform.bandwidth
    sol = run_method(chain, memory, bandwidth, args.method, args)
    sol.details.setdefault("bandwidth", bandwidth)
    if args.gantt and sol.schedule is not None:
        gantt(chain, sol, args.gantt)
    return sol


def report(sol: Solution, chain: Chain, args=None) -> str:
    from memplan.baselines.offload import lower_bound_value

    d = OffloadData.of(chain)
    bw = sol.details.get("bandwidth")
    if bw is None and sol.schedule is not None and math.isfinite(sol.schedule.bandwidth):
        bw = sol.schedule.bandwidth
    M = sol.memory_limit
    mp = peak_memory_no_offload(chain)
    lb = lower_bound_value(chain, M, bw) if M is not None else None
    lines = [f"{chain.name}: L = {chain.L} (+ loss), problem offload (paper 001), method {sol.method}",
             f"memory limit {fmt_memory(M)}  (M_peak without offloading {fmt_memory(mp)}, minimum feasible "
             f"{fmt_memory(min_feasible_memory(chain))}), bandwidth {fmt_bandwidth(bw)}",
             f"status       {sol.status}: {sol.message}",
             f"lower bound  {fmt_time(lb)}  (Proposition 3; compute alone {fmt_time(d.uF.sum() + d.uB.sum())})"]
    if "fractional" in sol.details:
        lines.append(f"fractional   {fmt_time(sol.details['fractional'])}  (Theorem 2: optimum when "
                     "activations may be split)")
    if sol.objective is not None:
        ratio = sol.objective / lb if lb else math.nan
        lines += [f"makespan     {fmt_time(sol.objective)}  (ratio to LB {ratio:.4f})",
                  f"peak memory  {fmt_memory(sol.peak_memory)}"]
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
    elif sol.method == "lb":
        lines.append(f"to offload   at least {fmt_memory(max(0.0, mp - M))} (Proposition 2)")
    if sol.times:
        lines.append("time         " + ", ".join(f"{k} {v:.3g}s" for k, v in sol.times.items()))
    return "\n".join(lines)


def gantt(chain: Chain, sol: Solution, path: str) -> None:
    """A Gantt chart (computations, link, memory) as an image."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from memplan.models.offload import validate_offload

    d = OffloadData.of(chain)
    s = sol.schedule
    fig, (ax, axm) = plt.subplots(2, 1, figsize=(11, 4.5), sharex=True, gridspec_kw={"height_ratios": [1.2, 1]})
    for i in range(d.L + 1):
        ax.broken_barh([(s.tF[i], d.uF[i])], (1, 0.8), color="tab:blue", edgecolor="k", lw=0.3)
        ax.broken_barh([(s.tB[i], d.uB[i])], (1, 0.8), color="tab:orange", edgecolor="k", lw=0.3)
    for j in s.offloaded:
        c = d.x[j] / s.bandwidth
        ax.broken_barh([(s.offload[j], c)], (0, 0.8), color="tab:green", edgecolor="k", lw=0.3)
        ax.broken_barh([(s.prefetch[j], c)], (0, 0.8), color="tab:red", edgecolor="k", lw=0.3)
        ax.text(s.offload[j] + c / 2, 0.4, str(j), ha="center", va="center", fontsize=6)
        ax.text(s.prefetch[j] + c / 2, 0.4, str(j), ha="center", va="center", fontsize=6)
    ax.set_yticks([0.4, 1.4], ["link", "device"])
    ax.set_title(f"{chain.name}: {sol.method}, makespan {fmt_time(sol.objective)}")
    trace: list = []
    validate_offload(chain, s, None, trace=trace, tol=1e-6)
    last = {}
    for t, mem in trace:           # memory once every event of an instant is applied
        last[t] = mem
    ts = sorted(last)
    axm.step(ts, [last[t] / 2**20 for t in ts], where="post", color="tab:purple", lw=1)
    axm.axhline(sol.memory_limit / 2**20, color="k", ls="--", lw=0.8)
    axm.set_ylabel("memory (MiB)")
    axm.set_xlabel("time (s)")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
