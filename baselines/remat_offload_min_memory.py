"""The least memory of re-materialization + offloading (paper 000's problem), with what is proven.

With a host link every stored forward value ``a^l`` / ``abar^l`` (l = 0..L) can be moved off the
device between the operations that read it (:mod:`memplan.models.remat_offload`); gradients and the
loss stage's values cannot. So the least memory is set by what the operations themselves hold:

Lower bound (:func:`necessary_memory`, valid for every schedule the simulator accepts). Every
stage ``l`` is computed once while delta^{L+1} is held (its input, ``a^0`` for ``l = 1`` else at least
``min(wa, wabar)^{l-1}``, and its output with its forward's overhead, at least
``min(wabar^l + o_f^l, wa^l + o_f^l)``); ``F_all^l`` runs once while some delta^k, ``k >= l``, is held;
``B^l`` holds ``abar^l``, its input, delta^l, delta^{l-1} and ``o_b^l``. Each forward is charged its own
overhead, as the simulator does: ``o_f^l`` is :attr:`Chain.of_all` with ``abar^l`` (F_all) and
:attr:`Chain.of_ng` with ``a^l`` (F_ck, F_none).

A schedule that reaches a value (:func:`min_memory_schedule`): the forward pass runs every stage
choosing, by a min-max dynamic program over the chain (:func:`_options`), ``F_all^l`` (keeps
``abar^l``), ``F_ck^l`` (keeps ``a^l``; ``F_all^l`` runs after ``B^{l+1}``), or ``F_ck^l F_none^{l+1}
F_all^l`` (the next stage reads the small ``a^l`` and ``F_all^l`` still runs while the seed gradient
is held); the backward pass runs ``F_all^l`` where it is still due, then ``B^l``, l = L+1..1. Before each operation every stored value it does not read is offloaded and the values it
reads are prefetched, one transfer at a time, the operation waiting for the link: slow, but its peak
is the largest memory of one operation with only its own inputs on the device. It is replayed by
the simulator, whose peak is the value.

:func:`min_memory` returns both; when they agree the minimum is exact (the usual case), else the
answer is labelled: a schedule fits at ``value`` and nothing fits below ``lower``. With no link
(bandwidth 0 or None) the problem is re-materialization alone and
:func:`memplan.baselines.remat_min_memory.min_memory_of` is used.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memplan.baselines.remat_min_memory import min_memory_of
from memplan.models.chain import Chain
from memplan.models.remat_offload import RematOffloadSchedule, Transfer, simulate_remat_offload
from memplan.models.units import fmt_bytes

__all__ = ["OffloadMinMemory", "necessary_memory", "min_memory_schedule", "min_memory"]

_A, _AB, _E = 1, 2, 3


@dataclass(frozen=True)
class OffloadMinMemory:
    """``value``: the peak of ``schedule`` (replayed, bytes); ``lower``: no schedule fits below it;
    ``exact`` when the two agree (relative 1e-9)."""

    value: float
    lower: float
    schedule: RematOffloadSchedule
    makespan: float

    @property
    def exact(self) -> bool:
        return self.value <= self.lower * (1 + 1e-9) + 1e-9

    def describe(self) -> str:
        return "exact" if self.exact else f"a schedule fits in {fmt_bytes(self.value)} B, none below {fmt_bytes(self.lower)} B"


def necessary_memory(chain: Chain) -> float:
    """A lower bound on the peak of every re-materialization + offloading schedule (bytes); see the
    module docstring.

    >>> from memplan.models.chain import Chain
    >>> necessary_memory(Chain.from_stages(uf=[1, 1], ub=[1, 1], wa=[4, 2, 2]))   # B^1: a^0, abar^1, delta^1, delta^0
    12.0
    """
    L = chain.L
    wa, wab, wd = chain.wa, chain.wabar, chain.wd
    small = np.minimum(wa, wab)
    suffix_wd = np.minimum.accumulate(wd[::-1])[::-1]
    best = 0.0
    ofa, ofn = chain.of_all, chain.of_ng     # F_all's own overhead, the no-grad forwards'
    for l in range(1, L + 2):
        inp = wa[0] if l == 1 else small[l - 1]
        first = min(wab[l] + ofa[l], wa[l] + ofn[l])     # the first forward of l: F_all, or F_ck / F_none
        best = max(best,
                   inp + first + wd[L + 1],
                   inp + wab[l] + ofa[l] + suffix_wd[l],
                   inp + wab[l] + wd[l] + wd[l - 1] + chain.ob[l])
        if l <= L:     # index l is abar^l at B^{l+1}, or a^l and then F_all^l runs while delta^l is held
            best = max(best, min(wab[l] + wab[l + 1] + wd[l + 1] + wd[l] + chain.ob[l + 1],
                                 inp + wab[l] + ofa[l] + wd[l]))
    return float(best)


def _options(chain: Chain) -> tuple[list[int], float]:
    """Options o_1..o_{L+1} of the construction minimizing the largest memory of an operation with
    only its own inputs on the device (a min-max DP over the chain, the state being o_{l-1}):

    - ``_AB``: ``F_all^l`` in the forward pass (later readers of index l see abar^l);
    - ``_A``: ``F_ck^l`` in the forward pass, ``F_all^l`` after ``B^{l+1}`` (delta^l held);
    - ``_E``: ``F_ck^l F_none^{l+1} F_all^l`` in the forward pass: ``F^{l+1}`` reads the small a^l and
      ``F_all^l`` still runs while the seed gradient is held (readers after it see abar^l).

    After ``_E`` at l - 1, ``F^l`` was first computed by that ``F_none^l``: only ``_A`` or ``_E``
    (without its ``F_ck^l``) remain. Returns the options and the largest memory of an operation.
    Each forward is charged its own overhead: ``ofa`` (F_all), ``ofn`` (F_ck, F_none)."""
    L = chain.L
    wa, wab, wd, ofa, ofn, ob = chain.wa, chain.wabar, chain.wd, chain.of_all, chain.of_ng, chain.ob
    dL = wd[L + 1]

    def seen(p, k, late):
        """Size of index k as its readers see it, k's option being p (index 0: a^0)."""
        if k == 0:
            return wa[0]
        if p == _AB or (p == _E and late):
            return wab[k]
        return wa[k]

    def cost(p, o, l):
        f1, f2 = seen(p, l - 1, False), seen(p, l - 1, True)
        done = p == _E                              # F^l already computed (F_none^l of the E at l-1)
        m = f2 + wab[l] + wd[l] + wd[l - 1] + ob[l]   # B^l
        if o == _AB:
            m = max(m, f1 + wab[l] + ofa[l] + dL)                                 # F_all^l
        elif o == _A:
            m = max(m, f2 + wab[l] + ofa[l] + wd[l])                              # F_all^l after B^{l+1}
            if not done:
                m = max(m, f1 + wa[l] + ofn[l] + dL)                              # F_ck^l
        else:
            m = max(m, wa[l] + wa[l + 1] + ofn[l + 1] + dL, f2 + wab[l] + ofa[l] + dL)  # F_none^{l+1}, F_all^l
            if not done:
                m = max(m, f1 + wa[l] + ofn[l] + dL)                              # F_ck^l
        return m

    best = {_A: 0.0}                                # index 0: a^0
    back: list[dict] = []
    for l in range(1, L + 2):
        nb, bk = {}, {}
        for p, pv in best.items():
            if l == L + 1:
                opts = (_AB,) if p != _E else ()
            elif p == _E:
                opts = (_A, _E) if l < L else (_A,)
            else:
                opts = (_AB, _A, _E) if l < L else (_AB, _A)
            for o in opts:
                v = max(pv, cost(p, o, l))
                if o not in nb or v < nb[o]:
                    nb[o], bk[o] = v, p
        best = nb
        back.append(bk)
    o = _AB
    out = [o]
    for l in range(L + 1, 1, -1):
        o = back[l - 1][o]
        out.append(o)
    out.reverse()                                   # o_1 .. o_{L+1}
    return out, float(best[_AB])


def min_memory_schedule(chain: Chain, bandwidth: float) -> RematOffloadSchedule:
    """The schedule of the module docstring (every stored value not read by the next operation is on
    the host); operations and transfers in sequence, with release times."""
    if not bandwidth or bandwidth <= 0:
        raise ValueError("min_memory_schedule needs a positive bandwidth")
    L = chain.L
    wa, wab = chain.wa, chain.wabar
    opt, _ = _options(chain)
    ops: list[tuple[str, int]] = []
    done = False
    for l in range(1, L + 2):
        o = opt[l - 1]
        if o == _AB:
            ops.append(("F_all", l))
        elif o == _A:
            if not done:
                ops.append(("F_ck", l))
        else:
            if not done:
                ops.append(("F_ck", l))
            ops += [("F_none", l + 1), ("F_all", l)]
        done = o == _E
    for l in range(L + 1, 0, -1):
        if opt[l - 1] == _A:
            ops.append(("F_all", l))
        ops.append(("B", l))
    state = [0] * (L + 2)
    state[0] = _A
    host = [False] * (L + 2)
    # a short idle gap after every operation and transfer keeps distinct events apart in the
    # simulator, which merges instants closer than 1e-9 of the makespan (operations of zero duration,
    # transfers of a few bytes over a fast link)
    total = float(chain.uf.sum() + chain.ub.sum()) + 2 * float(np.maximum(wa, wab)[:L + 1].sum()) / bandwidth
    gap = max(1e-6 * total, 1e-9)
    t = 0.0
    release: list[float] = []
    transfers: list[Transfer] = []
    # the stored values on the device (state set, not on the host): a few at a time, since every
    # operation offloads all it does not read; scanning all L + 1 values per operation made this
    # O(L^2), 1.1 s at L = 3000, unbounded by any time limit
    dev = {0}
    for op, l in ops:
        reads = (l, l - 1) if op == "B" else (l - 1,)
        for k in sorted(dev):                        # offload what this operation does not read
            size = wab[k] if state[k] == _AB else wa[k] if state[k] == _A else 0.0
            if k <= L and k not in reads and k != l and size > 0:
                transfers.append(Transfer("offload", k, float(size), release=t))
                t += size / bandwidth + gap
                host[k] = True
                dev.discard(k)
        for k in reads:                              # bring back what it reads
            if k <= L and host[k]:
                size = wab[k] if state[k] == _AB else wa[k]
                transfers.append(Transfer("prefetch", k, float(size), release=t))
                t += size / bandwidth + gap
                host[k] = False
                if state[k]:
                    dev.add(k)
        release.append(t)
        t += (chain.ub[l] if op == "B" else chain.uf[l]) + gap
        if op == "B":
            state[l] = 0
            dev.discard(l)
            if state[l - 1] == _A:
                state[l - 1] = 0
                dev.discard(l - 1)
        else:
            state[l] = _AB if op == "F_all" else max(state[l], _A)
            if not host[l]:
                dev.add(l)
            if op == "F_none":
                state[l - 1] = 0
                dev.discard(l - 1)
    return RematOffloadSchedule(ops=ops, release=release, transfers=transfers)


def min_memory(chain: Chain, bandwidth: float | None) -> OffloadMinMemory:
    """The least memory of re-materialization + offloading over a link of ``bandwidth`` bytes/s:
    a replayed schedule's peak (``value``) and a proven lower bound (``lower``); with no link, the
    exact minimum of re-materialization alone.

    Examples
    --------
    >>> from memplan.models.chain import random_chain
    >>> c = random_chain(4, seed=1)
    >>> alone, linked = min_memory(c, None), min_memory(c, 1.0)
    >>> alone.value, linked.value, linked.exact
    (46.0, 41.0, True)
    """
    if not bandwidth or bandwidth <= 0:
        mm = min_memory_of(chain, "all")
        sched = RematOffloadSchedule(ops=list(mm.schedule.ops))
        return OffloadMinMemory(value=mm.value, lower=mm.value if mm.exact else float(mm.lower), schedule=sched,
                                makespan=mm.makespan)
    sched = min_memory_schedule(chain, float(bandwidth))
    rep = simulate_remat_offload(chain, sched, float(bandwidth))
    # the DP's value counts every operation on its own; the simulator groups operations of zero
    # duration into one instant and can report less (see the report of issue 18): the larger is kept
    value = max(float(rep.peak_memory), _options(chain)[1])
    return OffloadMinMemory(value=value, lower=necessary_memory(chain), schedule=sched, makespan=float(rep.makespan))
