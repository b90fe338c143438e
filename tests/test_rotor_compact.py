"""The rotor DPs' fast kernels against straightforward references (issue 21).

- the persistent kernel (tiles of cells, split points pruned by a lower bound, vectorized inner loop)
  against the plain diagonal-by-diagonal evaluation it replaced: the tables must be bit-identical,
  for the default tile size and for small ones;
- the floating kernel's compact tables (only cells s <= t <= l and r < t' <= l stored, one row each)
  against the dense (L+2)^3 (S+1) tables it replaced: every value and every choice identical.

The references are the earlier versions of the kernels, kept here (for small chains only).
"""
import numpy as np
import pytest
from numba import njit

from memplan.baselines import remat_heuristics as H
from memplan.baselines import remat_rotor as rotor
from memplan.models.chain import random_chain


@njit(cache=True)
def dense_persistent(L, S, uf, ub, wa, wab, wd, ofa, ofn, ob, allow_carry):
    """The persistent DP as it was before the pruned, tiled kernel: diagonal by diagonal, every
    split point over the whole memory range. Table C[s, t, m] for 1 <= s <= t <= L+1, 0 <= m <= S (Eq. 6-7). ``allow_carry=False`` forbids
    F_all^s unless B^s follows immediately (revolve / AD model).

    The arg-min is not stored: :func:`_persistent_choice` recomputes it along the reconstructed path
    only (O(L) per visited entry), which keeps the O(S L^3) inner loop a plain ``min``.
    ``lo[s, t]`` is the smallest m where C[s, t, m] is finite (C is non-increasing in m), so the
    inner loops skip the infeasible region; above ``full[s, t]`` storing everything fits and C is the
    store-all time."""
    n = L + 2
    C = np.full((n, n, S + 1), np.inf)
    lo = np.full((n, n), S + 1, dtype=np.int64)
    # full[s, t]: memory from which "F_all every stage" fits in sub-chain (s, t); from there on
    # C[s, t, m] is the sum of u_f + u_b over s..t, a lower bound, so no search is needed.
    full = np.zeros((n, n), dtype=np.int64)
    base = np.zeros((n, n))
    for s in range(1, L + 2):
        need = max(wd[s] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
        for m in range(need, S + 1):
            C[s, s, m] = uf[s] + ub[s]
        lo[s, s] = min(need, S + 1)
        full[s, s] = need
        base[s, s] = uf[s] + ub[s]
    buf = np.empty(S + 1)
    if allow_carry:
        for d in range(1, L + 1):
            for s in range(1, L + 2 - d):
                t = s + d
                full[s, t] = max(wd[t] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s],
                                 wab[s] + full[s + 1, t])
                base[s, t] = uf[s] + base[s + 1, t] + ub[s]   # same order as C_all: exact match
    for d in range(1, L + 1):
        for s in range(1, L + 2 - d):
            t = s + d
            buf[:] = np.inf
            top = S + 1
            if allow_carry and full[s, t] <= S:
                top = full[s, t]
                for m in range(top, S + 1):
                    buf[m] = base[s, t]
            # F_all^s first (C_all)
            if allow_carry:
                need = max(wd[t] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                sub = C[s + 1, t]
                for m in range(max(need, wab[s] + lo[s + 1, t]), top):
                    buf[m] = uf[s] + sub[m - wab[s]] + ub[s]
            # F_ck^s, F_none^{s+1..s'-1} (C_ck)
            need = wd[t] + wa[s] + ofn[s]
            fsum = 0.0
            for sp in range(s + 1, t + 1):
                fsum += uf[sp - 1]
                if sp - 1 > s:   # F_none^{sp-1} joins the run
                    j = sp - 1
                    need = max(need, wd[t] + wa[j - 1] + wa[j] + ofn[j])
                if need > S:
                    break
                first = C[sp, t]
                second = C[s, sp - 1]
                shift = wa[sp - 1]
                start = max(need, shift + lo[sp, t], lo[s, sp - 1])
                for m in range(start, top):
                    buf[m] = min(buf[m], fsum + first[m - shift] + second[m])
            C[s, t, :] = buf
            first_finite = S + 1
            for m in range(S + 1):
                if buf[m] < np.inf:
                    first_finite = m
                    break
            lo[s, t] = first_finite
    return C


@njit(cache=True)
def dense_floating(L, S, uf, ub, wa, wab, wd, ofa, ofn, ob, prune):
    """The floating DP with the dense (L+2)^3 (S+1) tables it had before the compact layout.
    Tables for Theorem 4.7. C[s, t, l, m]; choice R[s,t,l,m] = r (0: infeasible, -1: F_all^s,
    -2: floating move to a^{t-1} then C(t, t, l)),
    TP[s,t,l,m] = t'. G[r, t', l, m] = min over s' of U(r, s'-1) + C[s', t', l, m - wa^{s'-1}] with the
    F_ck^r and F_none^{r+1..s'-1} memory checks; GS = the arg-min s'. Order: l increasing, s
    decreasing, so that G(r=s, ., l) only needs C(s' > s, ., l) and C(r, t, t'-1 < l)."""
    n = L + 2
    C = np.full((n, n, n, S + 1), np.inf)
    R = np.zeros((n, n, n, S + 1), dtype=np.int16)
    TP = np.zeros((n, n, n, S + 1), dtype=np.int16)
    G = np.full((n, n, n, S + 1), np.inf)
    GS = np.zeros((n, n, n, S + 1), dtype=np.int16)
    U = np.zeros((n + 1, n + 1))   # U[a, b] = sum_{k=a}^{b} uf[k]
    for a in range(1, n):
        acc = 0.0
        for b in range(a, n):
            acc += uf[b]
            U[a, b] = acc
    for l in range(1, L + 2):
        for s in range(l, 0, -1):
            # --- G(s, t', l, .) for s < t' <= l (needs C(s' > s, t', l))
            if s < l:
                for tp in range(s + 1, l + 1):
                    g = G[s, tp, l]
                    gs = GS[s, tp, l]
                    need = wd[l] + wa[s] + ofn[s]          # F_ck^s
                    for sp in range(s + 1, tp + 1):
                        if sp - 1 > s:
                            j = sp - 1
                            need = max(need, wd[l] + wa[j - 1] + wa[j] + ofn[j])
                        if need > S:
                            break
                        sub = C[sp, tp, l]
                        shift = wa[sp - 1]
                        u = U[s, sp - 1]
                        for m in range(max(need, shift), S + 1):
                            v = u + sub[m - shift]
                            if v < g[m]:
                                g[m] = v
                                gs[m] = sp
            # --- C(s, t, l, .) for s <= t <= l
            for t in range(s, l + 1):
                row = C[s, t, l]
                rr = R[s, t, l]
                tt = TP[s, t, l]
                if s == t == l:
                    need = max(wd[s] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                    for m in range(need, S + 1):
                        row[m] = uf[s] + ub[s]
                        rr[m] = -1
                    continue
                if s == t:  # C_all (Eq. 5)
                    need = max(wd[l] + wab[s] + ofa[s], wd[s] + wd[s - 1] + wab[s] + ob[s])
                    sub = C[s + 1, s + 1, l]
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
                    sub = C[t, t, l]
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
                        g = G[r, tp, l]
                        second = C[r, t, tp - 1]
                        for m in range(max(lo, 0), S + 1):
                            m2 = m - delta_m
                            if m2 > S:
                                continue
                            v = u + g[m2] + second[m2]
                            if v < row[m]:
                                row[m] = v
                                rr[m] = r
                                tt[m] = tp
    return C, R, TP, GS


def _cases():
    out = []
    for seed in range(10):
        L = 1 + (3 * seed) % 14
        integer = seed % 2 == 0
        out.append((L, seed, integer))
    out += [(5, 11, True), (7, 12, False)]      # each forward's own overhead (of_all, of_ng below of)
    return out


def _chain(L, seed, integer):
    return random_chain(L, seed, integer=integer, own_overheads=seed > 10)


def _discs(c, slots):
    lo, hi = rotor.min_memory(c), H.store_all(c).peak_memory
    for frac in (0.0, 0.4, 1.2):
        for mode in ("up", "down"):
            yield rotor.Discretization(c, lo + frac * (hi - lo), slots, mode=mode)


@pytest.mark.parametrize("L, seed, integer", _cases())
def test_persistent_kernel_bit_identical(L, seed, integer):
    c = _chain(3 * L, seed, integer)
    finite = 0
    for disc in _discs(c, 120):
        args = rotor._args(disc, c)
        for carry in (True, False):
            ref = dense_persistent(*args, carry)
            finite += np.isfinite(ref[1, 3 * L + 1]).any()
            # the default tiles, and small ones: many tiles, split points between blocks, a last
            # block cut short (3 L + 1 indices), one cell per tile
            for block in (rotor._BLOCK, 1, 2, 5):
                new = rotor._persistent_kernel(*args, *rotor._time_model(c), carry, block)
                assert np.array_equal(ref, new)     # same floats, same infinities
    assert finite >= 8       # not vacuous: most limits have a sequence


@pytest.mark.parametrize("L, seed, integer", _cases())
def test_floating_compact_tables_match_dense(L, seed, integer):
    c = _chain(L, seed, integer)
    n = L + 2
    finite = 0
    for disc in _discs(c, 60):
        args = rotor._args(disc, c)
        for prune in (True, False):
            C0, R0, TP0, GS0 = dense_floating(*args, prune)
            C, R, TP, GS, IC, IG = rotor._floating_kernel(*args, prune)
            assert C.shape[0] == IC.max() + 1 and GS.shape[0] == IG.max() + 1
            cells = 0
            for l in range(1, n):
                for s in range(1, l + 1):
                    for t in range(s, l + 1):
                        k = IC[s, t, l]
                        assert np.array_equal(C[k], C0[s, t, l])
                        assert np.array_equal(R[k], R0[s, t, l]) and np.array_equal(TP[k], TP0[s, t, l])
                        cells += 1
                        if t > s:
                            g = IG[s, t, l]
                            assert np.array_equal(GS[g], GS0[s, t, l])
            assert cells == C.shape[0]
            finite += np.isfinite(C[IC[1, 1, L + 1]]).any()
            # the cells not stored stay unused by the dense kernel too
            for s in range(1, n):
                for t in range(1, n):
                    for l in range(1, n):
                        if not s <= t <= l:
                            assert IC[s, t, l] == -1 and np.isinf(C0[s, t, l]).all() and not R0[s, t, l].any()
    assert finite >= 4       # not vacuous: most limits have a sequence


def test_floating_table_bytes_is_the_allocation():
    """floating_table_bytes is what the floating kernel allocates: measured on the kernel's own
    arrays for small chains, and at the 73 stages and 500 slots of issue 21 (too large to allocate
    here) counted by enumerating the cells the kernel's layout stores: C, R, TP (8 + 2 + 2 bytes) for
    1 <= s <= t <= l <= L+1, G, GS (8 + 2) for 1 <= r < t' <= l <= L+1, rows of S+1 entries, plus the
    two (L+2)^3 int64 row indexes."""
    for L, S, seed in ((9, 40, 3), (2, 5, 0), (5, 13, 1)):
        c = random_chain(L, seed, integer=False)
        disc = rotor.Discretization(c, H.store_all(c).peak_memory, S)
        C, R, TP, GS, IC, IG = rotor._floating_kernel(*rotor._args(disc, c), True)
        ng = GS.shape[0]
        real = C.nbytes + R.nbytes + TP.nbytes + ng * (S + 1) * 8 + GS.nbytes + IC.nbytes + IG.nbytes
        assert rotor.floating_table_bytes(L, S) == real, (L, S)
    L, S = 73, 500
    cells = sum(1 for l in range(1, L + 2) for t in range(1, l + 1) for s in range(1, t + 1))
    gcells = sum(1 for l in range(1, L + 2) for tp in range(1, l + 1) for r in range(1, tp))
    counted = (cells * 12 + gcells * 10) * (S + 1) + 2 * 8 * (L + 2) ** 3
    assert rotor.floating_table_bytes(L, S) == counted
    # each compact table holds about a sixth of the rows of its dense (L+2)^3 layout
    assert 0.16 < cells / (L + 2) ** 3 < 0.18 and counted < 1e9


def test_floating_at_73_stages_is_accepted():
    """Issue 21: 500 slots on a 73-stage chain used to be refused (more than 8 GB of tables)."""
    rotor.check_tables("all", 73, 500)        # raises TableTooLarge when refused
    with pytest.raises(rotor.TableTooLarge):
        rotor.check_tables("all", 73, 100_000)
