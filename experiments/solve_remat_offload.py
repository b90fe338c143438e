"""``memplan solve --problem remat-offload``: re-materialization and offloading together (paper 000).

Methods:

- ``dp`` -- the joint dynamic program of paper 000 (:func:`baselines.remat_offload_dp.solve_joint`).
- ``milp`` -- the exact reference for small chains: an exhaustive search over every schedule whose
  operations and one-slot transfer parts start on a common time grid
  (:func:`baselines.remat_offload_exhaustive.solve_exhaustive`); tiny chains only (L <= 4 or so).

Slots: the DP costs O(L^3 N^2 + L N^3 L) time and O(L N^3) memory, so the command line's default
``--slots 500`` (meant for the re-materialization DPs) is replaced by the paper's N = 50; an explicit
value above 200 is clamped to 200 (the report says so). ``--exact`` uses one slot per byte.
"""
from __future__ import annotations

import importlib

from memplan.models.chain import Chain, Platform
from memplan.models.solution import InfeasibleError, Solution, Status
from memplan.models.units import fmt_bandwidth, fmt_memory, fmt_time

METHODS = ["dp", "milp"]
DEFAULT_METHOD = "dp"
CLI_DEFAULT_SLOTS = 500     # the shared --slots default of experiments/cli.py
DEFAULT_SLOTS = 50          # paper 000, appendix B.4
MAX_SLOTS = 200


def slots_for(args) -> tuple[int, str]:
    """The slot count to use and a note for the report."""
    s = getattr(args, "slots", None)
    if s is None or s == CLI_DEFAULT_SLOTS:
        return DEFAULT_SLOTS, f"N = {DEFAULT_SLOTS} memory slots (paper 000's value; --slots N to change)"
    if s > MAX_SLOTS:
        return MAX_SLOTS, (f"--slots {s} is too slow for this DP (O(L N^3) states): clamped to N = {MAX_SLOTS}")
    return int(s), f"N = {s} memory slots"


def solve(chain: Chain, platform: Platform | None, args) -> Solution:
    memory = getattr(args, "memory", None)
    if memory is None:
        raise InfeasibleError("--memory is required for --problem remat-offload (or a platform memory in the "
                              "instance)")
    beta = getattr(args, "bandwidth", None) or 0.0
    method = getattr(args, "method", None) or DEFAULT_METHOD
    exact = bool(getattr(args, "exact", False))
    if method == "dp":
        slots, note = slots_for(args)
        from memplan.experiments.cli import CliError

        mod = importlib.import_module("memplan.baselines.remat_offload_dp")
        try:
            sol = mod.solve_joint(chain, memory, beta, slots=slots, exact=exact)
        except ValueError as e:      # exact mode on float sizes, tables too large
            raise CliError(f"--problem remat-offload: {e}") from None
        sol.details["slots_note"] = "exact: one slot per byte" if exact else note
    elif method == "milp":
        sol = _exact(chain, memory, beta, args)
    else:
        raise ValueError(f"unknown method {method!r}; choose from {', '.join(METHODS)}")
    if sol.status == Status.INFEASIBLE:
        raise InfeasibleError(sol.message, sol.details.get("min_memory"))
    return sol


def _exact(chain: Chain, memory: float, beta: float, args) -> Solution:
    """The exhaustive search, bounded by the joint DP's makespan (exact mode when the sizes allow)."""
    from memplan.experiments.cli import CliError

    if not chain.is_integer:
        raise CliError("--method milp (exhaustive search) needs integer sizes: it is meant for tiny test chains")
    dpm = importlib.import_module("memplan.baselines.remat_offload_dp")
    exm = importlib.import_module("memplan.baselines.remat_offload_exhaustive")
    exact = memory == int(memory) and memory <= 500
    dp = dpm.solve_joint(chain, memory, beta, exact=exact, slots=DEFAULT_SLOTS)
    ub = dp.objective
    try:
        sol = exm.solve_exhaustive(chain, memory, beta, upper_bound=ub, time_limit=getattr(args, "time_limit", 60.0))
    except ValueError as e:
        raise CliError(f"--method milp: {e}") from None
    if sol.details.get("proven_optimal_at_upper_bound") and dp.schedule is not None:
        # nothing faster than the DP's schedule exists in the searched space: it is optimal
        dp.method = "milp"
        dp.status = Status.OPTIMAL
        dp.bound = dp.objective
        dp.times = {**dp.times, "search": sol.times.get("total", 0.0)}
        dp.details.update(search_states=sol.details.get("states"), grid=sol.details.get("grid"))
        dp.message = ("optimal: the exhaustive search (every sequence, any value offloaded in 1-byte parts, starts "
                      f"on a {sol.details.get('grid'):.4g}s grid) finds nothing faster than the joint DP's schedule")
        return dp
    if sol.objective is not None and ub is not None:
        sol.details["dp_makespan"] = ub
        sol.message += f"; the joint DP's makespan is {ub:.6g}s ({(ub / sol.objective - 1) * 100:.2f}% above)"
    return sol


def report(sol: Solution, chain: Chain, args=None) -> str:
    from memplan.baselines.remat_heuristics import store_all

    base = store_all(chain)
    beta = sol.details.get("bandwidth")
    lines = [f"{chain.name}: L = {chain.L}, problem remat-offload, method {sol.method}, memory limit "
             f"{fmt_memory(sol.memory_limit)}, bandwidth {fmt_bandwidth(beta) if beta else '0 (no offloading)'}",
             f"status       {sol.status}: {sol.message}"]
    if sol.details.get("slots_note"):
        lines.append(f"slots        {sol.details['slots_note']}")
    if sol.objective is None:
        return "\n".join(lines)
    over = (sol.objective / base.objective - 1) * 100 if base.objective else 0.0
    lines += [
        f"makespan     {fmt_time(sol.objective)}  ({over:+.1f}% vs store-all {fmt_time(base.objective)}; "
        f"throughput {1 / sol.objective:.4g} iterations/s)" if sol.objective > 0 else
        f"makespan     {fmt_time(sol.objective)}",
        f"peak memory  {fmt_memory(sol.peak_memory)}  (store-all {fmt_memory(base.peak_memory)})",
    ]
    if sol.predicted is not None:
        lines.append(f"predicted    {fmt_time(sol.predicted)} (the method's own value; replayed "
                     f"{'equal' if abs(sol.predicted - sol.objective) <= 1e-9 * max(1.0, sol.objective) else 'DIFFERENT'})")
    d = sol.details
    if d.get("recompute_time") is not None:
        lines.append(f"recompute    {fmt_time(d['recompute_time'])}  "
                     f"({100 * d['recompute_time'] / sol.objective:.1f}% of the makespan)")
    if d.get("idle_time") is not None:
        lines.append(f"idle         {fmt_time(d['idle_time'])} waiting for transfers "
                     f"({fmt_time(d.get('idle_data', 0.0))} of it for prefetched inputs, the rest for memory "
                     f"freed by offloads or reserved by prefetches)")
    off = d.get("offloaded") or []
    if off:
        what = ", ".join(f"{o['value']}^{o['index']} ({fmt_memory(o['bytes'])})" for o in off)
        lines.append(f"offloaded    {len(off)} values, {fmt_memory(d.get('offloaded_bytes', 0.0))}: {what}")
        if d.get("transfer_time") is not None:
            lines.append(f"link busy    {fmt_time(d['transfer_time'])} (offload + prefetch)")
    else:
        lines.append("offloaded    nothing")
    if sol.bound is not None:
        lines.append(f"bound        {fmt_time(sol.bound)}")
    lines.append("time         " + ", ".join(f"{k} {v:.3g}s" for k, v in sol.times.items()))
    sched = sol.schedule
    if sched is not None:
        lines.append(f"sequence     ({len(sched)} operations)")
        lines.append("  " + sched.notation())
    path = getattr(args, "gantt", None) if args is not None else None
    if path and sched is not None:
        gantt(chain, sol, path)
        lines.append(f"Gantt chart  {path}")
    return "\n".join(lines)


def gantt(chain: Chain, sol: Solution, path: str) -> None:
    """Compute stream, link (offload / prefetch parts) and memory over time, replayed by the simulator."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from memplan.models.remat_offload import simulate_joint

    beta = sol.details.get("bandwidth") or None
    rep = simulate_joint(chain, sol.schedule, beta, sol.memory_limit)
    fig, (ax, axm) = plt.subplots(2, 1, figsize=(12, 5), sharex=True, gridspec_kw={"height_ratios": [1.2, 1]})
    colors = {"F_all": "C0", "F_ck": "C1", "F_none": "C2", "B": "C3"}
    for (op, l), s, e in zip(sol.schedule.ops, rep.op_start, rep.op_end):
        ax.barh(1, e - s, left=s, color=colors[op], edgecolor="k", linewidth=0.3)
        if e - s > rep.makespan / 80:
            ax.text((s + e) / 2, 1, str(l), ha="center", va="center", fontsize=6)
    for t, s, e in zip(sol.schedule.transfers, rep.transfer_start, rep.transfer_end):
        ax.barh(0, e - s, left=s, color="C4" if t.kind == "offload" else "C5", edgecolor="k", linewidth=0.2)
    ax.set_yticks([0, 1], ["link", "compute"])
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in list(colors.values()) + ["C4", "C5"]]
    ax.legend(handles, list(colors) + ["offload", "prefetch"], ncol=6, fontsize=7, loc="upper right")
    ts = [t for t, _ in rep.memory_trace] + [rep.makespan]
    ms = [m / 2**20 for _, m in rep.memory_trace]
    axm.step(ts[:-1], ms, where="post", color="k", linewidth=0.8)
    if sol.memory_limit:
        axm.axhline(sol.memory_limit / 2**20, color="r", linestyle="--", linewidth=0.8, label="limit")
        axm.legend(fontsize=7)
    axm.set_ylabel("memory (MiB)")
    axm.set_xlabel("time (s)")
    ax.set_title(f"{chain.name}: {sol.method}, makespan {fmt_time(sol.objective)}, idle {fmt_time(rep.idle_time)}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
