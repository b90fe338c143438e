"""Baselines for pipelined model parallelism (paper 003, section 5): PipeDream's planner, GPipe-style
time-balanced partitions, memory bounds of contiguous partitions, and the heuristic searches for
periodic patterns that give the ILP its MIP start.

All partitions are contiguous: stage ``s`` holds layers ``first_s..last_s`` and runs on GPU ``s``.
Every (partition, NOAM) is judged by :func:`memplan.baselines.pipeline_eager.simulate_eager` (eager
1F1B for ``n_batches`` mini-batches, measured by the simulator of :mod:`memplan.models.pipeline`),
never by the planner's own estimate, as in the paper's experiments. Every function takes the
:class:`~memplan.models.pipeline.TaskData` built once by the caller (``task_data(chain, bandwidth)``).

PipeDream's planner, as used in paper 003
-----------------------------------------
PipeDream (Narayanan et al., SOSP 2019) partitions the chain by a dynamic program minimizing the
time of the slowest stage, ``max(stage compute time, 2 x boundary communication)``, under a
*simplified* memory model: a stage that holds ``k`` mini-batches in flight stores ``k`` copies of its
activations (layer outputs) and of its weights (weight stashing) and must fit in the memory target.
We use ``k_s = max(1, NOAM - s)`` for stage ``s`` (0-based), which is also the admission limit of the
eager 1F1B simulation. We do not model PipeDream's stage replication (data parallelism inside a
stage): like paper 003, each stage is one GPU. Paper 003 sweeps memory targets and NOAM values,
simulates every resulting partition and keeps the (measured memory, period) points; so do we
(:func:`pipedream_points`).

Time limits
-----------
The sweeps (:func:`pipedream_points`, :func:`gpipe_points`) and the pattern searches
(:func:`start_pattern`, :func:`partition_search`) take a ``time_limit`` in seconds (also shortened to
what the active :class:`~memplan.models.budget.Budget` of a ``solve`` call has left): when it runs out
they stop and return what they have (a sweep's result says so in ``complete``).

Examples
--------
Four identical layers (forward 1 s, backward 2 s) on two GPUs with free communications: the best
PipeDream point splits them two and two and reaches the stage load, 6 s, with two mini-batches in
flight; one mini-batch at a time takes all 12 s of work.

>>> from memplan.models.chain import Chain
>>> from memplan.models.pipeline import task_data
>>> td = task_data(Chain.from_stages(uf=[1.0] * 4, ub=[2.0] * 4, wa=[1.0] * 5, weights=[0.0] * 4), None)
>>> pts = pipedream_points(td, 2, n_batches=40)
>>> best = best_feasible(pts, None)
>>> pts.complete, best.stages, best.noam, float(best.period)
(True, [(1, 2), (3, 4)], 2, 6.0)
>>> float(min(p.period for p in pts if p.noam == 1))
12.0
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from memplan.models import budget as _budget
from memplan.models.pipeline import (EagerResult, InvalidPattern, Pattern, TaskData, simulate_pattern,
                                     stages_to_layer_gpu)
from memplan.baselines.pipeline_eager import simulate_eager
from memplan.baselines.pipeline_modular import bisect_period, modular_pattern, serial_pattern


@dataclass
class Point:
    """One simulated (partition, NOAM): measured memory and period."""

    method: str
    stages: list[tuple[int, int]]
    noam: int
    period: float
    memory: float
    result: EagerResult
    target: float | None = None   # PipeDream's memory target that produced it
    memory_model: str = "paper"   # the task data's memory model that measured ``memory``

    @property
    def pattern(self) -> Pattern | None:
        return self.result.pattern


class Points(list):
    """The points of a sweep (a list of :class:`Point`), with ``complete`` (False when the sweep
    stopped at its time limit) and ``candidates`` (the number of distinct (partition, NOAM) pairs it
    would have simulated)."""

    complete: bool = True
    candidates: int = 0


def _deadline(time_limit: float | None) -> float:
    """The monotonic time at which a loop given ``time_limit`` seconds (shortened to what the active
    budget has left) stops."""
    t = _budget.clamp(time_limit)
    return math.inf if t is None else time.monotonic() + max(0.0, t)


def _expired(deadline: float) -> bool:
    return time.monotonic() >= deadline


class _Stopped(Exception):
    """A partition DP given a ``deadline`` reached it (O(P L^2) in Python: 34 s for one PipeDream DP at
    L = 20000, so the sweeps cannot only check their deadline between DPs)."""


# ----------------------------------------------------------------------------- memory of contiguous partitions
def _planner_activation(td: TaskData, l: int) -> float:
    """The activation bytes PipeDream's planner counts for layer l: the layer's output ``a^l`` (its
    profile's activation size) under the paper's memory model, the stored bytes ``S[l]`` (``abar^l``)
    under the autograd model, so that its estimate speaks of the memory that is replayed (the first
    layer of a stage adds ``H[l]``, :func:`_planner_stage_input`)."""
    return float(td.wa[l]) if td.memory_model == "paper" else float(td.S[l])


def _planner_stage_input(td: TaskData, l: int) -> float:
    """What PipeDream's planner adds for a stage that starts at layer l under the autograd model:
    ``H[l]``, the stage input that layer l saves and ``S`` counts with layer l-1 (0 under the paper's
    model, where ``H`` is 0)."""
    return 0.0 if td.memory_model == "paper" else float(td.H[l])


def _serial_stage_memory(td: TaskData, a: int, b: int) -> float:
    """Memory of the GPU holding layers a..b in the serial pattern (every shift 0)."""
    L, n = td.L, td.n
    mem = 3 * td.W[a:b + 1].sum()
    if a > 1:
        mem += td.A[a - 1] + td.A[n - a + 1]
    if b < L:
        mem += td.A[b] + td.A[n - b]
    peak, stored = 0.0, 0.0
    for l in range(a, b + 1):
        kept = td.S[l] + (td.H[l] if l == a else 0.0)       # layer a is the first of its GPU
        peak = max(peak, stored + td.A[l - 1] + td.A[l])
        stored += kept
    for l in range(b, a - 1, -1):
        kept = td.S[l] + (td.H[l] if l == a else 0.0)
        m = td.backward(l)
        peak = max(peak, stored + td.A[m - 1] + td.A[m])
        stored -= kept
    return float(mem + peak)


def _serial_stage_memories(td: TaskData) -> np.ndarray:
    """``M[a, b]`` = :func:`_serial_stage_memory` ``(td, a, b)`` for every 1 <= a <= b <= L (inf
    elsewhere), in O(L^2) instead of O(L^3): for a fixed first layer a, the bytes stored when the
    forward reaches layer l, and when the backward leaves it, are prefix sums over a..l that do not
    depend on the last layer b, so the forward and backward peaks of a..b are running maxima over b.
    Sums run in the same order as the loop's (cumulative sums); the weights' sum may differ from
    ``W[a:b+1].sum()`` in the last bits."""
    L, n = td.L, td.n
    A = np.asarray(td.A, dtype=float)
    S = np.array([float(td.S[l]) for l in range(L + 1)])
    H = np.array([float(td.H[l]) for l in range(L + 1)])
    W = np.asarray(td.W, dtype=float)
    fwd = np.array([0.0] + [A[l - 1] + A[l] for l in range(1, L + 1)])
    bwd = np.array([0.0] + [A[td.backward(l) - 1] + A[td.backward(l)] for l in range(1, L + 1)])
    cw = np.concatenate([[0.0], np.cumsum(W[1:L + 1])])
    right = np.array([0.0] + [A[b] + A[n - b] if b < L else 0.0 for b in range(1, L + 1)])
    M = np.full((L + 2, L + 1), np.inf)
    for a in range(1, L + 1):
        kept = S[a:L + 1].copy()
        kept[0] += H[a]
        incl = np.cumsum(kept)
        excl = incl - kept
        peak = np.maximum(np.maximum.accumulate(excl + fwd[a:L + 1]), np.maximum.accumulate(incl + bwd[a:L + 1]))
        peak = np.maximum(peak, 0.0)
        left = A[a - 1] + A[n - a + 1] if a > 1 else 0.0
        M[a, a:L + 1] = 3 * (cw[a:L + 1] - cw[a - 1]) + left + right[a:L + 1] + peak
    return M


def min_memory_contiguous_seconds(L: int, P: int) -> float:
    """A generous estimate of the seconds :func:`min_memory_contiguous` takes (it cannot be stopped):
    the O(L^2) table, then per (stages, last layer) one vectorized step over the first layers
    (measured on 2 cores: 0.1 s at L = 1000, P = 4; 1.1 s at L = 4000; 39 s at L = 20000; margin x2).
    Callers under a time limit skip it when it would not fit."""
    L, P = int(L), max(1, min(int(P), int(L)))
    return 8e-8 * L * L + 4e-8 * P * L * L + 2e-5 * P * L


def min_memory_contiguous(td: TaskData, P: int) -> tuple[float, list[tuple[int, int]]]:
    """The smallest peak memory of a *serial* pattern (no pipelining, every shift 0) over contiguous
    partitions into at most P stages: a memory that certainly suffices (DP over partitions on the
    table of :func:`_serial_stage_memories`: O(L^2) to build it, O(P L^2) vectorized for the DP;
    1000 layers take about a second)."""
    L = td.L
    M = _serial_stage_memories(td)
    INF = math.inf
    best = np.full((P + 1, L + 1), INF)
    arg = np.full((P + 1, L + 1), -1, dtype=np.int64)
    best[0, 0] = 0.0
    for k in range(1, P + 1):
        for j in range(k, L + 1):
            i = np.arange(k - 1, j)
            v = np.maximum(best[k - 1, k - 1:j], M[i + 1, j])
            t = int(np.argmin(v))
            if v[t] < best[k, j]:
                best[k, j], arg[k, j] = v[t], int(i[t])
    k = min(range(1, P + 1), key=lambda k: best[k, L])
    stages, j = [], L
    while k > 0:
        i = int(arg[k, j])
        stages.append((i + 1, j))
        j, k = i, k - 1
    return float(min(best[k, L] for k in range(1, P + 1))), stages[::-1]


# ----------------------------------------------------------------------------- partitions
def _stage_times(td: TaskData):
    L = td.L
    cf = np.concatenate([[0.0], np.cumsum([td.d[l] + td.d[td.backward(l)] for l in range(1, L + 1)])])
    return cf


def _link_time(td: TaskData, last: int) -> float:
    """Time the boundary link after layer ``last`` is busy per period: forward + backward transfer."""
    return float(td.dc[last] + td.dc[td.n - last])


def balanced_partition(td: TaskData, S: int, *, deadline: float = math.inf) -> list[tuple[int, int]]:
    """GPipe-style: the contiguous partition into exactly S stages minimizing the largest of the stage
    loads (u_F + u_B) and of the boundary link loads (DP, O(S L^2)). Raises :class:`_Stopped` when
    the :func:`time.monotonic` ``deadline`` comes first (checked once per O(L) row)."""
    L = td.L
    if not 1 <= S <= L:
        raise ValueError(f"cannot cut {L} layers into {S} stages")
    cum = _stage_times(td)
    INF = math.inf
    best = [[INF] * (L + 1) for _ in range(S + 1)]
    arg = [[-1] * (L + 1) for _ in range(S + 1)]
    best[0][0] = 0.0
    for k in range(1, S + 1):
        for j in range(k, L + 1):
            if _expired(deadline):
                raise _Stopped
            for i in range(k - 1, j):
                if best[k - 1][i] == INF:
                    continue
                v = max(best[k - 1][i], cum[j] - cum[i], _link_time(td, i) if i > 0 else 0.0)
                if v < best[k][j]:
                    best[k][j], arg[k][j] = v, i
    stages, j, k = [], L, S
    while k > 0:
        i = arg[k][j]
        stages.append((i + 1, j))
        j, k = i, k - 1
    return stages[::-1]


def pipedream_partition(td: TaskData, P: int, memory_target: float, noam: int, *,
                        deadline: float = math.inf) -> list[tuple[int, int]] | None:
    """PipeDream's DP with its simplified memory model (module docstring): contiguous partition into
    at most P stages minimizing the slowest stage ``max(u_F + u_B, 2 x boundary transfer)``, where
    stage s must satisfy ``max(1, noam - s) x (activations + weights of the stage) <= memory_target``
    (activations: the chain's layer outputs ``td.wa`` under the paper's memory model; under the
    autograd model the stored bytes ``S`` of the stage's layers plus ``H`` of its first layer). None
    when no partition satisfies the estimate. O(P L^2). Raises :class:`_Stopped` when the
    :func:`time.monotonic` ``deadline`` comes first (checked once per O(L) row)."""
    L = td.L
    cum = _stage_times(td)
    act = np.concatenate([[0.0], np.cumsum([_planner_activation(td, l) for l in range(1, L + 1)])])
    wts = np.concatenate([[0.0], np.cumsum(td.W[1:])])
    # per previous boundary i (the stage starts at layer i + 1): its stage input and its link's time
    h_in = np.array([_planner_stage_input(td, i + 1) for i in range(L)])
    comm = np.array([2 * max(td.dc[i], td.dc[td.n - i]) if i > 0 else 0.0 for i in range(L)])
    INF = math.inf
    best = np.full((P + 1, L + 1), INF)
    arg = np.full((P + 1, L + 1), -1, dtype=np.int64)
    best[0, 0] = 0.0
    # best[k, j]: the slowest stage of layers 1..j in k stages; over the previous boundaries i at once
    # (the loop over i in Python took 0.08 s per DP at L = 300, 192 DPs per PipeDream sweep), the
    # same arithmetic in the same order, ties to the smallest i as the loop's strict comparison did
    for k in range(1, P + 1):
        inflight = max(1, noam - (k - 1))
        for j in range(k, L + 1):
            if _expired(deadline):
                raise _Stopped
            i0 = k - 1
            prev = best[k - 1, i0:j]
            stage_act = act[j] - act[i0:j] + h_in[i0:j]
            ok = (prev < INF) & ~(inflight * (stage_act + wts[j] - wts[i0:j]) > memory_target)
            if not ok.any():
                continue
            v = np.where(ok, np.maximum(np.maximum(prev, cum[j] - cum[i0:j]), comm[i0:j]), INF)
            m = int(np.argmin(v))
            best[k, j], arg[k, j] = v[m], i0 + m
    ks = [k for k in range(1, P + 1) if best[k, L] < INF]
    if not ks:
        return None
    k = min(ks, key=lambda k: (best[k, L], k))
    stages, j = [], L
    while k > 0:
        i = int(arg[k, j])
        stages.append((i + 1, j))
        j, k = i, k - 1
    return stages[::-1]


# ----------------------------------------------------------------------------- sweeps
#: seconds per task instance (n_batches x 2L) of one eager simulation: measured 0.3e-6 to 0.6e-6 at
#: L >= 50 and 1.5e-6 at L = 6 on 2 loaded cores; x2 for a busier machine (see _simulate_all)
_SIM_S_PER_TASK = 1.2e-6


def _simulate_all(td: TaskData, cands: Sequence[tuple[tuple, int, float | None]], method: str, n_batches: int,
                  deadline: float, order: Sequence[int] | None = None) -> Points:
    """Simulate every distinct (partition, NOAM) of ``cands`` (in the order of the indices ``order``,
    default as given) until ``deadline``; the points come back in the order of ``cands``."""
    first: dict[tuple, int] = {}
    for i, (stages, noam, _) in enumerate(cands):
        first.setdefault((tuple(stages), noam), i)
    keep = sorted(first.values())
    kept = set(keep)
    todo = [i for i in (order if order is not None else range(len(cands))) if i in kept]
    done: dict[int, Point] = {}
    rate = _SIM_S_PER_TASK        # seconds per task instance: the estimate, or the slowest run seen
    for i in todo:
        # a simulation cannot be stopped once started (O(n_batches L): about 0.3 s at L = 1000):
        # none is started that would end after the deadline
        if time.monotonic() + rate * n_batches * td.n > deadline:
            break
        stages, noam, target = cands[i]
        t0 = time.monotonic()
        r = simulate_eager(td, stages, noam, n_batches)
        rate = max(rate, (time.monotonic() - t0) / (n_batches * td.n))
        done[i] = Point(method, list(stages), noam, r.period, r.peak_memory, r, target, td.memory_model)
    out = Points(done[i] for i in keep if i in done)
    out.complete = len(done) == len(keep)
    out.candidates = len(keep)
    return out


def pipedream_points(td: TaskData, P: int, *, n_targets: int = 24, noams: Sequence[int] | None = None,
                     n_batches: int = 500, time_limit: float | None = None) -> Points:
    """Paper 003's "exhaustive" PipeDream approach: for a geometric grid of memory targets and every
    NOAM in ``noams`` (default 1..2P), PipeDream's partition, simulated with eager 1F1B.

    Cost: ``n_targets x len(noams)`` planner DPs (O(P L^2) each) and one eager simulation
    (O(n_batches L)) per distinct (partition, NOAM). With ``time_limit`` the sweep stops when it runs
    out (``complete`` is then False); the simulations run in an order that visits every NOAM early
    (target by target, from the largest), so a cut sweep still spans the memory range."""
    deadline = _deadline(time_limit)
    L = td.L
    noams = list(noams) if noams is not None else list(range(1, 2 * P + 1))
    per_layer = [_planner_activation(td, l) + td.W[l] for l in range(1, L + 1)]
    lo = max(min(per_layer), 1e-12)
    hi = max(sum(per_layer) * max(noams), lo * 2)
    targets = np.geomspace(lo, hi, n_targets)
    cands, where = [], {}
    stopped = False
    for a, noam in enumerate(noams):
        for b, t in enumerate(targets):
            if _expired(deadline):
                stopped = True
                break
            try:
                st = pipedream_partition(td, P, float(t), noam, deadline=deadline)
            except _Stopped:
                stopped = True
                break
            if st is not None:
                where[len(cands)] = (b, a)
                cands.append((tuple(st), noam, float(t)))
        if stopped:
            break
    order = sorted(range(len(cands)), key=lambda i: (-where[i][0], where[i][1]))
    pts = _simulate_all(td, cands, "pipedream", n_batches, deadline, order)
    pts.complete = pts.complete and not stopped
    return pts


def gpipe_points(td: TaskData, P: int, *, n_batches: int = 500, time_limit: float | None = None) -> Points:
    """Time-balanced contiguous partitions into S = 1..P stages (:func:`balanced_partition`), each
    simulated with eager 1F1B for NOAM = 1..S; stops at ``time_limit`` like :func:`pipedream_points`."""
    deadline = _deadline(time_limit)
    L = td.L
    cands = []
    stopped = False
    for S in range(1, min(P, L) + 1):
        if _expired(deadline):
            stopped = True
            break
        try:
            st = tuple(balanced_partition(td, S, deadline=deadline))
        except _Stopped:
            stopped = True
            break
        for noam in range(1, S + 1):
            cands.append((st, noam, None))
    pts = _simulate_all(td, cands, "gpipe", n_batches, deadline)
    pts.complete = pts.complete and not stopped
    return pts


def best_feasible(points: Sequence[Point], memory: float | None) -> Point | None:
    """The point of smallest period whose measured memory fits (ties: less memory)."""
    ok = [p for p in points if memory is None or p.memory <= memory * (1 + 1e-9)]
    if not ok:
        return None
    return min(ok, key=lambda p: (p.period, p.memory))


def pareto(points: Sequence[Point]) -> list[Point]:
    """Points not dominated in (memory, period), sorted by memory."""
    out = []
    for p in sorted(points, key=lambda p: (p.memory, p.period)):
        if not out or p.period < out[-1].period - 1e-12 * max(1.0, p.period):
            out.append(p)
    return out


# ----------------------------------------------------------------------------- pattern searches
def partition_period(td: TaskData, stages: Sequence[tuple[int, int]]) -> float:
    """The smallest period of any pattern of a contiguous allocation: the largest GPU or link load."""
    loads = [sum(td.d[l] + td.d[td.backward(l)] for l in range(a, b + 1)) for a, b in stages]
    loads += [_link_time(td, b) for a, b in stages[:-1]]
    return float(max(loads))


def _load_bound(cum, links: Sequence[float], cuts: Sequence[int], L: int) -> float:
    """:func:`partition_period` of the partition with these cuts from the prefix sums ``cum`` of the
    layers' loads (:func:`_stage_times`) and the links' times after each layer (``links[b]``,
    :func:`_link_time`): O(P), equal to it up to rounding."""
    return float(max([cum[b] - cum[a - 1] for a, b in _cuts_to_stages(cuts, L)] + [links[b] for b in cuts]))


def modular_search(td: TaskData, stages: Sequence[tuple[int, int]], memory: float | None, P: int, *,
                   steps: int = 14, deadline: float = math.inf) -> Pattern | None:
    """The modular 1F1B pattern (:func:`memplan.baselines.pipeline_modular.modular_pattern`, both
    placement orders) of a contiguous allocation with the smallest period whose replayed memory
    fits, found by bisection on T between the allocation's load bound and the serial period (where
    every shift is 0); the bisection stops early at ``deadline`` (a :func:`time.monotonic` time)."""

    def fit(T):
        best = None
        for bf in (False, True):
            try:
                q = modular_pattern(td, stages, T, backward_first=bf)
            except InvalidPattern:
                continue
            r = simulate_pattern(q, td, gpus=P, n_batches=None)
            if memory is None or r.peak_memory <= memory * (1 + 1e-9):
                if best is None or r.peak_memory < best[1]:
                    best = (q, r.peak_memory)
        return None if best is None else best[0]

    hi = float(td.d[1:].sum() + sum(_link_time(td, b) for a, b in stages[:-1])) * (1 + 1e-9)
    return bisect_period(fit, partition_period(td, stages) * (1 + 1e-9), hi, steps,
                         stop=lambda: _expired(deadline))


def _cuts_to_stages(cuts: Sequence[int], L: int) -> tuple[tuple[int, int], ...]:
    b = [0, *cuts, L]
    return tuple((b[i] + 1, b[i + 1]) for i in range(len(b) - 1))


def _stages_to_cuts(stages: Sequence[Sequence[int]]) -> tuple[int, ...]:
    return tuple(int(b) for _, b in stages[:-1])


def count_partitions(L: int, P: int) -> int:
    """Number of contiguous partitions of L layers into at most P stages."""
    return sum(math.comb(L - 1, S - 1) for S in range(1, min(P, L) + 1))


def partition_search(td: TaskData, P: int, memory: float | None, seeds: Sequence[Sequence[tuple[int, int]]] = (),
                     *, incumbent: float = math.inf, exhaustive_limit: int = 4000, max_evals: int = 400,
                     screen_steps: int = 6, refine: int = 4, time_limit: float | None = None) -> Pattern | None:
    """The contiguous partition whose modular pattern (:func:`modular_search`) has the smallest
    period within ``memory``, searched over partitions that PipeDream's and GPipe's planners never
    propose: their planners optimize a load estimate, while under a memory limit the best periodic
    pattern is often found on a partition with a slightly larger load but fewer activations on the
    first stages (e.g. ResNet-18 on 4 GPUs at 0.78 GB: 6.04 ms against 6.60 ms for PipeDream's
    partition).

    When there are at most ``exhaustive_limit`` partitions into at most P stages, every partition
    whose load bound (:func:`partition_period`) is below the best period found so far is evaluated,
    in increasing order of that bound (so the search stops at the first bound that cannot improve;
    at most ``4 max_evals`` partitions; those whose serial pattern exceeds ``memory`` are skipped
    without a schedule, since no pattern of an allocation needs less memory than its serial one).
    Otherwise a best-improvement local search runs from each of ``seeds`` (best first): neighbours
    move one cut by 1 or 2 layers, drop a cut, or split the most loaded stage; at most ``max_evals``
    evaluations in all. Partitions are screened with ``screen_steps`` bisection steps and the
    ``refine`` best are searched again with the default precision. With ``time_limit`` the search
    stops when it runs out and keeps the best found. Returns the best pattern with period below
    ``incumbent``, or None."""
    deadline = _deadline(time_limit)
    L = td.L
    cum = _stage_times(td)
    cache: dict[tuple[int, ...], Pattern | None] = {}
    best: Pattern | None = None
    Tbest = incumbent

    def evaluate(cuts: tuple[int, ...]) -> float:
        nonlocal best, Tbest
        if cuts not in cache:
            st = _cuts_to_stages(cuts, L)
            hopeless = (partition_period(td, st) >= Tbest * (1 - 1e-9)
                        or (memory is not None and max(_serial_stage_memory(td, a, b) for a, b in st)
                            > memory * (1 + 1e-9)))   # the serial pattern needs the least memory
            cache[cuts] = None if hopeless else modular_search(td, st, memory, P, steps=screen_steps,
                                                               deadline=deadline)
            q = cache[cuts]
            if q is not None and q.T < Tbest * (1 - 1e-12):
                best, Tbest = q, q.T
        q = cache[cuts]
        return q.T if q is not None else math.inf

    def finish() -> Pattern | None:
        nonlocal best, Tbest
        top = sorted((q.T, c) for c, q in cache.items() if q is not None)[:refine]
        for _, cuts in top:
            if _expired(deadline):
                break
            q = modular_search(td, _cuts_to_stages(cuts, L), memory, P, deadline=deadline)
            if q is not None and q.T < Tbest * (1 - 1e-12):
                best, Tbest = q, q.T
        return best

    if count_partitions(L, P) <= exhaustive_limit:
        allp = [c for S in range(1, min(P, L) + 1) for c in itertools.combinations(range(1, L), S - 1)]
        # ordered by load bound from the prefix sums of the layers' loads, O(P) a partition (the direct
        # sums, O(L) each, took 4.5 s for the 3000 partitions of L = 3000 on 2 GPUs, past any time limit);
        # an evaluated partition's bound is partition_period's own
        links = [0.0] + [_link_time(td, b) for b in range(1, L)]
        for load, cuts in sorted((_load_bound(cum, links, c, L), c) for c in allp):
            if load >= Tbest * (1 - 1e-9) or len(cache) >= 4 * max_evals or _expired(deadline):
                break
            evaluate(cuts)
        return finish()

    def neighbours(cuts: tuple[int, ...]):
        cs = list(cuts)
        for i in range(len(cs)):
            for dlt in (-2, -1, 1, 2):
                c = cs[i] + dlt
                lo = cs[i - 1] if i > 0 else 0
                hi = cs[i + 1] if i + 1 < len(cs) else L
                if lo < c < hi:
                    yield tuple(cs[:i] + [c] + cs[i + 1:])
            yield tuple(cs[:i] + cs[i + 1:])
        if len(cs) + 1 < P:
            st = _cuts_to_stages(cuts, L)
            loads = [cum[b] - cum[a - 1] for a, b in st]
            a, b = st[int(np.argmax(loads))]
            if b > a:
                yield tuple(sorted(cs + [(a + b) // 2]))

    for seed in seeds:
        if _expired(deadline):
            break
        cur = _stages_to_cuts(seed)
        cur_T = evaluate(cur)
        improved = True
        while improved and len(cache) < max_evals and not _expired(deadline):
            improved = False
            for nb in neighbours(cur):
                if len(cache) >= max_evals or _expired(deadline):
                    break
                t = evaluate(nb)
                if t < cur_T * (1 - 1e-12):
                    cur, cur_T, improved = nb, t, True
        if len(cache) >= max_evals:
            break
    return finish()


def start_pattern(td: TaskData, P: int, memory: float | None, points: Sequence[Point], *, search: bool = True,
                  time_limit: float | None = None) -> Pattern | None:
    """The feasible pattern of smallest period among: the baselines' steady states (when 1-periodic),
    modular 1F1B patterns (:func:`memplan.baselines.pipeline_modular.modular_pattern`) of every
    baseline partition at its eager period and at its load bound, with ``search`` the bisection of
    :func:`modular_search` for every partition whose load bound is below the best so far, then
    :func:`partition_search` over all contiguous partitions (exhaustive or local, seeded with the
    baselines' partitions), and last the serial pattern of the memory-smallest contiguous partition.
    Every candidate is replayed; None when none fits. With ``time_limit`` the searches stop when it
    runs out (the first candidates and the serial fallback are always tried, the fallback unless its
    partition search, :func:`min_memory_contiguous_seconds`, would not fit in what the call's budget
    has left)."""
    deadline = _deadline(time_limit)
    cands: list[tuple[float, int, Pattern | None, tuple, float]] = []
    for i, p in enumerate(points):
        if p.pattern is not None:
            cands.append((p.period, i, p.pattern, (), 0.0))
        else:
            cands.append((p.period, i, None, tuple(p.stages), p.period))
    parts = {tuple(p.stages) for p in points}
    for st in parts:
        T = partition_period(td, st)
        cands.append((T, -1, None, st, T))
    best = None
    for T, _, pat, st, Tm in sorted(cands, key=lambda c: c[0]):
        pats = [pat] if pat is not None else []
        if pat is None:
            for bf in (False, True):
                try:
                    pats.append(modular_pattern(td, st, Tm * (1 + 1e-9), backward_first=bf))
                except InvalidPattern:
                    pass
        for q in pats:
            r = simulate_pattern(q, td, gpus=P)
            if memory is None or r.peak_memory <= memory * (1 + 1e-9):
                best = q
                break
        if best is not None:
            break
    if search:
        Tbest = best.T if best is not None else math.inf
        for st in sorted(parts):
            if _expired(deadline):
                break
            if partition_period(td, st) < Tbest * (1 - 1e-9):
                q = modular_search(td, st, memory, P, deadline=deadline)
                if q is not None and q.T < Tbest:
                    best, Tbest = q, q.T
        seeds = sorted(parts, key=lambda st: partition_period(td, st))
        if best is not None and best.meta.get("stages"):
            seeds.insert(0, tuple(tuple(x) for x in best.meta["stages"]))
        if not _expired(deadline):
            q = partition_search(td, P, memory, seeds, incumbent=Tbest,
                                 time_limit=max(0.0, deadline - time.monotonic()) if math.isfinite(deadline)
                                 else None)
            if q is not None and q.T < Tbest:
                best, Tbest = q, q.T
    if best is not None:
        return best
    b = _budget.current()
    if b.time_limit is not None and min_memory_contiguous_seconds(td.L, P) > b.remaining():
        return None       # the fallback's search would overrun the call's limit (39 s at L = 20000)
    mem, stages = min_memory_contiguous(td, P)
    if memory is None or mem <= memory * (1 + 1e-9):
        pat = serial_pattern(td, stages_to_layer_gpu(stages, td.L))
        pat.meta.update({"method": "serial", "stages": [list(s) for s in stages]})
        return pat
    return None
