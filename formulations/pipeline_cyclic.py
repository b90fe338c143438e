"""K-periodic schedules of a fixed allocation: a modulo-scheduling MILP (beyond paper 003).

Why
---
Paper 003 restricts the search to *patterns* (Definition 1: one instance of every task per period,
Lemma 1). PipeDream's eager 1F1B schedule is not restricted that way: in steady state it is
K-periodic for some K (K mini-batches every K T̄), and at some memory limits no pattern reaches its
average period T̄ (the paper's Figure 8 shows such a point; in ours, ResNet-18 on 8 GPUs at 1.29 GB:
PipeDream 4.1155 ms with 7 mini-batches in flight on the first GPU, while on that partition this
MILP with K = 1 and its exact memory model proves that no pattern reaches 4.1163 ms, and finds a
2-periodic schedule at 3.98 ms). This module
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

Memory: three models, all checked by the replay.

* ``exact_memory`` (memory model ``exact``, K = 1 only): the simulator's memory during every task,
  from the pair integers ``k`` of ``excl`` (which also give the order of the tasks of one GPU, the
  zero-length ones included): see :func:`_exact_memory`. Without ordering binaries this is the
  paper's ILP on a fixed allocation (its Lemma 7 counts the stored copies from the shifts in the
  same way); ``tests/test_pipeline_cyclic.py`` checks it against the exhaustive search under memory
  limits. It solves a ResNet-18 allocation on 8 GPUs in about a second, where the paper's ILP with
  the same allocation fixed has not closed its gap after 300 s.

Stored activations are ``td.stored(l, gpu)`` bytes per layer: ``td.S[l]`` (``A[l-1]`` = a^{l-1} under the
paper's memory model, what autograd saves under the autograd model), plus ``td.H[l]`` when layer l is the
first of its GPU (:mod:`memplan.models.pipeline`; the allocation is fixed here, so this is a constant per
layer); below, a^{l-1} and A[l-1] stand for it.

* ``copies`` (memory model ``caps``): GPU g holds the stored activations (a^{l-1}, kept from the end
  of F_l to the end of B_l) of at most ``c_g`` mini-batches: ``end F_l(j + c_g) >= end B_l(j)`` for
  every layer l of g and every j. With ``fifo`` at most c_g mini-batches then hold a^{l-1} at any
  instant: if j and j' >= j + c_g both did, F_l(j') would have ended after B_l(j), which ended after
  the instant. Like PipeDream's NOAM, one number per GPU, but chosen from the memory: ``c_g`` is the
  largest integer with ``3 W_g + buffers_g + max_m (A[m-1] + A[m]) + c_g sum_l A[l-1] <= M``
  (weights, buffers, running task and c_g copies of every stored activation of the memory model of
  :mod:`models.pipeline`). This bounds the simulator's measure from above except for the direct
  dependencies (A[m] between T_m and T_{m+1} on one GPU): when a replay exceeds M on a GPU,
  :func:`solve_cyclic` lowers that GPU's c_g by one and solves again.
* ``layer_copies`` and ``memory`` (memory model ``layers``): one integer per layer and mini-batch i
  of the period, ``e[l,i] >= (end B_l(i) - end F_l(i)) / (K T)``, and likewise ``q[m,i]`` for the
  wait of a direct dependency A[m] between T_m and T_{m+1}. Mini-batches ``r K + i`` (fixed i) are
  K T apart and each holds a^{l-1} over an interval of the same length, so at any instant at most
  ``ceil(span / (K T)) <= e[l,i]`` of them do. Per GPU,
  ``3 W_g + buffers_g + max_m (A[m-1] + A[m]) + sum_{l,i} e[l,i] A[l-1] + sum_{m,i} q[m,i] A[m] <= M``
  bounds the simulator's measure from above (each item at its largest count), so no retry is needed.
  With K = 1 this is the paper's count of stored copies per layer (its shifts) with the sum of the
  per-layer maxima in place of the exact peak; it allows different counts for the layers of one GPU
  (e.g. one more copy of a small input), which caps do not. With K >= 2 neither model contains the
  other (caps allow spans up to c_g T, per-class counts only multiples of K T), so ``auto`` tries caps
  first, then layers.
* No objective: the first feasible schedule is taken; the front end (``memplan/_pipeline_search.py``,
  ``cyclic_search``) bisects on T. :func:`min_memory_at_period` (K = 1, exact model) instead minimizes
  the peak memory at a fixed T.

Every schedule is replayed by :func:`memplan.models.pipeline.simulate_cyclic` before it is returned.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from memplan.formulations.highs_driver import EXACT_TOLERANCES, solve_milp
from memplan.models.pipeline import (CyclicSchedule, InvalidPattern, SimResult, TaskData, constant_memory, link_key,
                                     simulate_cyclic, task_gpus)
from memplan.models.solution import Status

SCALE_T = 1000.0


@dataclass
class CyclicResult:
    schedule: CyclicSchedule | None
    sim: SimResult | None
    status: Status
    message: str
    solves: int = 0


#: seconds to build one model of :func:`build_cyclic_model`: (a + c L^2) K (K = 1 measured 2.9 s at
#: L = 400 and about 35 s at L = 1000 on 2 cores, margin x2; K = 2 and 3 at L = 100: 1.0 and 2.0 s
#: against 0.7 s for K = 1, on 2 loaded cores)
BUILD_SECONDS = (0.5, 3e-5)


#: seconds per nonzero by which HiGHS runs past its limit in these models' root (LP and cut rounds:
#: 100 layers, K = 1, 80 k nonzeros, 5.0 s for 2.8 s); :func:`solve_milp` keeps that much of the call
ROOT_OVERRUN_S_PER_NNZ = 2.5e-5


def build_seconds(L: int, K: int = 1) -> float:
    """The estimated seconds :func:`build_cyclic_model` takes for L layers and K mini-batches per
    period (:data:`BUILD_SECONDS`); the build is not interruptible."""
    return (BUILD_SECONDS[0] + BUILD_SECONDS[1] * L * L) * max(1, int(K))


def build_cyclic_model(td, gpu: list[int], T: float, K: int, caps: dict[int, int] | None,
                       memory: float | None = None, exact: bool = False, minimize_memory: bool = False):
    """The MILP of the module docstring at average period T (seconds). Memory: with ``caps``, at most
    ``caps[g]`` stored copies on GPU g (no limit for a GPU absent from ``caps``); with ``memory``
    (bytes) instead, the per-layer counts (``layer_copies``/``memory``), or with ``exact`` (K = 1
    only) the memory during every task (``exact_memory``). With ``exact`` and ``minimize_memory``
    the objective is the peak memory ``md.peak`` (in units of ``memory / 1000`` bytes, ``memory``
    only sets the scale) instead of feasibility. Returns ``(model, comms, scale)`` where ``scale``
    converts model time to seconds."""
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
    # exclusivity on GPUs and links (zero-length items cannot overlap anything; with ``exact`` the
    # zero-length tasks get a pair too, for their place in the GPU's order)
    if exact and K != 1:
        raise ValueError("the exact memory model is for K = 1")
    res: dict[tuple, list[tuple[str, int, int, float]]] = {}
    for m in range(1, n + 1):
        if d[m] > 0 or exact:
            res.setdefault(("gpu", gpu[m - 1]), []).extend(("t", m, i, d[m]) for i in I)
    for m in comms:
        if dc[m] > 0:
            res.setdefault(("link",) + link_key(gpu[m - 1], gpu[m]), []).extend(("c", m, i, dc[m]) for i in I)
    pairs = [(a, b) for items in res.values() for x, a in enumerate(items) for b in items[x + 1:]
             if a[1] != b[1]]          # instances of one task are ordered by fifo already
    kb = int(math.ceil(H / PK)) + 1
    md.k = pyo.Var(range(len(pairs)), domain=pyo.Integers, bounds=(-kb, kb))
    md.excl = pyo.ConstraintList()
    tie = 1e-6 * Tm       # two zero-length tasks never start together across periods (order by m)
    for x, (a, b) in enumerate(pairs):
        e = st(b[0], b[1], b[2]) - st(a[0], a[1], a[2]) - md.k[x] * PK
        md.excl.add(e >= a[3])
        md.excl.add(e <= PK - (b[3] if b[3] > 0 else 0.0 if a[3] > 0 else tie))
    # stored copies: at most caps[g] mini-batches hold the activations of GPU g's layers
    md.copies = pyo.ConstraintList()
    for l in range(1, L + 1):
        c = caps.get(gpu[l - 1]) if caps else None
        if c is None or td.stored(l, gpu) <= 0:
            continue
        Bm = td.backward(l)
        for i in I:
            md.copies.add(st("t", l, i + c) + d[l] >= st("t", Bm, i) + d[Bm])
    if minimize_memory and not (exact and memory is not None):
        raise ValueError("minimize_memory needs the exact model and a memory scale")
    if exact:
        if memory is not None:
            _exact_memory(md, td, gpu, {(a[1], b[1]): x for x, (a, b) in enumerate(pairs) if a[0] == "t"}, memory,
                          minimize_memory)
    elif memory is not None:
        _layer_memory(md, td, gpu, d, st, K, PK, n + 2, memory)
    # feasibility (HiGHS stops at the first schedule) or the peak memory
    md.obj = pyo.Objective(expr=md.peak if minimize_memory else 0.0)
    return md, comms, sc


def _exact_memory(md, td, gpu, pk: dict[tuple[int, int], int], memory: float, minimize: bool = False) -> None:
    """``exact_memory`` (K = 1): the memory the simulator measures during every task x, linear in the
    pair integers. For two tasks a < b of one GPU, ``t_b - t_a - k T`` lies in the window of
    ``excl``, so the instances of a that come before b(0) in the GPU's order (start, then end, then
    task index) are exactly a(j), j <= k; write ``E(a, b) = k``, ``E(b, a) = -k - 1`` and
    ``E(x, x) = -1``. During x the copies of a^{l-1} (held from F_l(j) up to and including B_l(j)) are
    ``E(F_l, x) - E(B_l, x)``, those of a direct dependency A[m] (held strictly between T_m(j) and
    T_{m+1}(j)) ``E(T_m, x) - E(T_{m+1}, x) - [x = T_{m+1}]``; with the running task A[x-1] + A[x],
    weights and buffers this is the simulator's level during x, which must stay within ``memory``
    or, with ``minimize``, within the variable ``md.peak`` (units of ``memory / 1000`` bytes)."""
    import pyomo.environ as pyo

    L, n = td.L, td.n
    ms = memory / 1000.0

    def E(a: int, x: int):
        if a == x:
            return -1
        return md.k[pk[a, x]] if a < x else -md.k[pk[x, a]] - 1

    const = constant_memory(td, gpu)
    if minimize:
        md.peak = pyo.Var(bounds=(0, None))
    kept = td.stored_all(gpu)          # S[l], + H[l] for the first layer of a GPU
    md.exact_memory = pyo.ConstraintList()
    for x in range(1, n + 1):
        g = gpu[x - 1]
        expr = (td.A[x - 1] + td.A[x]) / ms
        for l in range(1, L + 1):
            if gpu[l - 1] == g and kept[l] > 0:
                expr = expr + kept[l] / ms * (E(l, x) - E(td.backward(l), x))
        for m in range(1, n):
            if gpu[m - 1] == g and gpu[m] == g and td.A[m] > 0:
                expr = expr + td.A[m] / ms * (E(m, x) - E(m + 1, x) - (1 if x == m + 1 else 0))
        rhs = md.peak if minimize else memory / ms
        row = expr <= rhs - (const[g]["weights"] + const[g]["buffers"]) / ms
        if isinstance(row, (bool, np.bool_)):
            # nothing of x's GPU is stored (every size 0): the row is a constant, which Pyomo does not
            # take as a constraint; it holds (no row) or the GPU's constant memory is over the limit
            row = pyo.Constraint.Feasible if row else pyo.Constraint.Infeasible
        md.exact_memory.add(row)


def _layer_memory(md, td, gpu, d, st, K: int, PK: float, most: int, memory: float) -> None:
    """``layer_copies`` and ``memory`` of the module docstring: integers ``e[l,i]`` (copies of
    a^{l-1}) and ``q[m,i]`` (copies of a direct dependency A[m]) bound the spans of mini-batch i of the
    period in units of K T; per GPU, weights + buffers + the largest running task + every stored item
    times its count stays within ``memory``."""
    import pyomo.environ as pyo

    L, n = td.L, td.n
    ms = memory / 1000.0                                 # bytes per model memory unit
    I = range(K)
    kept = td.stored_all(gpu)          # S[l], + H[l] for the first layer of a GPU
    stored = [l for l in range(1, L + 1) if kept[l] > 0]
    direct = [m for m in range(1, n) if gpu[m - 1] == gpu[m] and td.A[m] > 0]
    md.e = pyo.Var(stored, I, domain=pyo.NonNegativeIntegers, bounds=(0, most))
    md.q = pyo.Var(direct, I, domain=pyo.NonNegativeIntegers, bounds=(0, most))
    md.layer_copies = pyo.ConstraintList()
    for i in I:
        for l in stored:
            Bm = td.backward(l)
            md.layer_copies.add(st("t", Bm, i) + d[Bm] - st("t", l, i) - d[l] <= md.e[l, i] * PK)
        for m in direct:
            md.layer_copies.add(st("t", m + 1, i) - st("t", m, i) - d[m] <= md.q[m, i] * PK)
    md.memory = pyo.ConstraintList()
    for g, base in _base_memory(td, gpu).items():
        held_items = (sum(kept[l] / ms * md.e[l, i] for l in stored if gpu[l - 1] == g for i in I)
                      + sum(td.A[m] / ms * md.q[m, i] for m in direct if gpu[m - 1] == g for i in I))
        if not isinstance(held_items, (int, float)):      # (a GPU that stores nothing needs no row)
            md.memory.add(held_items <= (memory - base) / ms)


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
    caps = {}
    for g, const in _base_memory(td, gpu).items():
        act = sum(td.stored(l, gpu) for l in range(1, td.L + 1) if gpu[l - 1] == g)
        caps[g] = int(math.floor((memory - const) / act + 1e-9)) if act > 0 else td.n
    return caps


def _base_memory(td, gpu: Sequence[int]) -> dict[int, float]:
    """Per GPU, what ``caps`` and ``layers`` count besides the stored items: weights, buffers and
    the largest running task A[m-1] + A[m]."""
    return {g: held["weights"] + held["buffers"]
            + max(td.A[m - 1] + td.A[m] for m in range(1, td.n + 1) if gpu[m - 1] == g)
            for g, held in constant_memory(td, gpu).items()}


def _task_longer_than(td, T: float) -> bool:
    """True when some task alone lasts longer than the period T (no schedule at all)."""
    return any(td.d[m] > T * (1 + 1e-12) for m in range(1, td.n + 1))


def solve_cyclic(td: TaskData, layer_gpu: Sequence[int], T: float, K: int,
                 memory: float | None, *, P: int | None = None, time_limit: float | None = 20,
                 threads: int | None = None, retries: int = 4, memory_model: str = "auto",
                 deadline: float | None = None) -> CyclicResult:
    """A K-periodic schedule of the allocation ``layer_gpu`` (GPU of layer l at index l-1) of the
    task data ``td`` (``task_data(chain, bandwidth)``) with average period T whose replayed memory
    fits in ``memory``; see the module docstring.
    ``memory_model``: ``"layers"`` (per-layer counts, an upper bound on the replayed memory),
    ``"caps"`` (one cap per GPU; when the replay exceeds the limit on some GPU, since direct
    dependencies are not in that model, that GPU's cap is lowered by one and the MILP solved again,
    at most ``retries`` times), ``"exact"`` (K = 1: the simulator's memory during every task) or
    ``"auto"``: exact for K = 1; for K >= 2 caps, then layers when caps finds nothing (module
    docstring). ``deadline`` (a :func:`time.monotonic` time): no model is built whose estimated
    build (:func:`build_seconds`) would end after it; the answer is then NO_SOLUTION, saying so."""
    if memory_model == "auto":
        if K == 1:
            memory_model = "exact"
        elif memory is None:
            memory_model = "layers"
        else:   # neither model contains the other for K >= 2 (module docstring): caps, then layers
            kw = dict(P=P, time_limit=time_limit, threads=threads, retries=retries, deadline=deadline)
            r = solve_cyclic(td, layer_gpu, T, K, memory, memory_model="caps", **kw)
            if r.schedule is not None or r.status == Status.ERROR:
                return r
            r2 = solve_cyclic(td, layer_gpu, T, K, memory, memory_model="layers", **kw)
            r2.solves += r.solves
            if r2.schedule is None and r2.status != Status.ERROR:
                r.solves = r2.solves
                return r
            return r2
    gpu = task_gpus(td, layer_gpu)
    if memory_model not in ("layers", "caps", "exact") or (memory_model == "exact" and K != 1):
        raise ValueError(f"memory_model must be 'exact' (K = 1), 'layers', 'caps' or 'auto', "
                         f"not {memory_model!r} with K = {K}")
    if _task_longer_than(td, T):
        return CyclicResult(None, None, Status.INFEASIBLE, "a task is longer than the period")
    caps = copy_caps(td, gpu, memory) if memory_model == "caps" else None
    solves = 0
    for _ in range(retries + 1 if memory_model == "caps" else 1):
        if caps is not None and min(caps.values()) < 1:
            g = min(caps, key=caps.get)
            return CyclicResult(None, None, Status.INFEASIBLE,
                                f"GPU {g} cannot hold the activations of one mini-batch", solves)
        est = build_seconds(td.L, K)
        if deadline is not None and time.monotonic() + est > deadline:
            left = max(0.0, deadline - time.monotonic())
            return CyclicResult(None, None, Status.NO_SOLUTION,
                                f"not built: the {K}-periodic model of {td.L} layers takes about {est:.2g} s to "
                                f"build, more than the {left:.2g} s left", solves)
        md, comms, sc = build_cyclic_model(td, gpu, T, K, caps, None if memory_model == "caps" else memory,
                                           exact=memory_model == "exact")
        res = solve_milp(md, time_limit=time_limit, threads=threads, options=EXACT_TOLERANCES,
                         root_overrun=ROOT_OVERRUN_S_PER_NNZ)
        solves += 1
        if not res.has_solution:
            return CyclicResult(None, None, res.status, res.message, solves)
        sched = _read(md, td, gpu, comms, K, sc, T)
        try:
            sim = simulate_cyclic(sched, td, gpus=P)
        except InvalidPattern as e:      # numerical trouble: report, do not hide
            return CyclicResult(None, None, Status.ERROR, f"replay rejected the schedule: {e}", solves)
        over = [g for g, v in sim.memory.items() if memory is not None and v > memory * (1 + 1e-9)]
        if not over:
            sched.meta.update({"method": f"cyclic-K{K}", "memory_model": memory_model,
                               "copy_caps": caps if memory_model == "caps" else None})
            return CyclicResult(sched, sim, Status.FEASIBLE, res.message, solves)
        if memory_model != "caps":       # an exact value or upper bound was exceeded: a bug, not a retry
            return CyclicResult(None, None, Status.ERROR, f"replay exceeds the limit on GPU(s) {over} although "
                                f"the {memory_model} memory model bounds it", solves)
        for g in over:
            caps[g] -= 1
    return CyclicResult(None, None, Status.NO_SOLUTION, "replayed memory above the limit after retries", solves)


def min_memory_at_period(td: TaskData, layer_gpu: Sequence[int], T: float, *,
                         P: int | None = None, time_limit: float | None = 20,
                         threads: int | None = None) -> tuple[CyclicResult, float | None]:
    """The smallest peak memory of a pattern (K = 1) of the allocation ``layer_gpu`` at period T:
    the exact memory model with ``md.peak`` as the objective. Answers "how much memory would this
    allocation need to reach period T" (e.g. a baseline's period). Returns the replayed pattern
    (``result.sim.peak_memory`` is the memory it needs; status OPTIMAL when proven smallest) and the
    solver's lower bound in bytes (None without one). The replay must measure the MILP's value: the
    exact model is the simulator's memory, so any difference is reported as an error."""
    gpu = task_gpus(td, layer_gpu)
    if _task_longer_than(td, T):
        return CyclicResult(None, None, Status.INFEASIBLE, "a task is longer than the period"), None
    scale = float(3 * td.W[1:].sum() + td.A.sum()) or 1.0      # bytes; md.peak is in scale / 1000
    md, comms, sc = build_cyclic_model(td, gpu, T, 1, None, memory=scale, exact=True, minimize_memory=True)
    res = solve_milp(md, time_limit=time_limit, threads=threads, options=EXACT_TOLERANCES,
                     root_overrun=ROOT_OVERRUN_S_PER_NNZ)
    bound = res.bound * scale / 1000.0 if res.bound is not None else None
    if not res.has_solution:
        return CyclicResult(None, None, res.status, res.message), bound
    sched = _read(md, td, gpu, comms, 1, sc, T)
    try:
        sim = simulate_cyclic(sched, td, gpus=P)
    except InvalidPattern as e:
        return CyclicResult(None, None, Status.ERROR, f"replay rejected the schedule: {e}", 1), bound
    value = res.objective * scale / 1000.0
    if abs(sim.peak_memory - value) > 1e-6 * max(value, 1.0):
        return CyclicResult(None, None, Status.ERROR, f"replay measures {sim.peak_memory} B, the exact model "
                            f"{value} B", 1), bound
    sched.meta.update({"method": "min-memory-k1", "memory_model": "exact"})
    return CyclicResult(sched, sim, res.status, res.message, 1), bound
