"""Re-materialization + offloading: the joint dynamic program of paper 000 (appendix B).

Paper 000 (Beaumont et al., "Efficient Combination of Rematerialization and Offloading for Training
DNNs", NeurIPS 2021, appendix) extends the memory-persistent DP of paper 004 (Theorem 4.8): during
the forward phase the input ``Z^i`` kept by a top-level ``F_all^i`` / ``F_ck^i`` may be offloaded to
the host, and it is prefetched back during the backward phase before it is used again. The DP has
three parts, which this module follows:

- forward phase ``OC_x(i, A, Delta_F, Delta_B)`` (B.1): best time from ``F^i`` to ``B^i`` when the
  input ``Z^i`` (``a^{i-1}`` if ``x = 0``, ``abar^{i-1}`` if ``x = 1``) is stored, ``A`` memory is
  held by outer inputs that stay on the device, ``Delta_F`` offload data is still on its way to the
  host, and ``Delta_B`` data of outer inputs must be prefetched by the end of ``B^i``. Case 1: ``F_all^i``
  first, then ``OC_1(i+1, ...)``, then ``B^i``. Case 2: ``F_ck^i F_none^{i+1..j}`` then
  ``OC_0(j+1, ...)`` then the backward block ``C_A(i, j, ...)``. In both, ``v`` says whether ``Z^i`` is
  offloaded (Table 2: the offloaded input joins ``Delta_F`` and, for the sub-chain, ``Delta_B``).
- the loss junction (B.2): ``F_all^{L+1} B^{L+1}``; the remaining offloads and all prefetches still
  pending must complete during it (the paper's ``epsilon = (Delta_F + Delta_B) / beta`` idle time).
- backward blocks ``C_A(i, j, m, Delta)`` (B.3): a persistent re-materialization sequence for
  stages ``i..j`` (cases ``F_all^i`` first / ``F_ck^i`` first, as in paper 004) while ``Delta`` data
  is prefetched for outer blocks, with ``m`` free memory.

How the garbled formulas were read, and the one change of model that makes the DP exact
----------------------------------------------------------------------------------------
*Memory requirements* (the ``M`` list before B.1): with the persistent input ``Z`` counted outside,
``F_all^k`` needs ``delta^j + abar^k + o_f^k``, ``F_ck^k`` needs ``delta^j + a^k + o_f^k``,
``F_none^k`` needs ``delta^j + a^{k-1} + a^k + o_f^k`` and ``B^k`` needs ``abar^k + delta^k +
delta^{k-1} + o_b^k`` -- exactly :func:`models.remat.simulate_remat`'s accounting (as in
:mod:`baselines.remat_rotor`). The paper's one ``o_f^k`` is each forward's own here: F_all^k's
(:attr:`Chain.of_all`, ``ofa`` in the kernels) in F_all's conditions, here and in case 1 of ``OC`` and
the loss junction, and the no-grad forwards' (:attr:`Chain.of_ng`, ``ofn``) in F_ck's and F_none's;
with both equal to ``of`` (the default) the recurrences are the paper's.

*Transfers and Lemma 1.* The paper treats a transfer as a fluid: offloading frees memory at rate
beta, prefetching fills it at rate beta, and Lemma 1 gives the idle time ``epsilon = max(max_o (M_o -
beta d_o) - M_min, 0) / beta`` that an operation ``o`` at distance ``d_o`` from the end (prefetch) or
the start (offload) of a phase must wait. Our simulator (:mod:`models.remat_offload`) frees the bytes
of an offload when it ends and reserves a prefetch's bytes when it starts. We make the fluid exact by
moving every value in **parts of at most one memory slot** (``S = M / N`` bytes), each taking at most
``q = S / beta`` seconds: then "``n`` slots of data still to offload" means "``n`` parts, the ``c``-th of
which ends by ``c q``", and Lemma 1 becomes: an operation that needs ``r`` free slots while ``n``
parts are pending starts at ``max(end of previous operation, (n - r) q)`` (offload), or the block's end
is pushed to ``e_o + (n - r) q`` (prefetch, parts placed as late as possible, ``c``-th from the end
starting at ``E - c q``). The time a phase can host is ``floor(T / q)`` parts; Table 2's
``D_F = (sum u_F + epsilon) beta`` and ``D_B = (u_B + epsilon) beta`` become those floors.

*Offloading* (Table 2, ``v = 1``): ``Z^i``'s parts enter the link after those already queued and not
before the first operation of the level ends (it reads ``Z^i``; freeing its memory earlier would be
wrong). The new ``Delta_F`` is the remaining link work at the start of the sub-chain, rounded up to
whole parts; the new ``Delta_B`` is ``Z^i`` plus the part of ``Delta_B`` that the level's backward
block could not host (``max(Delta_B - D_B, 0) + Z``).

*Prefetching* in ``C_A`` (B.3): each sub-part of a block, taken from the end, hosts as many of the
pending parts as its duration allows (the ``A_1 = max(A - (u_F + epsilon) beta, 0)`` and ``A_2``
updates of the paper); the rest is "spilled" to the part before it, and the block returns its spill
together with its duration (a second table). A part that cannot fit an operation next to the
reserved prefetches waits at its end (Lemma 1). ``F_all^i`` and ``B^i`` are checked with the memory
reserved at their end.

*An addition to the paper's cases* ("flush"): a level's backward block may first wait, idle, until
the prefetch parts it cannot host are on the device (case 2), or idle after ``B^i`` until it has
hosted all of ``Delta_B`` (case 1), so that the sub-chain only has to prefetch ``Z^i``: the paper
only inserts the idle time Lemma 1 requires for memory, which can leave the deeper levels with more
reserved memory than necessary. The choice is part of the table (``CH = 4 j + 2 f + v``).

*Loss* (B.2): ``F_all^{L+1}`` waits for enough offload parts to fit; the block ends at
``max(end of B^{L+1}, (Delta_F + Delta_B) q, e_o + (Delta_B - r_o) q)``: all offloads finish before
the first prefetch (no offload in the backward phase, no prefetch in the forward phase).

*Exactness.* Sizes are rounded up to slots (``baselines.remat_rotor.Discretization``), so the model never
under-counts memory; transfer parts take ``q`` in the model and at most ``q`` in reality. The schedule
carries the model's start times as release times, so the simulator starts every operation exactly
there and the replayed makespan equals the DP value (tested), while the memory it checks uses the
real sizes. The price of the model is at most one part time ``q`` lost at each level boundary
(re-anchoring of pending transfers) and the rounding of sizes; both shrink with more slots.

With ``beta = 0`` (or no bandwidth) no offload is possible and the DP is exactly paper 004's
persistent DP (:func:`baselines.remat_rotor.persistent`) with the same slots.

Complexity (as in Theorem 1): backward tables ``O(L^3 N^2)`` (``C_A`` over ``i <= j``, ``m``,
``Delta``; case 2 over ``i'``, with running maxima so that each ``i'`` costs O(1)); forward table
``O(L N^3)`` states ``(i, x, A, Delta_F, Delta_B)`` times ``O(L)`` choices, ``O(L^2 N^3)``. Both are
numba kernels, written for speed without changing a single table entry (issue 21; the previous
serial kernels are kept in ``tests/test_remat_offload_dp_tables.py``, which checks bit-identical
tables):

- *loop order*: in the forward table everything about a level's forward run (op starts, ``Tf``, the
  offload ``Delta_F'`` left to the sub-chain) does not depend on ``Delta_B``, so it is computed once
  per ``(A, Delta_F, v, j)`` and the innermost loop runs over ``Delta_B`` on contiguous rows, with no
  bound checks (``Delta_B' <= N - A'`` always holds) and no branch on the outcome (two passes: the
  sub-chain's values are gathered first, then the comparisons run vectorized). For one ``(A, v)``
  the loop over ``j`` is outside the loop over ``Delta_F``, so that the block row ``C_A(i, j, m, .)``
  and the sub-chain's rows ``OC(j + 1, 0, A', ., .)`` stay in cache while all rows ``Delta_F`` use
  them; per state the candidates still come in the serial order (v, case 1, then j ascending). Case
  1's ``B^i`` (wait, hosted parts, flush) depends on ``Delta_B`` only and is computed once per ``A``.
  The per-thread rows are flat arrays indexed by offsets (an array view in a hot loop costs two
  atomic reference counts);
- *finite ranges*: the backward kernel records, per ``(i, j, m)``, the first and last ``D`` with a
  finite block time; the loops over a block's ``D`` visit that range only;
- *pruning by a lower bound*: every value covers each remaining ``F_all^k`` and ``B^k`` once, so a
  case-2 candidate ending its forward run at ``j`` (``i'`` in ``C_A``) lasts at least ``Tf(j) +
  sum_{k >= i} (uf^k + ub^k)``, which grows with ``j``; states (entries) whose best is already at most
  that bound (scaled by ``1 - 1e-9``, far more than any rounding of the sums) can no longer change
  under the strict ``<`` and are dropped from the inner loop. The exact skip tests below are at
  least as strong per candidate (``lb >= Tf + S_i``), so what the pruning still saves is the visit of
  rows ``(j, Delta_F)`` whose states are all closed and the rest of the loop over ``j`` once every
  row is (1% to 25% of the rows on the small chains of ``tests/test_remat_offload_dp_tables.py``,
  which counts them: ``work``);
- *exact skip tests* (issue 21, slow links): a case-2 candidate of the forward table is
  ``(Tf + OC(j + 1, 0, A', Delta_F', Delta_B')) + C_A(i, j, m, Delta_B)`` (or the flush
  ``(Tf + OC(.., v z)) + (spill q + C_A)``), so it is at least ``lb = (Tf + RMO) + RMT`` where
  ``RMO = min_P OC(j + 1, 0, A', Delta_F', P)`` (kept per level) and ``RMT = min_D C_A(i, j, m, D)``:
  floating-point addition rounds monotonically (``x <= x'`` implies ``fl(x + y) <= fl(x' + y)``), so
  the bound holds for the computed sums, not only for the exact ones, and needs no safety factor. A
  state whose best is at most ``lb`` cannot pass the strict ``<`` with that ``j``; the range of
  ``Delta_B`` is trimmed to the first and last state above ``lb`` and skipped when none is. In
  ``C_A``, a case-2 candidate ``((Tf + eps) + T_2) + T_1`` is at least ``(Tf + RMB) + T_1`` with
  ``RMB`` the minimum of ``T_2``'s row (``eps >= 0``), which spares the look-up of ``T_2`` where
  the entry is already at most that. At 100 MB/s on ResNet-101 (N = 100) these tests skip about 40%
  of the forward candidates, where the bound above skips 4%;
- *parallel stripes*: the entries of one diagonal ``j - i`` of ``C_A`` and the states of one level
  of ``OC`` are independent; ``nth`` threads take every ``nth``-th of them (:func:`_stripes`: numba
  functions compiled with ``nogil=True``, run on Python threads). Each entry still tries its
  candidates in the serial order with the same arithmetic.

Memory: ``L^2/2 (N+1)^2`` entries for ``C_A`` (time, spill, choice: 12 bytes) and
about ``2 (L+2) N^3 / 3`` for ``OC`` (10 bytes, states with ``A + Delta > N`` are not stored): 0.2 GB
for L = 100, N = 50; 1.3 GB for L = 100, N = 100.
"""
from __future__ import annotations

import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import config as numba_config
from numba import njit

from memplan.baselines.remat_offload_min_memory import min_memory as ro_min_memory
from memplan.baselines.remat_rotor import Discretization, DPStopped, check_deadline
from memplan.models.chain import Chain
from memplan.models.units import fmt_bytes
from memplan.models.remat_offload import RematOffloadSchedule, Transfer, simulate_remat_offload
from memplan.models.solution import Solution, Status

INF = math.inf
_TOL = 1e-9
#: lower bounds used to prune are scaled by this factor, far below 1 - (rounding of any sum in the DP)
_SAFE = 1.0 - 1e-9
#: the tables of :class:`RematOffloadDP` may take at most this many bytes (:func:`table_bytes`)
MAX_TABLE_BYTES = 3e9
#: tables with L^2 (N + 1)^3 below this are computed on one thread (L = 73: N <= 56)
PARALLEL_WORK = 1e9


_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """The threads of :func:`_stripes`, made once per process (keyed by the process id: a child made
    by ``fork`` inherits the parent's pool object but none of its threads, and would wait forever on
    it)."""
    key = (os.getpid(), workers)
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="memplan-dp")
    return pool


def _stripes(fn, nth, *args):
    """Runs ``fn(t, nth, *args)`` for the stripes ``t < nth`` and returns when all are done: stripe 0
    on the calling thread, the others on a pool of ``nth - 1`` threads. The stripe functions are
    compiled with ``nogil=True``, so the stripes run in parallel; they write disjoint entries of the
    tables and read only finished ones (the kernels' docstrings).

    Python threads rather than numba's ``parallel=True``: a ``prange`` kernel cost 12 s more to
    compile (21 s against 9 s for both kernels on a fresh cache, every fresh clone and every test
    worker) for the same run time, and numba's OpenMP threading layer shares its runtime with torch's,
    which changed torch's intra-op thread count."""
    if nth == 1:
        fn(0, 1, *args)
        return
    futures = [_pool(nth - 1).submit(fn, t, nth, *args) for t in range(1, nth)]
    try:
        fn(0, nth, *args)
    finally:
        for f in futures:
            f.result()


def table_bytes(L: int, slots: int) -> int:
    """Bytes of the DP's tables for a chain of ``L`` stages and ``slots`` memory slots N.

    ``C_A``: ``L (L + 1) / 2 (N + 1)^2`` entries of 12 bytes; ``OC``: ``2 (L + 2)`` times
    ``sum_{A=0..N} (N - A + 1)^2 = (N + 1)(N + 2)(2N + 3) / 6`` entries of 10 bytes.

    >>> table_bytes(6, 100)             # paper004_table2 with 100 slots: 58 MB
    58338812
    >>> max(n for n in range(1, 400) if table_bytes(23, n) <= MAX_TABLE_BYTES)    # ResNet-18 (L = 23)
    254
    """
    N = int(slots)
    backward = (L * (L + 1) // 2) * (N + 1) ** 2 * 12
    forward = (L + 2) * 2 * ((N + 1) * (N + 2) * (2 * N + 3) // 6) * 10
    return backward + forward


# ----------------------------------------------------------------------------- helpers
@njit(cache=True)
def _nch(t, q):
    """Parts of duration q that fit in t seconds (the model's floor(T / q))."""
    if not math.isfinite(q):
        return 0
    return int(math.floor(t / q + 1e-9))


@njit(cache=True)
def _wait(n, q):
    """Time for n parts (0 if n <= 0)."""
    if n <= 0:
        return 0.0
    return n * q


@njit(cache=True)
def _relax(T, SP, CH, p, m, D, v, spill, choice):
    """Keep (v, spill, choice) at [p, m, D] of the backward tables if v is a shorter block."""
    if v < T[p, m, D]:
        T[p, m, D] = v
        SP[p, m, D] = spill
        CH[p, m, D] = choice


@njit(cache=True, nogil=True)
def _backward_stripe(t, nth, ln, L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, fin, pid, T, SP, CH, DLO, DHI, RMB):
    """Stripe ``t`` of the diagonal ``j - i = ln`` of :func:`_backward_kernel`: the entries (p, m) numbered
    ``t, t + nth, ...`` (serial; the kernel runs the ``nth`` stripes of a diagonal in parallel,
    :func:`_stripes`)."""
    npairs = L - ln
    nitems = npairs * (N + 1)
    Gs = np.empty(L + 2)
    Tfs = np.empty(L + 2)
    rooms = np.empty(L + 2, dtype=np.int64)
    act = np.empty(N + 1, dtype=np.int64)
    for it in range(t, nitems, nth):
        i = 1 + it // (N + 1)
        m = it % (N + 1)
        j = i + ln
        p = pid[i, j]
        mb = ab[i] + d[i] + d[i - 1] + ob[i]
        if ln == 0:
            mf = d[i] + ab[i] + ofa[i]          # F_all^i
            if m >= mf and m >= mb:
                for D in range(0, m + 1):
                    e3 = _wait(D - (m - mb), q)
                    k3 = min(D, _nch(ub[i] + e3, q))
                    R = D - k3
                    e1 = _wait(R - (m - mf), q)
                    k1 = min(R, _nch(uf[i] + e1, q))
                    _relax(T, SP, CH, p, m, D, uf[i] + e1 + ub[i] + e3, R - k1, -2)
        else:
            # case 1: F_all^i, C(i+1, j, m - abar^i), B^i
            mf = d[j] + ab[i] + ofa[i]
            m2 = m - ab[i]
            if m >= mf and m >= mb and m2 >= 0:
                p2 = pid[i + 1, j]
                for D in range(0, m + 1):
                    e3 = _wait(D - (m - mb), q)
                    k3 = min(D, _nch(ub[i] + e3, q))
                    D2 = D - k3
                    if D2 > m2:
                        continue
                    T2 = T[p2, m2, D2]
                    if not T2 < np.inf:
                        continue
                    s2 = SP[p2, m2, D2]
                    e1 = _wait(s2 - (m - mf), q)
                    k1 = min(s2, _nch(uf[i] + e1, q))
                    _relax(T, SP, CH, p, m, D, uf[i] + e1 + T2 + ub[i] + e3, s2 - k1, -1)
            # case 2: F_ck^i F_none^{i+1..i'}, C(i'+1, j, m - a^{i'}), C(i, i', m)
            Tf = 0.0
            G = -np.inf
            minroom = 1 << 40
            for ip in range(i, j):
                if ip == i:
                    mem = d[j] + a[i] + ofn[i]                  # F_ck^i
                else:
                    mem = d[j] + a[ip - 1] + a[ip] + ofn[ip]    # F_none^{ip}
                Tf = Tf + uf[ip]
                room = m - mem
                if room < minroom:
                    minroom = room
                if fin:
                    g = Tf - room * q
                    if g > G:
                        G = g
                Tfs[ip] = Tf
                Gs[ip] = G
                rooms[ip] = minroom
            # every candidate of case 2 lasts at least Tf(i..i') + sum_{k=i..j} (uf^k + ub^k)
            # (both sub-blocks run every F_all^k and B^k once at least), which grows with i':
            # once an entry D is at most that bound, no later i' can improve it (strict <).
            sblk = 0.0
            for k in range(i, j + 1):
                sblk += uf[k] + ub[k]
            na = 0
            for D in range(0, m + 1):
                act[na] = D
                na += 1
            for ip in range(i, j):
                if rooms[ip] < 0:
                    break
                Tf = Tfs[ip]
                thr = (Tf + sblk) * _SAFE
                kk = 0
                for ia in range(na):
                    D = act[ia]
                    if T[p, m, D] > thr:
                        act[kk] = D
                        kk += 1
                na = kk
                if na == 0:
                    break
                m2 = m - a[ip]
                if m2 < 0:
                    continue
                p1 = pid[i, ip]
                p2 = pid[ip + 1, j]
                dlo = DLO[p1, m]
                dhi = DHI[p1, m]
                # exact skip: a candidate lasts ((Tf + eps) + T2) + T1 >= (Tf + RMB) + T1
                # (eps >= 0, T2 >= its row's minimum RMB, rounding is monotone), so an
                # entry already at most that cannot pass "<": T2 is not looked up
                lb2 = Tf + RMB[p2, m2]
                for ia in range(na):
                    D = act[ia]
                    if D < dlo:
                        continue
                    if D > dhi:
                        break
                    T1 = T[p1, m, D]
                    if not T1 < np.inf:
                        continue
                    if T[p, m, D] <= lb2 + T1:
                        continue
                    s1 = SP[p1, m, D]
                    if s1 > m2:
                        continue
                    T2 = T[p2, m2, s1]
                    if not T2 < np.inf:
                        continue
                    s2 = SP[p2, m2, s1]
                    if s2 == 0:
                        eps = 0.0
                    elif not fin:
                        continue
                    else:
                        eps = s2 * q + Gs[ip] - Tf
                        if eps < 0.0:
                            eps = 0.0
                    k = min(s2, _nch(Tf + eps, q)) if s2 > 0 else 0
                    _relax(T, SP, CH, p, m, D, Tf + eps + T2 + T1, s2 - k, ip)
        mn = np.inf
        for D in range(0, m + 1):
            if T[p, m, D] < np.inf:
                if DLO[p, m] > D:
                    DLO[p, m] = D
                DHI[p, m] = D
                if T[p, m, D] < mn:
                    mn = T[p, m, D]
        RMB[p, m] = mn


@njit(cache=True)
def _backward_tables(P, N):
    """The backward kernel's tables, filled with their initial values. Allocated by numba, as when the
    kernels were numba functions: numpy asks the kernel for huge pages on large arrays, which made the
    first solve after start-up about 2 s slower and the rebuild's scattered reads slower on ResNet-101
    at N = 100."""
    T = np.full((P, N + 1, N + 1), np.inf)
    SP = np.zeros((P, N + 1, N + 1), dtype=np.int16)
    CH = np.zeros((P, N + 1, N + 1), dtype=np.int16)
    DLO = np.full((P, N + 1), N + 1, dtype=np.int32)
    DHI = np.full((P, N + 1), -1, dtype=np.int32)
    RMB = np.full((P, N + 1), np.inf)          # min_D T[p, m, D], once the entry (p, m) is done
    return T, SP, CH, DLO, DHI, RMB


@njit(cache=True)
def _forward_tables(L, S3):
    """The forward kernel's tables ``OC`` (inf) and ``CH`` (-1), allocated by numba (as
    :func:`_backward_tables`)."""
    return np.full((L + 2, 2, S3), np.inf), np.full((L + 2, 2, S3), -1, dtype=np.int16)


def _backward_kernel(L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, pid, nth, deadline=None, tick=None):
    """Tables over pairs p = pid[i, j] (1 <= i <= j <= L), free memory m and prefetch demand D <= m:
    T[p, m, D] block duration, SP[p, m, D] parts spilled before the block, CH[p, m, D] choice
    (-1: F_all^i first, -2: single stage, i' >= i: F_ck^i F_none^{i+1..i'} keeping a^{i'}).

    Also returns the finite range of each row: DLO[p, m] / DHI[p, m], the first / last D with a
    finite T[p, m, D] (N + 1 / -1 if none); the loops over a child's D only visit that range.

    The entries (p, m) of one diagonal (j - i fixed) only read shorter pairs, so they are computed in
    parallel: ``nth`` stripes, each taking every ``nth``-th entry of the diagonal (the work per entry
    grows with m; striping balances it). Per entry the candidates are tried in the order of the serial
    recurrence (case 1, then i' ascending, D ascending) with the same arithmetic, so the tables are
    bit-identical to a serial run. Case-2 candidates that cannot pass "<" are dropped before their
    second look-up by the exact bound ``(Tf + RMB) + T_1`` (module docstring, *exact skip tests*;
    RMB[p, m] is the minimum of the finished row T[p, m, .]). ``deadline`` (``time.perf_counter()``):
    :class:`~memplan.baselines.remat_rotor.DPStopped` before a diagonal that would start after it.
    ``tick(phase, k, n)``: called after each diagonal (progress)."""
    T, SP, CH, DLO, DHI, RMB = _backward_tables(pid.max() + 1, N)
    fin = math.isfinite(q)
    for ln in range(0, L):
        check_deadline(deadline, ln + 1, L)
        _stripes(_backward_stripe, nth, ln, L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, fin, pid, T, SP, CH, DLO, DHI,
                 RMB)
        if tick is not None:
            tick("backward", ln + 1, L)
    return T, SP, CH, DLO, DHI, RMB


@njit(cache=True, inline="always")
def _cand(best, bch, P, Tf, Tb, sp, OCf, o0, subfl, q, fin, jc):
    """Case 2 of the forward table for state P: the sub-chain's value OCf[o0 + sp] (f = 0), then the
    flush (f = 1) with the sub-chain's value subfl; keeps the better in best / bch at P (written
    without branches on the outcome: improvements are frequent, a branch would be mispredicted)."""
    b = best[P]
    cb = bch[P]
    tot = Tf + OCf[o0 + sp] + Tb
    if tot < b:
        b = tot
        cb = jc
    if fin:
        tot = Tf + subfl + (sp * q + Tb)
        if tot < b:
            b = tot
            cb = jc + 2
    best[P] = b
    bch[P] = cb


@njit(cache=True, inline="always")
def _run_dense(best, bch, r0, lo, hi, Tf, Tf1, SPf, tb, OCf, o0, subfl, q, jc, g):
    """Case 2 of the forward table (both f) for every P in lo..hi of the row at r0 in best / bch,
    as :func:`_cand` does it: the same operations in the same order. Two passes: the sub-chain's
    values are gathered into g first, so that the second pass (no gather, no branch) vectorizes;
    unsigned indices (no negative-index wraparound)."""
    ut = np.uint64(tb) + np.uint64(lo)
    uo = np.uint64(o0)
    ur = np.uint64(r0) + np.uint64(lo)
    n = np.uint64(hi + 1 - lo)
    for k in range(n):
        g[k] = OCf[uo + np.uint64(SPf[ut + k])]
    tfl = Tf + subfl
    jc1 = np.int16(jc)
    jc2 = np.int16(jc + 2)
    for k in range(n):
        Tb = Tf1[ut + k]
        sp = SPf[ut + k]
        b = best[ur + k]
        cb = bch[ur + k]
        tot = Tf + g[k] + Tb
        c1 = tot < b
        b = tot if c1 else b
        cb = jc1 if c1 else cb
        tot = tfl + (sp * q + Tb)
        c2 = tot < b
        b = tot if c2 else b
        cb = jc2 if c2 else cb
        best[ur + k] = b
        bch[ur + k] = cb


@njit(cache=True, inline="always")
def _run_dense_nf(best, bch, r0, lo, hi, Tf, Tf1, SPf, tb, OCf, o0, jc):
    """:func:`_run_dense` without a link (no flush)."""
    ut = np.uint64(tb)
    uo = np.uint64(o0)
    ur = np.uint64(r0)
    for P in range(np.uint64(lo), np.uint64(hi) + np.uint64(1)):
        Tb = Tf1[ut + P]
        sp = SPf[ut + P]
        tot = Tf + OCf[uo + np.uint64(sp)] + Tb
        if tot < best[ur + P]:
            best[ur + P] = tot
            bch[ur + P] = jc


@njit(cache=True, inline="always")
def _trim(best, r0, lo, hi, lb):
    """(first, last) P in lo..hi with best[r0 + P] > lb (first > last if none), in one pass without
    branches (it vectorizes)."""
    ur = np.uint64(r0)
    first = hi + 1
    last = lo - 1
    for P in range(np.uint64(lo), np.uint64(hi) + np.uint64(1)):
        o = best[ur + P] > lb
        ip = np.int64(P)
        first = min(first, ip if o else hi + 1)
        last = max(last, ip if o else lo - 1)
    return first, last


@njit(cache=True)
def _row_min(OC, off, N, i, RMO):
    """RMO[i, A, F] = min over P of OC[i, 0, A, F, P] (inf if none is finite)."""
    for A in range(N + 1):
        W = N - A + 1
        for F in range(W):
            k0 = off[A] + F * W
            mn = np.inf
            for P in range(W):
                if OC[i, 0, k0 + P] < mn:
                    mn = OC[i, 0, k0 + P]
            RMO[i, A, F] = mn


@njit(cache=True, fastmath=True)
def _open_min(best, act, r0, na, dense):
    """min(best[r0 + P]) over the open states of the row at r0 (all P < na if dense, else
    act[r0 + ia], ia < na). fastmath lets the reduction vectorize; a minimum of floats (no NaN here)
    is exact in any order."""
    mn = np.inf
    if dense:
        for P in range(na):
            mn = min(mn, best[r0 + P])
    else:
        for ia in range(na):
            mn = min(mn, best[r0 + act[r0 + ia]])
    return mn


@njit(cache=True)
def _chunk_end_nb(c, F, zs, q):
    if c <= F:
        return c * q
    return zs + (c - F) * q


@njit(cache=True)
def _loss_eval(L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, x, A, F, P):
    """The loss junction (B.2); returns (s1, s2, E) or E = inf. Used by the table and by RematOffloadDP.loss.
    ``ofn`` is unused (the loss runs F_all^{L+1} only); it is taken for the kernels' common signature."""
    z = ab[L] if x else a[L]
    res = A + d[L + 1] + z
    r1 = N - (res + ab[L + 1] + ofa[L + 1])      # F_all^{L+1}
    r2 = N - (res + ab[L + 1] + d[L] + ob[L + 1])
    if r1 < 0 or r2 < 0:
        return 0.0, 0.0, np.inf
    s1 = _wait(F - r1, q)
    e1 = s1 + uf[L + 1]
    s2 = max(e1, _wait(F - r2, q))
    e2 = s2 + ub[L + 1]
    E = e2
    if F + P > 0:
        if not math.isfinite(q):
            return 0.0, 0.0, np.inf
        E = max(E, (F + P) * q)
        if P > 0:
            E = max(E, e1 + (P - r1) * q, e2 + (P - r2) * q)
    return s1, s2, E


@njit(cache=True, nogil=True)
def _loss_stripe(t, nth, x, L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, off, OC, CH):
    """Stripe ``t`` of the loss level ``L + 1`` of :func:`_forward_kernel` (every ``nth``-th A)."""
    for A in range(t, N + 1, nth):
        for F in range(N - A + 1):
            for P in range(N - A + 1):
                _, _, E = _loss_eval(L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, x, A, F, P)
                if E < np.inf:
                    OC[L + 1, x, off[A] + F * (N - A + 1) + P] = E
                    CH[L + 1, x, off[A] + F * (N - A + 1) + P] = 0


@njit(cache=True, nogil=True)
def _forward_stripe(t, nth, i, x, L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, pid, DLO, DHI, RMT, prune,
                    off, OC, CH, OCf, Tf1, SPf, Ssuf, RMO, work):
    """Stripe ``t`` of level ``(i, x)`` of :func:`_forward_kernel`: the states of every ``nth``-th A
    from ``t`` (serial; the kernel runs the ``nth`` stripes of a level on threads)."""
    fin = math.isfinite(q)
    nv = 2 if fin else 1
    dL1 = d[L + 1]
    S3 = off[N + 1]
    z = ab[i - 1] if x else a[i - 1]
    mb1 = ab[i] + d[i] + d[i - 1] + ob[i]
    nA = N - z + 1
    # per thread: rows F of the states (A, F, .) of one A
    # (flat rows F of N + 1 entries at F (N + 1): no array view is made in the loops,
    # a view costs two atomic reference counts)
    best = np.empty((N + 1) * (N + 1))
    bch = np.empty((N + 1) * (N + 1), dtype=np.int16)
    act = np.empty((N + 1) * (N + 1), dtype=np.int64)
    gbuf = np.empty(N + 1)
    nact = np.empty(N + 1, dtype=np.int64)
    dense = np.empty(N + 1, dtype=np.bool_)
    minb = np.empty(N + 1)
    eF = np.empty(N + 1)
    zsF = np.empty(N + 1)
    oF = np.empty(N + 1, dtype=np.int64)
    e3a = np.empty(N + 1)
    e3b = np.empty(N + 1)
    ka = np.empty(N + 1, dtype=np.int64)
    kb = np.empty(N + 1, dtype=np.int64)
    fla = np.empty(N + 1, dtype=np.int64)
    lbF = np.empty(N + 1)
    for A in range(t, nA, nth):
        base = A + dL1
        mfree = N - A - z
        W = N - A + 1
        for F in range(W):
            for P in range(W):
                best[F * (N + 1) + P] = np.inf
                bch[F * (N + 1) + P] = -1
        # B^i of case 1 with Delta_B = P: its wait e3 and the parts k it hosts, without
        # (a) and with (b, fla = 1) the flush; the same for every F and v
        for P in range(W):
            e3 = _wait(P - (mfree - mb1), q)
            e3a[P] = e3
            fla[P] = 0
            if e3 < np.inf:
                k = min(P, _nch(ub[i] + e3, q))
                ka[P] = k
                if k != P and fin:
                    fla[P] = 1
                    e3 = max(e3, P * q - ub[i])
                    e3b[P] = e3
                    kb[P] = min(P, _nch(ub[i] + e3, q))
        for v in range(nv):
            res = base + (1 - v) * z
            cA = A + (1 - v) * z
            vz = v * z
            lim = N - cA
            # ---- case 1: F_all^i, OC_1(i+1), B^i
            room1 = N - (base + z + ab[i] + ofa[i])       # F_all^i
            if room1 >= 0 and mfree >= mb1:
                for F in range(W):
                    n_tot = F + vz
                    s1 = _wait(F - room1, q)
                    e = s1 + uf[i]
                    zs = max(F * q, e) if v else 0.0
                    Tf = e
                    F2 = 0
                    if n_tot > 0:
                        tend = _chunk_end_nb(n_tot, F, zs, q)
                        F2 = max(0, int(math.ceil((tend - Tf) / q - 1e-9)))
                    if cA <= N and F2 <= lim:
                        row = off[cA] + F2 * (N - cA + 1)
                        for P in range(W):
                            if e3a[P] < np.inf:
                                for fl in range(1 + fla[P]):
                                    # fl = 1: flush, idle after B^i until all of Delta_B is hosted
                                    e3 = e3a[P] if fl == 0 else e3b[P]
                                    k = ka[P] if fl == 0 else kb[P]
                                    P2 = vz + P - k
                                    if P2 <= lim:
                                        sub = OC[i + 1, 1, row + P2]
                                        if sub < np.inf:
                                            tot = Tf + sub + (ub[i] + e3)
                                            if tot < best[F * (N + 1) + P]:
                                                best[F * (N + 1) + P] = tot
                                                bch[F * (N + 1) + P] = 2 * fl + v
            # ---- case 2: F_ck^i F_none^{i+1..j}, OC_0(j+1), C_A(i, j)
            room1 = N - (base + z + a[i] + ofn[i])        # F_ck^i
            if room1 < 0:
                continue
            # Pruning, per row F: a candidate with this j or a later one lasts at least
            # Tf(j) + S_i (Tf grows with j), so a state whose best is at most that bound
            # is final for this v. The states still open are all P (dense) until the
            # first one closes, then the list act[r0 : r0 + nact[F]]; the list is only
            # filtered when the bound reaches the smallest open best (minb).
            for F in range(W):
                s1 = _wait(F - room1, q)
                e = s1 + uf[i]
                eF[F] = e
                zsF[F] = max(F * q, e) if v else 0.0
                dense[F] = True
                nact[F] = W
                mb = np.inf
                for P in range(W):
                    if best[F * (N + 1) + P] < mb:
                        mb = best[F * (N + 1) + P]
                minb[F] = mb
            for j in range(i, L + 1):
                room = 0
                if j > i:
                    room = N - (res + a[j - 1] + a[j] + ofn[j])   # F_none^j
                    if room < 0:
                        break
                p = pid[i, j]
                lo = DLO[p, mfree]
                hi = DHI[p, mfree]          # <= mfree: D <= m in C_A
                tb = (p * (N + 1) + mfree) * (N + 1)         # T[p, mfree, 0] in Tf1
                jc = 4 * j + v
                rmT = RMT[p, mfree]
                # pass 1 over the rows F: the forward run's end Tf, the pruning of states
                # by the bound Tf + S_i, and the sub-chain's row (Delta_F' = F2)
                nlive = 0
                for F in range(W):
                    oF[F] = -1
                    na = nact[F]
                    if na == 0:
                        continue            # every state of the row is final for this v
                    work[t] += 1
                    n_tot = F + vz
                    if j > i:
                        c = n_tot - room
                        s = eF[F]
                        if c > 0:
                            s = max(s, _chunk_end_nb(c, F, zsF[F], q))
                        eF[F] = s + uf[j]
                    Tf = eF[F]
                    thr = (Tf + Ssuf[i]) * _SAFE if prune else -np.inf
                    r0 = F * (N + 1)            # row F in best, bch, act
                    dn = dense[F]
                    if (j - i) % 4 == 3:
                        # best only decreases: minb stays an upper bound of the open
                        # minimum between refreshes (a late refresh only delays a filter)
                        minb[F] = _open_min(best, act, r0, na, dn)
                    if thr >= minb[F]:
                        kk = 0
                        mb = np.inf
                        for ia in range(na):
                            P = ia if dn else act[r0 + ia]
                            if best[r0 + P] > thr:
                                act[r0 + kk] = P
                                kk += 1
                                if best[r0 + P] < mb:
                                    mb = best[r0 + P]
                        nact[F] = kk
                        minb[F] = mb
                        dense[F] = False
                        if kk == 0:
                            continue
                    nlive += 1
                    if hi < lo:
                        continue
                    F2 = 0
                    if n_tot > 0:
                        tend = _chunk_end_nb(n_tot, F, zsF[F], q)
                        F2 = max(0, int(math.ceil((tend - Tf) / q - 1e-9)))
                    if F2 > lim:
                        continue
                    row = off[cA] + F2 * (N - cA + 1)
                    oF[F] = (j + 1) * 2 * S3 + row + vz      # OC[j + 1, 0, row + vz] in OCf
                    # Exact skip bound: both candidates of this j are at least
                    # lb = (Tf + RMO) + RMT (rounding is monotone: fl(fl(Tf + x) + y) grows
                    # with x and y, and OC[.., P2] >= RMO, sp q + Tb >= Tb >= RMT)
                    lbF[F] = (Tf + RMO[j + 1, cA, F2]) + rmT
                if nlive == 0:
                    break                   # every state of every row is final for this v
                if hi < lo:
                    continue
                # pass 2: the candidates of this j
                for F in range(W):
                    o0 = oF[F]
                    if o0 < 0:
                        continue
                    Tf = eF[F]
                    r0 = F * (N + 1)
                    na = nact[F]
                    dn = dense[F]
                    # The lookups below need no bound checks: sp <= P <= hi <= mfree, so
                    # P2 = v z + sp <= v z + N - A - z = N - cA = lim, and v z <= lim.
                    # An infinite T or OC makes tot infinite, which never passes "<".
                    # Flush (idle before the block while its spilled parts are
                    # prefetched, the sub-chain then prefetches Z^i only): the serial
                    # recurrence skips it when sp = 0, where it equals the f = 0
                    # candidate just tried (0 q + Tb = Tb), so it cannot pass "<" either.
                    # A state with best <= lb cannot pass "<" with this j: the range
                    # lo..hi is trimmed to the first and last P with best > lb.
                    l2, h2 = _trim(best, r0, lo, hi, lbF[F])
                    if h2 < l2:
                        continue
                    subfl = OCf[o0]
                    if dn or 2 * na >= W:
                        # closed states are visited too: their candidates cannot pass "<"
                        if fin:
                            _run_dense(best, bch, r0, l2, h2, Tf, Tf1, SPf, tb, OCf, o0, subfl, q, jc, gbuf)
                        else:
                            _run_dense_nf(best, bch, r0, l2, h2, Tf, Tf1, SPf, tb, OCf, o0, jc)
                    else:
                        for ia in range(na):
                            P = act[r0 + ia]
                            if P < l2:
                                continue
                            if P > h2:
                                break
                            _cand(best, bch, r0 + P, Tf, Tf1[tb + P], SPf[tb + P], OCf, o0, subfl, q,
                                  fin, jc)
        for F in range(W):
            k0 = off[A] + F * W
            for P in range(W):
                OC[i, x, k0 + P] = best[F * (N + 1) + P]
                CH[i, x, k0 + P] = bch[F * (N + 1) + P]


def _forward_kernel(L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, pid, T, SP, DLO, DHI, RMT, nth, prune,
                    deadline=None, tick=None):
    """OC[i, x, A, F, P] (B.1, B.2) bottom-up over i = L+1..1 and its choice
    CH = 4 j + 2 f + v (j = 0: F_all^i first; j >= i: F_ck^i F_none^{i+1..j}; f = 1: "flush", the
    level's backward block first waits until all of Delta_B it could not host is prefetched, so that
    the sub-chain prefetches only Z^i); -1 when infeasible.
    States with A + F > N or A + P > N cannot be feasible and are not stored: (A, F, P) is packed
    as ``off[A] + F (N - A + 1) + P`` (about N^3 / 3 entries per level and x).

    Loop order: for one (A, F) and offload decision v, everything about the forward run (its op
    starts, the end ``Tf``, the pending offload ``Delta_F'`` handed to the sub-chain) does not depend
    on P = Delta_B, so it is computed once per (A, F, v, j) and the innermost loop runs over P, reading
    the backward block's row ``C_A(i, j, N - A - z, .)`` only over its finite range (DLO, DHI) and the
    sub-chain's row ``OC(j + 1, 0, A', Delta_F', .)`` contiguously. Per (A, v) the loops are j, then
    F (all rows of one A are kept, flat, per thread), then P: the block row and the sub-chain's rows
    of one j are shared by all F. For each state the candidates are still tried in the serial order
    (v, case 1 with f = 0, 1, then j ascending with f = 0, 1) with the same arithmetic and a strict
    ``<``, so OC and its choices are bit-identical to the state-by-state recurrence; the pruning
    (bound ``Tf + S_i``) and the exact skip test (``lb = (Tf + RMO) + RMT``, module docstring) only
    leave out candidates that cannot pass ``<``. Levels depend on deeper levels only: within (i, x)
    the values of A are split over ``nth`` parallel stripes (every ``nth``-th A, which balances the
    (N - A + 1)^2 states per A).

    ``prune=False`` switches the pruning by ``Tf + S_i`` off (same tables, more work: the tests
    compare both). Returns ``(OC, CH, off, work)``; ``work`` counts the rows (j, Delta_F) of case 2
    that the loops over j visit (a row whose states are all closed is skipped, and the loop over j
    stops when every row is), the work the pruning saves. ``deadline`` (``time.perf_counter()``):
    :class:`~memplan.baselines.remat_rotor.DPStopped` before a level that would start after it.
    ``tick(phase, k, n)``: called after each level (progress)."""
    off = np.zeros(N + 2, dtype=np.int64)      # packed index of (A, F, P), F, P <= N - A
    off[1:] = np.cumsum((N - np.arange(N + 1) + 1) ** 2)
    OC, CH = _forward_tables(L, off[N + 1])
    OCf = OC.reshape(-1)                       # flat views: no array view is made in the loops
    Tf1 = T.reshape(-1)
    SPf = SP.reshape(-1)
    # S_i = sum_{k >= i} (uf^k + ub^k): OC(i, ...) >= S_i (summed from the end, as a loop would)
    Ssuf = np.zeros(L + 3)
    for k in range(L + 1, -1, -1):
        Ssuf[k] = Ssuf[k + 1] + (uf[k] + ub[k])
    # Lower bounds of the two parts of a case-2 candidate, for the exact skip test below:
    # RMT[p, m] = min_D T[p, m, D] (a block's shortest time, the backward kernel's RMB) and
    # RMO[i, A, F] = min_P OC[i, 0, A, F, P] (a sub-chain's best value whatever its Delta_B), filled
    # once level i is done.
    RMO = np.full((L + 2, N + 1, N + 1), np.inf)
    work = np.zeros(nth, dtype=np.int64)       # per stripe: rows (j, Delta_F) visited by case 2
    for x in range(2):
        _stripes(_loss_stripe, nth, x, L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, off, OC, CH)
    _row_min(OC, off, N, L + 1, RMO)
    for i in range(L, 0, -1):
        for x in range(2):
            if i == 1 and x == 1:
                continue
            check_deadline(deadline, L - i + 1, L)
            _stripes(_forward_stripe, nth, i, x, L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, pid, DLO, DHI, RMT,
                     prune, off, OC, CH, OCf, Tf1, SPf, Ssuf, RMO, work)
            if x == 0:
                _row_min(OC, off, N, i, RMO)
        if tick is not None:
            tick("forward", L - i + 1, L)
    return OC, CH, off, work.sum()


def _region_idle(i, ip, j, m, s2, uf, a, d, ofn, q):
    """(Tf, eps, op ends) of the forward run F_ck^i F_none^{i+1..i'} in a block, computed with the same
    operations, in the same order, as the kernel (no-grad forwards: their own overhead ``ofn``)."""
    Tf = 0.0
    G = -INF
    ends = []
    for k in range(i, ip + 1):
        mem = d[j] + a[i] + ofn[i] if k == i else d[j] + a[k - 1] + a[k] + ofn[k]
        Tf = Tf + uf[k]
        ends.append(Tf)
        room = m - mem
        if math.isfinite(q):
            g = Tf - room * q
            if g > G:
                G = g
    if s2 == 0:
        eps = 0.0
    else:
        eps = s2 * q + G - Tf
        if eps < 0.0:
            eps = 0.0
    return Tf, eps, ends


def _chunk_end(c, F, zs, q):
    """End time (model) of the c-th pending offload part: the first F end at q, 2q, ..; Z's after zs."""
    if c <= F:
        return c * q
    return zs + (c - F) * q


# ----------------------------------------------------------------------------- the DP
class RematOffloadDP:
    """Tables and the forward recursion for one chain, memory, bandwidth and slot count."""

    def __init__(self, chain: Chain, memory: float, bandwidth: float | None, *, slots: int = 50,
                 exact: bool = False):
        self.chain = chain
        self.disc = Discretization(chain, memory, slots, exact)
        self.N = int(self.disc.budget)
        self.S = float(self.disc.q)
        self.beta = float(bandwidth or 0.0)
        self.q = self.S / self.beta if self.beta > 0 else INF
        d = self.disc
        # each forward's own overhead in slots: F_all's (ofa), the no-grad forwards' F_ck / F_none (ofn)
        self.a, self.ab, self.d, self.ofa, self.ofn, self.ob = (np.asarray(x, dtype=np.int64) for x in
                                                                (d.wa, d.wab, d.wd, d.ofa, d.ofn, d.ob))
        self.uf = chain.uf.astype(np.float64)
        self.ub = chain.ub.astype(np.float64)
        L = chain.L
        self.pid = np.zeros((L + 2, L + 2), dtype=np.int64)
        n = 0
        for i in range(1, L + 1):
            for j in range(i, L + 1):
                self.pid[i, j] = n
                n += 1
        self.T = self.SP = self.CH = None
        self.threads = 1
        self.work = 0          # rows (j, Delta_F) the forward kernel's case 2 visited

    def tables(self, deadline: float | None = None, tick=None):
        """Fills the tables; ``deadline`` (``time.perf_counter()``): ``DPStopped`` between two rounds of
        the kernels once it has passed; ``tick(phase, k, n)`` after each round."""
        L = self.chain.L
        need = table_bytes(L, self.N)
        if need > MAX_TABLE_BYTES:
            raise ValueError(f"the DP's tables for L={L} and {self.N} slots would need {need / 1e9:.1f} GB "
                             f"(at most {MAX_TABLE_BYTES / 1e9:.0f} GB); use fewer slots")
        args = (L, self.N, self.uf, self.ub, self.a, self.ab, self.d, self.ofa, self.ofn, self.ob, self.q)
        # parallel stripes (:func:`_stripes`) for large tables, as many as numba's thread count
        # (NUMBA_NUM_THREADS, default: the cores); small ones run on the calling thread, where starting
        # the ~3 L parallel rounds would cost more than they save (much more on a busy machine)
        nth = max(1, int(numba_config.NUMBA_NUM_THREADS))
        if L * L * (self.N + 1) ** 3 < PARALLEL_WORK:
            nth = 1
        if L >= 1:
            self.T, self.SP, self.CH, dlo, dhi, rmt = _backward_kernel(*args, self.pid, nth, deadline, tick)
        else:
            self.T, self.SP, self.CH, dlo, dhi, rmt = _backward_tables(1, self.N)
        self.OC, self.FCH, self.off, self.work = _forward_kernel(*args, self.pid, self.T, self.SP, dlo, dhi,
                                                                 rmt, nth, True, deadline, tick)
        self.threads = nth

    # --- backward block lookup: (duration, spill) for C(i, j, m, D)
    def block(self, i, j, m, D):
        if m < 0 or D > m or m > self.N:
            return INF, 0
        p = self.pid[i, j]
        t = float(self.T[p, m, D])
        return t, int(self.SP[p, m, D])

    # --- one forward level: every quantity the value and the rebuild need
    def level(self, i, x, A, F, P, v, j, fl=0):
        """Evaluate level ``i`` (state x, A, F, P) with offload decision ``v`` and, for case 2, last
        forward stage ``j`` (``j = 0`` means case 1, F_all^i). Returns None if infeasible, else a dict."""
        a, ab, d, ofa, ofn, ob = self.a, self.ab, self.d, self.ofa, self.ofn, self.ob
        uf, ub, q, N = self.uf, self.ub, self.q, self.N
        L = self.chain.L
        z = int(ab[i - 1] if x else a[i - 1])
        base = A + int(d[L + 1])
        n_tot = F + v * z
        # first op reads Z^i: Z counts in full during it
        out1 = ab[i] + ofa[i] if j == 0 else a[i] + ofn[i]     # F_all^i or F_ck^i, own overhead
        room1 = N - (base + z + out1)
        if room1 < 0:
            return None
        s1 = _wait(F - room1, q)
        e = s1 + uf[i]
        starts = [s1]
        zs = max(F * q, e) if v else 0.0
        res = base + (1 - v) * z
        if j:
            for k in range(i + 1, j + 1):
                room = N - (res + a[k - 1] + a[k] + ofn[k])       # F_none^k
                if room < 0:
                    return None
                c = n_tot - room
                s = e
                if c > 0:
                    s = max(s, _chunk_end(c, F, zs, q))
                starts.append(s)
                e = s + uf[k]
        Tf = e
        if n_tot > 0:
            tend = _chunk_end(n_tot, F, zs, q)
            F2 = max(0, int(math.ceil((tend - Tf) / q - _TOL)))
        else:
            F2 = 0
        mb_free = N - A - z
        if j == 0:
            mb = ab[i] + d[i] + d[i - 1] + ob[i]
            if mb_free < mb:
                return None
            e3 = _wait(P - (mb_free - mb), q)
            if not math.isfinite(e3):
                return None
            k = min(P, _nch(ub[i] + e3, q))
            if fl:
                e3 = max(e3, P * q - ub[i])
                k = min(P, _nch(ub[i] + e3, q))
            Tb, spill = ub[i] + e3, P - k
            child = (i + 1, 1)
            pre, cspill = 0.0, spill
        else:
            Tb, spill = self.block(i, j, mb_free, P)
            if not Tb < INF:
                return None
            child = (j + 1, 0)
            pre, cspill = (spill * q, 0) if fl else (0.0, spill)
        return dict(z=z, starts=starts, Tf=Tf, zs=zs, F2=F2, Tb=Tb, spill=spill, pre=pre,
                    child=(child[0], child[1], A + (1 - v) * z, F2, v * z + cspill))

    def loss(self, x, A, F, P):
        """The loss junction (B.2) for the rebuild: the kernel's own arithmetic (``_loss_eval``)."""
        s1, s2, E = _loss_eval(self.chain.L, self.N, self.uf, self.ub, self.a, self.ab, self.d, self.ofa,
                               self.ofn, self.ob, self.q, x, A, F, P)
        if not E < INF:
            return None
        return dict(s1=float(s1), s2=float(s2), E=float(E))

    def value(self, i, x, A, F, P):
        """OC_x(i, A, Delta_F, Delta_B) from the forward table: (best time, choice (v, j))."""
        N = self.N
        if not (0 <= A <= N and 0 <= F <= N - A and 0 <= P <= N - A):
            return INF, None
        k = int(self.off[A]) + F * (N - A + 1) + P
        t = float(self.OC[i, x, k])
        c = int(self.FCH[i, x, k])
        if c < 0:
            return INF, None
        return t, (c % 2, c // 4, (c // 2) % 2)

    # ------------------------------------------------------------------------- rebuild
    def rebuild(self):
        """The joint schedule of the optimal value: ops with release times, offload and prefetch parts."""
        self.ops: list = []
        self.rel: list = []
        self.trans: list = []
        self.offloaded: list = []
        self._level(1, 0, 0, 0, 0, [], 0.0)
        order = sorted(range(len(self.trans)), key=lambda k: (self.trans[k].release, k))
        return RematOffloadSchedule(ops=self.ops, release=self.rel, transfers=[self.trans[k] for k in order])

    def _parts(self, idx, x):
        """The parts (index, part, bytes) of value idx (abar if x else a), at most one slot each."""
        ch = self.chain
        w = float(ch.wabar[idx] if x else ch.wa[idx])
        n = int(self.ab[idx] if x else self.a[idx])
        out = []
        left = w
        for p in range(n):
            b = min(self.S, left) if p < n - 1 else left
            if b > 0:
                out.append((idx, p, b))
            left -= b
        return out

    def _place(self, parts, end):
        """Prefetch ``parts`` (in time order) as late as possible, the c-th from the end at end - c q."""
        n = len(parts)
        for c in range(1, n + 1):
            idx, p, b = parts[n - c]
            self.trans.append(Transfer("prefetch", idx, b, end - c * self.q, p))

    def _emit(self, op, l, t):
        self.ops.append((op, l))
        self.rel.append(t)

    def _level(self, i, x, A, F, P, demand, t0):
        L = self.chain.L
        assert len(demand) == P
        if i == L + 1:
            r = self.loss(x, A, F, P)
            self._emit("F_all", L + 1, t0 + r["s1"])
            self._emit("B", L + 1, t0 + r["s2"])
            self._place(demand, t0 + r["E"])
            return t0 + r["E"]
        _, (v, j, fl) = self.value(i, x, A, F, P)
        r = self.level(i, x, A, F, P, v, j, fl)
        if j == 0:
            self._emit("F_all", i, t0 + r["starts"][0])
        else:
            self._emit("F_ck", i, t0 + r["starts"][0])
            for k, s in zip(range(i + 1, j + 1), r["starts"][1:]):
                self._emit("F_none", k, t0 + s)
        zparts = []
        if v:
            zparts = self._parts(i - 1, x)
            self.offloaded.append((i - 1, x))
            for c, (idx, p, b) in enumerate(zparts):
                self.trans.append(Transfer("offload", idx, b, t0 + r["zs"] + c * self.q, p))
        spill = r["spill"]
        ci, cx, cA, cF, cP = r["child"]
        if j == 0 or not fl:
            child_demand = demand[:spill] + zparts
        else:
            child_demand = zparts
        t1 = self._level(ci, cx, cA, cF, cP, child_demand, t0 + r["Tf"])
        if j == 0:
            self._emit("B", i, t1)
            self._place(demand[spill:], t1 + r["Tb"])
            return t1 + r["Tb"]
        if fl:      # wait while the parts the block spills are prefetched
            self._place(demand[:spill], t1 + r["pre"])
            t1 = t1 + r["pre"]
        mfree = self.N - A - r["z"]
        return self._block(i, j, mfree, demand, t1)

    def _block(self, i, j, m, demand, t0):
        """Rebuild C(i, j, m, D) starting at t0; ``demand`` lists the D parts; returns the end time."""
        a, ab, d, ofa, ofn, ob = self.a, self.ab, self.d, self.ofa, self.ofn, self.ob
        uf, ub, q = self.uf, self.ub, self.q
        D = len(demand)
        p = self.pid[i, j]
        ch = int(self.CH[p, m, D])
        Ttot = float(self.T[p, m, D])
        spill = int(self.SP[p, m, D])
        if ch == -2 or ch == -1:
            mb = ab[i] + d[i] + d[i - 1] + ob[i]
            e3 = _wait(D - (m - mb), q)
            k3 = min(D, _nch(ub[i] + e3, q))
            rest = demand[:D - k3]
            self._emit("F_all", i, t0)
            if ch == -2:
                mf = d[i] + ab[i] + ofa[i]
                R = len(rest)
                e1 = _wait(R - (m - mf), q)
                t1 = t0 + uf[i] + e1
                self._place(rest[spill:], t1)
            else:
                m2 = m - ab[i]
                T2, s2 = self.block(i + 1, j, m2, len(rest))
                mf = d[j] + ab[i] + ofa[i]
                e1 = _wait(s2 - (m - mf), q)
                tsub = t0 + uf[i] + e1
                self._place(rest[spill:s2], tsub)
                t1 = self._block(i + 1, j, m2, rest, tsub)
            self._emit("B", i, t1)
            self._place(demand[D - k3:], t1 + ub[i] + e3)
            return t1 + ub[i] + e3
        ip = ch
        T1, s1 = self.block(i, ip, m, D)
        m2 = m - a[ip]
        T2, s2 = self.block(ip + 1, j, m2, s1)
        Tf, eps, ends = _region_idle(i, ip, j, m, s2, uf, a, d, ofn, q)
        self._emit("F_ck", i, t0)
        for k, e in zip(range(i + 1, ip + 1), ends[:-1]):
            self._emit("F_none", k, t0 + e)
        treg = t0 + Tf + eps
        self._place(demand[spill:s2], treg)
        t2 = self._block(ip + 1, j, m2, demand[:s1], treg)
        return self._block(i, ip, m, demand, t2)


#: seconds between two progress lines of :func:`solve_remat_offload_dp`
PROGRESS_EVERY = 5.0


def _ticker(progress, t0: float):
    """A ``tick(phase, k, n)`` for the kernels that passes a line to ``progress`` at most every
    :data:`PROGRESS_EVERY` seconds."""
    last = [time.perf_counter()]

    def tick(phase: str, k: int, n: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= PROGRESS_EVERY:
            last[0] = now
            progress(f"tables: {phase} round {k}/{n} after {now - t0:.1f}s")
    return tick


def solve_remat_offload_dp(chain: Chain, memory: float, bandwidth: float | None, *, slots: int = 50,
                           exact: bool = False, time_limit: float | None = None,
                           progress=None) -> Solution:
    """Best re-materialization + offloading schedule of the joint DP of paper 000 (appendix B).

    See the module docstring for the model. The schedule is replayed by
    :func:`memplan.models.remat_offload.simulate_remat_offload`; ``objective`` and ``peak_memory`` are
    the replayed values, ``predicted`` the DP's own (they are equal).

    Parameters
    ----------
    chain : Chain
    memory : float
        Memory limit in bytes.
    bandwidth : float or None
        Link bandwidth in bytes/s; 0 or None: no offloading, and the DP is then paper 004's
        persistent DP (:func:`memplan.baselines.remat_rotor.persistent`) with the same slots.
    slots : int
        The number N of memory slots (50 in the paper); ignored with ``exact``.
    exact : bool
        One slot per byte (integer sizes and an integer memory limit only).
    time_limit : float or None
        Seconds for the tables: the kernels stop between two of their rounds (a diagonal of the
        backward table, a level of the forward table: a fraction of a second at N = 100 on
        ResNet-101) once it has passed, and the call returns NO_SOLUTION with
        ``details["stopped"] = True``. None: no limit.
    progress : callable, optional
        Called with a line (``"tables: forward round 30/73 after 12.4s"``) at most every
        :data:`PROGRESS_EVERY` seconds while the tables are filled: a long run shows where it is.

    Returns
    -------
    Solution
        Status OPTIMAL without a link in exact mode (optimal among persistent sequences), else FEASIBLE
        (best within the DP's model and its rounding), INFEASIBLE below the least memory of the problem
        (:mod:`memplan.baselines.remat_offload_min_memory`, ``details["min_memory"]``), NO_SOLUTION
        when the DP's model has no schedule although one fits.

    Raises
    ------
    ValueError
        ``exact`` with float sizes or a float limit; tables above :data:`MAX_TABLE_BYTES`.

    Examples
    --------
    >>> from memplan.models.chain import random_chain
    >>> c = random_chain(4, seed=1)          # re-materialization alone needs 46 B
    >>> sol = solve_remat_offload_dp(c, 50, 2.0, exact=True)
    >>> sol.objective, solve_remat_offload_dp(c, 50, 0.0, exact=True).objective   # with and without the link
    (64.0, 76.0)
    >>> [(o["value"], o["index"]) for o in sol.details["offloaded"]]
    [('a', 0)]
    >>> solve_remat_offload_dp(c, 45, 2.0, exact=True).objective        # below the re-materialization minimum
    65.0
    """
    t0 = time.perf_counter()
    times: dict[str, float] = {}
    dp = RematOffloadDP(chain, memory, bandwidth, slots=slots, exact=exact)
    try:
        dp.tables(None if time_limit is None else t0 + max(0.0, float(time_limit)),
                  None if progress is None else _ticker(progress, t0))
    except DPStopped:
        times["tables"] = times["total"] = time.perf_counter() - t0
        return Solution(problem="remat-offload", method="dp", status=Status.NO_SOLUTION, memory_limit=memory,
                        message=f"the joint DP's tables ({dp.disc.describe()}) were not finished within "
                                f"time_limit={float(time_limit):g} s (stopped after {times['total']:.3g} s)",
                        times=times, details={"stopped": True, "slots": dp.N, "threads": dp.threads})
    times["tables"] = time.perf_counter() - t0
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20 * chain.L + 1000))
    try:
        best, _ = dp.value(1, 0, 0, 0, 0)
        details = {"discretization": dp.disc.describe(), "slot_bytes": dp.S, "slots": dp.N,
                   "part_time": dp.q, "bandwidth": dp.beta, "feasible_states": int(np.isfinite(dp.OC).sum()),
                   "threads": dp.threads}
        if not best < INF:
            mm = ro_min_memory(chain, dp.beta if math.isfinite(dp.q) else None)
            need = mm.value
            times["total"] = time.perf_counter() - t0
            proven = memory < mm.lower * (1 - 1e-12)
            if proven:
                msg = (f"no schedule fits in {fmt_bytes(memory)} B: the minimum is {fmt_bytes(need)} B"
                       + ("" if mm.exact else f" (none fits below {fmt_bytes(mm.lower)} B)"))
            else:
                msg = (f"the joint DP finds no schedule within {fmt_bytes(memory)} B ({dp.disc.describe()}), although "
                       f"one fits from {fmt_bytes(need)} B: its model (persistent sequences, top-level inputs offloaded, "
                       "sizes rounded up) is too narrow here; try more slots or more memory")
            return Solution(problem="remat-offload", method="dp",
                            status=Status.INFEASIBLE if proven else Status.NO_SOLUTION, memory_limit=memory,
                            message=msg, times=times, details={**details, "min_memory": need if proven or mm.exact
                                                               else mm.lower})
        sched = dp.rebuild()
    finally:
        sys.setrecursionlimit(old)
    times["rebuild"] = time.perf_counter() - t0 - times["tables"]
    rep = simulate_remat_offload(chain, sched, dp.beta, memory)
    times["total"] = time.perf_counter() - t0
    details.update(recompute_time=rep.recompute_time, idle_time=rep.idle_time, idle_data=rep.idle_data,
                   offloaded=[{"index": l, "value": "abar" if x else "a",
                               "bytes": float(chain.wabar[l] if x else chain.wa[l])} for l, x in dp.offloaded],
                   offloaded_bytes=rep.offloaded_bytes, transfer_time=rep.transfer_time)
    # without a link and in exact mode this is paper 004's persistent DP, proven optimal in its class;
    # with slots the rounding may hide better sequences, and with a link the model is a restriction
    status = Status.OPTIMAL if (not math.isfinite(dp.q) and exact) else Status.FEASIBLE
    within = ("memory-persistent sequences (paper 004, Theorem 4.8)" if not math.isfinite(dp.q) else
              "the joint DP's model (persistent sequences, top-level inputs offloaded, transfers in slot "
              "parts)")
    return Solution(problem="remat-offload", method="dp", status=status, objective=rep.makespan,
                    peak_memory=rep.peak_memory, schedule=sched, memory_limit=memory, predicted=float(best),
                    message=f"best within {within}; {dp.disc.describe()}", times=times, details=details)


def solve_whole_transfers(chain: Chain, memory: float, bandwidth: float, *, slots: int = 50,
                          tries: int = 3) -> tuple[RematOffloadSchedule | None, str]:
    """The joint DP's schedule with each value's parts merged into one whole transfer
    (:func:`memplan.models.remat_offload.coalesce_parts`, then
    :func:`~memplan.models.remat_offload.whole_values`: a fraction of a value rounded up to the value,
    a value moved in separate runs moved once: what an executor that moves whole values runs) whose
    replay fits ``memory``: merged, a schedule can peak above the limit the DP kept (a whole
    offload frees at its end, a whole prefetch reserves at its start), so the DP is asked again below
    by the overshoot, ``tries`` times at most. Returns (the schedule, "") or (None, why)."""
    from memplan.models.remat_offload import coalesce_parts, whole_values

    target, peak = float(memory), None
    for _ in range(tries):
        sol = solve_remat_offload_dp(chain, target, bandwidth, slots=slots)
        if sol.schedule is None:
            return None, f"the joint DP has no schedule at {fmt_bytes(target)} B ({sol.message})"
        try:
            sched = whole_values(coalesce_parts(sol.schedule, chain), chain, bandwidth)
            peak = simulate_remat_offload(chain, sched, bandwidth).peak_memory
        except ValueError as e:
            return None, f"merged into whole transfers it does not replay ({str(e).splitlines()[0][:160]})"
        if peak <= memory:
            return sched, ""
        target -= peak - memory
    return None, f"merged into whole transfers no schedule fitted {fmt_bytes(memory)} B (the last peaked at {fmt_bytes(peak)} B)"
