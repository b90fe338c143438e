"""The least memory of re-materialization, computed exactly (paper 004's DPs with the peak as objective).

Paper 004's dynamic programs (:mod:`memplan.baselines.remat_rotor`) answer "the fastest sequence
within ``m`` bytes" for every ``m`` of a discretized memory axis. Every case of their recurrences is
feasible for a set of ``m`` of the form ``m >= threshold`` (the memory of the operations it runs, and
``m - shift >= threshold`` for the sub-problems it calls, ``shift`` being the checkpoint the case
keeps), so the least memory for which a sub-problem has a sequence obeys the same recurrences with
``(min, max, +)`` in place of ``(min, +)`` over the memory axis:

- persistent (Theorem 4.8; class ``"persistent"``), with ``T(s, t)`` the least ``m`` (not counting
  a^{s-1}) from which delta^{s-1} can be computed from a^{s-1} and delta^t:

  * ``T(s, s) = max(wd^s + wabar^s + o_f^s, wd^s + wd^{s-1} + wabar^s + o_b^s)``;
  * ``F_all^s`` first: ``max(wd^t + wabar^s + o_f^s, wd^s + wd^{s-1} + wabar^s + o_b^s, wabar^s + T(s+1, t))``;
  * ``F_ck^s F_none^{s+1..s'-1}``: ``max(memory of those forwards, wa^{s'-1} + T(s', t), T(s, s'-1))``;

- the AD model of revolve (class ``"revolve"``): the same without the ``F_all^s``-first case when
  ``s < t``;
- floating, weakly persistent (Theorem 4.7 + Lemma 4.4, optimal among *all* valid sequences; class
  ``"all"``): the recurrences of ``_floating_kernel`` in :mod:`remat_rotor` with the same reading of
  the paper (the floating-move case, per-operation memory checks), ``T(s, t, l)``.

The least memory of a class is ``wa^0 + T`` at the top level. Sizes are used as given (floats, no
slots), so the value is exact for the chain as given; the sequence that reaches it is rebuilt from
the arg-min choices (ties broken by the makespan at the threshold) and replayed by
:func:`memplan.models.remat.simulate_remat`, whose peak is what :func:`min_memory` returns (equal to
the DP value up to float rounding; the tests check both against an exhaustive search, large forward
and backward overheads included).

Why recompute-all is not the answer: its peak counts ``F^l`` recomputed while delta^l is held, and
when a forward overhead ``o_f^l`` dominates it is cheaper in memory to run ``F_all^l`` once while the
(small) seed gradient is held, e.g. two stages with ``u = 1``, all sizes 1 and ``o_f^2 = 20``:
store-all peaks at 23 B, recompute-all at 24 B.

Complexity: O(L^3) (persistent, revolve) and O(L^5 / 60) (floating) operations, no memory axis;
well under a second for L = 100 once compiled (numba, cached). The floating DP keeps seven (L+2)^3
tables, so it runs up to :data:`FLOATING_MAX_L` stages only (L = 150: about 1.5 s and 0.2 GB; L = 200
already 12 s); on longer chains the class ``"all"`` takes the persistent class's least-memory sequence,
exact when it reaches :func:`necessary_memory`, else reported with that proven lower bound
(``exact=False``). A caller with a time budget passes ``time_limit``: a computation estimated
(:func:`min_memory_seconds`) to take longer raises :class:`TooCostly` instead of starting, and
:func:`proven_infeasible_below` then falls back on :func:`necessary_memory`.
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import njit

from memplan.baselines.remat_exhaustive import exhaustive_min_memory
from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule, simulate_remat
from memplan.models.units import fmt_bytes

__all__ = ["CLASSES", "MinMemory", "min_memory", "min_memory_of", "class_min_memory", "necessary_memory",
           "proven_infeasible_below", "min_memory_seconds", "TooCostly", "FLOATING_MAX_L"]

#: chains up to this length whose DP value may not be exact (a gradient larger than its activation)
#: are settled by the exhaustive search
EXHAUSTIVE_MAX_L = 5

#: the classes of sequences whose least memory is computed
CLASSES = ("all", "persistent", "revolve")

_INF = np.inf

#: the floating threshold DP (class ``"all"``: O(L^5 / 60) time, seven (L+2)^3 tables) runs up to this
#: many stages; above, the class takes the persistent class's least-memory sequence (see the module)
FLOATING_MAX_L = 150
#: seconds per inner step of the threshold DPs on the machine they were measured on (2 shared cores,
#: numba), doubled for safety: L^3 / 6 steps for the persistent DP (L = 1000: 1.5 s measured), L^5 / 60
#: for the floating one (L = 150: 1.4 s)
_PERSISTENT_STEP_SECONDS = 2 * 9e-9
_FLOATING_STEP_SECONDS = 2 * 1.1e-8


class TooCostly(RuntimeError):
    """A least-memory computation would take longer than the time it was given (``seconds``: the
    estimate); nothing was started."""

    def __init__(self, what: str, seconds: float, time_limit: float):
        super().__init__(f"{what} would take about {seconds:.3g} s (more than the {time_limit:.3g} s left)")
        self.seconds = seconds


@njit(cache=True)
def forward_sums(uf, n):
    """``U[a, b] = uf[a] + ... + uf[b]`` for ``1 <= a <= b < n`` (the time of a forward run from stage a
    to b), summed left to right; shared by the floating-DP kernels here and in :mod:`remat_rotor`."""
    U = np.zeros((n + 1, n + 1))
    for a in range(1, n):
        acc = 0.0
        for b in range(a, n):
            acc += uf[b]
            U[a, b] = acc
    return U


@njit(cache=True)
def _better(c, tm, best, best_t):
    """Lexicographic (threshold, time) comparison with a relative tolerance on the threshold."""
    tol = 1e-12 * max(1.0, abs(best)) if best < np.inf else 0.0
    if c < best - tol:
        return True
    if c <= best + tol and tm < best_t:
        return True
    return False


@njit(cache=True)
def _persistent_threshold(L, uf, ub, wa, wab, wd, ofa, ofn, ob, allow_carry):
    """T[s, t] (least memory not counting a^{s-1}), TM[s, t] (makespan of the chosen sequence) and
    CH[s, t] (-1: F_all^s first; s': F_ck^s keeping a^{s'-1})."""
    n = L + 2
    T = np.full((n, n), np.inf)
    TM = np.full((n, n), np.inf)
    CH = np.zeros((n, n), dtype=np.int64)
    for s in range(1, L + 2):
        T[s, s] = max(wd[s] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
        TM[s, s] = uf[s] + ub[s]
        CH[s, s] = -1
    for d in range(1, L + 1):
        for s in range(1, L + 2 - d):
            t = s + d
            best = np.inf
            best_t = np.inf
            ch = 0
            if allow_carry:
                c = max(max(wd[t] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s]), wab[s] + T[s + 1, t])
                tm = uf[s] + TM[s + 1, t] + ub[s]
                if _better(c, tm, best, best_t):
                    best, best_t, ch = c, tm, -1
            need = wd[t] + wa[s] + ofn[s]
            fsum = 0.0
            for sp in range(s + 1, t + 1):
                fsum += uf[sp - 1]
                if sp - 1 > s:
                    j = sp - 1
                    need = max(need, wd[t] + wa[j - 1] + wa[j] + ofn[j])
                c = max(need, max(wa[sp - 1] + T[sp, t], T[s, sp - 1]))
                tm = fsum + TM[sp, t] + TM[s, sp - 1]
                if _better(c, tm, best, best_t):
                    best, best_t, ch = c, tm, sp
            T[s, t] = best
            TM[s, t] = best_t
            CH[s, t] = ch
    return T, TM, CH


@njit(cache=True)
def _floating_threshold(L, uf, ub, wa, wab, wd, ofa, ofn, ob, prune):
    """The floating DP of :func:`remat_rotor._floating_kernel` with the peak as objective: T[s, t, l],
    the choice R (-1 F_all^s, -2 floating move to a^{t-1}, r >= 1 the C_ck case) and TP (t'); TG/GS
    for the factored minimum G over s'."""
    n = L + 2
    T = np.full((n, n, n), np.inf)
    TM = np.full((n, n, n), np.inf)
    R = np.zeros((n, n, n), dtype=np.int64)
    TP = np.zeros((n, n, n), dtype=np.int64)
    TG = np.full((n, n, n), np.inf)
    GM = np.full((n, n, n), np.inf)
    GS = np.zeros((n, n, n), dtype=np.int64)
    U = forward_sums(uf, n)
    for l in range(1, L + 2):
        for s in range(l, 0, -1):
            if s < l:
                for tp in range(s + 1, l + 1):
                    need = wd[l] + wa[s] + ofn[s]
                    best = np.inf
                    best_t = np.inf
                    gs = 0
                    for sp in range(s + 1, tp + 1):
                        if sp - 1 > s:
                            j = sp - 1
                            need = max(need, wd[l] + wa[j - 1] + wa[j] + ofn[j])
                        shift = wa[sp - 1]
                        c = max(max(need, shift), shift + T[sp, tp, l])
                        tm = U[s, sp - 1] + TM[sp, tp, l]
                        if _better(c, tm, best, best_t):
                            best, best_t, gs = c, tm, sp
                    TG[s, tp, l] = best
                    GM[s, tp, l] = best_t
                    GS[s, tp, l] = gs
            for t in range(s, l + 1):
                best = np.inf
                best_t = np.inf
                r_best = 0
                tp_best = 0
                if s == t and t == l:
                    T[s, t, l] = max(wd[s] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                    TM[s, t, l] = uf[s] + ub[s]
                    R[s, t, l] = -1
                    continue
                if s == t:
                    need = max(wd[l] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                    c = max(max(need, wab[s]), wab[s] + T[s + 1, s + 1, l])
                    tm = uf[s] + TM[s + 1, s + 1, l] + ub[s]
                    if _better(c, tm, best, best_t):
                        best, best_t, r_best, tp_best = c, tm, -1, 0
                if t > s and not (prune and wa[t - 1] < wa[s - 1]):
                    lo = wd[l] + wa[s] + ofn[s]
                    for j in range(s + 1, t):
                        lo = max(lo, wd[l] + wa[j - 1] + wa[j] + ofn[j] - wa[s - 1])
                    delta_m = wa[t - 1] - wa[s - 1]
                    lo = max(max(lo, delta_m), 0.0)
                    c = max(lo, delta_m + T[t, t, l])
                    tm = U[s, t - 1] + TM[t, t, l]
                    if _better(c, tm, best, best_t):
                        best, best_t, r_best, tp_best = c, tm, -2, t
                if t < l:
                    pre = wd[l] + wa[s] + ofn[s]
                    mid = 0.0
                    for r in range(s, t + 1):
                        if r > s + 1:
                            j = r - 1
                            mid = max(mid, wd[l] + wa[j - 1] + wa[j] + ofn[j])
                        if prune and wa[r - 1] < wa[s - 1]:
                            continue
                        delta_m = wa[r - 1] - wa[s - 1]
                        lo = max(max(max(pre, mid - wa[s - 1]), delta_m), 0.0)
                        u = U[s, r - 1] if r > s else 0.0
                        for tp in range(t + 1, l + 1):
                            c = max(lo, delta_m + max(TG[r, tp, l], T[r, t, tp - 1]))
                            tm = u + GM[r, tp, l] + TM[r, t, tp - 1]
                            if _better(c, tm, best, best_t):
                                best, best_t, r_best, tp_best = c, tm, r, tp
                T[s, t, l] = best
                TM[s, t, l] = best_t
                R[s, t, l] = r_best
                TP[s, t, l] = tp_best
    return T, TM, R, TP, GS


def _persistent_ops(CH, L: int) -> list[tuple[str, int]]:
    """Algorithm 4 (OptRecP) driven by the arg-min choices of the threshold table."""
    out: list[tuple[str, int]] = []
    stack = [(1, L + 1, False)]
    while stack:
        s, t, emit_b = stack.pop()
        if emit_b:
            out.append(("B", s))
            continue
        c = int(CH[s, t])
        if s == t:
            out.extend([("F_all", s), ("B", s)])
        elif c == -1:
            out.append(("F_all", s))
            stack.append((s, s, True))
            stack.append((s + 1, t, False))
        else:
            out.append(("F_ck", s))
            out.extend(("F_none", j) for j in range(s + 1, c))
            stack.append((s, c - 1, False))      # runs second
            stack.append((c, t, False))          # runs first
    return out


def _floating_ops(R, TP, GS, L: int) -> list[tuple[str, int]]:
    """Algorithm 2 (OptRecFL) driven by the arg-min choices of the threshold tables."""
    out: list[tuple[str, int]] = []
    stack = [(1, 1, L + 1, False)]
    while stack:
        s, t, l, emit_b = stack.pop()
        if emit_b:
            out.append(("B", s))
            continue
        r = int(R[s, t, l])
        if r == 0:
            raise RuntimeError(f"internal error: no choice at T[{s},{t},{l}]")
        if s == t == l:
            out.extend([("F_all", s), ("B", s)])
        elif r == -1:
            out.append(("F_all", s))
            stack.append((s, s, l, True))
            stack.append((s + 1, s + 1, l, False))
        elif r == -2:
            tt = int(TP[s, t, l])
            out.extend(("F_none", j) for j in range(s, tt))
            stack.append((tt, tt, l, False))
        else:
            tp = int(TP[s, t, l])
            sp = int(GS[r, tp, l])
            out.extend(("F_none", j) for j in range(s, r))
            out.append(("F_ck", r))
            out.extend(("F_none", j) for j in range(r + 1, sp))
            stack.append((r, t, tp - 1, False))      # second
            stack.append((sp, tp, l, False))         # first
    return out


@dataclass(frozen=True)
class MinMemory:
    """The least memory of a class of sequences and a sequence that reaches it.

    ``value`` is the peak of ``schedule`` as replayed by the simulator (bytes); ``dp_value`` the
    DP's own threshold (equal up to float rounding); ``makespan`` the replayed makespan of
    ``schedule`` on the chain as given, own no-grad forward times and turns included (a sequence of
    least peak, not the fastest one at that memory). ``exact`` says
    whether no sequence of the class can fit below ``value``; when it is False, ``lower`` is a
    proven lower bound (:func:`necessary_memory`) and ``value`` is exact only among paper 004's
    operations (see :func:`min_memory_of`)."""

    kind: str
    value: float
    dp_value: float
    makespan: float
    schedule: RematSchedule
    exact: bool = True
    lower: float | None = None
    how: str = "the DP with the peak as objective"

    def describe(self) -> str:
        """``"82.1 MiB"``-style text is the caller's; this says what is proven about ``value``."""
        if self.exact:
            return "exact"
        scope = ("exact among paper 004's operations" if self.how == "the DP with the peak as objective"
                 else self.how)
        return f"reached by a sequence ({scope}), and no sequence fits below {fmt_bytes(self.lower)} B"


def _arrays(chain: Chain):
    f = lambda x: np.ascontiguousarray(x, dtype=np.float64)  # noqa: E731
    return (chain.L, f(chain.uf), f(chain.ub), f(chain.wa), f(chain.wabar), f(chain.wd), f(chain.of_all), f(chain.of_ng),
            f(chain.ob))


def _key(chain: Chain) -> tuple:
    return tuple(np.concatenate([chain.uf, chain.ub, chain.wa, chain.wabar, chain.wd, chain.of, chain.ob,
                                 chain.of_all, chain.of_ng]).tolist())


_CACHE: "OrderedDict[tuple, MinMemory]" = OrderedDict()
_CACHE_SIZE = 64
#: the least-memory sequence's makespan replayed on a chain with its own no-grad forward times and
#: turn cost, per (contents, class, those times): one Python replay per chain, not per call
_OWN_MAKESPAN: "OrderedDict[tuple, float]" = OrderedDict()


def min_memory_seconds(L: int, kind: str = "all") -> float:
    """Estimated seconds of :func:`min_memory_of` on a chain of ``L`` stages (not counting a cached
    answer), from the step counts of the threshold DPs (see :data:`FLOATING_MAX_L`)."""
    pers = _PERSISTENT_STEP_SECONDS * (L + 2) ** 3 / 6
    if kind == "all" and L <= FLOATING_MAX_L:
        return pers + _FLOATING_STEP_SECONDS * (L + 2) ** 5 / 60
    return pers


def _compute(key: tuple, kind: str) -> MinMemory:
    n = len(key) // 9
    arr = np.array(key, dtype=float).reshape(9, n)
    chain = Chain(uf=arr[0], ub=arr[1], wa=arr[2], wabar=arr[3], wd=arr[4], of=arr[5], ob=arr[6],
                  weights=np.zeros(n), of_all=arr[7], of_ng=arr[8])
    args = _arrays(chain)
    L = chain.L
    if kind == "all" and L > FLOATING_MAX_L:
        return _all_from_persistent(chain, _get(key, "persistent"))
    if kind == "all":
        T, _, R, TP, GS = _floating_threshold(*args, True)
        dp = float(chain.wa[0] + T[1, 1, L + 1])
        ops = _floating_ops(R, TP, GS, L)
    else:
        T, _, CH = _persistent_threshold(*args, kind == "persistent")
        dp = float(chain.wa[0] + T[1, L + 1])
        ops = _persistent_ops(CH, L)
    sched = RematSchedule(ops)
    rep = simulate_remat(chain, sched)
    if rep.peak_memory > dp * (1 + 1e-9) + 1e-9:
        raise RuntimeError(f"internal error: the least-memory sequence ({kind}) peaks at {rep.peak_memory!r} B, "
                           f"above the DP's {dp!r} B")
    res = MinMemory(kind=kind, value=float(rep.peak_memory), dp_value=dp, makespan=float(rep.makespan),
                    schedule=sched)
    if kind != "all" or not np.any(chain.wd[1:L + 1] > chain.wa[1:L + 1]):
        return res
    # Some gradient is larger than its activation: the simulator's upgrade F_all^l over a stored a^l
    # (outside paper 004's Table 1, so outside Lemma 4.4 and the DP) may go lower.
    lower = necessary_memory(chain)
    if res.value <= lower * (1 + 1e-12):
        return res
    if L <= EXHAUSTIVE_MAX_L:
        peak, seq = exhaustive_min_memory(chain)
        if peak < res.value:
            rep = simulate_remat(chain, seq)
            return MinMemory(kind=kind, value=float(rep.peak_memory), dp_value=dp, makespan=float(rep.makespan),
                             schedule=seq, how="the exhaustive search (the DP's operations do not reach it)")
        return res
    return MinMemory(kind=kind, value=res.value, dp_value=dp, makespan=res.makespan, schedule=sched, exact=False,
                     lower=lower)


def _all_from_persistent(chain: Chain, pers: MinMemory) -> MinMemory:
    """Class ``"all"`` on a chain longer than :data:`FLOATING_MAX_L`: the persistent class's
    least-memory sequence (a sequence of every class's superset, so an upper bound), exact when it
    reaches the proven lower bound :func:`necessary_memory`."""
    lower = necessary_memory(chain)
    exact = pers.value <= lower * (1 + 1e-12)
    return MinMemory(kind="all", value=pers.value, dp_value=pers.dp_value, makespan=pers.makespan,
                     schedule=pers.schedule, exact=exact, lower=None if exact else lower,
                     how=f"the persistent DP's least-memory sequence (the floating DP, O(L^5), runs up to "
                     f"L = {FLOATING_MAX_L}; L = {chain.L})")


def _lru(cache: OrderedDict, k: tuple, compute):
    """``cache[k]``, computed by ``compute()`` when missing; at most :data:`_CACHE_SIZE` entries, the
    least recently used dropped first."""
    hit = cache.get(k)
    if hit is not None:
        cache.move_to_end(k)
        return hit
    value = compute()
    cache[k] = value
    while len(cache) > _CACHE_SIZE:
        cache.popitem(last=False)
    return value


def _get(key: tuple, kind: str) -> MinMemory:
    return _lru(_CACHE, (key, kind), lambda: _compute(key, kind))


def is_known(chain: Chain, kind: str = "all") -> bool:
    """Whether :func:`min_memory_of` has this chain's answer for ``kind`` cached (then it costs nothing)."""
    return (_key(chain), kind) in _CACHE


def necessary_memory(chain: Chain) -> float:
    """A lower bound on the peak of every valid sequence (bytes), from operations every sequence runs.

    a^0 stays in memory until B^1 (nothing can recompute it) and one gradient is always held. Every
    stage l is computed once while delta^{L+1} is held (its input, and its output with that forward's
    own overhead: at least ``min(wabar + o_f_all, wa + o_f_ng)``), ``F_all^l`` runs at some point with a
    gradient delta^k, ``k >= l``, held (``wabar + o_f_all``), and ``B^l`` holds ``abar^l``, its input,
    delta^l, delta^{l-1} and ``o_b^l``.

    >>> from memplan.models.chain import Chain
    >>> necessary_memory(Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[1, 1, 1], of=[0, 20]))
    23.0
    """
    L = chain.L
    wa, wab, wd = chain.wa, chain.wabar, chain.wd
    small = np.minimum(wa, wab)
    ofa, ofn = chain.of_all, chain.of_ng
    first = np.minimum(wab + ofa, wa + ofn)                   # the first forward of stage l, either kind
    suffix_wd = np.minimum.accumulate(wd[::-1])[::-1]        # min_{k >= l} wd^k
    best = wa[0] + wd[L + 1]
    for l in range(1, L + 2):
        inp = small[l - 1] if l >= 2 else 0.0
        best = max(best,
                   wa[0] + inp + first[l] + wd[L + 1],
                   wa[0] + inp + wab[l] + ofa[l] + suffix_wd[l],
                   wa[0] + inp + wab[l] + wd[l] + wd[l - 1] + chain.ob[l])
        if l <= L:     # index l is abar^l at B^{l+1}, or a^l and then F_all^l runs while delta^l is held
            best = max(best, wa[0] + min(wab[l] + wab[l + 1] + wd[l + 1] + wd[l] + chain.ob[l + 1],
                                         inp + wab[l] + ofa[l] + wd[l]))
    return float(best)


def min_memory_of(chain: Chain, kind: str = "all", *, time_limit: float | None = None) -> MinMemory:
    """The least memory of the sequences of class ``kind`` (:data:`CLASSES`) and one that reaches it.

    ``"all"``: every valid sequence (the floating DP, optimal among all sequences by paper 004's
    Lemma 4.4; above :data:`FLOATING_MAX_L` stages the persistent class's answer with a proven lower
    bound, see the module); ``"persistent"``: memory-persistent sequences (rotor's class);
    ``"revolve"``: the AD model (``F_all^l`` right before ``B^l``). Cached per chain contents. With
    ``time_limit`` (seconds), raises :class:`TooCostly` instead of starting a computation estimated
    to take longer (:func:`min_memory_seconds`); a cached answer is always returned.

    Examples
    --------
    The two-stage chain where a forward overhead dominates: recompute-all needs 24 B, store-all 23 B.

    >>> from memplan.models.chain import Chain
    >>> c = Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[1, 1, 1], of=[0, 20])
    >>> r = min_memory_of(c)
    >>> r.value, r.schedule.notation()
    (23.0, 'F_all^1..F_all^3 B^3..B^1')
    """
    if kind not in CLASSES:
        raise ValueError(f"kind must be one of {', '.join(CLASSES)}, got {kind!r}")
    key = _key(chain)
    if time_limit is not None and (key, kind) not in _CACHE:
        need = min_memory_seconds(chain.L, kind)
        if kind == "all" and chain.L > FLOATING_MAX_L and (key, "persistent") in _CACHE:
            need = 0.0
        if need > time_limit:
            raise TooCostly(f"the least memory ({kind}) of a chain of L = {chain.L} stages", need, time_limit)
    res = _get(key, kind)
    if chain.own_times:
        # the cache is keyed on the papers' times (a peak does not depend on times): the makespan is
        # replayed on the chain as given, with its no-grad forwards and turns. Taken as it was, it had
        # ranked this sequence among rotor's candidates below what it really takes (a GPT-2 profiled
        # under load: rotor 13% slower than the checkpoint_sequential cut at the same memory). One
        # replay per chain and class, cached with those times
        own = (key, kind, tuple(np.asarray(chain.ufn, dtype=float).tolist()), float(chain.u_turn))
        res = dataclasses.replace(res, makespan=_lru(
            _OWN_MAKESPAN, own, lambda: float(simulate_remat(chain, res.schedule).makespan)))
    return res


def min_memory(chain: Chain) -> float:
    """The least memory limit (bytes) for which *some* valid re-materialization sequence exists.

    Exact for the chain as given (see the module docstring); below it no sequence is valid, at it
    the sequence of :func:`min_memory_of` is.

    >>> from memplan.models.instance import load_instance
    >>> round(min_memory(load_instance("paper004_table2")[0]) / 2**20, 2)
    82.12
    """
    return min_memory_of(chain, "all").value


def proven_infeasible_below(chain: Chain, *, time_limit: float | None = None) -> float:
    """Below this limit (bytes) no valid sequence fits, proven: :func:`min_memory` when it is exact,
    else the lower bound :func:`necessary_memory` (also when computing :func:`min_memory` is
    estimated to take longer than ``time_limit`` seconds)."""
    try:
        mm = min_memory_of(chain, "all", time_limit=time_limit)
    except TooCostly:
        return necessary_memory(chain)
    return mm.value if mm.exact else float(mm.lower)


def class_min_memory(chain: Chain, kind: str) -> float:
    """:func:`min_memory` restricted to a class of :data:`CLASSES` (bytes)."""
    return min_memory_of(chain, kind).value


