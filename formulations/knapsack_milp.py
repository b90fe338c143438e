"""The 0-1 knapsack that PyTorch's min-cut partitioner solves under an activation memory budget, as a
MILP solved exactly with HiGHS (issue 28, first slice).

The model (the same one PyTorch's ``dp_knapsack`` solves, without its quantization)
--------------------------------------------------------------------------------------
PyTorch's partitioner (``torch._functorch.partitioners.choose_saved_values_set``, torch 2.13) hands a
knapsack solver the candidate tensors of the joint forward-backward graph that it would otherwise ban
from recomputation. Item ``i`` has a size ``m_i`` (its bytes, normalized by the partitioner so that
the budget fraction is the capacity) and a runtime ``r_i`` (the partitioner's estimate of what
recomputing it costs: FLOPs by default). The solver chooses which items to *save*; the others may be
recomputed in the backward. With ``s_i = 1`` for a saved item:

- ``c_capacity``: ``sum_i m_i s_i <= M`` (the saved items fit the budget fraction ``M``);
- objective: minimize ``sum_i r_i (1 - s_i)``, the runtime left to recompute (PyTorch maximizes the
  saved runtime ``sum_i r_i s_i``; the two differ by the constant ``sum_i r_i``);
- tie-break (``tiebreak=True``, a second MILP): among the choices of optimal runtime (``c_runtime``),
  minimize the saved size ``sum_i m_i s_i``. PyTorch's FLOP estimate gives every pointwise operation
  the same cost (1), so ties are the rule, and ``dp_knapsack`` breaks them by item order.

This is a knapsack over saved bytes: it does not know *when* the backward frees each tensor, so its
capacity is not the step's peak. A peak-aware model of the backward's memory over time (issue 28,
item 2) is future work; this module only solves PyTorch's own model exactly.

``dp_knapsack`` rounds every size to a multiple of 1e-4 of the capacity scale before its dynamic
program, so its answer can be suboptimal, or (rarely) exceed the capacity in the true sizes. Here the
sizes are used as given. The caller's start (PyTorch's answer) is checked against the true sizes; when
it fits, it is the MIP start, and the answer returned is never worse than it: if HiGHS stops without
improving on it (time limit), the start itself is returned.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from memplan.formulations.highs_driver import EXACT_TOLERANCES, solve_milp, timed
from memplan.models.solution import Status


# exact feasibility (the answer is checked in the true sizes) and no gap: the runtimes span 1 to 1e12
_OPTIONS = {**EXACT_TOLERANCES, "mip_abs_gap": 0.0}


@dataclass
class KnapsackResult:
    saved: list[int]                 # item indices kept (sorted)
    recomputed: list[int]            # the others (sorted)
    recompute_runtime: float         # sum of r_i over the recomputed items (the objective)
    saved_memory: float              # sum of m_i over the saved items (<= capacity)
    status: Status
    source: str                      # "milp" or "start" (the start was at least as good)
    times: dict[str, float] = field(default_factory=dict)


def knapsack_value(memory: Sequence[float], runtimes: Sequence[float], saved: Sequence[int]) -> tuple[float, float]:
    """``(recompute runtime, saved memory)`` of a choice of saved items, in the true sizes."""
    keep = set(int(i) for i in saved)
    return (float(sum(r for i, r in enumerate(runtimes) if i not in keep)),
            float(sum(memory[i] for i in keep)))


def solve_knapsack(memory: Sequence[float], runtimes: Sequence[float], capacity: float, *,
                   start: Sequence[int] | None = None, time_limit: float | None = 10.0,
                   threads: int | None = 1, tolerance: float = 1e-12, tiebreak: bool = True) -> KnapsackResult:
    """Choose the saved items: minimize the recompute runtime subject to ``c_capacity`` (module
    docstring). ``tiebreak``: then, among the choices whose runtime is optimal (within 1e-9
    relative), save the fewest bytes (a second MILP; ``c_runtime`` holds the first's optimum). ``start``: the saved items of another solver's answer (PyTorch's ``dp_knapsack``),
    used as the MIP start where it fits in the true sizes (``+ tolerance`` relative to the capacity).
    """
    import pyomo.environ as pyo

    n = len(memory)
    if len(runtimes) != n:
        raise ValueError(f"solve_knapsack: {n} sizes but {len(runtimes)} runtimes")
    if any(m < 0 for m in memory) or any(r < 0 for r in runtimes):
        raise ValueError("solve_knapsack: sizes and runtimes must be >= 0")
    cap = max(float(capacity), 0.0)
    slack = tolerance * max(cap, 1.0)
    times: dict[str, float] = {}
    start_ok = None
    if start is not None:
        start_r, start_m = knapsack_value(memory, runtimes, start)
        if start_m <= cap + slack:
            start_ok = (sorted(set(int(i) for i in start)), start_r, start_m)
    if n == 0:
        return KnapsackResult([], [], 0.0, 0.0, Status.OPTIMAL, "milp", times)
    # scale runtimes (FLOPs, ~1e9) and sizes to about 1 for HiGHS
    r_scale = max(max(runtimes), 1e-300)
    m_scale = max(max(memory), cap, 1e-300)
    with timed(times, "build"):
        mdl = pyo.ConcreteModel()
        mdl.I = pyo.RangeSet(0, n - 1)
        mdl.s = pyo.Var(mdl.I, domain=pyo.Binary)
        for i in range(n):
            if memory[i] > cap + slack:          # cannot fit on its own: recomputed
                mdl.s[i].fix(0)
            elif memory[i] == 0:                 # free to keep
                mdl.s[i].fix(1)
        mdl.c_capacity = pyo.Constraint(
            expr=sum((memory[i] / m_scale) * mdl.s[i] for i in range(n)) <= cap / m_scale)
        mdl.obj = pyo.Objective(expr=sum((runtimes[i] / r_scale) * (1 - mdl.s[i]) for i in range(n)),
                                sense=pyo.minimize)
    mip_start = None
    if start_ok is not None:
        keep = set(start_ok[0])
        mip_start = [(mdl.s[i], 1.0 if i in keep else 0.0) for i in range(n) if not mdl.s[i].fixed]
    if all(mdl.s[i].fixed for i in range(n)):
        saved = [i for i in range(n) if mdl.s[i].value == 1]
        res_status = Status.OPTIMAL
    else:
        res = solve_milp(mdl, time_limit=time_limit, threads=threads, gap=0.0, mip_start=mip_start,
                         options=_OPTIONS)
        times.update(res.times)
        res_status = res.status
        saved = ([i for i in range(n) if round(pyo.value(mdl.s[i])) == 1] if res.has_solution else None)
        if saved is not None and tiebreak and res.status == Status.OPTIMAL and res.objective is not None:
            # second phase: the least saved memory among the choices of (nearly) optimal runtime
            first = saved
            with timed(times, "build"):
                mdl.c_runtime = pyo.Constraint(expr=sum((runtimes[i] / r_scale) * (1 - mdl.s[i])
                                                        for i in range(n)) <= res.objective * (1 + 1e-9) + 1e-12)
                mdl.obj.deactivate()
                mdl.obj_memory = pyo.Objective(expr=sum((memory[i] / m_scale) * mdl.s[i] for i in range(n)),
                                               sense=pyo.minimize)
            res2 = solve_milp(mdl, time_limit=time_limit, threads=threads, gap=0.0, options=_OPTIONS,
                              mip_start=[(mdl.s[i], 1.0 if i in set(first) else 0.0)
                                         for i in range(n) if not mdl.s[i].fixed])
            for k, v in res2.times.items():
                times[k + "_tiebreak"] = v
            if res2.has_solution:
                second = [i for i in range(n) if round(pyo.value(mdl.s[i])) == 1]
                r1, _ = knapsack_value(memory, runtimes, first)
                r2, m2 = knapsack_value(memory, runtimes, second)
                if m2 <= cap + slack and r2 <= r1 + 1e-12 * max(r1, 1.0):
                    saved = second
    best = None
    if saved is not None:
        rr, mm = knapsack_value(memory, runtimes, saved)
        if mm <= cap + slack:
            best = (saved, rr, mm, "milp")
    if start_ok is not None and (best is None or start_ok[1] < best[1]
                                 or (start_ok[1] == best[1] and start_ok[2] < best[2])):
        best = (start_ok[0], start_ok[1], start_ok[2], "start")
    if best is None:                             # nothing found in time and no usable start: save nothing
        best = ([i for i in range(n) if memory[i] == 0], *knapsack_value(
            memory, runtimes, [i for i in range(n) if memory[i] == 0]), "empty")
        res_status = Status.NO_SOLUTION
    saved, rr, mm, source = best
    keep = set(saved)
    return KnapsackResult(sorted(keep), [i for i in range(n) if i not in keep], rr, mm, res_status,
                          source, times)
