"""The joint DP's optimized kernels give the same tables as the previous serial recurrence.

``baselines/remat_offload_dp.py``'s kernels were restructured for speed (issue 21, item 3): the
forward table loops over Delta_B innermost with each forward run computed once, prunes candidates
with a lower bound, and both kernels run in parallel stripes; then (slow links) the forward table
loops over j outside Delta_F, and both kernels skip candidates by exact bounds built from row minima
(``(Tf + RMO) + RMT``, ``(Tf + RMB) + T_1``). The previous kernels are kept below, verbatim
(``_ref_backward_kernel``, ``_ref_forward_kernel`` and the helpers they call) but for each forward's
own overhead, as in the kernels (F_all's ``ofa`` in F_all's conditions, the no-grad forwards' ``ofn``
in F_ck's and F_none's, where the paper has one ``o_f``), as the slow reference: every table (block time, spill and choice; forward value and choice) must be bit-identical,
hence the DP's value and schedule too. A bound that were ever too high would drop a candidate that
wins, and an equal value found later would change a choice: both show up here, on every entry.
"""
import math
from pathlib import Path

import numpy as np
import pytest
from numba import njit

from memplan.baselines import remat_offload_dp as rod
from memplan.baselines.remat_heuristics import min_memory, store_all
from memplan.models.chain import random_chain
from memplan.models.instance import load_chain
from memplan.models.remat_offload import simulate_remat_offload


# ----------------------------------------------------------------------------- the previous kernels
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


@njit(cache=True)
def _ref_backward_kernel(L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, pid):
    """Tables over pairs p = pid[i, j] (1 <= i <= j <= L), free memory m and prefetch demand D <= m:
    T[p, m, D] block duration, SP[p, m, D] parts spilled before the block, CH[p, m, D] choice
    (-1: F_all^i first, -2: single stage, i' >= i: F_ck^i F_none^{i+1..i'} keeping a^{i'})."""
    P = pid.max() + 1
    T = np.full((P, N + 1, N + 1), np.inf)
    SP = np.zeros((P, N + 1, N + 1), dtype=np.int16)
    CH = np.zeros((P, N + 1, N + 1), dtype=np.int16)
    Gs = np.empty(L + 2)
    Tfs = np.empty(L + 2)
    rooms = np.empty(L + 2, dtype=np.int64)
    for ln in range(0, L):
        for i in range(1, L + 1 - ln):
            j = i + ln
            p = pid[i, j]
            for m in range(0, N + 1):
                mb = ab[i] + d[i] + d[i - 1] + ob[i]
                if ln == 0:
                    mf = d[i] + ab[i] + ofa[i]
                    if m < mf or m < mb:
                        continue
                    for D in range(0, m + 1):
                        e3 = _wait(D - (m - mb), q)
                        k3 = min(D, _nch(ub[i] + e3, q))
                        R = D - k3
                        e1 = _wait(R - (m - mf), q)
                        k1 = min(R, _nch(uf[i] + e1, q))
                        _relax(T, SP, CH, p, m, D, uf[i] + e1 + ub[i] + e3, R - k1, -2)
                    continue
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
                nip = 0
                Tf = 0.0
                G = -np.inf
                minroom = 1 << 40
                for ip in range(i, j):
                    if ip == i:
                        mem = d[j] + a[i] + ofn[i]
                    else:
                        mem = d[j] + a[ip - 1] + a[ip] + ofn[ip]
                    Tf = Tf + uf[ip]
                    room = m - mem
                    if room < minroom:
                        minroom = room
                    if math.isfinite(q):
                        g = Tf - room * q
                        if g > G:
                            G = g
                    Tfs[ip] = Tf
                    Gs[ip] = G
                    rooms[ip] = minroom
                    nip = ip
                for ip in range(i, j):
                    if rooms[ip] < 0:
                        break
                    m2 = m - a[ip]
                    if m2 < 0:
                        continue
                    p1 = pid[i, ip]
                    p2 = pid[ip + 1, j]
                    Tf = Tfs[ip]
                    for D in range(0, m + 1):
                        T1 = T[p1, m, D]
                        if not T1 < np.inf:
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
                        elif not math.isfinite(q):
                            continue
                        else:
                            eps = s2 * q + Gs[ip] - Tf
                            if eps < 0.0:
                                eps = 0.0
                        k = min(s2, _nch(Tf + eps, q))
                        _relax(T, SP, CH, p, m, D, Tf + eps + T2 + T1, s2 - k, ip)
    return T, SP, CH


@njit(cache=True)
def _chunk_end_nb(c, F, zs, q):
    if c <= F:
        return c * q
    return zs + (c - F) * q


@njit(cache=True)
def _loss_eval(L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, x, A, F, P):
    """The loss junction (B.2); returns (s1, s2, E) or E = inf. Used by the table and by RematOffloadDP.loss."""
    z = ab[L] if x else a[L]
    res = A + d[L + 1] + z
    r1 = N - (res + ab[L + 1] + ofa[L + 1])
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


@njit(cache=True)
def _ref_forward_kernel(L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, pid, T, SP):
    """OC[i, x, A, F, P] (B.1, B.2) bottom-up over i = L+1..1 and its choice
    CH = 4 j + 2 f + v (j = 0: F_all^i first; j >= i: F_ck^i F_none^{i+1..j}; f = 1: "flush", the
    level's backward block first waits until all of Delta_B it could not host is prefetched, so that
    the sub-chain prefetches only Z^i); -1 when infeasible.
    States with A + F > N or A + P > N cannot be feasible and are not stored: (A, F, P) is packed
    as ``off[A] + F (N - A + 1) + P`` (about N^3 / 3 entries per level and x)."""
    off = np.zeros(N + 2, dtype=np.int64)      # packed index of (A, F, P), F, P <= N - A
    for A in range(N + 1):
        off[A + 1] = off[A] + (N - A + 1) ** 2
    OC = np.full((L + 2, 2, off[N + 1]), np.inf)
    CH = np.full((L + 2, 2, off[N + 1]), -1, dtype=np.int16)
    fin = math.isfinite(q)
    nv = 2 if fin else 1
    dL1 = d[L + 1]
    for x in range(2):
        for A in range(N + 1):
            for F in range(N - A + 1):
                for P in range(N - A + 1):
                    _, _, E = _loss_eval(L, N, uf, ub, a, ab, d, ofa, ofn, ob, q, x, A, F, P)
                    if E < np.inf:
                        OC[L + 1, x, off[A] + F * (N - A + 1) + P] = E
                        CH[L + 1, x, off[A] + F * (N - A + 1) + P] = 0
    for i in range(L, 0, -1):
        for x in range(2):
            if i == 1 and x == 1:
                continue
            z = ab[i - 1] if x else a[i - 1]
            mb1 = ab[i] + d[i] + d[i - 1] + ob[i]
            for A in range(N - z + 1):
                base = A + dL1
                mfree = N - A - z
                for F in range(N - A + 1):
                    for P in range(N - A + 1):
                        best = np.inf
                        bch = -1
                        for v in range(nv):
                            n_tot = F + v * z
                            res = base + (1 - v) * z
                            cA = A + (1 - v) * z
                            # ---- case 1: F_all^i, OC_1(i+1), B^i
                            room1 = N - (base + z + ab[i] + ofa[i])
                            if room1 >= 0 and mfree >= mb1:
                                s1 = _wait(F - room1, q)
                                e = s1 + uf[i]
                                zs = max(F * q, e) if v else 0.0
                                Tf = e
                                F2 = 0
                                if n_tot > 0:
                                    tend = _chunk_end_nb(n_tot, F, zs, q)
                                    F2 = max(0, int(math.ceil((tend - Tf) / q - 1e-9)))
                                e3 = _wait(P - (mfree - mb1), q)
                                if e3 < np.inf:
                                    k = min(P, _nch(ub[i] + e3, q))
                                    for fl in range(2):
                                        if fl == 1:
                                            # flush: idle after B^i until all of Delta_B is hosted
                                            if k == P or not fin:
                                                break
                                            e3 = max(e3, P * q - ub[i])
                                            k = min(P, _nch(ub[i] + e3, q))
                                        P2 = v * z + P - k
                                        if cA <= N and F2 <= N - cA and P2 <= N - cA:
                                            sub = OC[i + 1, 1, off[cA] + F2 * (N - cA + 1) + P2]
                                            if sub < np.inf:
                                                tot = Tf + sub + (ub[i] + e3)
                                                if tot < best:
                                                    best = tot
                                                    bch = 2 * fl + v
                            # ---- case 2: F_ck^i F_none^{i+1..j}, OC_0(j+1), C_A(i, j)
                            room1 = N - (base + z + a[i] + ofn[i])
                            if room1 < 0:
                                continue
                            s1 = _wait(F - room1, q)
                            e = s1 + uf[i]
                            zs = max(F * q, e) if v else 0.0
                            for j in range(i, L + 1):
                                if j > i:
                                    room = N - (res + a[j - 1] + a[j] + ofn[j])
                                    if room < 0:
                                        break
                                    c = n_tot - room
                                    s = e
                                    if c > 0:
                                        s = max(s, _chunk_end_nb(c, F, zs, q))
                                    e = s + uf[j]
                                Tf = e
                                F2 = 0
                                if n_tot > 0:
                                    tend = _chunk_end_nb(n_tot, F, zs, q)
                                    F2 = max(0, int(math.ceil((tend - Tf) / q - 1e-9)))
                                if P > mfree:
                                    continue
                                p = pid[i, j]
                                Tb = T[p, mfree, P]
                                if not Tb < np.inf:
                                    continue
                                sp = SP[p, mfree, P]
                                if F2 > N - cA:
                                    continue
                                for fl in range(2):
                                    if fl == 1 and (sp == 0 or not fin):
                                        break
                                    # flush: idle before the block while its spilled parts are prefetched
                                    P2 = v * z + (sp if fl == 0 else 0)
                                    if P2 > N - cA:
                                        continue
                                    sub = OC[j + 1, 0, off[cA] + F2 * (N - cA + 1) + P2]
                                    if sub < np.inf:
                                        tot = Tf + sub + (Tb if fl == 0 else sp * q + Tb)
                                        if tot < best:
                                            best = tot
                                            bch = 4 * j + 2 * fl + v
                        OC[i, x, off[A] + F * (N - A + 1) + P] = best
                        CH[i, x, off[A] + F * (N - A + 1) + P] = bch
    return OC, CH, off




# ----------------------------------------------------------------------------- comparisons
def _ref_tables(dp):
    args = (dp.chain.L, dp.N, dp.uf, dp.ub, dp.a, dp.ab, dp.d, dp.ofa, dp.ofn, dp.ob, dp.q)
    T, SP, CH = _ref_backward_kernel(*args, dp.pid)
    OC, FCH, off = _ref_forward_kernel(*args, dp.pid, T, SP)
    return T, SP, CH, OC, FCH, off


def _memory(chain, frac):
    lo, hi = min_memory(chain), store_all(chain).peak_memory
    return lo + frac * (hi - lo)


def _assert_same_tables(dp, ref, stripes=(1, 2, 5)):
    T0, SP0, CH0, OC0, FCH0, off0 = ref
    args = (dp.chain.L, dp.N, dp.uf, dp.ub, dp.a, dp.ab, dp.d, dp.ofa, dp.ofn, dp.ob, dp.q)
    for nth in stripes:          # the parallel stripes must not change anything (no race, no order effect)
        T, SP, CH, dlo, dhi, rmb = rod._backward_kernel(*args, dp.pid, nth)
        np.testing.assert_array_equal(T, T0)
        np.testing.assert_array_equal(SP, SP0)
        np.testing.assert_array_equal(CH, CH0)
        # the finite range of each row is what the forward kernel relies on
        fin = np.isfinite(T0)
        has = fin.any(axis=2)
        np.testing.assert_array_equal(dhi >= 0, has)
        np.testing.assert_array_equal(dlo[has], fin.argmax(axis=2)[has])
        np.testing.assert_array_equal(dhi[has], dp.N - fin[:, :, ::-1].argmax(axis=2)[has])
        np.testing.assert_array_equal(rmb, T0.min(axis=2))      # each row's minimum (the skip bounds')
        OC, FCH, off, _ = rod._forward_kernel(*args, dp.pid, T, SP, dlo, dhi, rmb, nth, True)
        np.testing.assert_array_equal(off, off0)
        np.testing.assert_array_equal(OC, OC0)      # bit-identical values, inf where infeasible
        np.testing.assert_array_equal(FCH, FCH0)


def _assert_same_solution(chain, M, beta, ref, **kw):
    """solve_remat_offload_dp's value and schedule equal those rebuilt from the reference tables."""
    sol = rod.solve_remat_offload_dp(chain, M, beta, **kw)
    dp = rod.RematOffloadDP(chain, M, beta, **kw)
    dp.T, dp.SP, dp.CH, dp.OC, dp.FCH, dp.off = ref
    best, _ = dp.value(1, 0, 0, 0, 0)
    if not best < math.inf:
        assert sol.objective is None
        return
    assert sol.predicted == best
    sched = dp.rebuild()
    assert sol.schedule.ops == sched.ops and sol.schedule.release == sched.release
    assert sol.schedule.transfers == sched.transfers
    assert simulate_remat_offload(chain, sched, dp.beta, M).makespan == sol.objective


@pytest.mark.parametrize("seed", [0, 1, pytest.param(2, marks=pytest.mark.long), pytest.param(3, marks=pytest.mark.long)])
def test_exact_mode_tables_equal_the_serial_recurrence(seed):
    """Integer chains, one slot per byte: tight memory (waits, spills, flushes) to ample memory
    (the lower-bound pruning closes most states), slow and fast links, and no link at all."""
    c = random_chain(6, seed, max_size=5, max_time=5)
    for frac in (0.0, 0.15, 0.5, 1.0):
        M = math.ceil(_memory(c, frac))
        for beta in (0.0, 0.5, 1.0, 3.0):
            dp = rod.RematOffloadDP(c, M, beta, exact=True)
            ref = _ref_tables(dp)
            _assert_same_tables(dp, ref, stripes=(1, 3) if beta == 1.0 else (1,))
            _assert_same_solution(c, M, beta, ref, exact=True)


@pytest.mark.parametrize("seed", range(2))
def test_own_overheads_tables_equal_the_serial_recurrence(seed):
    """Chains whose forwards have their own overheads (F_all's and the no-grad forwards' differ, one
    of them equal to ``of``): exact mode, and a float chain with slots."""
    c = random_chain(6, seed, max_size=5, max_time=5, own_overheads=True)
    assert (c.of_all != c.of_ng).sum() >= 3
    for frac in (0.0, 0.3, 1.0):
        M = math.ceil(_memory(c, frac))
        for beta in (0.0, 0.5, 2.0):
            dp = rod.RematOffloadDP(c, M, beta, exact=True)
            ref = _ref_tables(dp)
            _assert_same_tables(dp, ref, stripes=(1, 3) if beta == 0.5 else (1,))
            _assert_same_solution(c, M, beta, ref, exact=True)
    c = random_chain(12, seed, integer=False, own_overheads=True)
    M = _memory(c, 0.2)
    for beta in (1e9, 1.2e10):
        dp = rod.RematOffloadDP(c, M, beta, slots=20)
        assert (dp.ofa != dp.ofn).any()
        ref = _ref_tables(dp)
        _assert_same_tables(dp, ref, stripes=(1, 2))
        _assert_same_solution(c, M, beta, ref, slots=20)


@pytest.mark.parametrize("seed", range(2))
def test_float_chain_tables_equal_the_serial_recurrence(seed):
    """Float chains with slots; the bandwidths span "transfers nearly free" (12 GB/s: pruning
    everywhere) to "one part takes longer than a stage" (50 MB/s: almost no pruning)."""
    c = random_chain(14, seed, integer=False)
    for frac in (0.1, 0.3):
        M = _memory(c, frac)
        for beta in (5e7, 1e9, 1.2e10):
            dp = rod.RematOffloadDP(c, M, beta, slots=24)
            ref = _ref_tables(dp)
            _assert_same_tables(dp, ref, stripes=(1, 2, 5) if frac == 0.3 else (1,))
            _assert_same_solution(c, M, beta, ref, slots=24)


@pytest.mark.parametrize("frac, beta", [(0.3, 1e8), pytest.param(0.1, 3e8, marks=pytest.mark.long),
                                        pytest.param(0.6, 1e8, marks=pytest.mark.long)])
def test_zoo_chain_at_slow_links_tables_equal_the_serial_recurrence(frac, beta):
    """The regime of issue 21's slow-link target: the zoo's ResNet-101 chain (L = 73) with transfers
    slow next to compute (100 and 300 MB/s: one slot part takes longer than three forward stages of
    median length), where the lower bound Tf + S_i prunes little and the exact skip tests leave out most of
    what is skipped; few slots keep the serial reference short. (Two of the three limits are marked
    long: benchmarks/long_checks.sh.)"""
    c = load_chain(Path(__file__).resolve().parents[1] / "instances" / "resnet101-b8-224-cpu.json")
    assert c.L == 73
    M = _memory(c, frac)
    dp = rod.RematOffloadDP(c, M, beta, slots=20)
    assert dp.q > 3 * np.median(c.uf[1:])       # slow: a part outlasts three typical stages
    ref = _ref_tables(dp)
    assert np.isfinite(ref[3][1, 0, 0])         # a schedule exists, its tables are compared
    _assert_same_tables(dp, ref, stripes=(1, 2))
    _assert_same_solution(c, M, beta, ref, slots=20)


@pytest.mark.parametrize("case", ["float", "integer"])
def test_pruning_is_exercised(case):
    """The lower-bound pruning of the forward table (bound ``Tf + S_i``) really skips work, and skips
    only what cannot matter.

    Ample memory and a fast link, where the bound closes states: the forward kernel with the pruning
    visits fewer rows (j, Delta_F) than the same kernel with it switched off (``prune=False``), and
    both give tables bit-identical to the serial recurrence above, which has no pruning. A bound that
    were too high (unsound) closes states that a later candidate improves, so the tables differ from
    the serial ones (both instances catch a bound 1.5x too high); a pruning that never fires leaves
    the work equal."""
    if case == "float":
        c = random_chain(10, 0, integer=False)
        dp = rod.RematOffloadDP(c, _memory(c, 0.8), 1.2e10, slots=24)
    else:
        c = random_chain(6, 0, max_size=5, max_time=5)
        dp = rod.RematOffloadDP(c, math.ceil(_memory(c, 1.0)), 3.0, exact=True)
    ref = _ref_tables(dp)
    args = (dp.chain.L, dp.N, dp.uf, dp.ub, dp.a, dp.ab, dp.d, dp.ofa, dp.ofn, dp.ob, dp.q)
    T, SP, CH, dlo, dhi, rmb = rod._backward_kernel(*args, dp.pid, 1)
    work = {}
    for prune in (True, False):
        OC, FCH, off, work[prune] = rod._forward_kernel(*args, dp.pid, T, SP, dlo, dhi, rmb, 1, prune)
        np.testing.assert_array_equal(OC, ref[3])           # the serial table (no pruning), bit for bit
        np.testing.assert_array_equal(FCH, ref[4])
    # measured: 60029 of 60864 rows (float), 36292 of 47730 (integer); the exact skip tests, at least
    # as strong per candidate, leave the pruning the rows and the early end of the loop over j
    assert work[True] < (0.99 if case == "float" else 0.8) * work[False], work
    dp.tables()                                             # what solve uses: the pruned kernel
    assert dp.work == work[True]
    # the bound itself: every forward value is at least S_i = sum_{k >= i} (uf^k + ub^k), and some
    # equal it (store-all within reach), so the pruning has states to close
    S = np.cumsum((c.uf + c.ub)[::-1])[::-1]
    tight = 0
    for i in range(1, c.L + 2):
        v = OC[i][np.isfinite(OC[i])]
        assert (v >= S[i] * (1 - 1e-12)).all()
        tight += int(np.isclose(v, S[i], rtol=1e-12, atol=0).sum())
    assert tight > 0


def _stripes_in_child(args, pid, conn):
    T = rod._backward_kernel(*args, pid, 3)[0]
    conn.send(float(np.nansum(np.where(np.isfinite(T), T, 0.0))))
    conn.close()


def test_striped_tables_in_a_forked_child():
    """The stripes' threads are made once per process: a child made by ``fork`` after the parent ran
    striped tables (it inherits the pool object, not its threads) makes its own and finishes, with
    the parent's tables."""
    import multiprocessing as mp

    if "fork" not in mp.get_all_start_methods():
        pytest.skip("this platform has no fork")
    c = random_chain(5, 2, integer=False)
    dp = rod.RematOffloadDP(c, _memory(c, 0.5), 1e9, slots=12)
    args = (c.L, dp.N, dp.uf, dp.ub, dp.a, dp.ab, dp.d, dp.ofa, dp.ofn, dp.ob, dp.q)
    T = rod._backward_kernel(*args, dp.pid, 3)[0]           # the parent's pool of 2 threads exists now
    here = float(np.nansum(np.where(np.isfinite(T), T, 0.0)))
    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_stripes_in_child, args=(args, dp.pid, send))
    child.start()
    try:
        assert recv.poll(60), "the forked child's striped tables did not finish"
        assert recv.recv() == here
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
