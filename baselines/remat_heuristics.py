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
  checkpoints), a memory-independent reference sequence for the executor, and a candidate of the
  DPs on long chains (O(L log L) operations, about log2(L) checkpoints).

:func:`sequential_points` and :func:`schedule_stats` evaluate schedules with a compiled replay
(``_replay_codes``: the arithmetic of :func:`~memplan.models.remat.simulate_remat`, in the same
order, without its checks), so choosing the number of segments on a 1000-stage chain takes
milliseconds instead of seconds; the schedule returned is always replayed by the simulator itself.

The optimal sequence of the AD model, ``revolve`` (paper 004, 5.4), is a restricted persistent DP and
lives with the DPs in :mod:`memplan.baselines.remat_rotor`. A schedule that does not fit is
INFEASIBLE only below the minimum feasible memory (nothing fits); above it, it is NO_SOLUTION (this
schedule does not fit, others do).
"""
from __future__ import annotations

import numbers
import time
from collections import OrderedDict

import numpy as np
from numba import njit

from memplan.baselines.remat_min_memory import TooCostly, min_memory, min_memory_of, necessary_memory  # noqa: F401 (min_memory: re-exported)
from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule, simulate_remat, store_all_ops
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
    return RematSchedule(store_all_ops(_num_stages(chain)))


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


#: the most segment counts :func:`replayed_baselines` replays (1..this, then every 8th)
REPLAYED_SEGMENTS = 128


def baseline_schedules(chain: Chain, method: str = "all") -> list:
    """``[(name, () -> schedule)]``: the baselines of ``method``'s class, in the order
    :func:`replayed_baselines` replays them (store-all and recompute-all, then ``checkpoint_sequential``
    with 1.. :data:`REPLAYED_SEGMENTS` segments and every 8th beyond; ``method`` one of these baselines'
    names, ``"store-all"``, ``"recompute-all"``, ``"sequential"``: its own only)."""
    L = chain.L
    ks = list(range(1, min(L, REPLAYED_SEGMENTS) + 1)) + list(range(REPLAYED_SEGMENTS + 8, L + 1, 8))
    seq = [(f"sequential with {k} segment(s)", lambda k=k: sequential_schedule(chain, k)) for k in ks]
    ends = [("store-all", lambda: store_all_schedule(chain)),
            ("recompute-all", lambda: recompute_all_schedule(chain))]
    return {"store-all": ends[:1], "recompute-all": ends[1:], "sequential": seq}.get(method, ends + seq)


def replayed_baselines(chain: Chain, memory: float, method: str = "all", time_left: float | None = None):
    """``(fastest, least)``: of :func:`baseline_schedules`'s baselines replayed by
    :func:`memplan.models.remat.simulate_remat` (which charges a chain's resident tensors only while
    they exist, where the DPs charge them whole), the fastest whose replayed peak fits ``memory`` and
    the one of least replayed peak, each ``(name, schedule, replay)`` or None. No new replay once
    ``time_left`` seconds have passed (the first one always runs). Shared by :mod:`memplan.remat`
    (never worse than a baseline) and the budget search's chain of multi-tensor cuts."""
    best = least = None
    t0 = time.perf_counter()
    for name, make in baseline_schedules(chain, method):
        if time_left is not None and least is not None and time.perf_counter() - t0 > time_left:
            break
        sched = make()
        rep = simulate_remat(chain, sched)
        if rep.peak_memory <= memory * (1 + 1e-9) and (best is None or rep.makespan < best[2].makespan):
            best = (name, sched, rep)
        if least is None or rep.peak_memory < least[2].peak_memory:
            least = (name, sched, rep)
    return best, least


def bisection_schedule(chain: Chain | int, leaf: int = 1) -> RematSchedule:
    """Recursive checkpointing by halving (the structure of revolve/treeverse with unlimited
    checkpoints: O(log L) stored activations, O(L log L) forward steps).

    To back-propagate stages s..e from a stored a^{s-1}: compute a^m (m = middle) with
    ``F_ck^s F_none^{s+1..m}``, back-propagate m+1..e recursively, then s..m; a run of at most
    ``leaf`` stages is done as plain autograd, ``F_all^s..F_all^e B^e..B^s`` (``leaf=1``: a single
    stage is ``F_all^s B^s``). Stages 1..L+1, the loss included.

    >>> bisection_schedule(3).notation()
    'F_ck^1 F_∅^2 F_ck^3 F_all^4 B^4 F_all^3 B^3 F_ck^1 F_all^2 B^2 F_all^1 B^1'
    >>> bisection_schedule(3, leaf=2).notation()
    'F_ck^1 F_∅^2 F_all^3 F_all^4 B^4 B^3 F_all^1 F_all^2 B^2 B^1'
    """
    if not (isinstance(leaf, numbers.Integral) and leaf >= 1):
        raise ValueError(f"leaf must be a whole number >= 1, got {leaf!r}")
    ops: list[tuple[str, int]] = []
    stack = [(1, _num_stages(chain) + 1)]
    while stack:
        s, e = stack.pop()
        if e - s + 1 <= leaf:
            ops.extend(("F_all", l) for l in range(s, e + 1))
            ops.extend(("B", l) for l in range(e, s - 1, -1))
            continue
        m = (s + e) // 2
        ops.append(("F_ck", s))
        ops.extend(("F_none", l) for l in range(s + 1, m + 1))
        stack.append((s, m))          # runs second
        stack.append((m + 1, e))      # runs first
    return RematSchedule(ops)


def best_bisection(chain: Chain, memory: float | None, max_leaf: int | None = None
                   ) -> tuple[int, float, float] | None:
    """``(leaf, makespan, peak)`` of the fastest :func:`bisection_schedule` whose peak fits in
    ``memory`` over ``leaf`` = 1, 2, 4, ... up to ``max_leaf`` (default L+1; ``leaf=1`` is the only one
    of the AD model) by the compiled replay (O(L log^2 L) steps), or None."""
    top = chain.L + 1 if max_leaf is None else max_leaf
    best = None
    leaf = 1
    key = _content_key(chain)
    while leaf <= top:
        # the stats of one chain's schedules are kept (one solve asks from several phases; building
        # the sequences is most of the time: 3.7 s at L = 20000)
        if (key, leaf) not in _BISECTION_CACHE:
            _BISECTION_CACHE[(key, leaf)] = schedule_stats(chain, bisection_schedule(chain, leaf))
            while len(_BISECTION_CACHE) > 256:
                _BISECTION_CACHE.popitem(last=False)
        mk, pk = _BISECTION_CACHE[(key, leaf)]
        if (memory is None or pk <= memory * (1 + 1e-9) + 1e-9) and (best is None or mk < best[1]):
            best = (leaf, mk, pk)
        if leaf > chain.L:
            break
        leaf *= 2
    return best


# ----------------------------------------------------------------------------- compiled replay
#: operation codes of the compiled replay
CODES = {"F_all": 0, "F_ck": 1, "F_none": 2, "B": 3}


@njit(cache=True)
def _replay_codes(codes, stages, n, L, uf, ub, wa, wab, wd, ofa, ofn, ob, ufn, u_turn):
    """``(makespan, peak)`` of the first ``n`` operations (codes of :data:`CODES`), a sequence known to
    be valid: :func:`~memplan.models.remat.simulate_remat`'s arithmetic in the same order (``ufn``: the
    no-grad forwards' times, ``u_turn``: a forward right after a B)."""
    act = np.zeros(L + 2, np.int64)       # 0 nothing, 1 a^l, 2 abar^l
    act[0] = 1
    mem = wa[0] + wd[L + 1]
    peak = mem
    makespan = 0.0
    prev_b = False
    for i in range(n):
        op = codes[i]
        l = stages[i]
        if op == 3:
            cur = mem + wd[l - 1] + ob[l]
            mem_after = mem - wd[l] - wab[l] + wd[l - 1]
            act[l] = 0
            if act[l - 1] == 1:
                mem_after -= wa[l - 1]
                act[l - 1] = 0
            dt = ub[l]
        else:
            out = wab[l] if op == 0 else wa[l]
            cur = mem + out + (ofa[l] if op == 0 else ofn[l])     # each forward's own overhead
            old = wab[l] if act[l] == 2 else (wa[l] if act[l] == 1 else 0.0)
            new = 2 if op == 0 else max(act[l], 1)
            act[l] = new
            mem_after = mem - old + (wab[l] if new == 2 else wa[l])
            if op == 2:
                mem_after -= wa[l - 1]
                act[l - 1] = 0
            dt = uf[l] if op == 0 else ufn[l]
            if prev_b:
                dt += u_turn
        if cur > peak:
            peak = cur
        mem = mem_after
        makespan += dt
        prev_b = op == 3
    return makespan, peak


@njit(cache=True)
def _sequential_codes(L, s, codes, stages):
    """:func:`sequential_schedule`'s operations for ``s`` segments into ``codes``/``stages``; returns
    their number."""
    size = L // s
    n = 0
    for g in range(s - 1):                  # checkpointed segments: F_ck first, F_none the rest
        first = 1 + g * size
        codes[n] = 1
        stages[n] = first
        n += 1
        for j in range(first + 1, first + size):
            codes[n] = 2
            stages[n] = j
            n += 1
    lf = 1 + (s - 1) * size
    for j in range(lf, L + 2):
        codes[n] = 0
        stages[n] = j
        n += 1
    for j in range(L + 1, lf - 1, -1):
        codes[n] = 3
        stages[n] = j
        n += 1
    for g in range(s - 2, -1, -1):
        first = 1 + g * size
        last = first + size - 1
        for j in range(first, last + 1):
            codes[n] = 0
            stages[n] = j
            n += 1
        for j in range(last, first - 1, -1):
            codes[n] = 3
            stages[n] = j
            n += 1
    return n


@njit(cache=True)
def _sequential_kernel(L, uf, ub, wa, wab, wd, ofa, ofn, ob, ufn, u_turn):
    codes = np.zeros(3 * L + 3, np.int64)
    stages = np.zeros(3 * L + 3, np.int64)
    mk = np.zeros(L + 1)
    pk = np.zeros(L + 1)
    for s in range(1, L + 1):
        n = _sequential_codes(L, s, codes, stages)
        mk[s], pk[s] = _replay_codes(codes, stages, n, L, uf, ub, wa, wab, wd, ofa, ofn, ob, ufn, u_turn)
    return mk, pk


@njit(cache=True)
def _recompute_all_codes(L, codes, stages):
    n = 0
    for l in range(L + 1, 0, -1):
        if l >= 2:
            codes[n] = 1
            stages[n] = 1
            n += 1
            for j in range(2, l):
                codes[n] = 2
                stages[n] = j
                n += 1
        codes[n] = 0
        stages[n] = l
        codes[n + 1] = 3
        stages[n + 1] = l
        n += 2
    return n


def _arrays(chain: Chain):
    f = lambda x: np.ascontiguousarray(x, dtype=np.float64)  # noqa: E731
    return (chain.L, f(chain.uf), f(chain.ub), f(chain.wa), f(chain.wabar), f(chain.wd), f(chain.of_all),
            f(chain.of_ng), f(chain.ob), f(chain.ufn), float(chain.u_turn))


def schedule_stats(chain: Chain, sched: RematSchedule) -> tuple[float, float]:
    """``(makespan, peak)`` of a sequence known to be valid, by the compiled replay (the same values
    as :func:`~memplan.models.remat.simulate_remat`, without its checks)."""
    n = len(sched.ops)
    codes = np.fromiter((CODES[o] for o, _ in sched.ops), dtype=np.int64, count=n)
    stages = np.fromiter((l for _, l in sched.ops), dtype=np.int64, count=n)
    mk, pk = _replay_codes(codes, stages, n, *_arrays(chain))
    return float(mk), float(pk)


def recompute_all_ops(L: int) -> int:
    """Number of operations of :func:`recompute_all_schedule` (L(L+1)/2 + 2L + 2: quadratic)."""
    return L * (L + 1) // 2 + 2 * L + 2


def recompute_all_stats(chain: Chain) -> tuple[float, float]:
    """``(makespan, peak)`` of :func:`recompute_all_schedule` by the compiled replay, without building
    the (quadratic) list of operations."""
    n = recompute_all_ops(chain.L)
    codes = np.zeros(n, np.int64)
    stages = np.zeros(n, np.int64)
    m = _recompute_all_codes(chain.L, codes, stages)
    assert m == n
    mk, pk = _replay_codes(codes, stages, n, *_arrays(chain))
    return float(mk), float(pk)


# ----------------------------------------------------------------------------- solutions
def not_fitting(chain: Chain, method: str, needed: float, memory: float, time_limit: float | None = None
                ) -> tuple[Status, str, dict]:
    """Status, message and details of a schedule of ``method`` that needs ``needed`` > ``memory`` bytes:
    INFEASIBLE below the minimum feasible memory (proven), else NO_SOLUTION. When the minimum is
    estimated to take longer than ``time_limit`` seconds to compute (long chains), the proven lower
    bound :func:`~memplan.baselines.remat_min_memory.necessary_memory` decides and the message says so."""
    try:
        mm = min_memory_of(chain, "all", time_limit=time_limit)
    except TooCostly as e:
        low = necessary_memory(chain)
        status = Status.INFEASIBLE if memory < low * (1 - 1e-12) else Status.NO_SOLUTION
        msg = (f"{method} needs {fmt_memory(needed)} > limit {fmt_memory(memory)} (no sequence fits below "
               f"{fmt_memory(low)}; the exact minimum was not computed: {e})")
        return status, msg, {"needed": needed, "min_memory": low}
    need = mm.value
    proven = need if mm.exact else float(mm.lower)
    status = Status.INFEASIBLE if memory < proven * (1 - 1e-12) else Status.NO_SOLUTION
    msg = (f"{method} needs {fmt_memory(needed)} > limit {fmt_memory(memory)} "
           f"(minimum feasible memory for any sequence: {fmt_memory(need)})")
    return status, msg, {"needed": needed, "min_memory": need}


def _solution(chain: Chain, method: str, sched: RematSchedule, memory: float | None, message: str, t0: float,
              time_limit: float | None = None, **details) -> Solution:
    rep = simulate_remat(chain, sched)
    times = {"total": time.perf_counter() - t0}
    if memory is not None and rep.peak_memory > memory * (1 + 1e-9):
        # the exact minimum is for the message: at most half of what is left goes to it
        left = None if time_limit is None else max(0.0, time_limit - times["total"]) / 2
        status, msg, more = not_fitting(chain, method, rep.peak_memory, memory, left)
        return Solution(problem="remat", method=method, status=status, memory_limit=memory,
                        message=msg, times=times, details={**more, **details})
    return Solution(problem="remat", method=method, status=Status.FEASIBLE, objective=rep.makespan,
                    peak_memory=rep.peak_memory, schedule=sched, memory_limit=memory, predicted=None,
                    message=message, times=times, details={"recompute_time": rep.recompute_time, **details})


def store_all(chain: Chain, memory: float | None = None, *, time_limit: float | None = None) -> Solution:
    """No re-materialization (plain autograd); NO_SOLUTION when its peak exceeds ``memory`` (INFEASIBLE
    below the minimum feasible memory).

    >>> from memplan.models.instance import load_instance
    >>> sol = store_all(load_instance("paper004_table2")[0])
    >>> round(sol.objective * 1e3, 2), round(sol.peak_memory / 2**20, 2)
    (37.38, 106.99)
    """
    return _solution(chain, "store-all", store_all_schedule(chain), memory, "no re-materialization",
                     time.perf_counter(), time_limit)


def recompute_all(chain: Chain, memory: float | None = None, *, time_limit: float | None = None) -> Solution:
    """Keep only a^0; recompute from the input before every backward step (little memory; the least
    is :func:`min_memory`, lower when a forward overhead dominates)."""
    return _solution(chain, "recompute-all", recompute_all_schedule(chain), memory,
                     "only a^0 kept", time.perf_counter(), time_limit)


#: seconds per step of :func:`sequential_points` (3 L^2 steps; measured 6.5e-9 at L = 20000, 2 cores)
SEQUENTIAL_STEP_SECONDS = 6e-9
_SEQUENTIAL_CACHE: "OrderedDict[bytes, list]" = OrderedDict()
_BISECTION_CACHE: "OrderedDict[tuple[bytes, int], tuple[float, float]]" = OrderedDict()


def sequential_points_seconds(chain: Chain) -> float:
    """Estimated seconds of :func:`sequential_points` on ``chain`` (0 when its answer is cached)."""
    if _content_key(chain) in _SEQUENTIAL_CACHE:
        return 0.0
    return SEQUENTIAL_STEP_SECONDS * 3.0 * float(chain.L) ** 2


def _content_key(chain: Chain) -> bytes:
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for a in _arrays(chain)[1:-1]:
        h.update(a.tobytes())
    h.update(repr((chain.L, float(chain.u_turn))).encode())
    return h.digest()


def sequential_points(chain: Chain) -> list[tuple[int, float, float]]:
    """``(segments, makespan, peak memory)`` of :func:`sequential_schedule` for 1..L segments (compiled
    replay: O(L^2) steps in all; the last few chains' answers are kept, since one solve asks for them
    from several phases: 8 s each at L = 20000)."""
    key = _content_key(chain)
    if key in _SEQUENTIAL_CACHE:
        _SEQUENTIAL_CACHE.move_to_end(key)
        return list(_SEQUENTIAL_CACHE[key])
    mk, pk = _sequential_kernel(*_arrays(chain))
    pts = [(s, float(mk[s]), float(pk[s])) for s in range(1, chain.L + 1)]
    _SEQUENTIAL_CACHE[key] = pts
    while len(_SEQUENTIAL_CACHE) > 8:
        _SEQUENTIAL_CACHE.popitem(last=False)
    return list(pts)


def best_sequential(chain: Chain, memory: float | None) -> tuple[int, bool]:
    """``(segments, fits)``: the fastest number of segments whose peak fits in ``memory`` (ties: the
    least memory), else the least-memory one with ``fits`` False."""
    pts = sequential_points(chain)
    fit = [p for p in pts if memory is None or p[2] <= memory * (1 + 1e-9)]
    if not fit:
        return min(pts, key=lambda p: p[2])[0], False
    return min(fit, key=lambda p: (p[1], p[2]))[0], True


def sequential(chain: Chain, memory: float | None = None, segments_: int | None = None, *,
               time_limit: float | None = None) -> Solution:
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
                         f"{segments_} segments", t0, time_limit, segments=segments_)
    s, fits = best_sequential(chain, memory)
    if not fits:
        return _solution(chain, "sequential", sequential_schedule(chain, s), memory,
                         f"{s} segments (least memory)", t0, time_limit, segments=s)
    return _solution(chain, "sequential", sequential_schedule(chain, s), memory,
                     f"best of 1..{chain.L} segments: {s}", t0, time_limit, segments=s)
