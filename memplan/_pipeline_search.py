"""Searches of :mod:`memplan.pipeline` that drive MILPs (private to the front end).

These combine the baselines (``baselines/pipeline*.py``) with the formulations
(``formulations/pipeline_*.py``), which never import each other:

* :func:`cyclic_search`: bisection on the average period with the K-periodic MILP of
  :mod:`memplan.formulations.pipeline_cyclic` on one allocation;
* :func:`exact_refine`: the best pattern of each candidate allocation by that bisection with K = 1
  and the exact memory model (the ILP's MIP start, method ``ilp``);
* :func:`known_allocations`: the candidate allocations (the start's, the best baseline partitions',
  the load-balanced ones of :mod:`memplan.formulations.pipeline_balance`);
* :func:`min_memory_pattern`: the smallest memory of any pattern (min-memory ILP), for the message of
  an infeasible answer;
* :func:`memory_at_period`: the least memory a pattern of an allocation needs at a given period.

Every search takes the :class:`~memplan.models.pipeline.TaskData` of the call and a ``deadline``
(a :func:`time.monotonic` time, the end of its phase of the call's budget): loops stop there and keep
what they have, and each MILP's time limit is shortened to what the phase has left.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Any, Iterator, Sequence

from memplan.baselines.pipeline import Point, best_feasible, min_memory_contiguous
from memplan.baselines.pipeline_modular import bisect_period, serial_pattern
from memplan.formulations.pipeline_balance import balanced_allocation
from memplan.formulations.pipeline_cyclic import CyclicResult, build_seconds, min_memory_at_period, solve_cyclic
from memplan.formulations.pipeline_ilp import solve_min_memory
from memplan.models.budget import Budget
from memplan.models.pipeline import (Pattern, TaskData, allocation_load, simulate_pattern, stages_to_layer_gpu)
from memplan.models.solution import Status


def expired(deadline: float) -> bool:
    return time.monotonic() >= deadline


def left(deadline: float, cap: float | None) -> float | None:
    """A MILP's time limit: ``cap`` shortened to what is left before ``deadline``."""
    if math.isinf(deadline):
        return cap
    rest = max(0.0, deadline - time.monotonic())
    return rest if cap is None else min(float(cap), rest)


def deadline_of(b: Budget, cap: float | None = None, share: float = 1.0) -> float:
    """The end of a phase given ``share`` of what the budget has left, at most ``cap`` seconds."""
    t = b.limit(cap, share)
    return math.inf if t is None else time.monotonic() + t


@contextlib.contextmanager
def phase(b: Budget, deadline: float | None = None, *, report: bool = True) -> Iterator[Budget]:
    """Run a block under a budget that ends at ``deadline`` (at most ``b``'s own end: e.g. to keep
    time for the steps after an ILP) and reports to ``b``'s progress sink, or to none with
    ``report=False`` (the many small MILPs of a search would each report their feasibility
    incumbents; the search reports once instead)."""
    q = Budget(None, b.progress if report else None)
    q.start, q.cpu_start, q.time_limit = b.start, b.cpu_start, b.time_limit
    q.deadline = b.deadline if deadline is None else min(deadline, b.deadline)
    with q.active():
        yield q


def quiet(b: Budget) -> contextlib.AbstractContextManager:
    """``with quiet(b):`` the block runs under ``b``'s deadline without progress lines."""
    return phase(b, report=False)


# ----------------------------------------------------------------------------- searches
def cyclic_search(td: TaskData, layer_gpu: Sequence[int], memory: float | None, K: int, *, hi: float,
                  lo: float | None = None, P: int | None = None, steps: int = 8, time_limit: float | None = 20,
                  threads: int | None = None, lo_fails: bool = False,
                  deadline: float = math.inf) -> CyclicResult | None:
    """Bisection on the average period between ``lo`` (default: the allocation's load bound, the
    busiest GPU or link; ``lo_fails``: the caller already tried it) and ``hi``: the smallest T found
    at which a schedule with at most K mini-batches per period fits in ``memory`` (at each T the
    1-periodic MILP is tried first, it is small and a 1-periodic schedule is also K-periodic; then
    the K-periodic one). ``time_limit`` is per MILP. None when even ``hi`` fails (or the deadline
    came first)."""
    if lo is None:
        lo = allocation_load(td, layer_gpu)
    if left(deadline, math.inf) < build_seconds(td.L, 1):
        return None           # the exact model's build alone (O(L^2) rows, not interruptible) would overrun

    def fit(T: float) -> CyclicResult | None:
        for k in sorted({1, int(K)}):
            if expired(deadline):
                return None
            r = solve_cyclic(td, layer_gpu, T, k, memory, P=P, time_limit=left(deadline, time_limit),
                             threads=threads, deadline=deadline if math.isfinite(deadline) else None)
            if r.schedule is not None:
                return r
        return None

    return bisect_period(fit, lo, hi, steps, lo_fails=lo_fails, stop=lambda: expired(deadline))


def exact_refine(td: TaskData, P: int, memory: float | None, allocations: Sequence[Sequence[int]],
                 incumbent: Pattern | None, *, steps: int = 12, time_limit: float | None = 10,
                 threads: int | None = None, goal: float | None = None,
                 deadline: float = math.inf) -> Pattern | None:
    """The best pattern of each allocation (layer -> GPU lists) by bisection on T with the exact
    1-periodic MILP of :mod:`memplan.formulations.pipeline_cyclic` (memory model ``exact``), between
    the allocation's load bound and the incumbent's period. With ``goal`` (e.g. the best PipeDream
    period at this memory) the bisection first runs below the goal, then, when nothing is found
    there, between the goal and the incumbent: a solve that stops at its time limit counts as a
    failure, so aiming at the goal first keeps a busy machine from missing it. ``time_limit`` is per
    MILP; the allocations are tried in order until ``deadline``. Every pattern is replayed. Returns
    the best pattern strictly faster than the incumbent, or None."""
    best, Tbest = None, incumbent.T if incumbent is not None else math.inf
    for lg in dict.fromkeys(tuple(int(g) for g in a) for a in allocations):
        if expired(deadline):
            break
        hi = Tbest if math.isfinite(Tbest) else float(td.d[1:].sum() + td.dc[1:].sum())
        kw: dict[str, Any] = dict(P=P, steps=steps, time_limit=time_limit, threads=threads, deadline=deadline)
        if goal is not None and goal < hi * (1 - 1e-9):
            r = cyclic_search(td, list(lg), memory, 1, hi=goal, **kw)
            if r is None and not expired(deadline):   # nothing at or below the goal: between it and hi
                r = cyclic_search(td, list(lg), memory, 1, lo=goal, lo_fails=True, hi=hi, **kw)
        else:
            r = cyclic_search(td, list(lg), memory, 1, hi=hi, **kw)
        if r is None or r.schedule.T >= Tbest * (1 - 1e-9):
            continue
        q = r.schedule.as_pattern(td)
        sim = simulate_pattern(q, td, gpus=P)
        if memory is not None and sim.peak_memory > memory * (1 + 1e-9):
            raise RuntimeError(f"exact pattern replays above the limit: {sim.peak_memory} > {memory}")
        q.meta.update({"method": "exact-k1", "allocation": list(lg)})
        best, Tbest = q, q.T
    return best


#: seconds per row and per nonzero to build and compile the balancing MILP (fitted on 2 loaded cores:
#: 1.05 s at L = 73, P = 16; 3.4 s at P = 32; 5.8 s at L = 1000, P = 4; margin x1.5)
_BALANCE_BUILD_S = (4.5e-5, 3.6e-6)


def _balance_build_seconds(L: int, P: int) -> float:
    """Seconds to build and compile one model of :func:`memplan.formulations.pipeline_balance.
    balanced_allocation` (not interruptible): rows ``3 L P`` (one GPU per layer, GPU order, cuts) plus
    ``L P^2`` (the link of each boundary and GPU pair), nonzeros ``P L^2 / 2`` (GPU order) plus
    ``3.5 L P^2``. The ``L P^2`` part dominates on many GPUs: ResNet-101 (L = 73) on 64 GPUs builds
    300,000 rows, about 20 s per model, which a P L^2 estimate put at 0.3 s (issue: a 5 s call took
    35 s)."""
    P = max(1, min(int(P), int(L)))
    rows = 3 * L * P + L * P * P
    nonzeros = P * L * L / 2 + 3.5 * L * P * P
    return _BALANCE_BUILD_S[0] * rows + _BALANCE_BUILD_S[1] * nonzeros


def known_allocations(td: TaskData, points: Sequence[Point], memory: float | None, start: Pattern | None,
                      extra: Sequence[Sequence[int]] = (), *, P: int | None = None, threads: int | None = None,
                      goal: float | None = None, deadline: float = math.inf) -> list[tuple[int, ...]]:
    """Layer -> GPU lists, without repeats: ``extra``, the start pattern's, those of the best
    PipeDream (on the chain, or over the antichain DAG) and GPipe points that fit in ``memory``, and (given ``P``) the nearly load-balanced,
    possibly non-contiguous allocations of
    :func:`memplan.formulations.pipeline_balance.balanced_allocation` whose load is below the start's
    period: the one that only fits weights and buffers (the paper's "abundant memory" case) and,
    given the period to beat ``goal`` and a limit, the one that also fits the average activations of
    a pattern of period ``goal`` (the tight-memory case). The balancing MILPs run until
    ``deadline``."""
    cands = [tuple(int(g) for g in a) for a in extra]
    if start is not None:
        cands.append(tuple(start.layer_gpus()))
    for meth in ("pipedream", "pipedream-dag", "gpipe"):      # pipedream-dag: memplan.pipeline.solve_graph
        bb = best_feasible([p for p in points if p.method == meth], memory)
        if bb is not None:
            cands.append(tuple(stages_to_layer_gpu(bb.stages, td.L)))
    if P is not None and P > 1:
        periods = [None] + ([goal] if goal is not None and memory is not None else [])
        for period in periods:
            # its models are built before HiGHS can be stopped (:func:`_balance_build_seconds`; the
            # cut-minimizing second solve compiles the model again): skipped when two builds do not
            # fit in what is left
            if expired(deadline) or left(deadline, math.inf) < 2 * _balance_build_seconds(td.L, P):
                break
            bal = balanced_allocation(td, P, memory, period=period, threads=threads,
                                      time_limit=left(deadline, 300.0))
            if bal is not None and (start is None or bal[1] < start.T * (1 - 1e-9)):
                cands.append(tuple(bal[0]))
    return list(dict.fromkeys(cands))


def min_memory_pattern(td: TaskData, P: int, *, time_limit: float | None,
                       threads: int | None) -> tuple[float, bool, float] | None:
    """(smallest memory of a replayed pattern, proven?, solver bound) from the min-memory ILP of
    :func:`memplan.formulations.pipeline_ilp.solve_min_memory` started from the serial pattern of
    the memory-smallest contiguous partition; None when it found nothing."""
    _, stages = min_memory_contiguous(td, P)
    start = serial_pattern(td, stages_to_layer_gpu(stages, td.L))
    pat, res = solve_min_memory(td, P, start=start, threads=threads, time_limit=time_limit)
    if pat is None:
        return None
    peak = simulate_pattern(pat, td, gpus=P).peak_memory
    return peak, res.status == Status.OPTIMAL, res.bound or 0.0


def memory_at_period(td: TaskData, P: int, layer_gpu: Sequence[int], T: float, *, time_limit: float | None,
                     threads: int | None) -> dict[str, Any]:
    """Where a baseline beats the ILP: the least memory a pattern of the ILP's allocation needs at the
    baseline's period (:func:`memplan.formulations.pipeline_cyclic.min_memory_at_period`, about a
    second), so the report can say how far the paper's patterns are from the baseline there."""
    r, bound = min_memory_at_period(td, layer_gpu, T, P=P, time_limit=time_limit, threads=threads)
    return {"memory": r.sim.peak_memory if r.schedule is not None else None, "bound": bound,
            "status": str(r.status)}
