"""Rotor's persistent DP with a choice of **variant per stage** (the hierarchy of issue 28: rotor across
stages, a keep-or-recompute decision inside each).

A stage can be profiled in several variants: the same function compiled with the partitioner at
different activation budgets (``compile_under_budget(stage_fractions=...)``), so that ``F_all^l``
saves fewer bytes (``wabar^l``) and ``B^l`` recomputes more (``u_b^l``, ``o_b^l``). The output
``a^l``, its gradient ``delta^l`` and the forward without autograd (``F_ck``, ``F_none``) do not
depend on what ``F_all`` saves. Rotor's persistent sequences (paper 004, Eq. 6-7) run every stage's
``F_all`` exactly once, right before its sub-chain and its ``B``, so a variant chosen per stage is a
choice made where the DP takes the ``C_all`` branch, and the DP stays exact over every assignment of
variants:

    C_all(s, t, m) = min over variants v of  u_f^s + C(s+1, t, m - wabar_v^s) + u_b,v^s
                     where m >= max(wd^t + wabar_v^s + o_f_all,v^s, wd^s + wd^{s-1} + wabar_v^s + o_b,v^s)

and the split branch ``C_ck`` (F_ck^s F_none^{s+1..k}, keep a^k) is rotor's, on the shared forward
quantities. The model a variant's stage is given (:func:`mixed_chain`):

- ``u_f^l``: the smallest of the variants' forward times (a forward without autograd is the same
  function; the extra time a variant's ``F_all`` takes over it is moved into its ``u_b``, so that
  ``F_all`` + ``B`` keeps the variant's own total, and every ``u_b`` stays >= its own);
- the no-grad forward's overhead ``o_f_ng^l`` (:attr:`Chain.of_ng`), ``wa^l``, ``wd^l``: the largest
  over the variants (they measure the same tensors; the largest keeps every plan within its limit);
- ``wabar^l``, ``u_b^l`` (as above), ``o_b^l`` and F_all's own overhead ``o_f_all^l``
  (:attr:`Chain.of_all`): the chosen variant's, since F_all runs as that variant. This includes the
  loss stage ``L+1``, which only ever runs ``F_all`` then ``B``: a loss stage over chunks of tokens
  holds a chunk's logits where the whole one holds all of them, and the largest would hide exactly
  what the chunks save. ``o_f^l`` is the larger of the two.

With one variant the DP is rotor's persistent DP (same table, ``tests/test_remat_variants.py``), and
with several its value is the least over all assignments of rotor on the mixed chain (checked by
brute force on small chains in the tests).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from numba import njit

from memplan.baselines.remat_rotor import Discretization
from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule, simulate_remat

__all__ = ["mixed_chain", "persistent_variants", "VariantPlan"]


def _check(chains: Sequence[Chain]) -> list[Chain]:
    chains = list(chains)
    if not chains:
        raise ValueError("persistent_variants: at least one chain (variant) is needed")
    L = chains[0].L
    for c in chains[1:]:
        if c.L != L:
            raise ValueError(f"persistent_variants: the variants must cut the same stages (L = {L} and {c.L})")
    return chains


def mixed_chain(chains: Sequence[Chain], assign: Sequence[int], name: str | None = None) -> Chain:
    """The chain whose stage ``l`` (1..L+1) runs ``F_all`` and ``B`` as variant ``assign[l]`` (index into
    ``chains``; ``assign[0]`` is ignored), with the shared forward quantities of the module docstring."""
    chains = _check(chains)
    c0 = chains[0]
    L = c0.L
    if len(assign) != L + 2:
        raise ValueError(f"mixed_chain: assign needs L+2 = {L + 2} entries, got {len(assign)}")
    uf_all = np.array([c.uf for c in chains])
    uf = uf_all.min(axis=0)
    pick = np.array([0] + [int(v) for v in assign[1:]])
    idx = np.arange(L + 2)
    ub = np.array([c.ub for c in chains])[pick, idx] + uf_all[pick, idx] - uf
    ub[0] = 0.0
    of_ng = np.max([c.of_ng for c in chains], axis=0)      # the no-grad forward: the same in every variant
    of_all = np.array([c.of_all for c in chains])[pick, idx]   # F_all runs as the chosen variant
    of_ng[L + 1] = of_all[L + 1]                         # the loss stage runs F_all only
    return Chain(uf=uf, ub=np.maximum(ub, 0.0), wa=np.max([c.wa for c in chains], axis=0),
                 wabar=np.array([c.wabar for c in chains])[pick, idx],
                 wd=np.max([c.wd for c in chains], axis=0), of=np.maximum(of_all, of_ng),
                 of_all=of_all, of_ng=of_ng,
                 ob=np.array([c.ob for c in chains])[pick, idx], weights=c0.weights.copy(),
                 name=name or f"{c0.name} (a variant per stage)", stage_names=list(c0.stage_names),
                 provenance={**c0.provenance, "variants": [str(v) for v in pick[1:]]}, resident=c0.resident)


@njit(cache=True)
def _split_runs(s, t, uf, wa, wd, of):
    """For each split k = s..t-1 of cell (s, t) (C_ck: F_ck^s F_none^{s+1..k}, keep a^k): the forward
    run's time (summed from 0.0 in stage order) and the memory the split needs (wd^t + the run's
    peak, and a^k itself)."""
    n = t - s
    acc = np.empty(n)
    need = np.empty(n, dtype=np.int64)
    a = 0.0
    pre = wa[s] + of[s]
    for i in range(n):
        k = s + i
        a += uf[k]
        if k > s:
            pre = max(pre, wa[k - 1] + wa[k] + of[k])
        acc[i] = a
        need[i] = max(wd[t] + pre, wa[k])
    return acc, need


@njit(cache=True)
def _kernel(L, S, uf, UB, wa, WAB, wd, of, OB, OF):
    """C[s, t, m] of the module docstring for 1 <= s <= t <= L+1, 0 <= m <= S (slots). ``of``: the
    forward overhead of F_ck/F_none (the largest of the variants' ``of_ng``); ``OF[v, s]``: F_all^s's
    own in variant v (its ``of_all``)."""
    n = L + 2
    V = UB.shape[0]
    C = np.full((n, n, S + 1), np.inf)
    for s in range(1, L + 2):
        for v in range(V):
            need = max(wd[s] + WAB[v, s] + OF[v, s], wd[s] + wd[s - 1] + WAB[v, s] + OB[v, s])
            val = uf[s] + UB[v, s]
            for m in range(max(need, 0), S + 1):
                if val < C[s, s, m]:
                    C[s, s, m] = val
    for d in range(1, L + 1):
        for s in range(1, L + 2 - d):
            t = s + d
            buf = C[s, t]
            for v in range(V):                       # C_all: F_all^s (variant v), (s+1, t), B^s
                w = WAB[v, s]
                need = max(wd[t] + w + OF[v, s], wd[s] + wd[s - 1] + w + OB[v, s], w)
                sub = C[s + 1, t]
                for m in range(need, S + 1):
                    val = uf[s] + sub[m - w] + UB[v, s]
                    if val < buf[m]:
                        buf[m] = val
            acc, need = _split_runs(s, t, uf, wa, wd, of)    # C_ck: F_ck^s F_none^{s+1..k}, keep a^k
            for i in range(t - s):
                k = s + i
                first = C[k + 1, t]
                second = C[s, k]
                for m in range(need[i], S + 1):
                    val = acc[i] + first[m - wa[k]] + second[m]
                    if val < buf[m]:
                        buf[m] = val
    return C


@dataclass
class VariantPlan:
    """The DP's answer: the sequence, the variant of each stage (``assign[l]`` for l = 1..L+1;
    ``assign[0]`` = 0), the mixed chain it runs on (:func:`mixed_chain`), the DP's value and the
    simulator's makespan and peak on that chain (real sizes, within ``memory``)."""

    schedule: RematSchedule
    assign: list[int]
    chain: Chain
    value: float
    makespan: float
    peak_memory: float
    memory_limit: float
    details: dict = field(default_factory=dict)


def persistent_variants(chains: Sequence[Chain], memory: float, *, slots: int = 500) -> VariantPlan | None:
    """Rotor's persistent sequence with a variant chosen per stage (module docstring), sizes in
    ``slots`` slots of ``memory / slots`` bytes rounded up (the plan never exceeds ``memory``); None
    when no sequence fits."""
    for c in chains:
        c.check_papers_times("remat_variants.persistent_variants")
    chains = _check(chains)
    L = chains[0].L
    discs = [Discretization(c, memory, slots) for c in chains]
    S = discs[0].budget
    wa = np.max([d.wa for d in discs], axis=0)
    wd = np.max([d.wd for d in discs], axis=0)
    of = np.max([d.ofn for d in discs], axis=0)        # F_ck / F_none: the same function in every variant
    WAB = np.array([d.wab for d in discs], dtype=np.int64)
    OB = np.array([d.ob for d in discs], dtype=np.int64)
    OF = np.array([d.ofa for d in discs], dtype=np.int64)      # F_all^s as variant v: its own overhead
    uf_all = np.array([c.uf for c in chains], dtype=np.float64)
    uf = uf_all.min(axis=0)
    UB = np.array([c.ub for c in chains], dtype=np.float64) + uf_all - uf
    UB[:, 0] = 0.0
    budget = S - int(wa[0])
    if budget < 0:
        return None
    C = _kernel(L, S, uf, UB, wa.astype(np.int64), WAB, wd.astype(np.int64), of.astype(np.int64), OB, OF)
    value = float(C[1, L + 1, budget])
    if not math.isfinite(value):
        return None
    ops: list[tuple[str, int]] = []
    assign = [0] * (L + 2)
    stack = [(1, L + 1, budget, False)]
    while stack:
        s, t, m, emit_b = stack.pop()
        if emit_b:
            ops.append(("B", s))
            continue
        kind, arg = _choice(C, s, t, m, uf, UB, wa, WAB, wd, of, OB, OF)
        if kind == "all":
            assign[s] = arg
            ops.append(("F_all", s))
            if s == t:
                ops.append(("B", s))
                continue
            stack.append((s, s, 0, True))
            stack.append((s + 1, t, m - int(WAB[arg, s]), False))
        else:
            sp = arg
            ops.append(("F_ck", s))
            ops.extend(("F_none", j) for j in range(s + 1, sp))
            stack.append((s, sp - 1, m, False))                   # runs second
            stack.append((sp, t, m - int(wa[sp - 1]), False))       # runs first
    mixed = mixed_chain(chains, assign)
    sched = RematSchedule(ops)
    rep = simulate_remat(mixed, sched, memory_limit=memory)
    return VariantPlan(sched, assign, mixed, value, float(rep.makespan), float(rep.peak_memory), float(memory),
                       details={"slots": S, "slot_bytes": discs[0].q, "variants": len(chains)})


def _choice(C, s, t, m, uf, UB, wa, WAB, wd, of, OB, OF) -> tuple[str, int]:
    """Which case reaches C[s, t, m], by the kernel's arithmetic (1e-12 relative): ("all", v) for
    F_all^s in variant v (the first such v), ("ck", s') for F_ck^s keeping a^{s'-1}."""
    target = C[s, t, m]
    tol = 1e-12 * max(1.0, abs(target))
    for v in range(WAB.shape[0]):
        w = int(WAB[v, s])
        if s == t:
            need = max(wd[s] + w + OF[v, s], wd[s] + wd[s - 1] + w + OB[v, s])
            if m >= need and abs(uf[s] + UB[v, s] - target) <= tol:
                return "all", v
            continue
        need = max(wd[t] + w + OF[v, s], wd[s] + wd[s - 1] + w + OB[v, s], w)
        if m >= need and abs(uf[s] + C[s + 1, t, m - w] + UB[v, s] - target) <= tol:
            return "all", v
    acc, need = _split_runs(s, t, uf, wa, wd, of)
    for i in range(t - s):
        k = s + i
        if m >= need[i] and abs(acc[i] + C[k + 1, t, m - wa[k]] + C[s, k, m] - target) <= tol:
            return "ck", k + 1
    raise RuntimeError(f"internal error: no case reaches C[{s},{t},{m}]")
