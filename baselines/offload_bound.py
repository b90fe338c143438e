"""A lower bound of Problem 1 (paper 001: offloading with whole transfers) that keeps the rule the
fractional relaxation drops: an activation's memory is freed only when its *whole* offload has ended,
and reserved from the *start* of its whole prefetch (issue 21).

The split relaxation
--------------------
Notation of :mod:`models.offload`: computations ``q = 0..2L+1`` (``F_0..F_L, B_L..B_0``), activations
``x_j`` offloaded over one link (transfer time ``c_j = |x_j| / beta``). At the start of computation ``q``
the memory is ``static(q) + sum of the transfer-dependent x_j present`` (:func:`models.offload.
window_memory`), so it fits iff the absent ones cover the deficit ``D_q = static(q) + sum_var |x_j| - M``.

Pick a computation ``q*`` (default: the one with the largest deficit) and any valid schedule of makespan
``T``. Let ``A`` be the activations absent when ``q*`` starts (offload ended, prefetch not started);
``A`` covers ``D_{q*}``.

* **Before ``s_{q*}``** drop every prefetch (its link time and its reservation) and every offload that
  has not ended by then. What is left is a *forward problem*: computations ``0..q*-1`` in order, offloads
  of a set ``S`` (released when ``F_{j-1}`` ends, one at a time on the link, absent once ended), each
  computation ``k`` starting only when the ended offloads cover ``D_k``. Dropping work and reservations
  never makes a check fail, so this problem reaches ``q*`` (with ``S`` ended, ``S`` covering
  ``D_{q*}``) no later than ``s_{q*}``, with ``S ⊇ A``.
* **After ``s_{q*}``** treat every activation whose offload ends after ``s_{q*}`` as absent already at
  ``s_{q*}`` and drop those offloads; the prefetches left (of a set ``A' ⊇ A``) all start after
  ``s_{q*}``. Read in reversed time from ``T``, a prefetch is an offload that frees its memory at its
  (reversed) end, released when ``B_j`` (reversed) ends, and the memory checked at the (real) end of each
  computation's run -- where it is largest within the run, since it only grows by prefetch starts --
  is the same covering condition. So this *backward problem* is the forward problem in reversed time:
  computations ``2L+1, ..., q*`` and transfers of ``A'``; it ends no later than ``T - s_{q*}``.

Hence ``T >= FW(A) + BW(A)``, with ``FW(A)`` (``BW(A)``) the least time of the forward (backward)
problem over transferred sets containing ``A``, and the optimum is at least ``min FW(A) + BW(A)`` over
the sets ``A`` covering ``D_{q*}``.

Each one-way problem is solved by a dynamic programme over transferred sets (bitmasks, in increasing
order, so a set is final before it is extended). For a fixed sequence of transfers the schedule where
each transfer starts as soon as the link is free and its activation exists, and each computation as
soon as its check holds, is optimal (starting earlier never delays anything: nothing here reserves
memory). The state of a set is (the time the link is free, the time the computations would reach the
first computation whose check fails with that set); two sequences of one set are merged into the
componentwise *minimum*, which is not the state of any sequence but is optimistic, and every transition
is non-decreasing in both times, so the result stays a lower bound. A release is read from the
computation times as if no computation waited since ``F_{j-1}``; if one did, that wait ended at an
earlier transfer's end, so the formula is below the link time and the start is the link time anyway.

Small activations make the tables larger than they help: beyond ``max_items`` activations, the
smallest ones are *relaxed* (offloaded and prefetched instantly, without the link, the moment they may
be), which only lowers the bound, by at most their ``2 c_j``. Tests compare the bound with proven
optima of the MILP on random chains, at every split point.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from memplan.models.chain import Chain
from memplan.models.offload import OffloadData, lower_bound_value, peak_memory_no_offload, window_memory

try:                      # numba: the tables have 2^n entries (n <= 22 by default)
    import numba as _nb
except ImportError:       # pragma: no cover - numba is a dependency; the pure-Python path is slow
    _nb = None


def _jit(f):
    return _nb.njit(cache=True)(f) if _nb is not None else f


@_jit
def _cover(mask, x):
    """Total size of the items in ``mask``."""
    cov = 0.0
    i = 0
    while mask:
        if mask & 1:
            cov += x[i]
        mask >>= 1
        i += 1
    return cov


@_jit
def _one_way(n, pre, D, V, rel, c, x, K, cutoff):
    """The one-way problem: computations ``0..K-1`` (``pre[k]``: their durations before ``k``), checks
    ``cover(done & V[k]) >= D[k]`` before each computation ``k = 0..K`` (``K`` is the target), transfers of
    ``n`` items (``rel[i]``: the computation after which item ``i`` exists, ``-1``: from the start;
    ``c[i]`` its duration, ``x[i]`` its size). Returns, per set of transferred items (bitmask), a lower
    bound on when the target is reached with those transfers ended (``inf``: not below ``cutoff``)."""
    N = 1 << n
    TL = np.full(N, np.inf)         # link free
    ET = np.full(N, np.inf)         # computations reach k at ET + pre[k] (if they do not wait)
    kb = np.zeros(N, np.int16)      # first computation whose check fails (K + 1: target reached)
    val = np.full(N, np.inf)
    TL[0] = 0.0
    ET[0] = 0.0
    for m in range(N):
        tl = TL[m]
        if tl == np.inf:
            continue
        k = 0
        if m != 0:
            k = kb[m ^ (m & (-m))]      # a subset's block point: checks before it hold already
        while k <= K:
            if _cover(m & V[k], x) < D[k]:
                break
            k += 1
        kb[m] = k
        kk = k if k <= K else K
        tr = ET[m] + pre[kk]
        if tr < tl:
            tr = tl
        if k > K:
            val[m] = tr
        if tr >= cutoff:
            continue
        et = tr - pre[kk]
        for j in range(n):
            b = 1 << j
            if m & b or rel[j] >= kk:
                continue
            r = et + pre[rel[j] + 1] if rel[j] >= 0 else 0.0
            tl2 = (tl if tl > r else r) + c[j]
            if tl2 >= cutoff:
                continue
            et2 = (tr if tr > tl2 else tl2) - pre[kk]
            m2 = m | b
            if tl2 < TL[m2]:
                TL[m2] = tl2
            if et2 < ET[m2]:
                ET[m2] = et2
    return val


@_jit
def _superset_min(v, n):
    """``v[m] = min over supersets of m`` (in place)."""
    N = 1 << n
    for j in range(n):
        b = 1 << j
        for m in range(N):
            if not m & b:
                w = v[m | b]
                if w < v[m]:
                    v[m] = w
    return v


@_jit
def _combine(F, B, n, x, Vq, Dq):
    best = np.inf
    arg = -1
    for m in range(1 << n):
        s = F[m] + B[m]
        if s >= best:
            continue
        if _cover(m & Vq, x) >= Dq:
            best = s
            arg = m
    return best, arg


@dataclass
class SplitBound:
    """Result of :func:`split_bound`: ``value`` (seconds) is a lower bound on Problem 1's optimum."""
    value: float
    split: int                              #: the computation q* where the schedule is split
    absent: list[int] = field(default_factory=list)   #: a set A achieving the minimum (x_j indices)
    forward: float | None = None            #: FW(A)
    backward: float | None = None           #: BW(A)
    relaxed: list[int] = field(default_factory=list)  #: activations relaxed to instant transfers
    cutoff_reached: bool = False            #: no set below ``cutoff``: the value is the cutoff
    forward_set: list[int] = field(default_factory=list)   #: offloads of the forward problem's optimum
    backward_set: list[int] = field(default_factory=list)  #: prefetches of the backward problem's optimum


class SplitRelaxation:
    """The data of the split relaxation of one instance at one split computation ``q*``, built once;
    :meth:`bound` then solves it for any set of activations allowed to move (the whole instance, or one
    candidate offloaded set: a lower bound of the best schedule offloading exactly that set).

    ``split``: the computation ``q*`` (``0..2L+1``; default the one with the largest deficit)."""

    def __init__(self, chain: Chain, memory: float, bandwidth: float, *, split: int | None = None) -> None:
        d = OffloadData.of(chain)
        L, M = d.L, float(memory)
        self.L, self.M, self.beta = L, M, float(bandwidth)
        self.x = np.array(d.x[:L + 1], dtype=float)
        nq = 2 * L + 2
        dur = np.array([float(d.uF[q]) if q <= L else float(d.uB[2 * L + 1 - q]) for q in range(nq)])
        self.D = np.zeros(nq)
        self.var = np.zeros((nq, L + 1), dtype=bool)     # var[q, j]: x_j's presence at q depends on transfers
        for q in range(nq):
            static, var = window_memory(d, 2 * q)
            self.D[q] = static + sum(float(d.x[j]) for j in var) - M
            self.var[q, [j for j in var if j <= L]] = True
        q_star = int(np.argmax(self.D)) if split is None else int(split)
        if not 0 <= q_star < nq:
            raise ValueError(f"split must be a computation 0..{nq - 1}, got {split!r}")
        self.q = q_star
        tol = 1e-12 * M
        js = np.arange(L + 1)
        # forward: computations 0..q*-1, target q*; x_j exists from the end of F_{j-1} (computation j-1),
        # so a relaxed x_j is absent at q when j - 1 < q
        K = q_star
        self.K = K
        self.preF = np.concatenate([[0.0], np.cumsum(dur[:K]), [dur[:K].sum()]])
        self.DF = self.D[:K + 1] - tol
        self.varF = self.var[:K + 1]
        self.freeF = self.varF & (js[None, :] - 1 < np.arange(K + 1)[:, None])
        # backward in reversed time: reversed computation r is q = nq-1-r (B_r), r = 0..KB-1 (the last is
        # q* itself), target KB without a check; a relaxed x_j is absent until B_j starts (j < r)
        KB = nq - q_star
        self.KB = KB
        rev = dur[::-1][:KB]
        self.preB = np.concatenate([[0.0], np.cumsum(rev), [rev.sum()]])
        self.DB = np.concatenate([self.D[::-1][:KB], [-math.inf]]) - tol
        self.varB = np.concatenate([self.var[::-1][:KB], np.zeros((1, L + 1), bool)])
        self.freeB = self.varB & (js[None, :] < np.arange(KB + 1)[:, None])

    def bound(self, items, *, relaxed=(), cutoff: float = math.inf, sets: bool = False) -> SplitBound:
        """Solve the relaxation where only ``items`` move over the link and ``relaxed`` move instantly
        (both: indices j of x_j); every other activation stays. With ``sets``, also the transferred
        sets of the two one-way optima (``forward_set``, ``backward_set``)."""
        items = [int(j) for j in items if self.x[j] > 0]
        relaxed = [int(j) for j in relaxed if self.x[j] > 0]
        n = len(items)
        if n > 30:
            raise ValueError(f"the split relaxation keeps 2^n tables: {n} activations is too many")
        x = self.x[items]
        c = x / self.beta
        bits = np.int64(1) << np.arange(n, dtype=np.int64)
        xr = np.zeros(self.L + 1)
        xr[relaxed] = self.x[relaxed]
        VF = (self.varF[:, items] * bits).sum(axis=1).astype(np.int64)
        VB = (self.varB[:, items] * bits).sum(axis=1).astype(np.int64)
        DF = self.DF - self.freeF @ xr
        DB = self.DB - self.freeB @ xr
        F = _one_way(n, self.preF, DF, VF, np.array(items, np.int64) - 1, c, x, self.K, float(cutoff))
        B = _one_way(n, self.preB, DB, VB, np.array(items, np.int64), c, x, self.KB, float(cutoff))
        if sets:
            Fraw, Braw = F.copy(), B.copy()
        F = _superset_min(F, n)
        B = _superset_min(B, n)
        best, arg = _combine(F, B, n, x, VF[self.K], DF[self.K])
        if not best < cutoff:
            return SplitBound(value=float(cutoff), split=self.q, relaxed=relaxed, cutoff_reached=True)
        out = SplitBound(value=float(best), split=self.q, absent=[items[i] for i in range(n) if arg >> i & 1],
                         forward=float(F[arg]), backward=float(B[arg]), relaxed=relaxed)
        if sets:
            sup = (np.arange(1 << n, dtype=np.int64) & arg) == arg
            fset, bset = (int(np.argmin(np.where(sup, t, np.inf))) for t in (Fraw, Braw))
            out.forward_set = [items[i] for i in range(n) if fset >> i & 1]
            out.backward_set = [items[i] for i in range(n) if bset >> i & 1]
        return out


def _needs_offload(chain: Chain, memory: float, bandwidth: float) -> bool:
    return float(memory) < peak_memory_no_offload(chain) and bool(bandwidth) and math.isfinite(bandwidth)


def _items_and_relaxed(chain: Chain, max_items: int) -> tuple[list[int], list[int]]:
    """The activations worth a transfer split into those the tables follow (at most ``max_items``) and
    the smallest others, relaxed to instant transfers."""
    d = OffloadData.of(chain)
    cand = [j for j in range(d.L + 1) if d.x[j] > 0]
    by_size = sorted(cand, key=lambda j: (d.x[j], j))
    relaxed = sorted(by_size[:max(0, len(cand) - max_items)])
    return [j for j in cand if j not in set(relaxed)], relaxed


def split_bound(chain: Chain, memory: float, bandwidth: float, *, split: int | None = None,
                cutoff: float = math.inf, max_items: int = 22) -> SplitBound | None:
    """The split relaxation's optimum over every offloaded set (module docstring), or None when nothing
    must be offloaded.

    ``split``: the computation ``q*`` (``0..2L+1``; default the one with the largest deficit).
    ``cutoff``: the makespan of a known valid schedule; states that cannot lead below it are dropped,
    and when none does, the value is ``cutoff`` itself (that schedule is then optimal).
    ``max_items``: beyond this many activations, the smallest are relaxed (instant transfers). Tables
    of ``2^max_items`` entries: 22 takes about 150 MB and a second or two.
    """
    if not _needs_offload(chain, memory, bandwidth):
        return None
    items, relaxed = _items_and_relaxed(chain, max_items)
    rel = SplitRelaxation(chain, memory, bandwidth, split=split)
    return rel.bound(items, relaxed=relaxed, cutoff=cutoff, sets=True)


def milp_bounds(chain: Chain, memory: float, bandwidth: float, *, max_items: int = 22,
                set_items: int = 16):
    """The ``bound`` and ``set_bound`` callables that :func:`formulations.offload_milp.solve_offload_milp`
    takes, from this relaxation; ``(None, None)`` when nothing must be offloaded or where the
    activations it would relax to keep its tables at ``2^max_items`` entries account for more than 1%
    of Proposition 3's bound in link time (it could not beat the fractional bound by much then:
    ResNet-101's 74 activations). ``set_bound`` restricts the relaxation to one offloaded set (None for
    sets of more than ``set_items`` activations)."""
    if not _needs_offload(chain, memory, bandwidth):
        return None, None
    items, relaxed = _items_and_relaxed(chain, max_items)
    x = OffloadData.of(chain).x
    if 2 * float(sum(x[j] for j in relaxed)) / float(bandwidth) > 0.01 * lower_bound_value(chain, memory, bandwidth):
        return None, None
    rel = SplitRelaxation(chain, memory, bandwidth)

    def bound(cutoff: float):
        return rel.bound(items, relaxed=relaxed, cutoff=cutoff, sets=True)

    def set_bound(S, cutoff: float):
        return rel.bound(S, cutoff=cutoff).value if len(S) <= set_items else None

    return bound, set_bound
