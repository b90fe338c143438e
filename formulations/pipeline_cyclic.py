"""K-periodic schedules of a fixed allocation: a modulo-scheduling MILP (beyond paper 003).

Why
---
Paper 003 restricts the search to *patterns* (Definition 1: one instance of every task per period,
Lemma 1). PipeDream's eager 1F1B schedule is not restricted that way: in steady state it is
K-periodic for some K (K mini-batches every K T̄), and at some memory limits no pattern reaches its
average period T̄ (the paper's Figure 8 shows such a point; in ours, ResNet-18 on 8 GPUs at 1.29 GB:
PipeDream 4.1155 ms with 7 mini-batches in flight on the first GPU, while on that partition this
MILP with K = 1 finds no pattern at T <= 4.2 ms that holds at most 7 mini-batches' activations on
the first GPU, and a 2-periodic schedule at 3.98 ms). This module
schedules K mini-batches per period on a *given* allocation (the ILP's, PipeDream's, ...): with K = 1
it finds patterns, with K >= 2 it finds schedules that patterns cannot express.

Formulation (fixed average period T, fixed allocation; all times scaled so that T = 1000)
----------------------------------------------------------------------------------------
* ``t[m,i]``: start of T_m for mini-batch i of the period (i = 0..K-1), ``tc[m,i]`` that of the
  communication of A[m] (when T_m and T_{m+1} are on different GPUs). Mini-batch ``rK + i`` runs them
  ``r K T`` later. ``t[1,0] = 0``.
* ``prec``: chain dependencies of every mini-batch (task -> communication -> task, or task -> task on
  one GPU), in absolute time: no shift variables are needed because every mini-batch has its own
  times.
* ``fifo``: instances of one task (one communication) run in mini-batch order:
  ``start(m, j+1) >= start(m, j) + d_m``.
* ``excl``: two instances x, y of different tasks on one GPU (communications on one link) never
  overlap, periodically: with one free integer ``k`` per pair,
  ``d_x <= start(y) - start(x) - k K T <= K T - d_y``. (Two intervals of lengths d_x, d_y on a circle
  of circumference K T are disjoint iff such a k exists; no binary ordering variable is needed.)
* ``copies``: GPU g holds the stored activations (a^{l-1}, kept from the end of F_l to the end of
  B_l) of at most ``c_g`` mini-batches: ``end F_l(j + c_g) >= end B_l(j)`` for every layer l of g and
  every j. With ``fifo`` at most c_g mini-batches then hold a^{l-1} at any instant: if j and
  j' >= j + c_g both did, F_l(j') would have ended after B_l(j), which ended after the instant.
  Like PipeDream's NOAM, one number per GPU, but chosen from the memory: ``c_g`` is the largest
  integer with ``3 W_g + buffers_g + max_m (A[m-1] + A[m]) + c_g sum_l A[l-1] <= M`` (weights,
  buffers, running task and c_g copies of every stored activation of the memory model of
  :mod:`models.pipeline`). This bounds the simulator's measure from above except for the direct
  dependencies (A[m] between T_m and T_{m+1} on one GPU): when a replay exceeds M on a GPU,
  :func:`solve_cyclic` lowers that GPU's c_g by one and solves again.
* No objective: the first feasible schedule is taken; :func:`cyclic_search` bisects on T.

Every schedule is replayed by :func:`models.pipeline.simulate_cyclic` before it is returned.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from models.chain import Chain
from models.pipeline import (CyclicSchedule, InvalidPattern, SimResult, _link, bisect_period, constant_memory,
                             simulate_cyclic, task_data, task_gpus)
from models.solution import Status

SCALE_T = 1000.0


@dataclass
class CyclicResult:
    schedule: CyclicSchedule | None
    sim: SimResult | None
    status: Status
    message: str
    solves: int = 0


def build_cyclic_model(td, gpu: list[int], T: float, K: int, caps: dict[int, int] | None):
    """The MILP of the module docstring at average period T (seconds) with at most ``caps[g]`` stored
    copies on GPU g (no limit for a GPU absent from ``caps``). Returns ``(model, comms, scale)`` where
    ``scale`` converts model time to seconds."""
    import pyomo.environ as pyo

    L, n = td.L, td.n
    sc = T / SCALE_T                              # seconds per model time unit
    d = [x / sc for x in td.d]
    dc = [x / sc for x in td.dc]
    Tm = SCALE_T
    PK = K * Tm
    comms = [m for m in range(1, n) if gpu[m - 1] != gpu[m]]
    serial = sum(d[1:]) + sum(dc[m] for m in comms)
    # a mini-batch waits less than one period K T before each task and communication
    H = serial + (n + len(comms)) * PK
    md = pyo.ConcreteModel(name=f"cyclic_K{K}")
    I = range(K)
    md.t = pyo.Var(range(1, n + 1), I, bounds=(0, H))
    md.tc = pyo.Var(comms, I, bounds=(0, H))

    def st(kind: str, m: int, j: int):
        r, i = divmod(j, K)
        return (md.t[m, i] if kind == "t" else md.tc[m, i]) + r * PK

    md.origin = pyo.Constraint(expr=md.t[1, 0] == 0)
    md.prec = pyo.ConstraintList()
    for i in I:
        for m in range(1, n):
            if m in comms:
                md.prec.add(md.tc[m, i] >= md.t[m, i] + d[m])
                md.prec.add(md.t[m + 1, i] >= md.tc[m, i] + dc[m])
            else:
                md.prec.add(md.t[m + 1, i] >= md.t[m, i] + d[m])
    md.fifo = pyo.ConstraintList()
    for i in I:
        for m in range(1, n + 1):
            md.fifo.add(st("t", m, i + 1) >= st("t", m, i) + d[m])
        for m in comms:
            md.fifo.add(st("c", m, i + 1) >= st("c", m, i) + dc[m])
    # exclusivity on GPUs and links (zero-length items cannot overlap anything)
    res: dict[tuple, list[tuple[str, int, int, float]]] = {}
    for m in range(1, n + 1):
        if d[m] > 0:
            res.setdefault(("gpu", gpu[m - 1]), []).extend(("t", m, i, d[m]) for i in I)
    for m in comms:
        if dc[m] > 0:
            res.setdefault(("link",) + _link(gpu[m - 1], gpu[m]), []).extend(("c", m, i, dc[m]) for i in I)
    pairs = [(a, b) for items in res.values() for x, a in enumerate(items) for b in items[x + 1:]
             if a[1] != b[1]]          # instances of one task are ordered by fifo already
    kb = int(math.ceil(H / PK)) + 1
    md.k = pyo.Var(range(len(pairs)), domain=pyo.Integers, bounds=(-kb, kb))
    md.excl = pyo.ConstraintList()
    for x, (a, b) in enumerate(pairs):
        e = st(b[0], b[1], b[2]) - st(a[0], a[1], a[2]) - md.k[x] * PK
        md.excl.add(e >= a[3])
        md.excl.add(e <= PK - b[3])
    # stored copies: at most caps[g] mini-batches hold the activations of GPU g's layers
    md.copies = pyo.ConstraintList()
    for l in range(1, L + 1):
        c = caps.get(gpu[l - 1]) if caps else None
        if c is None or td.A[l - 1] <= 0:
            continue
        Bm = td.backward(l)
        for i in I:
            md.copies.add(st("t", l, i + c) + d[l] >= st("t", Bm, i) + d[Bm])
    md.obj = pyo.Objective(expr=0.0)     # feasibility: HiGHS stops at the first schedule
    return md, comms, sc


def _read(md, td, gpu, comms, K, sc, T) -> CyclicSchedule:
    import pyomo.environ as pyo

    n = td.n
    start = [[pyo.value(md.t[m, i]) * sc for i in range(K)] for m in range(1, n + 1)]
    start_c = [[pyo.value(md.tc[m, i]) * sc for i in range(K)] if m in comms else None for m in range(1, n)]
    return CyclicSchedule(gpu=list(gpu), K=K, T=T, start=start, start_c=start_c)


def copy_caps(td, gpu: Sequence[int], memory: float | None) -> dict[int, int] | None:
    """``c_g`` per GPU (module docstring); None without a memory limit. A cap below 1 means the GPU
    cannot hold even the mini-batch it is processing."""
    if memory is None:
        return None
    L, n = td.L, td.n
    caps = {}
    for g, held in constant_memory(td, gpu).items():
        const = held["weights"] + held["buffers"]
        const += max(td.A[m - 1] + td.A[m] for m in range(1, n + 1) if gpu[m - 1] == g)
        act = sum(td.A[l - 1] for l in range(1, L + 1) if gpu[l - 1] == g)
        caps[g] = int(math.floor((memory - const) / act + 1e-9)) if act > 0 else n
    return caps


def solve_cyclic(chain: Chain, bandwidth: float | None, layer_gpu: Sequence[int], T: float, K: int,
                 memory: float | None, *, P: int | None = None, time_limit: float | None = 20,
                 threads: int | None = None, retries: int = 4) -> CyclicResult:
    """A K-periodic schedule of the allocation ``layer_gpu`` (GPU of layer l at index l-1) with
    average period T whose replayed memory fits in ``memory``; see the module docstring. When the
    replay exceeds the limit on some GPU (direct dependencies are not in the model), that GPU's copy
    cap is lowered by one and the MILP solved again (at most ``retries`` times)."""
    from formulations.highs_driver import solve_milp

    td = task_data(chain, bandwidth)
    gpu = task_gpus(td, layer_gpu)
    if any(td.d[m] > T * (1 + 1e-12) for m in range(1, td.n + 1)):
        return CyclicResult(None, None, Status.INFEASIBLE, "a task is longer than the period")
    caps = copy_caps(td, gpu, memory)
    solves = 0
    for _ in range(retries + 1):
        if caps is not None and min(caps.values()) < 1:
            g = min(caps, key=caps.get)
            return CyclicResult(None, None, Status.INFEASIBLE,
                                f"GPU {g} cannot hold the activations of one mini-batch", solves)
        md, comms, sc = build_cyclic_model(td, gpu, T, K, caps)
        res = solve_milp(md, time_limit=time_limit, threads=threads,
                         options={"mip_feasibility_tolerance": 1e-9, "primal_feasibility_tolerance": 1e-9})
        solves += 1
        if not res.has_solution:
            return CyclicResult(None, None, res.status, res.message, solves)
        sched = _read(md, td, gpu, comms, K, sc, T)
        try:
            sim = simulate_cyclic(sched, chain, bandwidth, gpus=P)
        except InvalidPattern as e:      # numerical trouble: report, do not hide
            return CyclicResult(None, None, Status.ERROR, f"replay rejected the schedule: {e}", solves)
        over = [g for g, v in sim.memory.items() if memory is not None and v > memory * (1 + 1e-9)]
        if not over:
            sched.meta.update({"method": f"cyclic-K{K}", "copy_caps": caps})
            return CyclicResult(sched, sim, Status.FEASIBLE, res.message, solves)
        for g in over:
            caps[g] -= 1
    return CyclicResult(None, None, Status.NO_SOLUTION, "replayed memory above the limit after retries", solves)


def cyclic_search(chain: Chain, bandwidth: float | None, layer_gpu: Sequence[int], memory: float | None,
                  K: int, *, hi: float, lo: float | None = None, P: int | None = None, steps: int = 8,
                  time_limit: float | None = 20, threads: int | None = None) -> CyclicResult | None:
    """Bisection on the average period between ``lo`` (default: the allocation's load bound, the
    busiest GPU or link) and ``hi``: the smallest T found at which a schedule with at most K
    mini-batches per period fits in ``memory`` (at each T the 1-periodic MILP is tried first, it is
    small and a 1-periodic schedule is also K-periodic; then the K-periodic one). None when even
    ``hi`` fails."""
    td = task_data(chain, bandwidth)
    gpu = task_gpus(td, layer_gpu)
    if lo is None:
        load: dict = {}
        for m in range(1, td.n + 1):
            load[gpu[m - 1]] = load.get(gpu[m - 1], 0.0) + td.d[m]
        for m in range(1, td.n):
            if gpu[m - 1] != gpu[m]:
                key = ("link",) + _link(gpu[m - 1], gpu[m])
                load[key] = load.get(key, 0.0) + td.dc[m]
        lo = max(load.values())

    def fit(T: float) -> CyclicResult | None:
        for k in sorted({1, int(K)}):
            r = solve_cyclic(chain, bandwidth, layer_gpu, T, k, memory, P=P, time_limit=time_limit,
                             threads=threads)
            if r.schedule is not None:
                return r
        return None

    return bisect_period(fit, lo, hi, steps)
