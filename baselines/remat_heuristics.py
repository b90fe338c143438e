"""Simple re-materialization schedules: the baselines of paper 004 (section 5.4) that need no search.

One implementation of each, shared by the solvers (:mod:`memplan.remat`), the runtime executor's
checks and the experiments. A schedule builder takes the chain (or just its number of stages L, the
only thing these schedules depend on) and returns a :class:`~memplan.models.remat.RematSchedule`;
the ``Solution``-returning functions replay it with :func:`~memplan.models.remat.simulate_remat`.

- :func:`store_all_schedule` / :func:`store_all` — what plain autograd does:
  ``F_all^1..F_all^{L+1}``, then ``B^{L+1}..B^1``.
- :func:`recompute_all_schedule` / :func:`recompute_all` — keep only a^0 and recompute from it before
  every backward step (quadratic time). Its peak is often, not always, the smallest of any valid
  sequence: :func:`min_memory` (from :mod:`memplan.baselines.remat_min_memory`) is the exact one.
- :func:`sequential_schedule` / :func:`sequential` — PyTorch's
  ``torch.utils.checkpoint.checkpoint_sequential`` (Chen et al. 2016), see :func:`sequential_schedule`.
- :func:`bisection_schedule` — recursive halving (treeverse/revolve's structure with unlimited
  checkpoints), a memory-independent reference sequence for the executor.

The optimal sequence of the AD model, ``revolve`` (paper 004, 5.4), is a restricted persistent DP and
lives with the DPs in :mod:`memplan.baselines.remat_rotor`. A schedule that does not fit is
INFEASIBLE only below the minimum feasible memory (nothing fits); above it, it is NO_SOLUTION (this
schedule does not fit, others do).
"""
from __future__ import annotations

import numbers
import time

from memplan.baselines.remat_min_memory import min_memory, proven_infeasible_below
from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule, simulate_remat
from memplan.models.solution import Solution, Status
from memplan.models.units import fmt_memory


def _num_stages(chain: Chain | int) -> int:
    """L of a Chain, or L itself (the simple schedules depend on nothing else)."""
    if isinstance(chain, Chain):
        return chain.L
    if isinstance(chain, numbers.Integral) and not isinstance(chain, bool) and chain >= 1:
        return int(chain)
    raise TypeError(f"expected a Chain or a number of stages L >= 1, got {chain!r}")


# ----------------------------------------------------------------------------- schedules
def store_all_schedule(chain: Chain | int) -> RematSchedule:
    """``F_all^1..F_all^{L+1} B^{L+1}..B^1``: no re-materialization (plain autograd).

    >>> store_all_schedule(2).notation()
    'F_all^1..F_all^3 B^3..B^1'
    """
    n = _num_stages(chain) + 1
    return RematSchedule([("F_all", l) for l in range(1, n + 1)] + [("B", l) for l in range(n, 0, -1)])


def recompute_all_schedule(chain: Chain | int) -> RematSchedule:
    """Keep only a^0: for l = L+1..1, recompute a^{l-1} with ``F_ck^1 F_none^2..F_none^{l-1}``,
    then ``F_all^l B^l``.

    >>> recompute_all_schedule(2).notation()
    'F_ck^1 F_∅^2 F_all^3 B^3 F_ck^1 F_all^2 B^2 F_all^1 B^1'
    """
    ops = []
    for l in range(_num_stages(chain) + 1, 0, -1):
        if l >= 2:
            ops.append(("F_ck", 1))
            ops.extend(("F_none", j) for j in range(2, l))
        ops.extend([("F_all", l), ("B", l)])
    return RematSchedule(ops)


def segments(L: int, s: int) -> list[tuple[int, int]]:
    """``checkpoint_sequential``'s cut of stages 1..L into ``s`` segments, as ``(first, last)`` pairs.

    PyTorch takes ``L // s`` modules per segment and gives the last segment the remainder.

    >>> segments(5, 2)
    [(1, 2), (3, 5)]
    >>> segments(10, 3)
    [(1, 3), (4, 6), (7, 10)]
    """
    if not 1 <= s <= L:
        raise ValueError(f"segments must be in 1..{L} (L = {L} stages), got {s}")
    size = L // s
    out = []
    start = 1
    for _ in range(s - 1):
        out.append((start, start + size - 1))
        start += size
    out.append((start, L))
    return out


def sequential_schedule(chain: Chain | int, s: int) -> RematSchedule:
    """What ``torch.utils.checkpoint.checkpoint_sequential(stages, s, x)`` followed by
    ``loss_fn(out).backward()`` does, as a sequence of paper 004's operations.

    ``checkpoint_sequential`` cuts the module list (stages 1..L) into ``s`` consecutive segments of
    ``L // s`` stages, the last one taking the remainder (:func:`segments`). Every segment but the
    last is run under ``checkpoint``: without recording the graph, keeping only the segment's input
    (``F_ck`` at its first stage, ``F_none`` at the others). The last segment runs normally (``F_all``).
    **The loss** (stage L+1) is not one of the modules given to ``checkpoint_sequential``: the
    caller applies it to the output, with autograd recording, so it is ``F_all^{L+1}`` right after
    the last segment, and ``B^{L+1}`` is the first backward step. In the backward pass each
    checkpointed segment, from the last to the first, is recomputed with the graph from its stored
    input (``F_all``) and back-propagated. ``s = 1`` is store-all.

    Parameters
    ----------
    chain : Chain or int
        The chain, or its number of stages L.
    s : int
        Number of segments, 1..L.

    Examples
    --------
    L = 5 stages in 2 segments: stages 1-2 checkpointed, 3-5 and the loss (6) run normally.

    >>> sequential_schedule(5, 2).notation()
    'F_ck^1 F_∅^2 F_all^3..F_all^6 B^6..B^3 F_all^1 F_all^2 B^2 B^1'
    """
    L = _num_stages(chain)
    segs = segments(L, s)
    ops: list[tuple[str, int]] = []
    for first, last in segs[:-1]:
        ops.append(("F_ck", first))
        ops.extend(("F_none", j) for j in range(first + 1, last + 1))
    lf, _ = segs[-1]
    ops.extend(("F_all", j) for j in range(lf, L + 2))
    ops.extend(("B", j) for j in range(L + 1, lf - 1, -1))
    for first, last in reversed(segs[:-1]):
        ops.extend(("F_all", j) for j in range(first, last + 1))
        ops.extend(("B", j) for j in range(last, first - 1, -1))
    return RematSchedule(ops)


def bisection_schedule(chain: Chain | int) -> RematSchedule:
    """Recursive checkpointing by halving (the structure of revolve/treeverse with unlimited
    checkpoints: O(log L) stored activations, O(L log L) forward steps).

    To back-propagate stages s..e from a stored a^{s-1}: compute a^m (m = middle) with
    ``F_ck^s F_none^{s+1..m}``, back-propagate m+1..e recursively, then s..m; a single stage is
    ``F_all^s B^s``. Stages 1..L+1, the loss included.

    >>> bisection_schedule(3).notation()
    'F_ck^1 F_∅^2 F_ck^3 F_all^4 B^4 F_all^3 B^3 F_ck^1 F_all^2 B^2 F_all^1 B^1'
    """
    ops: list[tuple[str, int]] = []
    stack = [(1, _num_stages(chain) + 1)]
    while stack:
        s, e = stack.pop()
        if s == e:
            ops.extend([("F_all", s), ("B", s)])
            continue
        m = (s + e) // 2
        ops.append(("F_ck", s))
        ops.extend(("F_none", l) for l in range(s + 1, m + 1))
        stack.append((s, m))          # runs second
        stack.append((m + 1, e))      # runs first
    return RematSchedule(ops)


# ----------------------------------------------------------------------------- solutions
def _solution(chain: Chain, method: str, sched: RematSchedule, memory: float | None, message: str, t0: float,
              **details) -> Solution:
    rep = simulate_remat(chain, sched)
    times = {"total": time.perf_counter() - t0}
    if memory is not None and rep.peak_memory > memory * (1 + 1e-9):
        need = min_memory(chain)
        status = Status.INFEASIBLE if memory < proven_infeasible_below(chain) * (1 - 1e-12) else Status.NO_SOLUTION
        return Solution(problem="remat", method=method, status=status, memory_limit=memory,
                        message=f"{method} needs {fmt_memory(rep.peak_memory)} > limit {fmt_memory(memory)} "
                        f"(minimum feasible memory for any sequence: {fmt_memory(need)})",
                        times=times, details={"needed": rep.peak_memory, "min_memory": need, **details})
    return Solution(problem="remat", method=method, status=Status.FEASIBLE, objective=rep.makespan,
                    peak_memory=rep.peak_memory, schedule=sched, memory_limit=memory, predicted=None,
                    message=message, times=times, details={"recompute_time": rep.recompute_time, **details})


def store_all(chain: Chain, memory: float | None = None) -> Solution:
    """No re-materialization (plain autograd); NO_SOLUTION when its peak exceeds ``memory`` (INFEASIBLE
    below the minimum feasible memory).

    >>> from memplan.models.instance import load_instance
    >>> sol = store_all(load_instance("paper004_table2")[0])
    >>> round(sol.objective * 1e3, 2), round(sol.peak_memory / 2**20, 2)
    (37.38, 106.99)
    """
    return _solution(chain, "store-all", store_all_schedule(chain), memory, "no re-materialization",
                     time.perf_counter())


def recompute_all(chain: Chain, memory: float | None = None) -> Solution:
    """Keep only a^0; recompute from the input before every backward step (little memory; the least
    is :func:`min_memory`, lower when a forward overhead dominates)."""
    return _solution(chain, "recompute-all", recompute_all_schedule(chain), memory,
                     "only a^0 kept", time.perf_counter())


def sequential_points(chain: Chain) -> list[tuple[int, float, float]]:
    """``(segments, makespan, peak memory)`` of :func:`sequential_schedule` for 1..L segments."""
    pts = []
    for s in range(1, chain.L + 1):
        rep = simulate_remat(chain, sequential_schedule(chain, s))
        pts.append((s, rep.makespan, rep.peak_memory))
    return pts


def sequential(chain: Chain, memory: float | None = None, segments_: int | None = None) -> Solution:
    """``checkpoint_sequential`` (:func:`sequential_schedule`): with ``segments_`` that many
    segments, else the fastest number of segments whose peak fits in ``memory`` (NO_SOLUTION, or
    INFEASIBLE below the minimum feasible memory, with the least-memory one when none fits).

    >>> from memplan.models.instance import load_instance
    >>> sol = sequential(load_instance("paper004_table2")[0], 100 * 2**20)
    >>> sol.details["segments"], round(sol.objective * 1e3, 2), round(sol.peak_memory / 2**20, 2)
    (2, 43.62, 91.66)
    """
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
