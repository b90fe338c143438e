"""Optimal re-materialization dynamic programs of paper 004 (Rotor).

- :func:`persistent` — optimal **memory persistent** sequence, Theorem 4.8 / Algorithms 3-4,
  O(S L^3) time (numba, vectorized over the memory axis).
- :func:`floating` — optimal **weakly persistent** ("floating materialized activation") sequence,
  Theorem 4.7 / Algorithms 1-2, which paper 004 proves optimal among *all* valid sequences
  (Lemma 4.4). Implemented in O(S L^5) instead of the paper's O(S L^6) by factoring the inner
  minimum (see ``_floating_kernel``).
- :func:`revolve` reuses the persistent kernel restricted to ``F_all^l`` immediately followed by
  ``B^l`` (the AD model of Figure 1b; paper 004, section 5.4).
- :func:`min_memory` (:mod:`memplan.baselines.remat_min_memory`): the smallest memory any valid
  sequence needs, exact (the DPs with the peak as objective).

Every public DP takes ``slots`` (honoured as given), ``exact`` (one slot per byte), or neither: then
it chooses and refines its discretization until the optimum is proven, and never returns less than
the baselines (see :func:`persistent`).

Memory discretization (section 5.2). Memory is counted in *slots* of ``q`` bytes: with ``slots=S``,
``q = M / S``; every size and overhead is rounded **up** to whole slots and the budget rounded down,
so a plan accepted by the DP never exceeds ``M`` (it may miss plans that fit only within the
rounding, at most ``q`` per stored item). ``exact=True`` uses ``q = 1`` and needs integer sizes.
The same DP with sizes rounded **down** is a relaxation (every sequence valid for the real sizes is
valid for the rounded ones), so its value is a lower bound; when the two values agree the
rounded-up plan is optimal for the chain as given. Doubling ``S`` never loses a plan
(``2 ceil(x) >= ceil(2x)``) and never lowers the bound, so the refinement converges monotonically.

Reading of the paper's recurrences (the extracted text is garbled in places). The paper has one forward
overhead ``o_f^s``; below, in F_all's conditions (``wabar^s + o_f^s``) it is F_all's own
(:attr:`Chain.of_all`, ``ofa`` in the kernels) and in the no-grad forwards' (``wa^s + o_f^s`` for F_ck,
F_none) theirs (:attr:`Chain.of_ng`, ``ofn``), what the executor holds; with both equal to ``of`` (the
default) the recurrences are the paper's. Every condition bounds one operation, so the proofs carry over
unchanged.

*Persistent, Theorem 4.8.* ``C(s, t, m)``: best time to compute delta^{s-1} from a^{s-1} and delta^t
with ``m`` memory not counting a^{s-1} (a^{s-1} may be stored as abar^{s-1}; it is outside ``m``).

- ``C(s, s, m) = u_f^s + u_b^s`` if ``m >= max(wd^s + wabar^s + o_f^s, wd^s + wd^{s-1} + wabar^s + o_b^s)``
  (Eq. 6: F_all^s then B^s);
- ``C_all(s, t, m) = u_f^s + C(s+1, t, m - wabar^s) + u_b^s`` if ``m >= max(wd^t + wabar^s + o_f^s,
  wd^s + wd^{s-1} + wabar^s + o_b^s)`` (F_all^s, the rest of the chain, B^s);
- ``C_ck(s, s', t, m) = sum_{k=s}^{s'-1} u_f^k + C(s', t, m - wa^{s'-1}) + C(s, s'-1, m)``: F_ck^s then
  F_none^{s+1..s'-1}, keeping a^{s'-1}. We check the memory of exactly those forward operations
  (``wd^t + wa^s + o_f^s`` for F_ck^s, ``wd^t + wa^{j-1} + wa^j + o_f^j`` for F_none^j); the paper's
  blanket condition ``m >= m_none^{s,t}`` over all j < t is implied by these checks and the sub-calls'.

*Floating, Theorem 4.7.* ``C(s, t, l, m)``: best time to go from a^{s-1}, delta^l to delta^{t-1}
(backward steps B^l..B^t; a^{s-1} is discarded by the end when t > s), ``m`` not counting a^{s-1}.
The first operation is F_all^s (only when t = s: Eq. 5, ``C(s+1, s+1, l, m - wabar^s)``) or a
forward run ``F_none^s..F_none^{r-1} F_ck^r F_none^{r+1}..F_none^{s'-1}`` (r = s means
``F_ck^s F_none..``) that moves the floating activation from a^{s-1} to a^{r-1} (Corollary 4.5:
``wa^{r-1} >= wa^{s-1}``) and keeps a^{s'-1}; then Eq. 3-4 with ``m2 = m - wa^{r-1} + wa^{s-1}``:
``C(s', t', l, m2 - wa^{s'-1}) + C(r, t, t'-1, m2)`` for ``r < s' <= t'``, ``t < t' <= l``, ``r <= t``.
Memory of the forward run is checked operation by operation: F_none^s / F_ck^s need
``wd^l + wa^s + o_f^s <= m``; once a^{s-1} is gone the budget is ``m + wa^{s-1}``, so F_none^j
(s < j < r) needs ``wd^l + wa^{j-1} + wa^j + o_f^j <= m + wa^{s-1}``, F_ck^r needs
``wd^l + wa^r + o_f^r <= m2``, and F_none^j (r < j < s') needs ``wd^l + wa^{j-1} + wa^j + o_f^j <= m2``.
(The paper's single condition ``m >= m_none^{s,t,l}`` is not exact when r > s: it allows F_none^j
for r < j < s' with ``m`` where only ``m2 <= m`` is available; checking each operation fixes this.)

One case is missing from Eq. 2 as printed: the floating activation may move to a^{t-1} with
F_none^s..F_none^{t-1} and the chain continue with C(t, t, l) (F_all^t or F_ck^t first) without any
new checkpoint; without it C(s, t, t) is infinite for s < t although F_none^s..F_none^{t-1} F_all^t
B^t is valid. We add this case (choice -2); the exhaustive search in the tests finds optimal
sequences that need it.
"""
from __future__ import annotations

import math
import sys
import time

import numpy as np
from numba import njit

from memplan.baselines import remat_heuristics as H
from memplan.baselines.remat_min_memory import TooCostly, forward_sums, min_memory, min_memory_of, necessary_memory
from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule, simulate_remat
from memplan.models.solution import Solution, Status
from memplan.models.units import fmt_bytes, fmt_memory

__all__ = ["Discretization", "persistent", "floating", "revolve", "min_memory", "floating_table_bytes",
           "persistent_table_bytes", "table_bytes", "max_slots", "check_tables", "TableTooLarge", "KINDS"]

INF = np.inf


# ----------------------------------------------------------------------------- discretization
#: exact mode (one slot per byte) refuses limits above this many bytes
EXACT_MAX = 5_000_000


class Discretization:
    """Sizes in slots of ``q`` bytes and the budget in slots.

    ``mode="up"`` (the plans): sizes rounded **up**, the budget ``memory / q`` rounded down, so a plan
    accepted by the DP never exceeds ``memory``. ``mode="down"`` (the bound): sizes rounded **down**,
    so every sequence valid for the real sizes is valid for the rounded ones and the DP's value is a
    lower bound on the optimum of its class. Sizes are clipped at ``budget + 1`` slots (anything
    larger cannot fit anyway), so a huge size never overflows the integer tables.
    """

    def __init__(self, chain: Chain, memory: float, slots: int = 500, exact: bool = False, mode: str = "up"):
        if memory is None or not memory > 0:
            raise ValueError("a positive memory limit is needed")
        if mode not in ("up", "down"):
            raise ValueError(f"mode must be 'up' or 'down', got {mode!r}")
        if exact:
            if not chain.is_integer or memory != math.floor(memory):
                raise ValueError("exact mode needs integer sizes and an integer memory limit")
            if memory > EXACT_MAX:
                raise ValueError(f"exact mode would need {memory:.0f} slots (at most {EXACT_MAX}); use slots instead")
            self.q = 1.0
            self.budget = int(memory)
        else:
            if slots < 1:
                raise ValueError("slots must be >= 1")
            self.q = float(memory) / slots
            self.budget = int(slots)
        self.exact = exact
        self.mode = mode
        self.memory = float(memory)
        cap = float(self.budget + 1)
        if mode == "up":
            f = lambda x: np.ceil(np.minimum(np.asarray(x, dtype=float) / self.q, cap) - 1e-9)  # noqa: E731
        else:
            f = lambda x: np.floor(np.minimum(np.asarray(x, dtype=float) / self.q, cap) * (1 + 1e-12))  # noqa: E731
        conv = lambda x: f(x).clip(min=0).astype(np.int64)  # noqa: E731
        # a tiny limit (memory=1e-300: slots of 1e-303 B) overflows x / q to inf, which the cap then clips:
        # the result is right, the "overflow encountered in divide" warnings on stderr were noise
        with np.errstate(over="ignore"):
            self.wa, self.wab, self.wd = conv(chain.wa), conv(chain.wabar), conv(chain.wd)
            # each forward's own overhead: F_all's (ofa), the no-grad forwards' F_ck / F_none (ofn)
            self.ofa, self.ofn, self.ob = conv(chain.of_all), conv(chain.of_ng), conv(chain.ob)

    def describe(self) -> str:
        if self.exact:
            return "exact (one slot per byte unit)"
        if self.mode == "down":
            return f"{self.budget} slots of {self.q:.4g} B, sizes rounded down (a lower bound)"
        return (f"{self.budget} slots of {self.q:.4g} B; sizes rounded up, so plans never exceed the "
                f"limit but may use up to one slot more per stored value than needed")


# ----------------------------------------------------------------------------- persistent kernel
#: cells per side of the tiles of the persistent kernel (see ``_persistent_kernel``): three tiles of
#: 16 x 16 cells of 500 slots (3 MB) stay in a 2 MB L2 cache for the most part, and 12-24 all ran
#: within 5% of each other at L = 339, 500 slots
_BLOCK = 16


@njit(cache=True, inline="always")
def _persistent_split(C, lo, top, P, U, wa, wd, S, s, k, t):
    """Apply split point s' = k + 1 to cell (s, t): ``C[s, t, m] = min(C[s, t, m], U[s, k] +
    C[k+1, t, m - wa^k] + C[s, k, m])`` (C_ck of Eq. 7: F_ck^s F_none^{s+1..k}, keep a^k), where
    the forward run fits (``wd^t + P[s, k] <= m``) and both operands are finite.

    The candidate is non-increasing in m and at least ``lb = U + C[k+1, t, S] + C[s, k, S]`` (the
    operands' minima, same arithmetic, so the bound holds in floating point); the cell is
    non-increasing too, so the candidate can only improve it on the prefix where it is above
    ``lb``: a binary search finds that prefix and the rest is skipped (~40% of the range remains).
    The loop runs over slices indexed from 0, which LLVM vectorizes (indexing ``first[m - shift]``
    directly keeps numba's negative-index wraparound in the loop and it stays scalar, 5x slower)."""
    need = wd[t] + P[s, k]
    if need > S:
        return
    end = top[s, t]
    shift = wa[k]
    start = max(need, shift + lo[k + 1, t], lo[s, k])
    if start >= end:
        return
    first = C[k + 1, t]
    second = C[s, k]
    buf = C[s, t]
    fsum = U[s, k]
    lb = fsum + first[S] + second[S]
    a, b = start, end
    while a < b:
        h = (a + b) >> 1
        if buf[h] <= lb:
            b = h
        else:
            a = h + 1
    bv = buf[start:a]
    fv = first[start - shift:a - shift]
    sv = second[start:a]
    for i in range(a - start):
        bv[i] = min(bv[i], fsum + fv[i] + sv[i])


@njit(cache=True)
def _persistent_kernel(L, S, uf, ub, wa, wab, wd, ofa, ofn, ob, ufn, u_turn, allow_carry, block=_BLOCK):
    """Table C[s, t, m] for 1 <= s <= t <= L+1, 0 <= m <= S (Eq. 6-7). ``allow_carry=False`` forbids
    F_all^s unless B^s follows immediately (revolve / AD model).

    The time model (:attr:`Chain.uf_ng`, :attr:`Chain.u_turn`): the forward run F_ck^s F_none^{s+1..s'-1}
    of a split costs the no-grad times ``ufn``, and a split makes exactly one turn (the sub-chain
    (s', t) ends with B^{s'}, then (s, s'-1) starts with a forward; the C_all case makes none: its
    sub-chain's B^{s+1} is followed by B^s), so ``u_turn`` is added once to each split's forward run
    ``U[s, k]``. With ``ufn = uf`` and ``u_turn = 0`` the table is the papers' (adding 0.0 changes no
    float).

    The arg-min is not stored: :func:`_persistent_choice` recomputes it along the reconstructed path
    only (O(L) per visited entry), which keeps the O(S L^3) inner loop a plain ``min``.
    ``lo[s, t]`` is the smallest m where C[s, t, m] is finite (C is non-increasing in m), so the
    inner loops skip the infeasible region; above ``top[s, t]`` (``full[s, t]``: storing everything
    fits) C is the store-all time ``base[s, t]``, a lower bound, so no search is needed there.

    Cell (s, t) is the minimum of C_all (``u_f^s + C[s+1, t, m - wabar^s] + u_b^s``) and of the
    split points k = s' - 1 in s..t-1 (:func:`_persistent_split`, operands C[s, k] and C[k+1, t]):
    the interval-DP shape of a (min, +) matrix product, evaluated here in tiles of ``block`` x
    ``block`` cells (blocks I <= J of the indices 1..L+1) so that the operands are read from cache
    ``block`` times each instead of once per split from main memory:

    - tiles by block diagonal d = J - I ascending; in tile (I, J) the split points k in the blocks
      strictly between I and J come first: both operands lie in tiles of smaller d, final, and the
      tile product (I, K) x (K+1, J) runs cell by cell with all three tiles in cache;
    - then the tile's rows descending, cells ascending: C_all (row s+1 final), the split points in
      block I (operand C[k+1, t]: a row below, final, or row 1 of tile (I+1, J), final) and in block
      J (operand C[s, k], k < t: a cell to the left, final; C[k+1, t] in the diagonal tile (J, J)).

    Every cell is the ``min`` of the same floating-point candidates as in the plain
    diagonal-by-diagonal evaluation (min is exact and order-free; no NaN arises), so the table is
    bit-identical to it (tests/test_rotor_compact.py); only the candidates that cannot lower a cell
    are skipped."""
    n = L + 2
    C = np.full((n, n, S + 1), np.inf)
    lo = np.full((n, n), S + 1, dtype=np.int64)
    # full[s, t]: memory from which "F_all every stage" fits in sub-chain (s, t); from there on
    # C[s, t, m] is the sum of u_f + u_b over s..t, a lower bound, so no search is needed.
    full = np.zeros((n, n), dtype=np.int64)
    top = np.full((n, n), S + 1, dtype=np.int64)
    base = np.zeros((n, n))
    for s in range(1, L + 2):
        need = max(wd[s] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
        for m in range(need, S + 1):
            C[s, s, m] = uf[s] + ub[s]
        lo[s, s] = min(need, S + 1)
        full[s, s] = need
        base[s, s] = uf[s] + ub[s]
    if allow_carry:
        for d in range(1, L + 1):
            for s in range(1, L + 2 - d):
                t = s + d
                full[s, t] = max(wd[t] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s],
                                 wab[s] + full[s + 1, t])
                base[s, t] = uf[s] + base[s + 1, t] + ub[s]   # same order as C_all: exact match
                if full[s, t] <= S:
                    top[s, t] = full[s, t]
    # U[s, k] = u_f^s + ... + u_f^k, summed from 0.0 in that order (the order the plain DP used);
    # P[s, k]: memory of the forward run F_ck^s F_none^{s+1..k} without wd^t (o_f^s + wa^s for
    # F_ck^s, wa^{j-1} + wa^j + o_f^j for F_none^j)
    U = np.zeros((n, n))
    P = np.zeros((n, n), dtype=np.int64)
    for s in range(1, n):
        acc = 0.0
        pre = wa[s] + ofn[s]
        for k in range(s, n):
            acc += ufn[k]
            if k > s:
                pre = max(pre, wa[k - 1] + wa[k] + ofn[k])
            U[s, k] = acc + u_turn
            P[s, k] = pre
    B = max(1, block)
    nb = (L + B) // B        # blocks of B indices over 1..L+1
    for d in range(nb):
        for I in range(nb - d):
            J = I + d
            s0 = 1 + I * B
            s1 = min(L + 1, s0 + B - 1)
            t0 = 1 + J * B
            t1 = min(L + 1, t0 + B - 1)
            for s in range(s0, s1 + 1):              # store-all region
                for t in range(max(t0, s + 1), t1 + 1):
                    buf = C[s, t]
                    for m in range(top[s, t], S + 1):
                        buf[m] = base[s, t]
            for K in range(I + 1, J):                # split points between the blocks
                k0 = 1 + K * B
                for s in range(s0, s1 + 1):
                    for k in range(k0, k0 + B):
                        for t in range(t0, t1 + 1):
                            _persistent_split(C, lo, top, P, U, wa, wd, S, s, k, t)
            for s in range(s1, s0 - 1, -1):          # the rest of the tile
                for t in range(max(t0, s + 1), t1 + 1):
                    buf = C[s, t]
                    if allow_carry:                  # F_all^s first (C_all)
                        need = max(wd[t] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                        sub = C[s + 1, t]
                        w = wab[s]
                        for m in range(max(need, w + lo[s + 1, t]), top[s, t]):
                            buf[m] = min(buf[m], uf[s] + sub[m - w] + ub[s])
                    for k in range(s, min(s1, t - 1) + 1):
                        _persistent_split(C, lo, top, P, U, wa, wd, S, s, k, t)
                    if J > I:
                        for k in range(t0, t):
                            _persistent_split(C, lo, top, P, U, wa, wd, S, s, k, t)
                    f = S + 1                        # cell (s, t) is final
                    for m in range(S + 1):
                        if buf[m] < np.inf:
                            f = m
                            break
                    lo[s, t] = f
    return C


def _persistent_choice(C, s, t, m, uf, ub, wa, wab, wd, ofa, ofn, ob, ufn, u_turn, allow_carry):
    """Which case achieves C[s, t, m]: -1 (F_all^s first) or s' (F_ck^s keeping a^{s'-1}), by the same
    arithmetic as the kernel (compared with a 1e-12 relative tolerance)."""
    target = C[s, t, m]
    tol = 1e-12 * max(1.0, abs(target))
    if s == t:
        return -1
    if allow_carry:
        need = max(wd[t] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
        if m >= need and m >= wab[s] and abs(uf[s] + C[s + 1, t, m - wab[s]] + ub[s] - target) <= tol:
            return -1
    need = wd[t] + wa[s] + ofn[s]
    fsum = 0.0
    for sp in range(s + 1, t + 1):
        fsum += ufn[sp - 1]
        if sp - 1 > s:
            j = sp - 1
            need = max(need, wd[t] + wa[j - 1] + wa[j] + ofn[j])
        if m >= need and m >= wa[sp - 1] and abs(fsum + u_turn + C[sp, t, m - wa[sp - 1]] + C[s, sp - 1, m]
                                                 - target) <= tol:
            return sp
    raise RuntimeError(f"internal error: no case reaches C[{s},{t},{m}]")


def _persistent_sequence(C, s, t, m, disc: Discretization, chain: Chain, allow_carry: bool, out: list) -> None:
    """Algorithm 4 (OptRecP): rebuild the sequence from the table."""
    args = (chain.uf, chain.ub, disc.wa, disc.wab, disc.wd, disc.ofa, disc.ofn, disc.ob, *_time_model(chain),
            allow_carry)
    stack = [(s, t, m, False)]
    while stack:
        s, t, m, emit_b = stack.pop()
        if emit_b:          # marker: B^s after the C_all sub-chain
            out.append(("B", s))
            continue
        c = _persistent_choice(C, s, t, m, *args)
        if s == t:
            out.extend([("F_all", s), ("B", s)])
        elif c == -1:
            out.append(("F_all", s))
            stack.append((s, s, 0, True))
            stack.append((s + 1, t, m - int(disc.wab[s]), False))
        else:
            sp = c
            out.append(("F_ck", s))
            out.extend(("F_none", j) for j in range(s + 1, sp))
            stack.append((s, sp - 1, m, False))                   # runs second
            stack.append((sp, t, m - int(disc.wa[sp - 1]), False))  # runs first


# ----------------------------------------------------------------------------- floating kernel
@njit(cache=True)
def _floating_cells(L):
    """Rows of the floating DP's compact tables: (cells s <= t <= l, cells r < t' <= l) over 1..L+1."""
    k = L + 1
    return (k * (k + 1) * (k + 2)) // 6, ((k - 1) * k * (k + 1)) // 6


@njit(cache=True)
def _floating_index(L):
    """Row numbers of the compact floating tables: IC[s, t, l] for s <= t <= l, IG[r, t', l] for
    r < t' <= l (cells of one l together, then s, then t), -1 for cells that do not exist."""
    n = L + 2
    IC = np.full((n, n, n), -1, dtype=np.int64)
    IG = np.full((n, n, n), -1, dtype=np.int64)
    kc = 0
    kg = 0
    for l in range(1, n):
        for s in range(1, l + 1):
            for t in range(s, l + 1):
                IC[s, t, l] = kc
                kc += 1
                if t > s:
                    IG[s, t, l] = kg
                    kg += 1
    return IC, IG


class DPStopped(Exception):
    """A DP run stopped at its deadline before its tables were finished (``stage``: the first round not
    computed: a stage l of the floating DP's outer loop, a diagonal or level of the joint DP's)."""

    def __init__(self, stage: int, stages: int):
        super().__init__(f"stopped at stage {stage} of {stages}")
        self.stage, self.stages = stage, stages


def check_deadline(deadline: float | None, stage: int, stages: int) -> None:
    """:class:`DPStopped` before round ``stage`` of ``stages`` once ``deadline`` (``time.perf_counter()``;
    None: never) has passed: the DPs whose rounds run from Python call it between two rounds."""
    if deadline is not None and time.perf_counter() >= deadline:
        raise DPStopped(stage, stages)


@njit(cache=True)
def _floating_tables(L, S, uf):
    """The floating DP's compact tables, filled with their initial values (:func:`_floating_kernel`)."""
    n = L + 2
    IC, IG = _floating_index(L)
    nc, ng = _floating_cells(L)
    C = np.full((nc, S + 1), np.inf)
    R = np.zeros((nc, S + 1), dtype=np.int16)
    TP = np.zeros((nc, S + 1), dtype=np.int16)
    G = np.full((ng, S + 1), np.inf)
    GS = np.zeros((ng, S + 1), dtype=np.int16)
    U = forward_sums(uf, n)        # U[a, b] = sum_{k=a}^{b} uf[k]
    return C, R, TP, G, GS, IC, IG, U


def _floating_kernel(L, S, uf, ub, wa, wab, wd, ofa, ofn, ob, prune, deadline=None):
    """Tables for Theorem 4.7. C[s, t, l, m]; choice R[s,t,l,m] = r (0: infeasible, -1: F_all^s,
    -2: floating move to a^{t-1} then C(t, t, l)),
    TP[s,t,l,m] = t'. G[r, t', l, m] = min over s' of U(r, s'-1) + C[s', t', l, m - wa^{s'-1}] with the
    F_ck^r and F_none^{r+1..s'-1} memory checks; GS = the arg-min s'. Order: l increasing, s
    decreasing, so that G(r=s, ., l) only needs C(s' > s, ., l) and C(r, t, t'-1 < l).

    Compact layout: only the cells that exist are stored, C, R, TP for 1 <= s <= t <= l <= L+1 and
    G, GS for 1 <= r < t' <= l <= L+1, one row of S+1 entries each; ``IC[s, t, l]`` and
    ``IG[r, t', l]`` give the row (-1 elsewhere). That is about a sixth of the dense
    (L+2)^3 (S+1) layout (:func:`floating_table_bytes`).

    The outer loop over l runs here, one compiled :func:`_floating_stage` per l, so that a run stops
    between two stages once ``deadline`` (``time.perf_counter()``) has passed (:class:`DPStopped`;
    the work of stage l grows about as l^4, the last one is about 5/L of the whole)."""
    C, R, TP, G, GS, IC, IG, U = _floating_tables(L, S, uf)
    for l in range(1, L + 2):
        check_deadline(deadline, l, L + 1)
        _floating_stage(l, S, uf, ub, wa, wab, wd, ofa, ofn, ob, prune, C, R, TP, G, GS, IC, IG, U)
    return C, R, TP, GS, IC, IG


@njit(cache=True)
def _floating_stage(l, S, uf, ub, wa, wab, wd, ofa, ofn, ob, prune, C, R, TP, G, GS, IC, IG, U):
    """Stage l of :func:`_floating_kernel`: the cells C(s, t, l) and G(s, t', l) for s = l..1."""
    for s in range(l, 0, -1):
        # --- G(s, t', l, .) for s < t' <= l (needs C(s' > s, t', l))
        if s < l:
            for tp in range(s + 1, l + 1):
                g = G[IG[s, tp, l]]
                gs = GS[IG[s, tp, l]]
                need = wd[l] + wa[s] + ofn[s]          # F_ck^s
                for sp in range(s + 1, tp + 1):
                    if sp - 1 > s:
                        j = sp - 1
                        need = max(need, wd[l] + wa[j - 1] + wa[j] + ofn[j])
                    if need > S:
                        break
                    sub = C[IC[sp, tp, l]]
                    shift = wa[sp - 1]
                    u = U[s, sp - 1]
                    for m in range(max(need, shift), S + 1):
                        v = u + sub[m - shift]
                        if v < g[m]:
                            g[m] = v
                            gs[m] = sp
        # --- C(s, t, l, .) for s <= t <= l
        for t in range(s, l + 1):
            row = C[IC[s, t, l]]
            rr = R[IC[s, t, l]]
            tt = TP[IC[s, t, l]]
            if s == t == l:
                need = max(wd[s] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                for m in range(need, S + 1):
                    row[m] = uf[s] + ub[s]
                    rr[m] = -1
                continue
            if s == t:  # C_all (Eq. 5)
                need = max(wd[l] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                sub = C[IC[s + 1, s + 1, l]]
                for m in range(max(need, wab[s]), S + 1):
                    v = uf[s] + sub[m - wab[s]] + ub[s]
                    if v < row[m]:
                        row[m] = v
                        rr[m] = -1
            # Floating move then F_all (not in the paper's text): F_none^s..F_none^{t-1} moves the
            # floating activation to a^{t-1}, then C(t, t, l, m2) (which starts with F_all^t or
            # F_ck^t). Needed e.g. for C(s, t, t) with s < t, which Eq. 2 leaves infinite.
            if t > s and not (prune and wa[t - 1] < wa[s - 1]):
                lo = wd[l] + wa[s] + ofn[s]
                for j in range(s + 1, t):
                    lo = max(lo, wd[l] + wa[j - 1] + wa[j] + ofn[j] - wa[s - 1])
                delta_m = wa[t - 1] - wa[s - 1]
                lo = max(lo, delta_m)
                sub = C[IC[t, t, l]]
                u = U[s, t - 1]
                for m in range(max(lo, 0), S + 1):
                    m2 = m - delta_m
                    if m2 > S:
                        continue
                    v = u + sub[m2]
                    if v < row[m]:
                        row[m] = v
                        rr[m] = -2
                        tt[m] = t
            if t == l:
                continue
            # C_ck (Eq. 3-4): F_none^s..F_none^{r-1} F_ck^r ... ; needs t < t' <= l, r <= t
            pre = wd[l] + wa[s] + ofn[s]    # F_none^s (r > s) or F_ck^s (r = s), checked against m
            mid = 0                        # max over s<j<r of wd^l + wa^{j-1} + wa^j + o_f^j (<= m + wa^{s-1})
            for r in range(s, t + 1):
                if r > s + 1:
                    j = r - 1
                    mid = max(mid, wd[l] + wa[j - 1] + wa[j] + ofn[j])
                if prune and wa[r - 1] < wa[s - 1]:
                    continue
                if pre > S:
                    break
                delta_m = wa[r - 1] - wa[s - 1]      # m2 = m - delta_m
                lo = max(pre, mid - wa[s - 1], delta_m)
                u = U[s, r - 1] if r > s else 0.0
                for tp in range(t + 1, l + 1):
                    g = G[IG[r, tp, l]]
                    second = C[IC[r, t, tp - 1]]
                    for m in range(max(lo, 0), S + 1):
                        m2 = m - delta_m
                        if m2 > S:
                            continue
                        v = u + g[m2] + second[m2]
                        if v < row[m]:
                            row[m] = v
                            rr[m] = r
                            tt[m] = tp


def _floating_sequence(R, TP, GS, IC, IG, s, t, l, m, disc: Discretization, out: list) -> None:
    """Algorithm 2 (OptRecFL), iterative (``IC``, ``IG``: the rows of the compact tables)."""
    wa = disc.wa
    stack = [(s, t, l, m, 0)]
    while stack:
        s, t, l, m, kind = stack.pop()
        if kind == 1:
            out.append(("B", s))
            continue
        r = int(R[IC[s, t, l], m])
        if r == 0:
            raise RuntimeError(f"internal error: no choice at C[{s},{t},{l},{m}]")
        if s == t == l:
            out.extend([("F_all", s), ("B", s)])
        elif r == -1:
            out.append(("F_all", s))
            stack.append((s, s, l, 0, 1))
            stack.append((s + 1, s + 1, l, m - int(disc.wab[s]), 0))
        elif r == -2:   # floating move to a^{t-1}, then C(t, t, l)
            out.extend(("F_none", j) for j in range(s, t))
            stack.append((t, t, l, m - int(wa[t - 1]) + int(wa[s - 1]), 0))
        else:
            tp = int(TP[IC[s, t, l], m])
            m2 = m - int(wa[r - 1]) + int(wa[s - 1])
            sp = int(GS[IG[r, tp, l], m2])
            out.extend(("F_none", j) for j in range(s, r))
            out.append(("F_ck", r))
            out.extend(("F_none", j) for j in range(r + 1, sp))
            stack.append((r, t, tp - 1, m2, 0))                        # second
            stack.append((sp, tp, l, m2 - int(wa[sp - 1]), 0))         # first


# ----------------------------------------------------------------------------- table sizes
#: explicit ``slots``: the DPs refuse tables larger than these (bytes)
FLOATING_TABLE_LIMIT = 8e9
PERSISTENT_TABLE_LIMIT = 4e9
#: automatic discretization (``slots=None``): each table stays below this (bytes)
AUTO_TABLE_LIMIT = 1e9
#: automatic discretization: the first number of slots (then doubled while unproven)
AUTO_START_SLOTS = 500
#: automatic discretization under a short time limit: fewer slots than this are not worth a run
AUTO_MIN_SLOTS = 16
#: the class of sequences each DP optimizes over
KINDS = {"rotor": "persistent", "rotor-floating": "all", "revolve": "revolve"}
_CLASS_TEXT = {"persistent": "memory-persistent sequences", "all": "all valid sequences (weak memory persistence, "
               "Lemma 4.4)", "revolve": "sequences with F_all^l right before B^l (the AD model)"}


class TableTooLarge(ValueError):
    """The DP's tables for these slots would be too large; ``max_slots`` is the most that fit."""

    def __init__(self, message: str, max_slots: int):
        super().__init__(message)
        self.max_slots = max_slots


def floating_table_bytes(L: int, slots: int) -> float:
    """Bytes of the floating DP's compact tables for ``L`` stages and ``slots`` memory slots: rows of
    ``slots + 1`` entries, C (8 bytes), R and TP (2 bytes each) for the (L+1)(L+2)(L+3)/6 cells
    s <= t <= l, G (8 bytes) and GS (2 bytes) for the L(L+1)(L+2)/6 cells r < t' <= l, plus the two
    (L+2)^3 row indexes; :func:`floating` refuses more than ``FLOATING_TABLE_LIMIT``."""
    k = L + 1
    nc, ng = k * (k + 1) * (k + 2) // 6, (k - 1) * k * (k + 1) // 6
    return float((nc * 12 + ng * 10) * (slots + 1) + 2 * 8 * (L + 2) ** 3)


def persistent_table_bytes(L: int, slots: int) -> float:
    """Bytes of the persistent DP's table C[s, t, m] ((L+2)^2 (slots+1) 8-byte entries)."""
    return float((L + 2) ** 2 * (slots + 1) * 8 + 2 * (slots + 1) * 8)


def table_bytes(kind: str, L: int, slots: int) -> float:
    """Bytes of the tables of the DP of class ``kind`` (``KINDS`` values)."""
    return floating_table_bytes(L, slots) if kind == "all" else persistent_table_bytes(L, slots)


def max_slots(kind: str, L: int, limit: float) -> int:
    """The most slots whose tables stay within ``limit`` bytes (0 if none)."""
    per = table_bytes(kind, L, 1) - table_bytes(kind, L, 0)
    return max(0, int((limit - table_bytes(kind, L, 0)) // per))


def check_tables(kind: str, L: int, slots: int, *, what: str | None = None) -> None:
    """Raise :class:`TableTooLarge` when the tables for ``slots`` exceed the explicit-slots limit."""
    limit = FLOATING_TABLE_LIMIT if kind == "all" else PERSISTENT_TABLE_LIMIT
    need = table_bytes(kind, L, slots)
    if need > limit:
        fits = max_slots(kind, L, limit)
        raise TableTooLarge(f"{what or f'slots={slots}'} on L = {L} stages needs {fmt_memory(need)} of DP tables "
                            f"(more than {fmt_memory(limit)}); use slots <= {fits}"
                            + (", or method 'rotor' (the persistent DP)" if kind == "all" else ""), fits)


# ----------------------------------------------------------------------------- one DP run
def _dp(chain: Chain, memory: float, kind: str, slots: int, exact: bool, mode: str, prune: bool = True,
        deadline: float | None = None):
    """One run: ``(value or None, ops or None, Discretization)``; ops only for ``mode="up"``.
    ``deadline`` (``time.perf_counter()``, the floating DP only): :class:`DPStopped` between two of
    its stages once passed."""
    disc = Discretization(chain, memory, slots, exact, mode)
    budget = disc.budget - int(disc.wa[0])
    if budget < 0:
        return None, None, disc
    L = chain.L
    if kind == "all":
        C, R, TP, GS, IC, IG = _floating_kernel(*_args(disc, chain), prune, deadline)
        v = C[IC[1, 1, L + 1], budget]
        if not math.isfinite(v):
            return None, None, disc
        ops = None
        if mode == "up":
            ops = []
            _floating_sequence(R, TP, GS, IC, IG, 1, 1, L + 1, budget, disc, ops)
        return float(v), ops, disc
    carry = kind == "persistent"
    C = _persistent_kernel(*_args(disc, chain), *_time_model(chain), carry, _BLOCK)
    v = C[1, L + 1, budget]
    if not math.isfinite(v):
        return None, None, disc
    ops = None
    if mode == "up":
        ops = []
        _persistent_sequence(C, 1, L + 1, budget, disc, chain, carry, ops)
    return float(v), ops, disc


def _args(disc: Discretization, chain: Chain):
    return (chain.L, disc.budget, chain.uf.astype(np.float64), chain.ub.astype(np.float64), disc.wa, disc.wab,
            disc.wd, disc.ofa, disc.ofn, disc.ob)


def _time_model(chain: Chain):
    """The persistent kernel's no-grad forward times and turn cost (the papers' where not given)."""
    return np.ascontiguousarray(chain.ufn, dtype=np.float64), float(chain.u_turn)


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


# ----------------------------------------------------------------------------- time estimates
#: seconds of one persistent DP run: per (s, s', t) step of the L^3 / 6 (85-95 ns measured at L = 300
#: and 1000 on 2 shared cores, 3-4e-10 s more per slot), times :data:`_SAFETY`
_PERSISTENT_STEP_SECONDS = 1.0e-7
_PERSISTENT_SLOT_STEP_SECONDS = 4e-10
#: seconds per slot and step of one floating DP run (L^5 / 60 steps; 5-7e-10 measured at L = 60)
_FLOATING_SLOT_STEP_SECONDS = 7e-10
#: margin on the estimates: a run starts only when it fits ``_SAFETY`` times in what is left
_SAFETY = 1.5


def dp_seconds(kind: str, L: int, slots: int) -> float:
    """Estimated seconds of one DP run (sizes rounded up or down) with ``slots`` memory slots,
    margin included: the automatic discretization starts a run only when this fits in the time left."""
    steps3 = (L + 2) ** 3 / 6
    est = steps3 * (_PERSISTENT_STEP_SECONDS + _PERSISTENT_SLOT_STEP_SECONDS * (slots + 1))
    if kind == "all":
        est += _FLOATING_SLOT_STEP_SECONDS * (slots + 1) * (L + 2) ** 5 / 60
    return _SAFETY * est


# ----------------------------------------------------------------------------- candidates
#: recompute-all is a candidate while its replay (quadratic in L) stays below this many operations
RECOMPUTE_ALL_MAX_OPS = 20_000_000


def _candidates(chain: Chain, memory: float, kind: str, left) -> tuple[list, list[str]]:
    """Schedules the DP's answer is compared with, those that fit, as ``(makespan, name, schedule or
    builder)``: the baselines of the class (store-all, the best ``checkpoint_sequential`` cut,
    recompute-all, bisection) and the least-memory sequences (:mod:`remat_min_memory`). The
    baselines are evaluated by the compiled replay (milliseconds at L = 1000); a least-memory
    sequence whose computation is estimated to exceed ``left()`` seconds is skipped, and the second
    list says which were."""
    out: list = []
    skipped: list[str] = []
    lim = memory * (1 + 1e-9) + 1e-9          # the simulator's tolerance

    def add(name, stats, sched):
        mk, peak = stats
        if peak <= lim:
            out.append((mk, name, sched))

    if kind != "revolve":
        add("store-all", H.schedule_stats(chain, H.store_all_schedule(chain)), H.store_all_schedule(chain))
        need = H.sequential_points_seconds(chain)
        pts = []
        if need > left():
            skipped.append(f"sequential (the {chain.L} checkpoint_sequential cuts: about {need:.3g} s)")
        else:
            pts = H.sequential_points(chain)
        fit = [p for p in pts if p[2] <= memory * (1 + 1e-9)]
        if fit:
            seg = min(fit, key=lambda p: (p[1], p[2]))
            add(f"sequential ({seg[0]} segments)", (seg[1], seg[2]), H.sequential_schedule(chain, seg[0]))
    if H.recompute_all_ops(chain.L) <= RECOMPUTE_ALL_MAX_OPS:
        add("recompute-all", H.recompute_all_stats(chain), lambda: H.recompute_all_schedule(chain))
    else:
        skipped.append(f"recompute-all ({H.recompute_all_ops(chain.L)} operations)")
    bis = H.best_bisection(chain, memory, 1 if kind == "revolve" else None)   # the AD model: F_all^l B^l
    if bis is not None:
        add(f"bisection (runs of {bis[0]} stages stored)" if bis[0] > 1 else "bisection", bis[1:],
            lambda: H.bisection_schedule(chain, bis[0]))
    classes = [("revolve" if kind == "revolve" else "persistent",
                f"the least-memory {'AD-model ' if kind == 'revolve' else ''}sequence")]
    if kind != "revolve":
        classes.append(("all", "the least-memory sequence"))
    for cls, name in classes:
        try:
            mm = min_memory_of(chain, cls, time_limit=left())
        except TooCostly as e:
            skipped.append(f"{name} ({e})")
            continue
        add(name, (mm.makespan, mm.value), mm.schedule)
    return out, skipped


def _build(sched) -> RematSchedule:
    return sched() if callable(sched) else sched


# ----------------------------------------------------------------------------- the solutions
def _no_schedule(chain: Chain, memory: float, method: str, kind: str, times: dict, details: dict,
                 rounding: str | None, time_limit: float | None = None) -> Solution:
    """INFEASIBLE when nothing can fit (proven), else NO_SOLUTION saying why this method found nothing.
    When the least memory is estimated to take longer than ``time_limit`` to compute (long chains),
    INFEASIBLE is decided by the proven bound :func:`~remat_min_memory.necessary_memory`."""
    try:
        mm = min_memory_of(chain, "all", time_limit=time_limit)
    except TooCostly as e:
        low = necessary_memory(chain)
        details = {**details, "min_memory": low}
        if memory < low * (1 - 1e-12):
            return Solution(problem="remat", method=method, status=Status.INFEASIBLE, memory_limit=memory,
                            message=f"no valid sequence fits in {fmt_memory(memory)} ({fmt_bytes(memory)} B): none fits "
                            f"below {fmt_memory(low)} ({fmt_bytes(low)} B, a proven bound)", times=times, details=details)
        return Solution(problem="remat", method=method, status=Status.NO_SOLUTION, memory_limit=memory,
                        message=f"{method} found no sequence within {fmt_memory(memory)} in the time limit on this "
                        f"{chain.L}-stage chain: none of the quick baselines fits, and {e}; give a longer "
                        f"time limit (about {e.seconds:.0f} s more) or a larger limit (none fits below "
                        f"{fmt_memory(low)})", times=times, details=details)
    need = mm.value
    details = {**details, "min_memory": need}
    if not mm.exact:
        details["min_memory_bound"] = mm.lower
    if memory < need * (1 - 1e-12) and (mm.exact or memory < mm.lower * (1 - 1e-12)):
        bound = need if mm.exact else mm.lower
        details["min_memory"] = bound
        if mm.exact:
            msg = (f"no valid sequence fits in {fmt_memory(memory)} ({fmt_bytes(memory)} B): the minimum feasible "
                   f"memory is {fmt_memory(need)} ({fmt_bytes(need)} B)")
        else:
            msg = (f"no valid sequence fits in {fmt_memory(memory)} ({fmt_bytes(memory)} B): none fits below "
                   f"{fmt_memory(bound)} ({fmt_bytes(bound)} B, a proven bound), and one fits in {fmt_memory(need)} "
                   f"({fmt_bytes(need)} B)")
        return Solution(problem="remat", method=method, status=Status.INFEASIBLE, memory_limit=memory,
                        message=msg, times=times, details=details)
    try:
        cls = min_memory_of(chain, kind, time_limit=time_limit).value if kind != "all" else need
    except TooCostly:
        cls = 0.0                    # not computed in the time left: the message below says what would work
    if details.get("skipped") and rounding == "no slots":
        msg = (f"{method} found no sequence within {fmt_memory(memory)} in the time limit (minimum feasible "
               f"memory {fmt_memory(need)}): not run for lack of time: {'; '.join(details['skipped'])}; give a "
               "longer time limit")
    elif memory < cls * (1 - 1e-12):
        details["class_min_memory"] = cls
        if kind != "all" and cls > need * (1 + 1e-12):
            msg = (f"{method} found no sequence within {fmt_memory(memory)}: {_CLASS_TEXT[kind]} need at least "
                   f"{fmt_memory(cls)} ({cls:.0f} B); other sequences fit from {fmt_memory(need)} ({need:.0f} B)"
                   + ("" if mm.exact else " (or less)") + ": use method 'rotor-floating'")
        else:
            # the class's least memory is the least known at all, and the limit lies in the bracket
            # [proven bound, least known] (memory >= the bound: below it the answer is INFEASIBLE)
            msg = (f"{method} found no sequence within {fmt_memory(memory)}: one fits in {fmt_memory(need)} "
                   f"({need:.0f} B) and none below {fmt_memory(mm.lower)} ({mm.lower:.0f} B, a proven bound); "
                   f"whether one fits in between is not known: give at least {fmt_memory(need)}")
    else:
        msg = (f"{method} found no sequence within {fmt_memory(memory)} (minimum feasible memory "
               f"{fmt_memory(need)}); the rounding of {rounding} makes the limit too tight for it: use "
               "slots=None (automatic), more slots, exact=True, or a slightly larger limit")
    return Solution(problem="remat", method=method, status=Status.NO_SOLUTION, memory_limit=memory, message=msg,
                    times=times, details=details)


def floating_is_exact(chain: Chain) -> bool:
    """Whether the floating DP's optimum is, as far as known, the optimum over all valid sequences:
    gradient sizes equal to activation sizes at stages 1..L (``wd^l == wa^l``). Lemma 4.4 moves
    recomputations into the next phase, which can need more memory when a gradient is larger than
    what the backward frees: ``benchmarks/counterexample_floating_dp_deltas.py`` is a 6-stage chain
    where the DP gives 106 and a valid sequence takes 102 (:mod:`memplan.baselines.remat_bound`,
    rule 1). The profiled chains differ at index 0 only (token ids have no gradient), which no
    phase holds during a recomputation."""
    L = chain.L
    return bool(np.array_equal(chain.wd[1:L + 1], chain.wa[1:L + 1]))


def _solution(chain: Chain, memory: float, method: str, kind: str, sched: RematSchedule, predicted,
              status: Status, message: str, times: dict, details: dict, bound: float | None) -> Solution:
    rep = simulate_remat(chain, sched, memory_limit=memory)
    details = {**details, "recompute_time": rep.recompute_time, "optimal_within": _CLASS_TEXT[kind]}
    if kind == "all" and not floating_is_exact(chain):
        # the class "all valid sequences" is the DP's claim only where it is exact
        details["optimal_within"] = None
        details["proven"] = False
        if status == Status.OPTIMAL:
            status = Status.FEASIBLE
            message = ("the floating DP's sequence; not proven optimal: this chain's gradient sizes differ "
                       "from its activation sizes (wd != wa), where the DP can miss better sequences "
                       "(remat-milp proves the optimum)")
        bound = None
    return Solution(problem="remat", method=method, status=status, objective=rep.makespan,
                    peak_memory=rep.peak_memory, schedule=sched, memory_limit=memory, predicted=predicted,
                    bound=bound, message=message, times=times, details=details)


def _given(chain: Chain, memory: float, kind: str, method: str, slots: int, exact: bool, prune: bool,
           time_limit: float | None = None) -> Solution:
    """The DP with the discretization given by the caller (``slots`` or ``exact``), honoured as given.

    OPTIMAL (within the class) in exact mode, or when the DP with sizes rounded down (a relaxation:
    its value is a lower bound) gives the same value; else FEASIBLE with that bound.

    ``time_limit`` bounds the floating DP (``kind="all"``, O(S L^5): minutes at 1000 slots on
    ResNet-101), which stops between two of its stages: a plan run stopped at 85% of the limit (or
    not started, where :func:`dp_seconds` puts it beyond twice the limit) leaves the rest to the
    persistent DP with slots of its own choosing, whose schedule is returned with status
    TIME_LIMIT; a bound run stopped at the limit leaves the plan without a bound. The persistent DPs
    (O(S L^2)) run as given."""
    t0 = time.perf_counter()
    n = int(memory) if exact else int(slots)
    check_tables(kind, chain.L, n, what="exact=True (one slot per byte)" if exact else None)
    timed = time_limit is not None and kind == "all"          # the floating DP stops at a deadline
    if time_limit is not None and dp_seconds(kind, chain.L, n) > (2 if timed else 1) * float(time_limit):
        # not started: beyond the limit by its estimate (the floating DP: twice, since it can stop)
        return _stopped(chain, memory, method, kind, n, exact, None, t0, float(time_limit))
    try:
        value, ops, disc = _dp(chain, memory, kind, n, exact, "up", prune,
                               t0 + 0.85 * float(time_limit) if timed else None)
    except DPStopped as e:
        return _stopped(chain, memory, method, kind, n, exact, e, t0, float(time_limit))
    times = {"dp": time.perf_counter() - t0}
    details = {"discretization": disc.describe(), "slot_bytes": disc.q, "slots": "exact" if exact else n}
    if ops is None:
        times["total"] = time.perf_counter() - t0
        return _no_schedule(chain, memory, method, kind, times, details, disc.describe())
    bound = value
    proven = exact
    stopped = ""
    if not exact:
        low = None
        left = None if time_limit is None else t0 + float(time_limit) - time.perf_counter()
        if left is not None and not timed and dp_seconds(kind, chain.L, n) > left:
            stopped = (f"; the rounded-down DP (the bound) was not run: about {dp_seconds(kind, chain.L, n):.3g} s "
                       f"by its estimate, {max(left, 0.0):.3g} s left")
            details["skipped"] = [f"the lower bound (sizes rounded down) at {n} slots (not run in the time limit)"]
        else:
            try:
                low, _, _ = _dp(chain, memory, kind, n, False, "down", prune,
                                t0 + float(time_limit) if timed else None)
            except DPStopped as e:
                stopped = f"; the rounded-down DP (the bound) was stopped at the time limit ({e})"
                details["skipped"] = [f"the lower bound (sizes rounded down) at {n} slots: {e} at the time limit"]
            times["bound"] = time.perf_counter() - t0 - times["dp"]
        bound = low
        proven = low is not None and _same(low, value)
    times["total"] = time.perf_counter() - t0
    if proven:
        status = Status.OPTIMAL
        msg = f"optimal among {_CLASS_TEXT[kind]} ({disc.describe()}" + ("" if exact else
                                                                        "; the rounded-down DP proves it") + ")"
    else:
        status = Status.FEASIBLE
        gap = "" if bound is None else f"; the optimum is at least {bound:.6g} s (sizes rounded down)"
        msg = f"best within {disc.describe()}{gap}{stopped}"
    sol = _solution(chain, memory, method, kind, RematSchedule(ops), value, status, msg, times, details, bound)
    sol.details["proven"] = proven and (kind != "all" or floating_is_exact(chain))
    return sol


#: how :func:`_stopped`'s messages name each class's DP
_DP_NAMES = {"all": "the floating DP", "persistent": "the persistent DP", "revolve": "the revolve DP"}


def _stopped(chain: Chain, memory: float, method: str, kind: str, n: int, exact: bool, e: DPStopped | None,
             t0: float, time_limit: float) -> Solution:
    """:func:`_given`'s answer when its plan run was stopped (``e``) or not started (None): the DP of
    the same class with slots of its own choosing, made with what is left (the persistent DP for the
    floating one, whose automatic runs would not fit), status TIME_LIMIT."""
    spent = time.perf_counter() - t0
    fb = "persistent" if kind == "all" else kind
    fallback = {"persistent": "rotor", "revolve": "revolve"}[fb]
    sub = _auto(chain, memory, fb, fallback, True, max(0.0, t0 + time_limit - time.perf_counter()))
    what = "exact mode" if exact else f"{n} slots"
    how = (f"was {e} after {spent:.3g} s" if e is not None else
           f"was not started: about {dp_seconds(kind, chain.L, n):.3g} s by its estimate")
    times = {"dp": spent, "fallback": sub.times.get("total", 0.0), "total": time.perf_counter() - t0}
    details = {"slots": "exact" if exact else n, "stopped": True,
               "skipped": [f"{_DP_NAMES[kind]} at {what} {how} (time_limit={time_limit:g} s)"],
               "candidate": f"{_DP_NAMES[fb]} ({fallback}) with its own slots"}
    if sub.schedule is None:
        return _no_schedule(chain, memory, method, kind, times, {**details, **sub.details}, None)
    msg = (f"time limit: {_DP_NAMES[kind]} ({what}) {how}; the schedule of {_DP_NAMES[fb]} with its own slots "
           f"within the time left ({sub.message})")
    return _solution(chain, memory, method, kind, sub.schedule, None, Status.TIME_LIMIT, msg, times, details, None)


def _fitting_slots(kind: str, L: int, seconds: float, runs: int) -> int:
    """The most slots for which ``runs`` DP runs are estimated (:func:`dp_seconds`) to fit in
    ``seconds`` (0 if not even one slot does)."""
    if not math.isfinite(seconds):
        return sys.maxsize
    base = dp_seconds(kind, L, 0)
    per = dp_seconds(kind, L, 1) - base
    if runs * base >= seconds:
        return 0
    return int((seconds / runs - base) / per) if per > 0 else sys.maxsize


def _auto(chain: Chain, memory: float, kind: str, method: str, prune: bool, time_limit: float | None,
          extra: list[tuple[str, RematSchedule]] = ()) -> Solution:
    """The DP with a discretization it chooses, refined until proven, compared with the baselines.

    Exact mode when sizes and limit are integers and its table is small; else ``AUTO_START_SLOTS``
    slots, doubled while the rounded-up DP (plans) and the rounded-down DP (a lower bound) disagree,
    the tables stay below ``AUTO_TABLE_LIMIT`` and the time limit allows the next run (each doubling
    about doubles the time). The best replayed schedule among the DP's and the candidates of
    :func:`_candidates` (and ``extra``) is returned; OPTIMAL when its makespan equals the
    proven lower bound of the class.

    Every phase fits in ``time_limit``: a least-memory candidate or a DP run estimated
    (:func:`~remat_min_memory.min_memory_seconds`, :func:`dp_seconds`) to take longer than what is
    left is not started, the first run takes fewer slots when 500 would not fit (at least
    ``AUTO_MIN_SLOTS``), and the rounded-down run (the bound) is skipped when only the plan fits; on
    long chains (L = 1000 in a few seconds) the answer is then the best baseline, status FEASIBLE,
    and ``details["skipped"]`` says what did not fit."""
    t0 = time.perf_counter()
    deadline = math.inf if time_limit is None else t0 + float(time_limit)
    left = lambda: deadline - time.perf_counter()  # noqa: E731
    stop = deadline if math.isfinite(deadline) else None      # the floating DP's runs stop there too
    L = chain.L
    runs: list[dict] = []
    best_dp = None           # (value, ops, disc)
    bound = None
    proven_exact = False
    cands, skipped = _candidates(chain, memory, kind, left)
    lim = memory * (1 + 1e-9) + 1e-9
    for name, sched in extra:
        mk, peak = H.schedule_stats(chain, sched)
        if peak <= lim:
            cands.append((mk, name, sched))
    t_cands = time.perf_counter() - t0
    if (chain.is_integer and float(memory).is_integer() and memory <= EXACT_MAX
            and table_bytes(kind, L, int(memory)) <= AUTO_TABLE_LIMIT
            and dp_seconds(kind, L, int(memory)) <= left()):
        try:
            value, ops, disc = _dp(chain, memory, kind, int(memory), True, "up", prune, stop)
        except DPStopped as e:
            skipped.append(f"the exact DP ({e} at the time limit)")
        else:
            runs.append({"slots": "exact", "value": value, "bound": value})
            proven_exact = True
            if ops is not None:
                best_dp = (value, ops, disc)
                bound = value
            else:
                bound = math.inf     # exact: nothing of the class fits
    else:
        top = min(AUTO_START_SLOTS, max_slots(kind, L, AUTO_TABLE_LIMIT))
        S = min(top, _fitting_slots(kind, L, left(), 2))
        if S < min(AUTO_MIN_SLOTS, top):
            S = min(top, _fitting_slots(kind, L, left(), 1))     # the plan only, no bound
        if S < min(AUTO_MIN_SLOTS, top) or top < 1:
            if top < 1:
                skipped.append(f"the DP (its tables would exceed {fmt_memory(AUTO_TABLE_LIMIT)} on L = {L} stages "
                               "even with one memory slot)")
            else:
                skipped.append(f"the DP (one run with {min(top, AUTO_MIN_SLOTS)} slots: about "
                               f"{dp_seconds(kind, L, min(top, AUTO_MIN_SLOTS)):.3g} s on L = {L} stages, "
                               f"{max(left(), 0.0):.3g} s left)")
            S = 0
        while S >= 1:
            ts = time.perf_counter()
            try:
                value, ops, disc = _dp(chain, memory, kind, S, False, "up", prune, stop)
            except DPStopped as e:
                skipped.append(f"the DP at {S} slots ({e} at the time limit)")
                break
            if ops is not None and (best_dp is None or value < best_dp[0] - 1e-15):
                best_dp = (value, ops, disc)
            if dp_seconds(kind, L, S) > left():
                runs.append({"slots": S, "value": value, "bound": None, "seconds": time.perf_counter() - ts})
                skipped.append(f"the lower bound (sizes rounded down) at {S} slots")
                break
            try:
                low, _, _ = _dp(chain, memory, kind, S, False, "down", prune, stop)
            except DPStopped as e:
                runs.append({"slots": S, "value": value, "bound": None, "seconds": time.perf_counter() - ts})
                skipped.append(f"the lower bound (sizes rounded down) at {S} slots ({e} at the time limit)")
                break
            dt = time.perf_counter() - ts
            runs.append({"slots": S, "value": value, "bound": low, "seconds": dt})
            if low is None:
                bound = math.inf          # even the relaxation has nothing: no sequence of the class fits
                break
            bound = low if bound is None else max(bound, low)
            top_mk = min([c[0] for c in cands] + ([best_dp[0]] if best_dp else []), default=math.inf)
            if top_mk <= bound * (1 + 1e-12) + 1e-300:
                break                       # proven
            nxt = 2 * S
            if table_bytes(kind, L, nxt) > AUTO_TABLE_LIMIT or time.perf_counter() + 2.5 * dt > deadline:
                break
            S = nxt
    times = {"candidates": t_cands, "dp": time.perf_counter() - t0 - t_cands}
    if best_dp is not None:
        ops = best_dp[1]
        sched = RematSchedule(ops)
        cands.append((simulate_remat(chain, sched).makespan, "dp", sched))
    last = runs[-1]["slots"] if runs else None
    rounding = ("exact (one slot per byte)" if last == "exact" else
                f"{last} slots of {memory / last:.4g} B, sizes rounded up" if last else "no slots")
    details = {"refinements": runs, "slots": last, "discretization": rounding,
               "candidates": {name: mk for mk, name, _ in cands}}
    if skipped:
        details["skipped"] = skipped
    if not cands:
        times["total"] = time.perf_counter() - t0
        return _no_schedule(chain, memory, method, kind, times, details, rounding,
                            None if time_limit is None else max(0.0, left()))
    cands.sort(key=lambda c: (c[0], c[1] != "dp"))
    mk, name, sched = cands[0]
    sched = _build(sched)
    proven = bound is not None and math.isfinite(bound) and mk <= bound * (1 + 1e-12) + 1e-300
    # a candidate outside the class strictly below the class's proven optimum (the least-memory
    # sequence of all sequences, at the bottom of the range) proves only that the class is not optimal
    # here: the answer is not proven optimal, and the class's bound is no bound on it (random_chain(10,
    # 8) at 44 B: 326 from the least-memory sequence, the persistent optimum 330, rotor-floating 304)
    beaten = proven and mk < bound * (1 - 1e-12) - 1e-300
    proven = proven and not beaten
    details["candidate"] = name
    details["proven"] = proven
    times["total"] = time.perf_counter() - t0
    src = "the DP" if name == "dp" else name
    if beaten:
        msg = (f"{src} is faster than the proven optimum among {_CLASS_TEXT[kind]} ({bound:.6g} s), so that "
               "class is not optimal here and this sequence is not proven optimal (rotor-floating or remat-milp "
               "may find a faster one)")
        status = Status.FEASIBLE
        details["class_optimum"] = bound
        bound = None
    elif proven:
        how = "exact mode" if proven_exact else f"{last} slots; the rounded-down DP's lower bound is reached"
        msg = f"optimal among {_CLASS_TEXT[kind]} ({how}; schedule from {src})"
        status = Status.OPTIMAL
    else:
        lb = "" if bound is None or not math.isfinite(bound) else f"; the optimum is at least {bound:.6g} s"
        if runs:
            msg = f"best of the DP ({rounding}) and the baselines: {src}{lb}"
        else:
            msg = (f"best of the baselines: {src} (not run in the time limit: {'; '.join(skipped)}; a longer "
                   "time limit lets the DP improve it)")
        status = Status.FEASIBLE
    predicted = best_dp[0] if (best_dp is not None and name == "dp") else None
    return _solution(chain, memory, method, kind, sched, predicted, status, msg, times, details,
                     bound if bound is not None and math.isfinite(bound) else None)


# ----------------------------------------------------------------------------- public API
def persistent(chain: Chain, memory: float, *, slots: int | None = None, exact: bool = False,
               time_limit: float | None = None, _allow_carry: bool = True, _method: str = "rotor") -> Solution:
    """Optimal memory-persistent sequence (paper 004, Theorem 4.8, Algorithms 3 and 4).

    Complexity O(S L^3) time, O(S L^2) memory (S = slots). Returns a Solution replayed by
    :func:`memplan.models.remat.simulate_remat`.

    Discretization. ``exact=True``: one slot per byte (integer sizes), the optimum of the class.
    ``slots=S``: that many slots, sizes rounded up (plans never exceed the limit), honoured as given;
    the same DP with sizes rounded down gives a lower bound, and the status is OPTIMAL only when the
    two agree. ``slots=None`` (default): the DP chooses (exact mode on small integer chains, else
    500 slots doubled until the two DPs agree, within ``time_limit`` and
    :data:`AUTO_TABLE_LIMIT`) and the answer is the best of the DP's sequence, store-all, the best
    ``checkpoint_sequential`` cut, recompute-all and the least-memory sequences
    (:mod:`memplan.baselines.remat_min_memory`): it is never infeasible nor slower where one of
    those fits. Status OPTIMAL only when proven for the chain as given (exact mode, or the
    returned makespan equals the rounded-down DP's bound); INFEASIBLE only below the minimum
    feasible memory (exact, ``details["min_memory"]``); NO_SOLUTION when a given discretization
    finds nothing although something fits.

    Parameters
    ----------
    chain : Chain
    memory : float
        Memory limit in bytes.
    slots : int, optional
        Memory slots of ``memory / slots`` bytes; None: automatic.
    exact : bool
        One slot per byte (integer sizes and limit only).
    time_limit : float, optional
        Seconds the automatic refinement may take (None: until proven or the table limit). With
        ``slots`` or ``exact``: a run whose estimate exceeds it is not started (the automatic DP
        answers, status TIME_LIMIT) and the bound run is skipped where it would not fit in what is
        left (:func:`_given`).

    Examples
    --------
    Paper 004, section 3.2: the toy chain at 90 MiB.

    >>> from memplan.models.instance import load_instance
    >>> chain, _ = load_instance("paper004_table2")
    >>> sol = persistent(chain, 90 * 2**20)
    >>> str(sol.status), round(sol.objective * 1e3, 2), round(sol.peak_memory / 2**20, 2)
    ('optimal', 47.42, 86.75)
    """
    kind = "persistent" if _allow_carry else "revolve"
    if exact or slots is not None:
        return _given(chain, memory, kind, _method, slots, exact, True, time_limit)
    return _auto(chain, memory, kind, _method, True, time_limit)


def floating(chain: Chain, memory: float, *, slots: int | None = None, exact: bool = False,
             prune: bool = True, time_limit: float | None = None) -> Solution:
    """Optimal weakly-persistent sequence (paper 004, Theorem 4.7, Algorithms 1 and 2), optimal
    among all valid sequences of paper 004's operations by Lemma 4.4 (up to the discretization).

    Complexity O(S L^5) time and O(S L^3) memory (:func:`floating_table_bytes`). ``prune`` applies
    Corollary 4.5 (the floating activation only moves to a larger-or-equal one). ``slots``, ``exact``
    and ``time_limit`` as in :func:`persistent`; with ``slots=None`` the persistent DP's automatic
    answer is one of the candidates, so rotor-floating is never slower than rotor. The simulator also
    accepts ``F_all^l`` over a stored ``a^l`` (it replaces it by ``abar^l``), which is not an operation
    of Table 1: on chains where a gradient is larger than its activation a sequence using it can use
    less memory than the DP's (see :mod:`memplan.baselines.remat_min_memory`).

    Examples
    --------
    Paper 004's Figure 4 (L = 8, M = 15): the optimal sequence is not memory persistent and beats
    the persistent DP, 2n + 2 = 14 against 3n - 2 = 16 (n = 6).

    >>> from memplan.models.chain import Chain
    >>> chain = Chain.from_stages(uf=[4, 2, 0, 0, 0, 0, 0, 0], ub=[0] * 8, wa=[0, 1, 3, 3, 3, 3, 3, 3, 4])
    >>> float(floating(chain, 15, exact=True).objective), float(persistent(chain, 15, exact=True).objective)
    (14.0, 16.0)
    """
    chain.check_papers_times("rotor-floating (the floating DP; persistent() plans with them)")
    if exact or slots is not None:
        return _given(chain, memory, "all", "rotor-floating", slots, exact, prune, time_limit)
    t0 = time.perf_counter()
    pers = _auto(chain, memory, "persistent", "rotor", True, time_limit)
    extra = [("the persistent DP (rotor)", pers.schedule)] if pers.schedule is not None else []
    left = None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))
    sol = _auto(chain, memory, "all", "rotor-floating", prune, left, extra)
    sol.times["persistent"] = pers.times.get("total", 0.0)
    sol.times["total"] = time.perf_counter() - t0
    return sol


def revolve(chain: Chain, memory: float, *, slots: int | None = None, exact: bool = False,
            time_limit: float | None = None) -> Solution:
    """Optimal sequence of the AD model (paper 004, section 5.4; Figure 1b): only plain a^l are
    checkpointed and every ``F_all^l`` comes right before its ``B^l``, as in revolve (Griewank and
    Walther) and Gruslys et al.

    The persistent DP (:func:`persistent`) restricted to that class, with the true memory model (so
    the result never exceeds the limit, unlike a revolve computed on a^l sizes alone). Status
    FEASIBLE: optimal only within its restricted class (``details["proven"]`` says whether it is
    proven there). With ``slots=None`` the candidates are those of the class (recompute-all and the
    class's least-memory sequence). Complexity O(S L^3).

    Examples
    --------
    >>> from memplan.models.instance import load_instance
    >>> sol = revolve(load_instance("paper004_table2")[0], 90 * 2**20)
    >>> str(sol.status), round(sol.objective * 1e3, 2)
    ('feasible', 55.06)
    """
    sol = persistent(chain, memory, slots=slots, exact=exact, time_limit=time_limit, _allow_carry=False,
                     _method="revolve")
    if sol.status == Status.OPTIMAL:
        sol.status = Status.FEASIBLE   # optimal only within its restricted class
    return sol


sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
