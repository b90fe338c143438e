"""A lower bound on the re-materialization optimum at (almost) exact memory: the floating DP of paper
004 (Theorem 4.7) on step functions instead of slot tables.

Why. The floating DP (:func:`memplan.baselines.remat_rotor.floating`) is optimal among *all* valid
sequences (paper 004, Lemma 4.4), and run with sizes rounded **down** to slots of ``q`` bytes it is a
relaxation, so its value is a lower bound (``remat_rotor``'s module docstring). But its tables hold
``S + 1`` entries per cell for ~L^3/6 cells: at L = 73 a bound within 0.1% needs S of 3,000-20,000
slots (each item rounded down loses up to ``q``, and a tight limit stores tens of items), which is
tens of GB and 10-60 minutes. Yet a row ``C(s, t, l, .)`` is a non-increasing step function of the
memory ``m`` with few steps: the persistent DP's rows on the H200 ResNet-101 at 16,000 slots have 81
distinct values on average (221 at most), DenseNet-121's 163 (513). This module stores each row as
its steps only, so the memory axis can be as fine as one byte.

What it computes. :func:`floating_bound` runs the recurrences of ``remat_rotor._floating_kernel``
(the docstring of :mod:`memplan.baselines.remat_rotor` gives the reading of Theorem 4.7 and the
added case -2) on step functions ``f(m) = v_k`` for ``x_k <= m < x_{k+1}`` (``inf`` below ``x_0``),
thresholds ascending, values strictly descending, ``m`` at most the budget. Every operation of the
dense kernel maps onto one of three exact operations on step functions:

- a shift with a constant added and a lower cut (``u + C(s', t', l, m - w)`` for ``m >= need``: the
  G table, ``C_all``, the floating move): :func:`_sf_shift`;
- the sum of two rows read at the same shifted memory (``u + G(r, t', l, m2) + C(r, t, t'-1, m2)``,
  Eq. 3-4): :func:`_sf_sum`;
- the pointwise minimum over the cases: :func:`_sf_min`.

Each is evaluated at every threshold of its operands, where the functions change, and with the same
floating-point additions in the same order as the dense kernel, so on the same integer sizes the
step function equals the dense row entry by entry (``tests/test_remat_milp_bound.py`` checks it).
Corollary 4.5's pruning is applied (``prune=True`` of the dense kernel).

Memory unit and validity (the proof of the bound).

1. *Integer sizes and limit*: one unit per byte, no rounding: the DP is the floating DP of the chain
   as given, whose value is the optimum over all valid sequences (Theorem 4.7 with Lemma 4.4, both
   paper 004; checked against the exhaustive search of :mod:`memplan.baselines.remat_exhaustive`).
   *Limit:* Lemma 4.4 moves recomputations to the next phase, which can raise the memory when the
   gradient sizes differ from the activation sizes; ``benchmarks/counterexample_floating_dp_deltas.py``
   is a 6-stage chain with ``wd != wa`` where the DP gives 106 and the optimum (without ``up``) is
   102, and ``benchmarks/results/remat_bound_bruteforce.txt`` counts such cases. On chains with
   ``wd == wa`` no brute-force check has found one; the bound rests on that, and therefore runs on
   a chain with ``wd == wa``: both lowered to ``min(wa^l, wd^l)`` (:func:`equal_gradient_sizes`;
   lowering a size is a relaxation, as in rule 3). On the counterexample the bound is then 75 <= 102.
2. *Other sizes*: units of ``q = M / 2^32`` bytes, every size ``x`` mapped to
   ``floor(x / q * (1 - 1e-12))`` (at most ``x / q`` despite the rounding of the division) and the
   budget to ``2^32``. An operation whose real memory ``sum x_i <= M`` has mapped memory
   ``sum floor(.) <= sum x_i / q <= 2^32``: every sequence valid for the real sizes is valid for the
   mapped ones with the same makespan, so the mapped instance's optimum is at most the real one.
   (Sizes above the budget are clipped at budget + 1: they fit neither way.)

3. *The operation ``up``* (``F_all^l`` over a stored plain ``a^l``, which the simulator and the
   exhaustive search accept but Table 1 and the DP do not have). :mod:`memplan.formulations.remat_milp`
   ("Dominance") proves that it cannot help at a stage ``l`` with ``wabar^l >= wa^l`` and
   ``o_f^l <= wd^{l-1} + o_b^l``; on the real chains one to twelve stages miss the second condition
   (ResNet's stage 5, GPT-2's attention blocks). The bound therefore runs on the *relaxed chain*
   (:func:`relaxed_chain`): ``wa^l`` lowered to ``min(wa^l, wabar^l)`` and ``o_f^l`` to
   ``min(o_f^l, max(A^l, N^l))`` with ``A^l = wd^{l-1} + o_b^l`` and
   ``N^l = wabar^{l+1} + wd^{l+1} + o_b^{l+1}``, at those stages only. Lowering a size never makes an
   operation use more memory, so every valid sequence of the chain stays valid with the same makespan
   (relaxed optimum <= real optimum). In the relaxed chain every ``up`` can be rewritten away without
   changing the makespan or exceeding the limit (below), so some optimal sequence has no ``up`` and
   the floating DP reaches it. Without this step the DP would bound only the sequences without ``up``.

   *Rewriting an ``up`` at stage j* (in the relaxed chain; repeated, one ``up`` at a time: a stage
   has at most one, since after it abar^j stays until B^j, the only operation that frees it). Let
   ``tau`` be the ``up``, in phase ``t``.

   - ``t = j``: B^{j+1} freed every earlier plain a^j, so the a^j it upgrades was computed in phase
     j by some F_ck^j / F_none^j ``pi``; drop ``pi`` and run the ``up`` as an ordinary F_all^j
     (index j is then empty): one F^j less, and between ``pi`` and ``tau`` only operations at stages
     above j can read a^j, which in phase j produce nothing that B^j..B^1 use (remat_milp's
     docstring removes them in the same way).
   - ``t > j``, *first rewriting* (when ``o_f^j <= A^j``): remat_milp's "Dominance": drop the
     ``up``, keep the plain a^j until B^{j+1} (which takes it as its input and frees it), run F_all^j
     right before B^j. Its memory is ``S0 + o_f^j`` with ``S0`` what the original stores before
     B^j, at most the original B^j's ``S0 + wd^{j-1} + o_b^j``.
   - ``t > j``, *second rewriting* (when ``o_f^j <= N^j``): drop the ``up``, keep the plain a^j
     until B^{j+1}, run F_all^j as the **first** operation of phase j, right after B^{j+1}. Valid:
     its input a^{j-1} (or abar^{j-1}) is stored, because the ``up`` needed it and nothing frees it
     before B^j (a plain a^{j-1} is freed only by F_none^j, which needs index j empty, and by B^j;
     abar^{j-1} only by B^{j-1}); index j is empty (B^{j+1} freed the plain a^j). From there on
     phase j is the original one, with abar^j stored as in the original: same memory. Between
     ``tau`` and B^{j+1} index j holds wa^j instead of wabar^j (no more memory, as ``wa^j <= wabar^j``
     in the relaxed chain), B^{j+1} included. The new F_all^j: with ``S_B`` what the original stores
     before B^{j+1} (abar^{j+1}, delta^{j+1} and abar^j included), B^{j+1} frees abar^{j+1} and
     delta^{j+1} and adds delta^j, so F_all^j needs
     ``S_B - wabar^{j+1} - wd^{j+1} + wd^j + o_f^j`` (index j: abar^j in the original, now its
     output), at most the original B^{j+1}'s ``S_B + wd^j + o_b^{j+1}`` when ``o_f^j <= N^j``.

   Every ``o_f^j`` above is F_all's own overhead (:attr:`Chain.of_all`): the ``up`` and the F_all^j
   that replaces it are both F_all, and the dropped ``pi`` only lowers memory, so the no-grad forwards'
   overhead (:attr:`Chain.of_ng`) is not lowered. Both keep the makespan (one F^j dropped, one added)
   and need ``wa^j <= wabar^j``; with ``o_f^j``
   lowered to ``min(o_f^j, max(A^j, N^j))`` one of the two applies at every stage. On the H200
   ResNet-50 (b32) at 10% of the range (998 MiB) the first alone needs ``o_f^5`` lowered from 196 MiB
   to 98 MiB, and the bound was 0.52% below the optimum; ``N^5`` is only 2 KiB below ``o_f^5``, and the
   bound meets the persistent DP's schedule (``benchmarks/results/README.md``).

In every case the DP's value is at most the optimum of paper 004's model at limit ``M``: a lower
bound, which :mod:`memplan.remat` uses to prove the persistent DP's or the MILP's schedule
optimal. No schedule is rebuilt here (the tables hold no choices).

Time. The dense kernel's five nested loops remain (O(L^5) pairs of rows), each pair now costing
the rows' step counts instead of S; a pair whose best possible value ``u + min G + min C`` cannot
lower the row where the pair becomes finite is skipped (the row is non-increasing). The stages
``l = 1..L+1`` run one numba call each, so the Python caller can stop at its deadline between them
(:func:`floating_bound` returns None then).
"""
from __future__ import annotations

import math
import os
import time

import numpy as np
from numba import njit

from memplan.baselines.remat_min_memory import forward_sums
from memplan.baselines.remat_rotor import _floating_cells, _floating_index
from memplan.models.chain import Chain

__all__ = ["floating_bound", "floating_plan", "relaxed_chain", "bound_of_sizes", "BoundResult", "fine_units"]

#: memory units of the fine discretization of chains with non-integer sizes (the budget)
FINE_UNITS = 2 ** 32
_BIG = np.int64(2 ** 62)


class BoundResult:
    """``value`` (seconds, None when stopped at the deadline or nothing fits), ``exact`` (one unit per
    byte: the value is the optimum itself), ``units`` (the budget in units), ``steps`` (mean steps per
    row), ``seconds``, ``complete`` (False when stopped at the deadline)."""

    def __init__(self, value, exact, units, steps, seconds, complete, note=None):
        self.value, self.exact, self.units, self.steps = value, exact, units, steps
        self.seconds, self.complete = seconds, complete
        self.note = note      # why the run was not started (None when it ran)
        self.ops = None      # the plan's operations, when asked for (``plan=True``)
        self.relaxed = False  # the bound ran on relaxed_chain (rule 3), which differs from the chain

    def describe(self) -> str:
        if self.exact:
            return "floating DP on step functions, one unit per byte (exact sizes)"
        u = int(self.units)
        units = f"2^{u.bit_length() - 1}" if u > 1024 and u & (u - 1) == 0 else f"{u}"
        return f"floating DP on step functions, {units} units (sizes rounded down)"


def equal_gradient_sizes(chain: Chain) -> Chain:
    """The chain with ``wa^l`` and ``wd^l`` both lowered to ``min(wa^l, wd^l)`` at every index (rule
    1's limit: the floating DP is exact, as far as known, where ``wd == wa``). Lowering a size never
    makes an operation use more memory: every sequence valid for the chain is valid for this one with
    the same makespan. The same chain object when ``wd == wa`` already."""
    import dataclasses

    size = np.minimum(chain.wa, chain.wd)
    if np.array_equal(size, chain.wa) and np.array_equal(size, chain.wd):
        return chain
    return dataclasses.replace(chain, wa=size, wd=size.copy(), name=chain.name + " (relaxed: wd = wa)")


def relaxed_chain(chain: Chain) -> Chain:
    """The chain with ``wa^l = min(wa^l, wabar^l)`` and F_all's own overhead
    ``o_f_all^l = min(o_f_all^l, max(wd^{l-1} + o_b^l, wabar^{l+1} + wd^{l+1} + o_b^{l+1}))`` for l = 1..L
    (rule 3 of the module docstring: in it no ``up`` is needed): the same chain object when nothing
    changes. Where ``wa^l`` is lowered, ``wd^l`` is too when it was equal (a chain of
    :func:`equal_gradient_sizes` keeps ``wd == wa``)."""
    import dataclasses

    L = chain.L
    wa = chain.wa.copy()
    wd = chain.wd.copy()
    ofa = chain.of_all.copy()          # the up is an F_all, and so is what replaces it: F_all's own o_f
    for j in range(1, L + 1):
        low = min(wa[j], chain.wabar[j])
        if wd[j] == wa[j]:
            wd[j] = low
        wa[j] = low
    for j in range(1, L + 1):
        before_backward = wd[j - 1] + chain.ob[j]
        after_next_backward = chain.wabar[j + 1] + wd[j + 1] + chain.ob[j + 1]
        ofa[j] = min(ofa[j], max(before_backward, after_next_backward))
    if np.array_equal(wa, chain.wa) and np.array_equal(wd, chain.wd) and np.array_equal(ofa, chain.of_all):
        return chain
    return dataclasses.replace(chain, wa=wa, wd=wd, of_all=ofa, name=chain.name + " (relaxed: up dominated)")


def fine_units(chain: Chain, memory: float, units: int | None = None, mode: str = "down"):
    """``(wa, wab, wd, ofa, ofn, ob, budget, exact)``: the sizes (``ofa``, ``ofn``: F_all's and the
    no-grad forwards' own overheads, :attr:`Chain.of_all`, :attr:`Chain.of_ng`) in the units of rule 1
    or 2 of the module docstring (``units`` forces rule 2 with that budget, e.g. to compare with the dense DP).
    ``mode="up"`` rounds rule 2's sizes **up** instead (``ceil(x / q * (1 + 1e-12))``, at least
    ``x / q``): every plan of that instance fits the real limit (the plans of :func:`floating_plan`)."""
    arrays = (chain.wa, chain.wabar, chain.wd, chain.of_all, chain.of_ng, chain.ob)
    if units is None and chain.is_integer and float(memory) >= 0:
        budget = int(math.floor(float(memory)))
        cap = budget + 1
        conv = [np.minimum(np.asarray(a, dtype=float), cap).astype(np.int64) for a in arrays]
        return (*conv, budget, True)
    budget = int(FINE_UNITS if units is None else units)
    scale = budget / float(memory)
    cap = float(budget + 1)
    if mode == "up":
        conv = [np.ceil(np.minimum(np.asarray(a, dtype=float) * scale * (1 + 1e-12), cap)).astype(np.int64)
                for a in arrays]
    else:
        conv = [np.floor(np.minimum(np.asarray(a, dtype=float) * scale, cap) * (1 - 1e-12)).clip(min=0)
                .astype(np.int64) for a in arrays]
    return (*conv, budget, False)


# ----------------------------------------------------------------------------- step functions
@njit(cache=True, inline="always")
def _sf_at(X, o, n, m):
    """Index (0..n-1) of the step of ``X[o:o+n]`` that covers ``m``, -1 below the first threshold."""
    if n == 0 or m < X[o]:
        return -1
    a, b = 0, n - 1
    while a < b:
        h = (a + b + 1) >> 1
        if X[o + h] <= m:
            a = h
        else:
            b = h - 1
    return a


@njit(cache=True)
def _sf_shift(X, V, o, n, shift, a1, a2, need, cap, OX, OV):
    """``(a1 + f(m - shift)) + a2`` for ``need <= m <= cap`` (f = the steps X, V[o:o+n]) into OX, OV;
    returns the number of steps."""
    k = 0
    i = 0
    while i < n and X[o + i] + shift <= need:
        i += 1
    if i > 0 and need <= cap:
        OX[0] = need
        OV[0] = (a1 + V[o + i - 1]) + a2
        k = 1
    while i < n:
        x = X[o + i] + shift
        if x > cap:
            break
        OX[k] = x
        OV[k] = (a1 + V[o + i]) + a2
        k += 1
        i += 1
    return k


@njit(cache=True)
def _sf_sum(AX, AV, ao, an, BX, BV, bo, bn, d, u, lo, cap, OX, OV):
    """``(u + A(m - d)) + B(m - d)`` for ``lo <= m <= cap`` into OX, OV; returns the number of steps."""
    if an == 0 or bn == 0:
        return 0
    start = max(AX[ao], BX[bo], lo - d)
    i = _sf_at(AX, ao, an, start)
    j = _sf_at(BX, bo, bn, start)
    k = 0
    cur = start
    while True:
        m = cur + d
        if m > cap:
            break
        OX[k] = m
        OV[k] = (u + AV[ao + i]) + BV[bo + j]
        k += 1
        na = AX[ao + i + 1] if i + 1 < an else _BIG
        nb = BX[bo + j + 1] if j + 1 < bn else _BIG
        nx = min(na, nb)
        if nx == _BIG:
            break
        if na == nx:
            i += 1
        if nb == nx:
            j += 1
        cur = nx
    return k


@njit(cache=True)
def _sf_min(RX, RV, rn, CX, CV, cn, OX, OV):
    """Pointwise minimum of two step functions into OX, OV (strictly descending values kept only)."""
    i = 0
    j = 0
    k = 0
    last = np.inf
    vr = np.inf
    vc = np.inf
    while i < rn or j < cn:
        xr = RX[i] if i < rn else _BIG
        xc = CX[j] if j < cn else _BIG
        x = min(xr, xc)
        if xr == x:
            vr = RV[i]
            i += 1
        if xc == x:
            vc = CV[j]
            j += 1
        v = min(vr, vc)
        if v < last:
            OX[k] = x
            OV[k] = v
            k += 1
            last = v
    return k


@njit(cache=True)
def _copy2(DX, DV, o, SX, SV, n):
    """``DX[o:o+n], DV[o:o+n] = SX[:n], SV[:n]`` as a loop: numba compiles a slice assignment with its
    shape checks and their error message (about 4 s on a fresh cache for this module's sites)."""
    for i in range(n):
        DX[o + i] = SX[i]
        DV[o + i] = SV[i]


@njit(cache=True)
def _grow(X, V, used, need):
    """The pool arrays with room for ``need`` more entries (doubled when full)."""
    if used + need <= X.shape[0]:
        return X, V
    cap = max(2 * X.shape[0], used + need)
    NX = np.empty(cap, dtype=np.int64)
    NV = np.empty(cap)
    _copy2(NX, NV, 0, X, V, used)
    return NX, NV


# ----------------------------------------------------------------------------- the kernel, one l
@njit(cache=True)
def _sparse_stage(l, S, uf, ub, wa, wab, wd, ofa, ofn, ob, IC, IG, U, PX, PV, pused, COFF, CLEN,
                  QX, QV, qused, GOFF, GLEN, AX, AV, BX, BV, TX, TV):
    """Cells C(s, t, l) for s = l..1 (all t) and G(s, t', l): ``_floating_kernel``'s loop body for one
    l, on step functions. C rows go to the pool PX, PV (row ``IC[s, t, l]`` at COFF, CLEN), G rows to
    QX, QV (kept for every l: the plan's reconstruction reads them). Returns the (possibly grown)
    arrays and the pools' fill."""
    for s in range(l, 0, -1):
        # --- G(s, t', l) = min over s' of U(s, s'-1) + C(s', t', l, m - wa^{s'-1}), forward run checks
        if s < l:
            for tp in range(s + 1, l + 1):
                rn = 0
                need = wd[l] + wa[s] + ofn[s]
                for sp in range(s + 1, tp + 1):
                    if sp - 1 > s:
                        j = sp - 1
                        need = max(need, wd[l] + wa[j - 1] + wa[j] + ofn[j])
                    if need > S:
                        break
                    ci = IC[sp, tp, l]
                    o = COFF[ci]
                    k = CLEN[ci]
                    if k == 0:
                        continue
                    if TX.shape[0] < k or BX.shape[0] < rn + k:
                        w = 2 * (rn + k)
                        TX, TV = np.empty(w, dtype=np.int64), np.empty(w)
                        NX, NV = np.empty(w, dtype=np.int64), np.empty(w)
                        _copy2(NX, NV, 0, AX, AV, rn)
                        AX, AV = NX, NV
                        BX, BV = np.empty(w, dtype=np.int64), np.empty(w)
                    cn = _sf_shift(PX, PV, o, k, wa[sp - 1], U[s, sp - 1], 0.0, max(need, 0), S, TX, TV)
                    rn = _sf_min(AX, AV, rn, TX, TV, cn, BX, BV)
                    AX, BX = BX, AX
                    AV, BV = BV, AV
                QX, QV = _grow(QX, QV, qused, rn)
                gi = IG[s, tp, l]
                GOFF[gi] = qused
                GLEN[gi] = rn
                _copy2(QX, QV, qused, AX, AV, rn)
                qused += rn
        # --- C(s, t, l) for s <= t <= l
        for t in range(s, l + 1):
            rn = 0
            if s == t == l:
                need = max(wd[s] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                if need <= S:
                    AX[0] = need
                    AV[0] = uf[s] + ub[s]
                    rn = 1
            else:
                if s == t:   # C_all (Eq. 5)
                    need = max(wd[l] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                    ci = IC[s + 1, s + 1, l]
                    k = CLEN[ci]
                    if TX.shape[0] < k or AX.shape[0] < k:
                        w = 2 * k
                        TX, TV = np.empty(w, dtype=np.int64), np.empty(w)
                        AX, AV = np.empty(w, dtype=np.int64), np.empty(w)
                        BX, BV = np.empty(w, dtype=np.int64), np.empty(w)
                    rn = _sf_shift(PX, PV, COFF[ci], k, wab[s], uf[s], ub[s], max(need, wab[s]), S, AX, AV)
                # floating move to a^{t-1} then C(t, t, l) (case -2)
                if t > s and not (wa[t - 1] < wa[s - 1]):
                    lo = wd[l] + wa[s] + ofn[s]
                    for j in range(s + 1, t):
                        lo = max(lo, wd[l] + wa[j - 1] + wa[j] + ofn[j] - wa[s - 1])
                    delta_m = wa[t - 1] - wa[s - 1]
                    lo = max(lo, delta_m)
                    ci = IC[t, t, l]
                    k = CLEN[ci]
                    if TX.shape[0] < k or BX.shape[0] < rn + k:
                        w = 2 * (rn + k)
                        TX, TV = np.empty(w, dtype=np.int64), np.empty(w)
                        NX, NV = np.empty(w, dtype=np.int64), np.empty(w)
                        _copy2(NX, NV, 0, AX, AV, rn)
                        AX, AV = NX, NV
                        BX, BV = np.empty(w, dtype=np.int64), np.empty(w)
                    cn = _sf_shift(PX, PV, COFF[ci], k, delta_m, U[s, t - 1], 0.0, max(lo, 0), S, TX, TV)
                    rn = _sf_min(AX, AV, rn, TX, TV, cn, BX, BV)
                    AX, BX = BX, AX
                    AV, BV = BV, AV
                if t < l:    # C_ck (Eq. 3-4)
                    pre = wd[l] + wa[s] + ofn[s]
                    mid = 0
                    for r in range(s, t + 1):
                        if r > s + 1:
                            j = r - 1
                            mid = max(mid, wd[l] + wa[j - 1] + wa[j] + ofn[j])
                        if wa[r - 1] < wa[s - 1]:
                            continue
                        if pre > S:
                            break
                        delta_m = wa[r - 1] - wa[s - 1]
                        lo = max(max(pre, mid - wa[s - 1]), max(delta_m, 0))
                        u = U[s, r - 1] if r > s else 0.0
                        for tp in range(t + 1, l + 1):
                            gi = IG[r, tp, l]
                            gn = GLEN[gi]
                            ci = IC[r, t, tp - 1]
                            sn = CLEN[ci]
                            if gn == 0 or sn == 0:
                                continue
                            go = GOFF[gi]
                            so = COFF[ci]
                            first = max(max(QX[go], PX[so]) + delta_m, lo)
                            if first > S:
                                continue
                            # the candidate is >= lb everywhere and the row is non-increasing: where
                            # the row is already <= lb at the candidate's first point, nothing improves
                            lb = (u + QV[go + gn - 1]) + PV[so + sn - 1]
                            h = _sf_at(AX, 0, rn, first)
                            if h >= 0 and AV[h] <= lb:
                                continue
                            if TX.shape[0] < gn + sn or BX.shape[0] < rn + gn + sn:
                                w = 2 * (rn + gn + sn)
                                TX, TV = np.empty(w, dtype=np.int64), np.empty(w)
                                NX, NV = np.empty(w, dtype=np.int64), np.empty(w)
                                _copy2(NX, NV, 0, AX, AV, rn)
                                AX, AV = NX, NV
                                BX, BV = np.empty(w, dtype=np.int64), np.empty(w)
                            cn = _sf_sum(QX, QV, go, gn, PX, PV, so, sn, delta_m, u, lo, S, TX, TV)
                            rn = _sf_min(AX, AV, rn, TX, TV, cn, BX, BV)
                            AX, BX = BX, AX
                            AV, BV = BV, AV
            PX, PV = _grow(PX, PV, pused, rn)
            ci = IC[s, t, l]
            COFF[ci] = pused
            CLEN[ci] = rn
            _copy2(PX, PV, pused, AX, AV, rn)
            pused += rn
    return PX, PV, pused, QX, QV, qused, AX, AV, BX, BV, TX, TV


#: seconds per (L+2)^5 below every run measured (2-core CPU, chains of 40 to 100 stages, 10% to 60% of
#: store-all's peak: 6.5e-11 with few breakpoints at tight limits, up to 7e-9): a run predicted longer
#: than what is left even at this rate is not started
_MIN_SECONDS_PER_N5 = 3e-11
#: the tables of a run (two (L+2)^3 index arrays and four arrays of rows) may take at most this share of
#: the machine's memory; a longer chain is refused at once instead of paging for minutes
_MAX_MEMORY_SHARE = 0.25


def table_bytes(L: int) -> int:
    """Bytes of the index and row-offset tables of :func:`bound_of_sizes` for ``L`` stages (the step
    functions themselves come on top, growing as the run goes)."""
    nc, ng = _floating_cells(L)
    return 8 * (2 * (L + 2) ** 3 + 2 * int(nc) + 2 * max(int(ng), 1))


def _physical_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def not_started(L: int, deadline: float | None) -> str | None:
    """Why a run on ``L`` stages would not be started, or None: its tables would take more than
    :data:`_MAX_MEMORY_SHARE` of the machine's memory, or (with a ``deadline``) even the fastest rate
    seen (:data:`_MIN_SECONDS_PER_N5`) would not finish by then."""
    need = table_bytes(L)
    if need > _MAX_MEMORY_SHARE * _physical_memory():
        return (f"its tables would need {need / 1e9:.3g} GB for L = {L}, more than "
                f"{_MAX_MEMORY_SHARE:.0%} of this machine's memory")
    if deadline is not None:
        est = _MIN_SECONDS_PER_N5 * float(L + 2) ** 5
        left = deadline - time.perf_counter()
        if est > left:
            return f"it would take at least {est:.3g} s for L = {L}, more than the {max(0.0, left):.3g} s left"
    return None


def _estimate_left(done: list[tuple[int, float]], L: int) -> float:
    """Seconds the stages after the last one done should take: the work of stage l grows about as l^4
    (its loops over s <= t <= l, r, t'), scaled from the time of the stages done so far."""
    if not done:
        return math.inf
    spent = sum(dt for _, dt in done)
    if spent < 0.5:
        return 0.0      # the first stages take milliseconds: their times say nothing yet
    w_done = sum(float(l) ** 4 for l, _ in done)
    last = done[-1][0]
    w_left = sum(float(l) ** 4 for l in range(last + 1, L + 2))
    return spent * w_left / max(w_done, 1.0)


def floating_plan(chain: Chain, memory: float, *, deadline: float | None = None) -> BoundResult:
    """An optimal sequence of the floating DP on step functions with sizes rounded **up** (rule 2 with
    ceilings; on integer chains rule 1, exact): every plan fits the real limit, and ``value`` is the
    DP's makespan for it (``ops`` the operations, replay them with ``simulate_remat``). On integer
    chains this is the same run as :func:`floating_bound` and the plan is optimal among all
    sequences."""
    chain.check_papers_times("remat_bound.floating_plan")
    wa, wab, wd, ofa, ofn, ob, budget, exact = fine_units(chain, memory, None, "up")
    return bound_of_sizes(chain, wa, wab, wd, ofa, ofn, ob, budget, exact, deadline=deadline, plan=True)


def floating_bound(chain: Chain, memory: float, *, deadline: float | None = None,
                   units: int | None = None, plan: bool = False) -> BoundResult:
    """Lower bound on the makespan of every valid sequence within ``memory`` bytes (the module
    docstring proves it): the floating DP on step functions at one unit per byte (integer chains)
    or ``2^32`` units. ``deadline`` (``time.perf_counter()`` value): stop between two stages when the
    next ones would not finish in time (``value`` None, ``complete`` False), or do not start when
    even the fastest rate seen would not (:func:`not_started`; ``note`` says why). A chain whose
    tables would not fit in a quarter of the machine's memory is not started either, deadline or not. ``units``: force the
    rounded-down rule with that many units (the tests compare it with the dense DP).

    The DP runs on :func:`relaxed_chain` (rule 3: ``up`` dominated). ``value`` is ``math.inf`` when
    not even the relaxation has a sequence (nothing fits). ``plan``: also rebuild the DP's sequence
    (``ops``): on integer chains where the relaxation changes nothing, an optimal sequence of the
    chain as given; otherwise one of the relaxed instance, which may exceed the real limit (replay
    it; :func:`floating_plan` gives plans that fit).

    Examples
    --------
    Paper 004's toy chain at 90 MiB: no sequence is faster than the paper's 47.42 ms.

    >>> from memplan.models.instance import load_instance
    >>> chain, _ = load_instance("paper004_table2")
    >>> round(floating_bound(chain, 90 * 2**20).value * 1e3, 2)
    47.42
    """
    chain.check_papers_times("remat_bound.floating_bound")
    relaxed = relaxed_chain(equal_gradient_sizes(chain))
    wa, wab, wd, ofa, ofn, ob, budget, exact = fine_units(relaxed, memory, units)
    res = bound_of_sizes(relaxed, wa, wab, wd, ofa, ofn, ob, budget, exact, deadline=deadline, plan=plan)
    res.relaxed = relaxed is not chain
    return res


def bound_of_sizes(chain: Chain, wa, wab, wd, ofa, ofn, ob, budget: int, exact: bool = False, *,
                   deadline: float | None = None, plan: bool = False) -> BoundResult:
    """:func:`floating_bound` on sizes already in integer units (``budget`` units of memory): the
    value of the floating DP of that integer instance (the tests feed it ``Discretization``'s
    rounded-down sizes and compare with the dense kernel). ``plan``: also rebuild an optimal
    sequence of that instance (``ops``; None when nothing fits)."""
    t0 = time.perf_counter()
    wa, wab, wd, ofa, ofn, ob = (np.asarray(a, dtype=np.int64) for a in (wa, wab, wd, ofa, ofn, ob))
    L = chain.L
    S = budget - int(wa[0])
    if S < 0:
        return BoundResult(math.inf, exact, budget, 0.0, time.perf_counter() - t0, True)
    why = not_started(L, deadline)
    if why is not None:
        return BoundResult(None, exact, budget, 0.0, time.perf_counter() - t0, False, note=f"not started: {why}")
    n = L + 2
    IC, IG = _floating_index(L)
    nc, ng = _floating_cells(L)
    U = forward_sums(chain.uf.astype(np.float64), n)
    uf = chain.uf.astype(np.float64)
    ub = chain.ub.astype(np.float64)
    COFF = np.zeros(nc, dtype=np.int64)
    CLEN = np.zeros(nc, dtype=np.int64)
    GOFF = np.zeros(max(ng, 1), dtype=np.int64)
    GLEN = np.zeros(max(ng, 1), dtype=np.int64)
    PX, PV = np.empty(1 << 16, dtype=np.int64), np.empty(1 << 16)
    QX, QV = np.empty(1 << 14, dtype=np.int64), np.empty(1 << 14)
    w = 1 << 10
    AX, AV = np.empty(w, dtype=np.int64), np.empty(w)
    BX, BV = np.empty(w, dtype=np.int64), np.empty(w)
    TX, TV = np.empty(w, dtype=np.int64), np.empty(w)
    pused = 0
    qused = 0
    done: list[tuple[int, float]] = []
    for l in range(1, L + 2):
        now = time.perf_counter()
        if deadline is not None and (now >= deadline or (done and now + _estimate_left(done, L) > deadline)):
            return BoundResult(None, exact, budget, pused / max(1, nc), time.perf_counter() - t0, False)
        ts = time.perf_counter()
        PX, PV, pused, QX, QV, qused, AX, AV, BX, BV, TX, TV = _sparse_stage(
            l, S, uf, ub, wa, wab, wd, ofa, ofn, ob, IC, IG, U, PX, PV, pused, COFF, CLEN,
            QX, QV, qused, GOFF, GLEN, AX, AV, BX, BV, TX, TV)
        if l > 1:     # the first call may include numba's compilation (or loading its cache)
            done.append((l, time.perf_counter() - ts))
    ci = IC[1, 1, L + 1]
    k = int(CLEN[ci])
    value = math.inf
    if k > 0:
        o = int(COFF[ci])
        idx = np.searchsorted(PX[o:o + k], S, side="right") - 1
        if idx >= 0:
            value = float(PV[o + idx])
    res = BoundResult(value, exact, budget, pused / max(1, nc), time.perf_counter() - t0, True)
    if plan and math.isfinite(value):
        tables = (S, uf, ub, wa, wab, wd, ofa, ofn, ob, IC, IG, U, PX, PV, COFF, CLEN, QX, QV, GOFF, GLEN)
        res.ops = _sequence(tables, L)
    return res


@njit(cache=True)
def _choose(s, t, l, m, S, uf, ub, wa, wab, wd, ofa, ofn, ob, IC, IG, U, PX, PV, COFF, CLEN, QX, QV, GOFF, GLEN):
    """Which case of the recurrence gives C(s, t, l) its value at ``m``, recomputed with the kernel's
    arithmetic (as ``remat_rotor._persistent_choice`` does): ``(kind, r, t', s')`` with kind -1
    (C_all), -2 (floating move to a^{t-1}), 1 (C_ck: F_none^s..F_ck^r..F_none^{s'-1}, split t'),
    0 (s = t = l), -9 (none found: cannot happen)."""
    ci = IC[s, t, l]
    h = _sf_at(PX, COFF[ci], CLEN[ci], m)
    if h < 0:
        return -9, 0, 0, 0
    target = PV[COFF[ci] + h]
    if s == t == l:
        return 0, 0, 0, 0
    if s == t:
        need = max(wd[l] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
        if m >= max(need, wab[s]):
            c2 = IC[s + 1, s + 1, l]
            k = _sf_at(PX, COFF[c2], CLEN[c2], m - wab[s])
            if k >= 0 and (uf[s] + PV[COFF[c2] + k]) + ub[s] == target:
                return -1, 0, 0, 0
    if t > s and not (wa[t - 1] < wa[s - 1]):
        lo = wd[l] + wa[s] + ofn[s]
        for j in range(s + 1, t):
            lo = max(lo, wd[l] + wa[j - 1] + wa[j] + ofn[j] - wa[s - 1])
        delta_m = wa[t - 1] - wa[s - 1]
        lo = max(lo, delta_m)
        if m >= max(lo, 0):
            c2 = IC[t, t, l]
            k = _sf_at(PX, COFF[c2], CLEN[c2], m - delta_m)
            if k >= 0 and U[s, t - 1] + PV[COFF[c2] + k] == target:
                return -2, 0, 0, 0
    if t < l:
        pre = wd[l] + wa[s] + ofn[s]
        mid = 0
        for r in range(s, t + 1):
            if r > s + 1:
                j = r - 1
                mid = max(mid, wd[l] + wa[j - 1] + wa[j] + ofn[j])
            if wa[r - 1] < wa[s - 1]:
                continue
            if pre > S:
                break
            delta_m = wa[r - 1] - wa[s - 1]
            lo = max(max(pre, mid - wa[s - 1]), max(delta_m, 0))
            if m < lo:
                continue
            m2 = m - delta_m
            u = U[s, r - 1] if r > s else 0.0
            for tp in range(t + 1, l + 1):
                gi = IG[r, tp, l]
                c2 = IC[r, t, tp - 1]
                a = _sf_at(QX, GOFF[gi], GLEN[gi], m2)
                b = _sf_at(PX, COFF[c2], CLEN[c2], m2)
                if a < 0 or b < 0:
                    continue
                if (u + QV[GOFF[gi] + a]) + PV[COFF[c2] + b] == target:
                    # which s' gives G(r, t', l) its value at m2
                    gval = QV[GOFF[gi] + a]
                    need = wd[l] + wa[r] + ofn[r]
                    for sp in range(r + 1, tp + 1):
                        if sp - 1 > r:
                            j = sp - 1
                            need = max(need, wd[l] + wa[j - 1] + wa[j] + ofn[j])
                        if need > S:
                            break
                        if m2 < max(need, 0):
                            continue
                        c3 = IC[sp, tp, l]
                        e = _sf_at(PX, COFF[c3], CLEN[c3], m2 - wa[sp - 1])
                        if e >= 0 and (U[r, sp - 1] + PV[COFF[c3] + e]) + 0.0 == gval:
                            return 1, r, tp, sp
    return -9, 0, 0, 0


def _sequence(tables, L: int) -> list:
    """Algorithm 2 (OptRecFL) on the step-function tables: the operations of an optimal sequence of
    the (integer) instance the tables were computed for."""
    S, wa, wab = tables[0], tables[3], tables[4]
    out: list = []
    stack = [(1, 1, L + 1, S, 0)]
    while stack:
        s, t, l, m, kind = stack.pop()
        if kind == 1:
            out.append(("B", s))
            continue
        c, r, tp, sp = _choose(s, t, l, m, *tables)
        if c == -9:
            raise RuntimeError(f"internal error: no case reaches C[{s},{t},{l}] at {m}")
        if c == 0:
            out.extend([("F_all", s), ("B", s)])
        elif c == -1:
            out.append(("F_all", s))
            stack.append((s, s, l, 0, 1))
            stack.append((s + 1, s + 1, l, m - int(wab[s]), 0))
        elif c == -2:
            out.extend(("F_none", j) for j in range(s, t))
            stack.append((t, t, l, m - int(wa[t - 1]) + int(wa[s - 1]), 0))
        else:
            m2 = m - int(wa[r - 1]) + int(wa[s - 1])
            out.extend(("F_none", j) for j in range(s, r))
            out.append(("F_ck", r))
            out.extend(("F_none", j) for j in range(r + 1, sp))
            stack.append((r, t, tp - 1, m2, 0))
            stack.append((sp, tp, l, m2 - int(wa[sp - 1]), 0))
    return out
