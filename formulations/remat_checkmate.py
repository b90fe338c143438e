"""Checkmate (Jain et al., MLSys 2020) on the chain's graph, and its LP relaxation + two-phase rounding.

Written from the paper's description (section 4 of Checkmate: the MILP over a T x T grid of stages;
section 5: LP relaxation and two-phase rounding); paper 004 section 5.4 describes how it is compared
with Rotor ("does not differentiate between a and abar values; so for validity we have included a
conversion step which uses F_all operations when necessary").

The graph
---------
Nodes in topological order ``1..n`` with ``n = 2(L+1)``: ``F^1..F^{L+1}`` (node l; the loss is F^{L+1})
then ``B^{L+1}, B^L, ..., B^1`` (node ``2L+3-l`` is B^l). Edges (Figure 1a of paper 004):
``F^{l-1} -> F^l`` (a^{l-1}), ``F^l -> B^l`` (abar^l), ``F^{l-1} -> B^l`` (a^{l-1}),
``B^{l+1} -> B^l`` (delta^l). a^0 and delta^{L+1} are inputs, always resident. Costs: ``u_f^l`` /
``u_b^l``. Output sizes: F^l's value costs ``omega_abar^l`` (Checkmate has one value per node, so a
stored forward value is charged as the tape abar^l, never as the smaller a^l), B^l's costs
``omega_delta^{l-1}``. A backward node is computed only in its own stage (``R[t, B] = 0`` for the
other stages): paper 004's model, like autograd, runs each B^l once. Overheads o_f / o_b are added to the memory of the node while it runs (the
original has none; paper 004's reimplementation measured them), see ``c_u_budget``.

The forward overhead is each forward's own (``o_f_all`` = :attr:`Chain.of_all` for F_all, ``o_f_ng`` =
:attr:`Chain.of_ng` for F_ck / F_none), the paper's ``o_f`` when they are equal. Checkmate's model runs
only one kind of forward: a forward node has one value, charged as the tape abar^l (above), which only
F_all stores (no node stores the plain a^l of F_ck / F_none), so every forward node is an F_all^l and
its overhead is F_all's own, ``o_f_all^l`` (in ``c_u_budget``). The F_ck^l / F_none^l that the
conversion below makes of some of its computations are charged ``o_f_ng^l`` (with the smaller a^l) by
the replay, so the node is charged ``max(o_f_all^l, o_f_ng^l - (wabar^l - wa^l))``: its memory
``wabar^l + o`` then covers both kinds, as the papers' one ``o_f`` (the larger) did, and where the
no-grad forward's extra transient is at most what F_all stores beyond a^l (GPT-2's attention: the
attention weights, a transient without autograd and part of abar with it) the charge is F_all's own.

The MILP (Checkmate, section 4; equation names in the constraint names)
-----------------------------------------------------------------------
Stage t = 1..n computes node t (frontier-advancing): ``R[t,t] = 1``, ``R[t,i] = 0`` for i > t,
``S[t,i] = 0`` for i >= t.

- ``c_dep``: ``R[t,j] <= R[t,i] + S[t,i]`` for every edge i -> j (an input is computed in the stage or
  resident from the previous one);
- ``c_keep``: ``S[t+1,i] <= R[t,i] + S[t,i]`` (only a value present in stage t can be kept);
- ``c_u_init``: ``U[t,1] = static + sum_i M_i S[t,i] + M_1 R[t,1]``;
- ``c_u_next``: ``U[t,k] = U[t,k-1] - sum_{i in DEPS[k-1] u {k-1}} M_i FREE[t,i,k-1] + M_k R[t,k]``;
- ``c_free_lo`` / ``c_free_hi``: ``FREE[t,i,k] = R[t,k] (1 - S[t+1,i]) prod_{j in USERS[i], j > k}
  (1 - R[t,j])`` linearized with the hazard count ``h = (1 - R[t,k]) + S[t+1,i] + sum R[t,j]``:
  ``1 - FREE <= h`` and ``h_max (1 - FREE) >= h``;
- ``c_u_budget``: ``U[t,k] + o_k R[t,k] <= M`` (``o_k``: ``max(o_f_all^l, o_f_ng^l - (wabar^l - wa^l))``
  for the forward node F^l, an F_all in Checkmate's model that the conversion may turn into F_ck^l or
  F_none^l, see above; ``o_b^l`` for B^l);
- objective ``sum_t sum_i C_i R[t,i]``.

:func:`build_checkmate` writes this model in Pyomo, with these names; the solvers build the same
rows as arrays (:func:`build_checkmate_arrays`, numpy, family by family; ``tests/test_checkmate.py``
checks that the two give the same matrix, bounds and objective) and hand them to HiGHS through
:func:`formulations.highs_driver.solve_arrays`: on 2 shared cores the Pyomo model took 2 s to build and
0.9 s to compile at L = 60 (and the first one of a process 1.5 s more to import Pyomo and start its
compiler), none of which a time limit can interrupt; the arrays take 0.02 s. Inside a ``memplan.remat.solve``
call the build stops between two families once the call's time is up (NO_SOLUTION,
``details["interrupted"] = "build"``), and HiGHS gets what is left of the call.

From R, S to a sequence of paper 004 (the conversion of section 5.4)
--------------------------------------------------------------------
The stages are executed in order, each computing its nodes ``i`` with ``R[t,i] = 1`` in topological
order. A forward node becomes F_all^l when its value is the one B^l consumes and a^{l-1} stays resident
in Checkmate's plan until B^l (F_all keeps its input); otherwise it becomes F_ck^l (the plan uses a^{l-1}
again before recomputing it) or F_none^l. When B^l is reached without abar^l (only the plain a^l is
resident, or it was freed by B^{l+1}, which in paper 004's model frees a plain a^l), an ``F_all^l`` is
inserted right before it from a^{l-1} (a recomputation Checkmate did not pay for). Computations whose
value no (live) computation uses, or that are already resident, are skipped. The sequence is then replayed by
:func:`models.remat.simulate_remat`: its peak can exceed the limit Checkmate was given (a value Checkmate
frees may be one paper 004's model cannot free, F_all keeps a^{l-1}, abar may be smaller than a);
then the result says so (status LIMIT_EXCEEDED, ``details["limit_exceeded"] = True``).

LP relaxation + two-phase rounding (Checkmate section 5): solve the relaxation, round S (deterministic
threshold 0.5 and randomized rounding S = 1 with probability S*), then take the cheapest R that satisfies
the dependencies for the rounded S (computed by a backward closure per stage, which is what the LP in R
with S fixed gives). Memory is not enforced by the rounding; the memory the schedule really uses is
reported, and the fastest candidate within the limit is returned (else the one with the smallest peak).
"""
from __future__ import annotations

import time

import numpy as np

from memplan.models import budget as _budget
from memplan.models.chain import Chain
from memplan.models.remat import InvalidSequence, RematSchedule, simulate_remat
from memplan.models.solution import Solution, Status
from memplan.models.units import fmt_memory
from memplan.formulations.highs_driver import (EXACT_TOLERANCES, BuildClock, BuildInterrupted, MilpResult,
                                                solve_arrays, timed)



class ChainGraph:
    """The chain as Checkmate's DAG: node ids 1..n, kind/stage, deps/users, cost, size, overhead."""

    def __init__(self, chain: Chain):
        L = chain.L
        self.L = L
        self.n = n = 2 * (L + 1)
        self.kind = [None] * (n + 1)
        self.stage = [0] * (n + 1)
        for l in range(1, L + 2):
            self.kind[self.F(l)], self.stage[self.F(l)] = "F", l
            self.kind[self.B(l)], self.stage[self.B(l)] = "B", l
        self.deps: list[list[int]] = [[] for _ in range(n + 1)]
        for l in range(1, L + 2):
            if l >= 2:
                self.deps[self.F(l)].append(self.F(l - 1))
                self.deps[self.B(l)].append(self.F(l - 1))
            self.deps[self.B(l)].append(self.F(l))
            if l <= L:
                self.deps[self.B(l)].append(self.B(l + 1))
        for j in range(1, n + 1):
            self.deps[j].sort()
        self.users: list[list[int]] = [[] for _ in range(n + 1)]
        for j in range(1, n + 1):
            for i in self.deps[j]:
                self.users[i].append(j)
        self.cost = np.zeros(n + 1)
        self.size = np.zeros(n + 1)
        self.over = np.zeros(n + 1)
        for l in range(1, L + 2):
            f, b = self.F(l), self.B(l)
            self.cost[f], self.cost[b] = chain.uf[l], chain.ub[l]
            self.size[f], self.size[b] = chain.wabar[l], chain.wd[l - 1]
            # every forward node of Checkmate's model is an F_all (its value is charged as the tape
            # abar^l): F_all's own overhead o_f_all, raised where the F_ck / F_none the conversion may
            # make of it would need more (module docstring; c_u_budget)
            self.over[f] = max(chain.of_all[l], chain.of_ng[l] - (chain.wabar[l] - chain.wa[l]))
            self.over[b] = chain.ob[l]
        self.static = float(chain.wa[0] + chain.wd[L + 1])

    def F(self, l: int) -> int:
        return l

    def B(self, l: int) -> int:
        return 2 * self.L + 3 - l


def build_checkmate(chain: Chain, memory: float):
    """Checkmate's MILP (module docstring) as a Pyomo model; ``model.graph``, ``model.time_scale``."""
    import pyomo.environ as pyo

    g = ChainGraph(chain)
    n, L = g.n, g.L
    ms = 1.0 / float(memory)
    ts = chain.store_all_time() or 1.0
    size = g.size * ms
    over = g.over * ms
    cost = g.cost / ts
    m = pyo.ConcreteModel(name=f"checkmate[{chain.name}]")
    m.graph, m.time_scale = g, ts
    r_idx = [(t, i) for t in range(1, n + 1) for i in range(1, t + 1)]
    s_idx = [(t, i) for t in range(2, n + 1) for i in range(1, t)]
    m.R = pyo.Var(r_idx, domain=pyo.Binary)
    m.S = pyo.Var(s_idx, domain=pyo.Binary)
    for t in range(1, n + 1):
        m.R[t, t].fix(1)                               # frontier-advancing stages
        for i in range(L + 2, t):
            m.R[t, i].fix(0)                           # a backward step runs once (in its own stage)
    free_idx = [(t, i, k) for t in range(1, n + 1) for k in range(1, t + 1) for i in g.deps[k] + [k]]
    m.FREE = pyo.Var(free_idx, domain=pyo.Binary)
    m.U = pyo.Var(r_idx, bounds=(0, None))

    def S(t, i):
        return m.S[t, i] if (t, i) in m.S else 0

    def R(t, i):
        return m.R[t, i] if i <= t else 0

    dep_idx = [(t, i, j) for t in range(1, n + 1) for j in range(1, t + 1) for i in g.deps[j]]
    m.c_dep = pyo.Constraint(dep_idx, rule=lambda m_, t, i, j: m.R[t, j] <= R(t, i) + S(t, i))
    m.c_keep = pyo.Constraint(s_idx, rule=lambda m_, t, i: m.S[t, i] <= R(t - 1, i) + S(t - 1, i))

    def hazards(t, i, k):
        later = [j for j in g.users[i] if k < j <= t]
        h = (1 - m.R[t, k]) + S(t + 1, i) + sum(m.R[t, j] for j in later)
        return h, 2 + len(later)

    m.c_free_lo = pyo.Constraint(free_idx, rule=lambda m_, t, i, k: 1 - m.FREE[t, i, k] <= hazards(t, i, k)[0])
    m.c_free_hi = pyo.Constraint(
        free_idx, rule=lambda m_, t, i, k: hazards(t, i, k)[1] * (1 - m.FREE[t, i, k]) >= hazards(t, i, k)[0])
    m.c_u_init = pyo.Constraint(
        range(1, n + 1), rule=lambda m_, t: m.U[t, 1] == g.static * ms + sum(size[i] * S(t, i) for i in range(1, t))
        + size[1] * m.R[t, 1])
    m.c_u_next = pyo.Constraint(
        [(t, k) for (t, k) in r_idx if k >= 2],
        rule=lambda m_, t, k: m.U[t, k] == m.U[t, k - 1]
        - sum(size[i] * m.FREE[t, i, k - 1] for i in g.deps[k - 1] + [k - 1]) + size[k] * m.R[t, k])
    m.c_u_budget = pyo.Constraint(r_idx, rule=lambda m_, t, k: m.U[t, k] + over[k] * m.R[t, k] <= 1.0)
    m.makespan = pyo.Objective(expr=sum(cost[i] * m.R[t, i] for (t, i) in r_idx))
    return m


class _Rows:
    """Rows ``lo <= sum coef x <= hi`` collected family by family as arrays (no Pyomo objects)."""

    def __init__(self) -> None:
        self.r: list[np.ndarray] = []
        self.c: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.lo: list[np.ndarray] = []
        self.hi: list[np.ndarray] = []
        self.m = 0
        self.families: dict[str, int] = {}

    def add(self, name: str, m: int, terms, lo, hi) -> None:
        """``m`` rows of family ``name``. ``terms``: ``(cols, coefs, fixed)`` arrays of length ``m``, one
        term per row each; ``cols < 0`` is a variable fixed at ``fixed`` (0 for a term that is absent),
        whose part moves to the bounds, as Pyomo's compiler moves a fixed variable's. Zero coefficients
        are dropped; a row left empty is checked (it must hold) and dropped."""
        const = np.zeros(m)
        rows, cols, vals = [], [], []
        for c, v, f in terms:
            c = np.asarray(c, dtype=np.int64)
            v = np.broadcast_to(np.asarray(v, dtype=float), (m,))
            f = np.broadcast_to(np.asarray(f, dtype=float), (m,))
            var = c >= 0
            const += np.where(var, 0.0, v * f)
            keep = var & (v != 0.0)
            rows.append(np.flatnonzero(keep))
            cols.append(c[keep])
            vals.append(v[keep])
        rows_a = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        lo = np.broadcast_to(np.asarray(lo, dtype=float), (m,)) - const
        hi = np.broadcast_to(np.asarray(hi, dtype=float), (m,)) - const
        used = np.zeros(m, dtype=bool)
        used[rows_a] = True
        if not used.all() and ((lo[~used] > 1e-9) | (hi[~used] < -1e-9)).any():
            raise AssertionError(f"{name}: a row without variables is violated")
        new = np.cumsum(used) - 1 + self.m
        self.r.append(new[rows_a])
        self.c.append(np.concatenate(cols))
        self.v.append(np.concatenate(vals))
        self.lo.append(lo[used])
        self.hi.append(hi[used])
        k = int(used.sum())
        self.m += k
        self.families[name] = k


class CheckmateArrays:
    """Checkmate's MILP (:func:`build_checkmate`, the same rows and objective) as arrays for
    :func:`formulations.highs_driver.solve_arrays`, built with numpy family by family: 30x faster
    than the Pyomo model and its compilation (L = 60: 0.1 s against 3 s), and no Pyomo import.
    Fixed variables (``R[t,t] = 1``, a backward node outside its stage ``R[t,i] = 0``) are
    substituted, as Pyomo's compiler does. Columns: the free ``R[t,i]``, then ``S[t,i]``,
    ``FREE[t,i,k]`` and ``U[t,k]``, each in the index order of :func:`build_checkmate`
    (:meth:`column_names` gives Pyomo's names)."""

    def __init__(self, chain: Chain, memory: float, clock=None):
        g = ChainGraph(chain)
        n, L = g.n, g.L
        self.graph, self.n = g, n
        ms = 1.0 / float(memory)
        ts = chain.store_all_time() or 1.0
        self.time_scale = ts
        size = g.size * ms
        over = g.over * ms
        cost = g.cost / ts
        check = clock.check if clock is not None else (lambda: None)

        # R over r_idx = [(t, i) for t in 1..n for i in 1..t]: position t(t-1)/2 + i-1
        tr, ir = np.tril_indices(n)
        T, I = tr + 1, ir + 1
        fixed_one = I == T
        fixed = fixed_one | ((I >= L + 2) & (I < T))
        nR = int((~fixed).sum())
        self.r_col = np.full((n + 2, n + 2), -1, dtype=np.int64)
        self.r_fix = np.zeros((n + 2, n + 2))
        self.r_col[T[~fixed], I[~fixed]] = np.arange(nR)
        self.r_fix[T[fixed_one], I[fixed_one]] = 1.0
        # S over s_idx = [(t, i) for t in 2..n for i in 1..t-1]
        ts_, is_ = np.tril_indices(n, -1)
        self.s_col = np.full((n + 2, n + 2), -1, dtype=np.int64)
        self.s_col[ts_ + 1, is_ + 1] = nR + np.arange(len(ts_))
        nS = len(ts_)
        # FREE over free_idx = [(t, i, k) for (t, k) in r_idx for i in deps[k] + [k]]: slots of deps[k] + [k]
        W = 1 + max(len(d) for d in g.deps)
        slot = np.full((n + 1, W), -1, dtype=np.int64)
        for k in range(1, n + 1):
            for s, i in enumerate(g.deps[k] + [k]):
                slot[k, s] = i
        K = I                                        # r_idx read as (t, k)
        F_i = slot[K]                                # (len r_idx, W) freed node i, -1 absent
        f_ok = F_i >= 0
        nF = int(f_ok.sum())
        f_col = np.full(F_i.shape, -1, dtype=np.int64)
        f_col[f_ok] = nR + nS + np.arange(nF)
        # U over r_idx
        u_col = nR + nS + nF + np.arange(len(T))
        ncol = nR + nS + nF + len(T)
        self.n_cols = ncol
        self._blocks = (T, I, fixed, ts_ + 1, is_ + 1, F_i, f_ok, T)
        self.lower = np.zeros(ncol)
        self.upper = np.ones(ncol)
        self.upper[nR + nS + nF:] = np.inf
        self.integer = np.ones(ncol, dtype=bool)
        self.integer[nR + nS + nF:] = False

        def Rc(t, i):
            """(column, fixed value) of R[t, i] for index arrays (i <= t)."""
            return self.r_col[t, i], self.r_fix[t, i]

        def Sc(t, i):
            """(column, 0) of S[t, i]; -1 (absent: 0) outside s_idx."""
            ok = (t >= 2) & (t <= n) & (i < t) & (i >= 1)
            return np.where(ok, self.s_col[np.minimum(t, n + 1), np.clip(i, 0, n + 1)], -1), 0.0

        def pos(t, k):
            return t * (t - 1) // 2 + k - 1

        rows = _Rows()
        # c_dep: R[t,j] <= R[t,i] + S[t,i] for every edge i -> j, j <= t
        dslot = np.full((n + 1, max(1, max(len(d) for d in g.deps))), -1, dtype=np.int64)
        for j in range(1, n + 1):
            dslot[j, :len(g.deps[j])] = g.deps[j]
        Di = dslot[I]
        ok = Di >= 0
        t_, j_, i_ = np.broadcast_to(T[:, None], Di.shape)[ok], np.broadcast_to(I[:, None], Di.shape)[ok], Di[ok]
        (rj, fj), (ri, fi) = Rc(t_, j_), Rc(t_, i_)
        rows.add("c_dep", len(t_), [(rj, 1.0, fj), (ri, -1.0, fi), (Sc(t_, i_)[0], -1.0, 0.0)], -np.inf, 0.0)
        check()
        # c_keep: S[t,i] <= R[t-1,i] + S[t-1,i]
        t_, i_ = ts_ + 1, is_ + 1
        rows.add("c_keep", len(t_), [(self.s_col[t_, i_], 1.0, 0.0), (Rc(t_ - 1, i_)[0], -1.0, Rc(t_ - 1, i_)[1]),
                                     (Sc(t_ - 1, i_)[0], -1.0, 0.0)], -np.inf, 0.0)
        check()
        # c_free_lo / c_free_hi, with the hazard count h = (1 - R[t,k]) + S[t+1,i] + sum R[t,j] over the
        # users j of i with k < j <= t, and h_max = 2 + (number of those users)
        Uw = max(len(u) for u in g.users)
        uslot = np.full((n + 1, max(1, Uw)), -1, dtype=np.int64)
        for i in range(1, n + 1):
            uslot[i, :len(g.users[i])] = g.users[i]
        t_ = np.broadcast_to(T[:, None], F_i.shape)[f_ok]
        k_ = np.broadcast_to(K[:, None], F_i.shape)[f_ok]
        i_ = F_i[f_ok]
        fc = f_col[f_ok]
        us = uslot[i_]                                    # (rows, Uw)
        later = (us > k_[:, None]) & (us <= t_[:, None])
        hmax = 2.0 + later.sum(axis=1)
        rk = Rc(t_, k_)
        s_next = Sc(t_ + 1, i_)[0]
        later_terms = []
        for w in range(us.shape[1]):
            j = np.where(later[:, w], us[:, w], 0)
            c, f = Rc(t_, j)
            later_terms.append((np.where(later[:, w], c, -1), -1.0, np.where(later[:, w], f, 0.0)))
        common = [(rk[0], 1.0, rk[1]), (s_next, -1.0, 0.0)] + later_terms
        # 1 - FREE <= h  <=>  -FREE + R[t,k] - S[t+1,i] - sum R[t,j] <= 0
        rows.add("c_free_lo", len(t_), [(fc, -1.0, 0.0)] + common, -np.inf, 0.0)
        check()
        # h_max (1 - FREE) >= h  <=>  -h_max FREE + R[t,k] - S[t+1,i] - sum R[t,j] >= 1 - h_max
        rows.add("c_free_hi", len(t_), [(fc, -hmax, 0.0)] + common, 1.0 - hmax, np.inf)
        check()
        # c_u_init: U[t,1] = static + sum_{i<t} size_i S[t,i] + size_1 R[t,1]
        tt = np.arange(1, n + 1)
        terms = [(u_col[pos(tt, 1)], 1.0, 0.0), (Rc(tt, np.ones_like(tt))[0], -size[1], Rc(tt, np.ones_like(tt))[1])]
        for i in range(1, n):
            c = np.where(tt > i, self.s_col[tt, i], -1)
            terms.append((c, -size[i], 0.0))
        rows.add("c_u_init", n, terms, g.static * ms, g.static * ms)
        check()
        # c_u_next: U[t,k] = U[t,k-1] - sum_{i in deps[k-1] + [k-1]} size_i FREE[t,i,k-1] + size_k R[t,k]
        nx = I >= 2
        t_, k_ = T[nx], I[nx]
        prev = pos(t_, k_ - 1)
        terms = [(u_col[pos(t_, k_)], 1.0, 0.0), (u_col[prev], -1.0, 0.0),
                 (Rc(t_, k_)[0], -size[k_], Rc(t_, k_)[1])]
        for w in range(W):
            fi = F_i[prev, w]
            terms.append((f_col[prev, w], size[np.maximum(fi, 0)], 0.0))
        rows.add("c_u_next", len(t_), terms, 0.0, 0.0)
        check()
        # c_u_budget: U[t,k] + o_k R[t,k] <= 1
        rows.add("c_u_budget", len(T), [(u_col, 1.0, 0.0), (Rc(T, I)[0], over[I], Rc(T, I)[1])], -np.inf, 1.0)
        check()
        # objective: sum_t sum_i C_i R[t,i]
        self.cost = np.zeros(ncol)
        np.add.at(self.cost, self.r_col[T[~fixed], I[~fixed]], cost[I[~fixed]])
        self.offset = float((cost[I] * self.r_fix[T, I]).sum())
        from scipy.sparse import coo_matrix

        self.A = coo_matrix((np.concatenate(rows.v), (np.concatenate(rows.r), np.concatenate(rows.c))),
                            shape=(rows.m, ncol)).tocsc()
        self.row_lo = np.concatenate(rows.lo)
        self.row_hi = np.concatenate(rows.hi)
        self.families = rows.families

    def column_names(self) -> list[str]:
        """Pyomo's names of the columns (``R[t,i]``, ``S[t,i]``, ``FREE[t,i,k]``, ``U[t,k]``)."""
        T, I, fixed, St, Si, F_i, f_ok, _ = self._blocks
        names = [f"R[{t},{i}]" for t, i in zip(T[~fixed], I[~fixed])]
        names += [f"S[{t},{i}]" for t, i in zip(St, Si)]
        tk = np.broadcast_to(T[:, None], F_i.shape)[f_ok], np.broadcast_to(I[:, None], F_i.shape)[f_ok]
        names += [f"FREE[{t},{i},{k}]" for t, i, k in zip(tk[0], F_i[f_ok], tk[1])]
        names += [f"U[{t},{k}]" for t, k in zip(T, I)]
        return names

    def rs(self, x):
        """``(R, S)`` as :func:`_rs_from_model` gives them, from a solution vector ``x``."""
        xr = np.concatenate([np.asarray(x, dtype=float), [0.0]])     # column -1: the appended 0
        R = np.where(self.r_col >= 0, xr[self.r_col], self.r_fix)
        S = np.where(self.s_col >= 0, xr[self.s_col], 0.0)
        return R, S


def build_checkmate_arrays(chain: Chain, memory: float, *, clock=None) -> CheckmateArrays:
    """:class:`CheckmateArrays`; ``clock`` (a :class:`formulations.highs_driver.BuildClock`) is checked
    between the families of rows and raises :class:`~formulations.highs_driver.BuildInterrupted` once
    its deadline has passed."""
    return CheckmateArrays(chain, memory, clock)


def _rs_from_model(m):
    g = m.graph
    n = g.n
    R = np.zeros((n + 2, n + 2))
    S = np.zeros((n + 2, n + 2))
    for (t, i), v in m.R.items():
        R[t, i] = v.value or 0.0
    for (t, i), v in m.S.items():
        S[t, i] = v.value or 0.0
    return R, S


def events_from_rs(g: ChainGraph, R) -> list[int]:
    """The execution order of Checkmate's plan: stage by stage, nodes with R = 1 in topological order."""
    ev = []
    for t in range(1, g.n + 1):
        for i in range(1, t + 1):
            if R[t, i] > 0.5:
                ev.append(i)
    return ev


def _live_events(g: ChainGraph, events: list[int]) -> list[int]:
    """Drop computations whose value no live computation uses before the node is computed again
    (backward steps are live); a backward pass, so that chains of useless recomputations (e.g. forward
    values a rounded plan keeps after their backward step) disappear together."""
    n_ev = len(events)
    live = [False] * n_ev
    nxt = {}
    for p in range(n_ev - 1, -1, -1):
        v = events[p]
        stop = nxt.get(v, n_ev)
        live[p] = g.kind[v] == "B" or any(live[q] and v in g.deps[events[q]] for q in range(p + 1, stop))
        nxt[v] = p
    return [v for v, ok in zip(events, live) if ok]


def sequence_from_events(chain: Chain, g: ChainGraph, events: list[int]) -> RematSchedule:
    """Convert Checkmate's node order into an F_all/F_ck/F_none/B sequence (module docstring)."""
    L = chain.L
    N, A, AB = 0, 1, 2
    act = [N] * (L + 2)
    act[0] = A
    events = _live_events(g, events)
    n_ev = len(events)
    # for each position, the next position of each node (recompute) and of each use
    nxt_same: list[int] = [n_ev] * n_ev
    last: dict[int, int] = {}
    for p in range(n_ev - 1, -1, -1):
        nxt_same[p] = last.get(events[p], n_ev)
        last[events[p]] = p

    def next_pos(p: int, node: int, stop: int) -> int:
        for q in range(p + 1, stop):
            if events[q] == node:
                return q
        return n_ev

    def used_before(p: int, node: int, stop: int) -> bool:
        """Is ``node``'s value used by an event in (p, stop)?"""
        return any(node in g.deps[events[q]] for q in range(p + 1, stop))

    seq: list[tuple[str, int]] = []
    for p, v in enumerate(events):
        l = g.stage[v]
        if g.kind[v] == "B":
            if act[l] != AB and act[l - 1] != N:
                seq.append(("F_all", l))          # inserted F_all^l: upgrade of a^l, or a recomputation
                act[l] = AB                       # when the plain a^l was freed by B^{l+1}
            if act[l] != AB or act[l - 1] == N:
                raise InvalidSequence(len(seq), ("B", l), "Checkmate plan could not be converted")
            seq.append(("B", l))
            act[l] = N
            if act[l - 1] == A:
                act[l - 1] = N
            continue
        # forward node F^l
        stop = nxt_same[p]
        if not used_before(p, v, stop):
            continue                               # dead computation
        qb = next_pos(p, g.B(l), stop)             # B^l consumes this copy?
        feeds_b = qb < n_ev
        prev_input_recomputed = l >= 2 and next_pos(p, g.F(l - 1), qb if feeds_b else p + 1) < n_ev
        want_abar = feeds_b and not prev_input_recomputed
        if act[l] == AB or (act[l] == A and (not want_abar or act[l - 1] == N)):
            continue                               # already resident (B^l inserts F_all^l if needed)
        if act[l] == A and want_abar:
            seq.append(("F_all", l))               # complete the resident a^l into abar^l
            act[l] = AB
            continue
        if act[l - 1] == N:
            raise InvalidSequence(len(seq), ("F", l), f"a^{l - 1} is not resident in Checkmate's plan")
        if want_abar:
            op = "F_all"
        else:
            keep = l == 1 or act[l - 1] == AB or used_before(p, g.F(l - 1), next_pos(p, g.F(l - 1), n_ev))
            op = "F_ck" if keep else "F_none"
        seq.append((op, l))
        act[l] = AB if op == "F_all" else A
        if op == "F_none":
            act[l - 1] = N
    return RematSchedule(seq)


def round_two_phase(g: ChainGraph, S_frac, threshold: float | None = 0.5, rng=None):
    """Checkmate's two-phase rounding: round S, then the cheapest R satisfying the dependencies."""
    n = g.n
    S = np.zeros((n + 2, n + 2))
    for t in range(2, n + 1):
        for i in range(1, t):
            x = S_frac[t, i]
            if g.kind[i] == "B":               # never recomputed: delta^{l-1} is kept exactly into
                S[t, i] = 1.0 if t == i + 1 else 0.0   # the next stage, where B^{l-1} uses it
            else:
                S[t, i] = 1.0 if (x >= threshold if rng is None else rng.random() < x) else 0.0
    R = np.zeros((n + 2, n + 2))
    # a value kept into stage t+1 must be present in stage t: walk stages backwards so that
    # R[t] includes what S[t+1] needs, then close R[t] under the dependencies (reverse topological order)
    for t in range(n, 0, -1):
        R[t, t] = 1.0
        for i in range(1, t + 1):
            if S[t + 1, i] > 0.5 and S[t, i] < 0.5:
                R[t, i] = 1.0
        for j in range(t, 0, -1):
            if R[t, j] > 0.5:
                for i in g.deps[j]:
                    if S[t, i] < 0.5:
                        R[t, i] = 1.0
    return R, S


def _replay(chain, sched, memory):
    rep = simulate_remat(chain, sched)
    return rep, rep.peak_memory <= memory * (1 + 1e-9) + 1e-9


#: seconds, ``ROOT_SECONDS + ROOT_SECONDS_PER_NNZ * nonzeros``, by which HiGHS runs past its time limit
#: on this model on a quiet machine: its root's set-up, which does not watch the limit (measured on 2
#: cores with presolve, feasibility jump and symmetry detection off, as the driver runs a short limit:
#: 0.25 us per nonzero at 1.3 M nonzeros, 0.5 us at 1.9 M; the LP relaxation 0.4 us at 2.3 M), and on
#: a small model one round of the root's cuts, between two looks at the clock (73 k nonzeros beside two
#: busy loops: rounds of about 1 s, the call 3.9 s for 3 s)
ROOT_SECONDS = 0.2
ROOT_SECONDS_PER_NNZ = 1e-6


def _solve(model: CheckmateArrays, **kw):
    """``(MilpResult, x)``: :func:`formulations.highs_driver.solve_arrays` on the arrays of the model.
    Inside a ``solve`` call, HiGHS's limit keeps back its known overrun (:data:`ROOT_SECONDS` and
    :data:`ROOT_SECONDS_PER_NNZ`, times the machine's :meth:`~memplan.models.budget.Budget.pace`), and
    HiGHS is not started where the call has less time left than that overrun."""
    b = _budget.current()
    nnz = max(1, int(model.A.nnz))
    per_nnz = (ROOT_SECONDS / nnz + ROOT_SECONDS_PER_NNZ) * b.pace()     # the driver takes it per nonzero
    if per_nnz * nnz >= b.remaining():
        size = {"variables": model.n_cols, "integer": int(model.integer.sum()), "constraints": int(model.A.shape[0]),
                "nonzeros": nnz}
        msg = (f"not solved: HiGHS runs about {per_nnz * nnz:.2g} s past its time limit on this model "
               f"({nnz:,} nonzeros), more than the {b.remaining():.2g} s left of the call")
        return MilpResult(status=Status.NO_SOLUTION, objective=None, bound=None, size=size, message=msg), None
    return solve_arrays(cost=model.cost, lower=model.lower, upper=model.upper, integer=model.integer, A=model.A,
                        row_lower=model.row_lo, row_upper=model.row_hi, offset=model.offset, root_overrun=per_nnz,
                        **kw)


def _interrupted(method: str, memory: float, e: BuildInterrupted, times: dict, t0: float, details: dict) -> Solution:
    """NO_SOLUTION: the call's time ran out while the model was being built (``details["interrupted"]``)."""
    times["total"] = time.perf_counter() - t0
    return Solution("remat", method, Status.NO_SOLUTION, memory_limit=memory, message=f"not solved: {e}",
                    times=times, details={**details, "interrupted": "build", "stopped_by_time": True})


def solve_checkmate(chain: Chain, memory: float, *, time_limit: float | None = 60, gap: float | None = 1e-4,
                    threads: int | None = None, log_file=None, verbose: bool = False) -> Solution:
    """Checkmate's MILP (exact within Checkmate's model), converted and replayed (method ``checkmate``).

    Optimal within Checkmate's model is status FEASIBLE (``details['milp_status']`` says ``optimal``):
    nothing is proven in paper 004's model, where the converted sequence is replayed and where other
    methods can be faster. Its dual bound is a bound in that model
    only, neither for paper 004's model nor for the converted sequence, so it is reported as
    ``details['milp_bound']`` / ``details['milp_gap']`` (``predicted`` is the MILP objective) and
    ``bound`` stays None; LIMIT_EXCEEDED with ``details["limit_exceeded"]`` when the converted
    sequence breaks the limit. ``details["stopped_by_time"]``: the call's time ran out before HiGHS
    proved its answer (or before it ran: NO_SOLUTION), so :func:`memplan.remat.solve` compares the
    answer with the baselines.
    """
    chain.check_papers_times("checkmate")
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        with timed(times, "build"):
            model = build_checkmate_arrays(chain, memory, clock=BuildClock())
    except BuildInterrupted as e:
        return _interrupted("checkmate", memory, e, times, t0, {"time_limit": time_limit, "gap_target": gap})
    res, x = _solve(model, time_limit=time_limit, gap=gap, threads=threads, log_file=log_file, verbose=verbose,
                    options=EXACT_TOLERANCES, objective_scale=model.time_scale)
    times.update(res.times)
    ts = model.time_scale
    pred = None if res.objective is None else res.objective * ts
    bound = None if res.bound is None else res.bound * ts
    details = {"model_size": res.size, "milp_status": str(res.status), "milp_message": res.message,
               "time_limit": time_limit, "gap_target": gap,
               "stopped_by_time": res.status in (Status.TIME_LIMIT, Status.NO_SOLUTION),
               "note": "bound and optimality are within Checkmate's model (a and abar not distinguished)"}
    if not res.has_solution:
        times["total"] = time.perf_counter() - t0
        msg = (f"Checkmate's model has no schedule within {fmt_memory(memory)}"
               if res.status == Status.INFEASIBLE else res.message)
        return Solution("remat", "checkmate", res.status, memory_limit=memory, bound=bound, message=msg,
                        times=times, details=details)
    with timed(times, "convert"):
        R, _ = model.rs(x)
        try:
            sched = sequence_from_events(chain, model.graph, events_from_rs(model.graph, R))
            rep, ok = _replay(chain, sched, memory)
        except InvalidSequence as e:
            times["total"] = time.perf_counter() - t0
            return Solution("remat", "checkmate", Status.ERROR, memory_limit=memory, predicted=pred,
                            message=f"Checkmate's plan could not be converted: {e}", times=times,
                            details=details)
    details.update(limit_exceeded=not ok, recompute_time=rep.recompute_time,
                   inserted_or_removed_time=rep.makespan - pred, milp_objective=pred, milp_bound=bound,
                   milp_gap=res.gap)
    status, msg = res.status, res.message
    if status == Status.OPTIMAL:
        # proven in Checkmate's model only: the converted sequence, replayed in paper 004's, is not
        # proven optimal there, and rotor can be faster (random_chain(3, 1) at 55 B: 59 against 56)
        status = Status.FEASIBLE
        msg = (f"optimal within Checkmate's model (MILP {res.message}), not proven in paper 004's, where the "
               "converted sequence is replayed")
    if not ok:
        status = Status.LIMIT_EXCEEDED
        msg = (f"the converted sequence uses {fmt_memory(rep.peak_memory)}, more than the limit "
               f"{fmt_memory(memory)} (Checkmate's memory model differs from paper 004's)")
    times["total"] = time.perf_counter() - t0
    return Solution("remat", "checkmate", status, objective=rep.makespan, peak_memory=rep.peak_memory,
                    schedule=sched, bound=None, memory_limit=memory, predicted=pred, message=msg,
                    times=times, details=details)


def solve_checkmate_lp(chain: Chain, memory: float, *, time_limit: float | None = 60, threads: int | None = None,
                       samples: int = 20, seed: int = 0, log_file=None, verbose: bool = False, **_) -> Solution:
    """Checkmate's approximation: LP relaxation + two-phase rounding (method ``checkmate-lp``).

    Tries the deterministic rounding at 0.5 and ``samples`` randomized roundings (fewer when the
    ``memplan.remat.solve`` call's time runs out; ``details['roundings']`` says how many); returns
    the fastest converted sequence within the limit, else the one with the smallest peak, reporting
    the memory it really uses (status LIMIT_EXCEEDED, ``details["limit_exceeded"] = True`` when above the
    limit). ``details["stopped_by_time"]``: the relaxation was not solved in the call's time.
    """
    chain.check_papers_times("checkmate-lp")
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        with timed(times, "build"):
            model = build_checkmate_arrays(chain, memory, clock=BuildClock())
    except BuildInterrupted as e:
        return _interrupted("checkmate-lp", memory, e, times, t0, {"time_limit": time_limit})
    res, x = _solve(model, time_limit=time_limit, threads=threads, relax=True, log_file=log_file, verbose=verbose)
    times.update(res.times)
    ts = model.time_scale
    lp = None if res.objective is None else res.objective * ts
    details = {"model_size": res.size, "lp_status": str(res.status), "lp_bound": lp, "time_limit": time_limit,
               "stopped_by_time": res.status in (Status.TIME_LIMIT, Status.NO_SOLUTION)}
    if not res.has_solution:
        times["total"] = time.perf_counter() - t0
        return Solution("remat", "checkmate-lp", res.status, memory_limit=memory,
                        message=f"LP relaxation: {res.message}", times=times, details=details)
    g = model.graph
    _, S_frac = model.rs(x)
    rng = np.random.default_rng(seed)
    best = None
    tried = 0
    with timed(times, "rounding"):
        for k in range(samples + 1):
            if k > 0 and best is not None and _budget.current().expired():
                break                              # the call's time is up: keep the best so far
            R, _ = round_two_phase(g, S_frac, 0.5, None if k == 0 else rng)
            try:
                sched = sequence_from_events(chain, g, events_from_rs(g, R))
                rep, ok = _replay(chain, sched, memory)
            except InvalidSequence:
                continue
            tried += 1
            key = (0, rep.makespan, rep.peak_memory) if ok else (1, rep.peak_memory, rep.makespan)
            if best is None or key < best[0]:
                best = (key, sched, rep, ok, k)
    times["total"] = time.perf_counter() - t0
    if best is None:
        return Solution("remat", "checkmate-lp", Status.NO_SOLUTION, memory_limit=memory,
                        message="no rounding could be converted into a valid sequence", times=times,
                        details=details)
    _, sched, rep, ok, k = best
    details.update(limit_exceeded=not ok, roundings=tried, chosen="deterministic 0.5" if k == 0 else f"random #{k}",
                   recompute_time=rep.recompute_time)
    if ok:
        msg = f"LP relaxation + two-phase rounding ({details['chosen']}); fits the limit, no optimality claim"
    else:
        msg = (f"LP relaxation + two-phase rounding: the best rounded sequence uses {fmt_memory(rep.peak_memory)}, "
               f"more than the limit {fmt_memory(memory)} (the rounding ignores memory)")
    return Solution("remat", "checkmate-lp", Status.FEASIBLE if ok else Status.LIMIT_EXCEEDED, objective=rep.makespan,
                    peak_memory=rep.peak_memory, schedule=sched, bound=None, memory_limit=memory, predicted=None,
                    message=msg, times=times, details=details)
