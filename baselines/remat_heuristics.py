"""Re-materialization baselines compared against in paper 004 (section 5.4).

- :func:`store_all` — what plain PyTorch does: F_all^1..F_all^{L+1}, then B^{L+1}..B^1.
- :func:`sequential` — PyTorch's ``checkpoint_sequential`` with ``s`` segments: every segment but
  the last runs under no_grad keeping only its input (F_ck at its first stage, F_none after), the
  last segment and the loss run normally (F_all); in the backward phase each earlier segment is
  recomputed with F_all and back-propagated. Segments as PyTorch cuts them (``L // s`` stages each,
  the last one takes the remainder). :func:`sequential` returns the fastest ``s`` that fits.
- :func:`revolve` — the AD model (Figure 1b): only a^l are checkpointed and every F_all^l is
  immediately followed by B^l (paper 004, 5.4, as in Gruslys et al.). We compute the *optimal*
  sequence of that class with the persistent DP restricted accordingly, using the true memory model
  (so the result never exceeds the limit, unlike a revolve computed on a^l sizes alone).
- :func:`recompute_all` — keep only a^0 and recompute everything before each backward step
  (quadratic time, minimal memory: its peak is the minimum feasible memory).
"""
from __future__ import annotations

import time

from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule, simulate_remat
from memplan.models.solution import Solution, Status


def _solution(chain: Chain, method: str, ops, memory: float | None, message: str, t0: float,
              **details) -> Solution:
    from memplan.models.units import fmt_memory

    sched = RematSchedule(ops)
    rep = simulate_remat(chain, sched)
    times = {"total": time.perf_counter() - t0}
    if memory is not None and rep.peak_memory > memory * (1 + 1e-9):
        from memplan.baselines.remat_rotor import min_memory

        return Solution(problem="remat", method=method, status=Status.INFEASIBLE, memory_limit=memory,
                        message=f"{method} needs {fmt_memory(rep.peak_memory)} > limit {fmt_memory(memory)} "
                        f"(minimum feasible memory for any sequence: {fmt_memory(min_memory(chain))})",
                        times=times, details={"needed": rep.peak_memory, **details})
    return Solution(problem="remat", method=method, status=Status.FEASIBLE, objective=rep.makespan,
                    peak_memory=rep.peak_memory, schedule=sched, memory_limit=memory, predicted=None,
                    message=message, times=times, details={"recompute_time": rep.recompute_time, **details})


def store_all_schedule(chain: Chain) -> list:
    n = chain.L + 1
    return [("F_all", l) for l in range(1, n + 1)] + [("B", l) for l in range(n, 0, -1)]


def store_all(chain: Chain, memory: float | None = None) -> Solution:
    """No re-materialization (plain autograd)."""
    return _solution(chain, "store-all", store_all_schedule(chain), memory, "no re-materialization",
                     time.perf_counter())


def recompute_all_schedule(chain: Chain) -> list:
    ops = []
    for l in range(chain.L + 1, 0, -1):
        if l >= 2:
            ops.append(("F_ck", 1))
            ops.extend(("F_none", j) for j in range(2, l))
        ops.extend([("F_all", l), ("B", l)])
    return ops


def recompute_all(chain: Chain, memory: float | None = None) -> Solution:
    """Keep only a^0; recompute from the input before every backward step."""
    return _solution(chain, "recompute-all", recompute_all_schedule(chain), memory,
                     "only a^0 kept; minimal memory", time.perf_counter())


def segments(L: int, s: int) -> list[tuple[int, int]]:
    """PyTorch's ``checkpoint_sequential`` cut of stages 1..L into ``s`` segments (first, last)."""
    if not 1 <= s <= L:
        raise ValueError(f"segments must be in 1..{L}")
    size = L // s
    out = []
    start = 1
    for k in range(s - 1):
        out.append((start, start + size - 1))
        start += size
    out.append((start, L))
    return out


def sequential_schedule(chain: Chain, s: int) -> list:
    L = chain.L
    segs = segments(L, s)
    ops = []
    for first, last in segs[:-1]:
        ops.append(("F_ck", first))
        ops.extend(("F_none", j) for j in range(first + 1, last + 1))
    lf, _ = segs[-1]
    ops.extend(("F_all", j) for j in range(lf, L + 2))
    ops.extend(("B", j) for j in range(L + 1, lf - 1, -1))
    for first, last in reversed(segs[:-1]):
        ops.extend(("F_all", j) for j in range(first, last + 1))
        ops.extend(("B", j) for j in range(last, first - 1, -1))
    return ops


def sequential_points(chain: Chain) -> list[tuple[int, float, float]]:
    """(segments, makespan, peak memory) for every number of segments 1..L."""
    pts = []
    for s in range(1, chain.L + 1):
        rep = simulate_remat(chain, sequential_schedule(chain, s))
        pts.append((s, rep.makespan, rep.peak_memory))
    return pts


def sequential(chain: Chain, memory: float | None = None, segments_: int | None = None) -> Solution:
    """``checkpoint_sequential``: the given number of segments, or the fastest that fits in ``memory``."""
    t0 = time.perf_counter()
    if segments_ is not None:
        return _solution(chain, "sequential", sequential_schedule(chain, segments_), memory,
                         f"{segments_} segments", t0, segments=segments_)
    pts = sequential_points(chain)
    fit = [p for p in pts if memory is None or p[2] <= memory * (1 + 1e-9)]
    if not fit:
        s = min(pts, key=lambda p: p[2])[0]
        return _solution(chain, "sequential", sequential_schedule(chain, s), memory,
                         f"{s} segments (least memory)", t0, segments=s)
    s = min(fit, key=lambda p: (p[1], p[2]))[0]
    return _solution(chain, "sequential", sequential_schedule(chain, s), memory,
                     f"best of 1..{chain.L} segments: {s}", t0, segments=s)


def revolve(chain: Chain, memory: float, *, slots: int = 500, exact: bool = False) -> Solution:
    """Optimal sequence of the AD model (F_all^l only right before B^l), true memory model."""
    from memplan.baselines.remat_rotor import persistent

    sol = persistent(chain, memory, slots=slots, exact=exact, _allow_carry=False, _method="revolve")
    if sol.status == Status.OPTIMAL:
        sol.status = Status.FEASIBLE   # optimal only within its restricted class
    return sol
