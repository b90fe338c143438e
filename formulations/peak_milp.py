"""Keep or recompute each candidate tensor of a training step, with the memory modelled over time
(issue 28, item 2): a peak-aware replacement for the knapsack of PyTorch's partitioner.

The knapsack (:mod:`memplan.formulations.knapsack_milp`) bounds the *sum* of the saved bytes. What a
step really needs is its *peak*: a saved tensor is alive from where the forward makes it until its
last use in the backward, a recomputed one only while the forward uses it and again from its
recomputation (just before its first backward use) to its last backward use, and the rest of the step
(activations not among the candidates, gradients, temporaries) takes memory that changes over time.
This module solves that model exactly with HiGHS; the caller (``memplan._compile_budget``) reads the
intervals and the fixed memory off the joint forward-backward graph.

The model (the numbers are the caller's: positions in a topological order, bytes, runtimes)
-----------------------------------------------------------------------------------------
Time points ``t = 0..T-1``. Item ``i`` has size ``m_i``, recompute runtime ``r_i``, the intervals
``S_i`` where it is alive when saved and ``R_i`` where it is alive when recomputed (closed index
ranges), and ``F[t]`` is the memory of everything else at ``t``. With ``s_i = 1`` for a saved item:

- ``c_peak[k]``: for each segment ``k`` of the time axis on which no item's liveness changes,
  ``max_{t in k} F[t] + sum_i m_i (s_i [k in S_i] + (1 - s_i) [k in R_i]) <= P`` (the maximum of ``F``
  over a segment bounds every one of its points, and the items' part is constant on it, so one
  constraint per segment is exact: at most ``4 n + 1`` of them);
- ``P <= capacity``;
- objective: minimize ``sum_i r_i (1 - s_i)`` (the recompute runtime, PyTorch's objective); then,
  among the choices of optimal runtime (``c_runtime``), minimize the peak ``P``.

Warm start, and never worse in the model: with ``capacity=None`` the capacity is the modelled peak of
the ``start`` choice (PyTorch's own ``dp_knapsack`` answer). The start is then feasible, it is the MIP
start, and the answer has a modelled peak no higher and a recompute runtime no larger than the start's
(if HiGHS stops without anything better, the start is returned). The difference to the knapsack: a
tensor whose saved interval does not cross the peak costs nothing to keep, and recomputing a tensor
whose recomputed interval crosses the peak does not lower it.

This is the part of Checkmate's model (Jain et al. 2020, MLSys, "Checkmate: breaking the memory wall
with optimal tensor rematerialization", section 4: a memory constraint at every stage of a fixed
schedule) that a partitioner needs when the order of operations is given: one decision per tensor
(not per tensor and stage), the schedule fixed to the joint graph's order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from memplan.formulations.highs_driver import EXACT_TOLERANCES, solve_milp, timed
from memplan.models.solution import Status

_OPTIONS = {**EXACT_TOLERANCES, "mip_abs_gap": 0.0}

Interval = tuple[int, int]


@dataclass
class PeakResult:
    saved: list[int]
    recomputed: list[int]
    recompute_runtime: float
    peak: float                       # the modelled peak of the answer
    capacity: float                   # the bound used (the start's peak when none was given)
    start_runtime: float | None       # the start's recompute runtime and modelled peak
    start_peak: float | None
    status: Status
    source: str                       # "milp" or "start"
    segments: int = 0
    times: dict[str, float] = field(default_factory=dict)


def segments(T: int, saved: Sequence[Sequence[Interval]], recomputed: Sequence[Sequence[Interval]],
             fixed: Sequence[float]) -> list[tuple[int, int, float]]:
    """``(first, last, max F)`` of the segments of ``0..T-1`` on which no interval starts or ends."""
    cuts = {0, T}
    for ivs in list(saved) + list(recomputed):
        for lo, hi in ivs:
            cuts.add(max(0, min(T, lo)))
            cuts.add(max(0, min(T, hi + 1)))
    pts = sorted(cuts)
    out = []
    for a, b in zip(pts, pts[1:]):
        if b > a:
            out.append((a, b - 1, float(max(fixed[a:b])) if len(fixed) else 0.0))
    return out


def _live(ivs: Sequence[Interval], a: int, b: int) -> bool:
    return any(lo <= a and b <= hi for lo, hi in ivs)


def peak_value(sizes: Sequence[float], saved_iv, recomputed_iv, fixed: Sequence[float], keep) -> float:
    """The modelled peak of a choice (``keep``: the saved items), by a direct sweep over every time
    point (no segments): the reference the MILP's constraints are checked against."""
    keep = set(int(i) for i in keep)
    T = len(fixed)
    peak = 0.0
    for t in range(T):
        v = float(fixed[t])
        for i, m in enumerate(sizes):
            ivs = saved_iv[i] if i in keep else recomputed_iv[i]
            if any(lo <= t <= hi for lo, hi in ivs):
                v += m
        peak = max(peak, v)
    return peak


def solve_peak(sizes: Sequence[float], runtimes: Sequence[float], saved_iv: Sequence[Sequence[Interval]],
               recomputed_iv: Sequence[Sequence[Interval]], fixed: Sequence[float], *,
               capacity: float | None = None, start: Sequence[int] | None = None,
               time_limit: float | None = 10.0, threads: int | None = 1, tiebreak: bool = True) -> PeakResult:
    """Choose the saved items (module docstring). ``capacity`` None: the modelled peak of ``start``."""
    import pyomo.environ as pyo

    n, T = len(sizes), len(fixed)
    if not (len(runtimes) == len(saved_iv) == len(recomputed_iv) == n):
        raise ValueError("solve_peak: sizes, runtimes and the two interval lists must have one entry per item")
    if capacity is None and start is None:
        raise ValueError("solve_peak: give a capacity or a start")
    segs = segments(T, saved_iv, recomputed_iv, fixed)
    live_s = [[_live(saved_iv[i], a, b) for a, b, _ in segs] for i in range(n)]
    live_r = [[_live(recomputed_iv[i], a, b) for a, b, _ in segs] for i in range(n)]

    def value(keep) -> tuple[float, float]:
        keep = set(keep)
        rr = float(sum(r for i, r in enumerate(runtimes) if i not in keep))
        pk = max((f + sum(sizes[i] for i in range(n) if (live_s[i][k] if i in keep else live_r[i][k]))
                  for k, (_, _, f) in enumerate(segs)), default=0.0)
        return rr, pk

    start_v = None
    if start is not None:
        start = sorted(set(int(i) for i in start))
        start_v = value(start)
    cap = float(capacity) if capacity is not None else start_v[1]
    slack = 1e-9 * max(abs(cap), 1.0)
    times: dict[str, float] = {}
    if n == 0:
        rr, pk = value([])
        return PeakResult([], [], rr, pk, cap, None, None, Status.OPTIMAL, "milp", len(segs), times)
    r_scale = max(max(runtimes), 1e-300)
    m_scale = max(max(sizes), max((f for _, _, f in segs), default=0.0), abs(cap), 1e-300)
    with timed(times, "build"):
        mdl = pyo.ConcreteModel()
        mdl.I = pyo.RangeSet(0, n - 1)
        mdl.K = pyo.RangeSet(0, len(segs) - 1)
        mdl.s = pyo.Var(mdl.I, domain=pyo.Binary)
        mdl.P = pyo.Var(domain=pyo.Reals, bounds=(None, cap / m_scale + slack / m_scale))

        def c_peak(m, k):
            terms = [(sizes[i] / m_scale) * (mdl.s[i] if live_s[i][k] else 1 - mdl.s[i])
                     for i in range(n) if live_s[i][k] != live_r[i][k]]
            const = segs[k][2] / m_scale + sum(sizes[i] / m_scale for i in range(n) if live_s[i][k] and live_r[i][k])
            if not terms:
                return mdl.P >= const
            return mdl.P >= const + sum(terms)

        mdl.c_peak = pyo.Constraint(mdl.K, rule=c_peak)
        mdl.obj = pyo.Objective(expr=sum((runtimes[i] / r_scale) * (1 - mdl.s[i]) for i in range(n)),
                                sense=pyo.minimize)
    mip_start = None
    if start_v is not None and start_v[1] <= cap + slack:
        keep = set(start)
        mip_start = [(mdl.s[i], 1.0 if i in keep else 0.0) for i in range(n)] + [(mdl.P, start_v[1] / m_scale)]
    res = solve_milp(mdl, time_limit=time_limit, threads=threads, gap=0.0, mip_start=mip_start, options=_OPTIONS)
    times.update(res.times)
    status = res.status
    chosen = [i for i in range(n) if round(pyo.value(mdl.s[i])) == 1] if res.has_solution else None
    if chosen is not None and tiebreak and res.status == Status.OPTIMAL and res.objective is not None:
        with timed(times, "build"):
            mdl.c_runtime = pyo.Constraint(expr=sum((runtimes[i] / r_scale) * (1 - mdl.s[i]) for i in range(n))
                                           <= res.objective * (1 + 1e-9) + 1e-12)
            mdl.obj.deactivate()
            mdl.obj_peak = pyo.Objective(expr=mdl.P, sense=pyo.minimize)
        first = chosen
        res2 = solve_milp(mdl, time_limit=time_limit, threads=threads, gap=0.0, options=_OPTIONS,
                          mip_start=[(mdl.s[i], 1.0 if i in set(first) else 0.0) for i in range(n)]
                          + [(mdl.P, value(first)[1] / m_scale)])
        for k, v in res2.times.items():
            times[k + "_tiebreak"] = v
        if res2.has_solution:
            second = [i for i in range(n) if round(pyo.value(mdl.s[i])) == 1]
            (r1, _), (r2, p2) = value(first), value(second)
            if p2 <= cap + slack and r2 <= r1 + 1e-12 * max(r1, 1.0):
                chosen = second
    best = None
    if chosen is not None:
        rr, pk = value(chosen)
        if pk <= cap + slack:
            best = (chosen, rr, pk, "milp")
    if start_v is not None and start_v[1] <= cap + slack and (
            best is None or start_v[0] < best[1] or (start_v[0] == best[1] and start_v[1] < best[2])):
        best = (start, start_v[0], start_v[1], "start")
    if best is None:
        raise ValueError(f"solve_peak: no choice within the capacity {cap} was found (status {status})")
    keep = set(best[0])
    return PeakResult(sorted(keep), [i for i in range(n) if i not in keep], best[1], best[2], cap,
                      start_v[0] if start_v else None, start_v[1] if start_v else None, status, best[3],
                      len(segs), times)
