"""``memplan solve --problem remat``: method dispatch and the report.

Every method returns a Solution replayed by :func:`models.remat.simulate_remat`; :func:`solve`
replays it once more against the limit before anything is reported (the simulator is the judge).
"""
from __future__ import annotations

import argparse
import importlib
from typing import Callable

from memplan.models.chain import Chain, Platform
from memplan.models.remat import simulate_remat
from memplan.models.solution import InfeasibleError, Solution, Status
from memplan.models.units import fmt_memory, fmt_time


def _dp(name: str) -> Callable:
    def run(chain: Chain, memory: float, args) -> Solution:
        fn = getattr(importlib.import_module("memplan.baselines.remat_rotor"), name)
        return fn(chain, memory, slots=getattr(args, "slots", 500), exact=getattr(args, "exact", False))
    return run


def _heur(name: str, needs_slots: bool = False) -> Callable:
    def run(chain: Chain, memory: float, args) -> Solution:
        fn = getattr(importlib.import_module("memplan.baselines.remat_heuristics"), name)
        if needs_slots:
            return fn(chain, memory, slots=getattr(args, "slots", 500), exact=getattr(args, "exact", False))
        return fn(chain, memory)
    return run


def _milp(module: str, name: str, **extra) -> Callable:
    def run(chain: Chain, memory: float, args) -> Solution:
        fn = getattr(importlib.import_module(module), name)
        return fn(chain, memory, time_limit=getattr(args, "time_limit", 60.0), gap=getattr(args, "gap", 1e-4),
                  threads=getattr(args, "threads", None), log_file=getattr(args, "solver_log", None), **extra)
    return run


#: method name -> callable(chain, memory_bytes, args) -> Solution
METHODS: dict[str, Callable] = {
    "rotor": _dp("persistent"),
    "rotor-floating": _dp("floating"),
    "sequential": _heur("sequential"),
    "revolve": _heur("revolve", needs_slots=True),
    "store-all": _heur("store_all"),
    "recompute-all": _heur("recompute_all"),
    "remat-milp": _milp("memplan.formulations.remat_milp", "solve_remat_milp"),
    "checkmate": _milp("memplan.formulations.remat_checkmate", "solve_checkmate"),
    "checkmate-lp": _milp("memplan.formulations.remat_checkmate", "solve_checkmate_lp"),
}
DEFAULT_METHOD = "rotor"


def run_method(chain: Chain, memory: float, method: str, args=None) -> Solution:
    """Run one method and check its schedule with the simulator (raises if the check fails)."""
    if method not in METHODS:
        raise ValueError(f"unknown remat method {method!r}; choose from {', '.join(METHODS)}")
    args = args or argparse.Namespace(slots=500, exact=False, time_limit=60.0, gap=1e-4, threads=None,
                                      solver_log=None)
    sol = METHODS[method](chain, memory, args)
    if sol.schedule is not None:
        rep = simulate_remat(chain, sol.schedule)
        over = memory is not None and rep.peak_memory > memory * (1 + 1e-9)
        if abs(rep.makespan - (sol.objective or 0)) > 1e-9 * max(1.0, rep.makespan) or (
                over and not sol.details.get("limit_exceeded")):
            raise RuntimeError(f"{method}: the simulator does not confirm the solution "
                               f"(replayed {rep.makespan}, peak {rep.peak_memory}; reported {sol.objective})")
    return sol


def solve(chain: Chain, platform: Platform | None, args) -> Solution:
    if args.memory is None:
        raise InfeasibleError("--memory is required for --problem remat (or a platform memory in the instance)")
    sol = run_method(chain, args.memory, args.method, args)
    if sol.status == Status.INFEASIBLE:
        raise InfeasibleError(sol.message, sol.details.get("min_memory"))
    return sol


def report(sol: Solution, chain: Chain, args=None) -> str:
    from memplan.baselines.remat_heuristics import store_all

    base = store_all(chain)
    lines = [f"{chain.name}: L = {chain.L}, problem remat, method {sol.method}, "
             f"memory limit {fmt_memory(sol.memory_limit)}",
             f"status       {sol.status}: {sol.message}"]
    if sol.objective is not None:
        over = (sol.objective / base.objective - 1) * 100 if base.objective else 0.0
        lines += [
            f"makespan     {fmt_time(sol.objective)}  ({over:+.1f}% vs store-all {fmt_time(base.objective)})",
            f"peak memory  {fmt_memory(sol.peak_memory)}  (store-all {fmt_memory(base.peak_memory)})",
        ]
        if sol.details.get("recompute_time") is not None:
            lines.append(f"recompute    {fmt_time(sol.details['recompute_time'])}")
        if sol.bound is not None:
            gap = sol.gap
            lines.append(f"bound        {fmt_time(sol.bound)}" + (f"  (gap {gap * 100:.2f}%)" if gap is not None else ""))
        d = sol.details
        if d.get("limit_exceeded"):
            lines.append(f"LIMIT EXCEEDED the rounded schedule needs {fmt_memory(sol.peak_memory)} > "
                         f"{fmt_memory(sol.memory_limit)} (reported honestly, not a valid plan for this limit)")
        if sol.method.startswith("checkmate") and sol.predicted is not None:
            lines.append(f"own model    {fmt_time(sol.predicted)} (Checkmate's plan before conversion to "
                         "F_all/F_ck/F_none/B)")
        if d.get("milp_bound") is not None:
            g = d.get("milp_gap")
            lines.append(f"MILP bound   {fmt_time(d['milp_bound'])} in Checkmate's own model"
                         + (f" (gap {g * 100:.2f}%)" if g is not None else ""))
        if d.get("lp_bound") is not None:
            lines.append(f"LP bound     {fmt_time(d['lp_bound'])} (relaxation, Checkmate's model)")
        t = sol.times
        lines.append("time         " + ", ".join(f"{k} {v:.3g}s" for k, v in t.items()))
        lines.append(f"sequence     ({len(sol.schedule)} operations)")
        lines.append("  " + sol.schedule.notation())
    return "\n".join(lines)
