"""Exhaustive search over all valid re-materialization sequences (small chains; a test oracle).

Dijkstra over memory states. A state is what is stored: for each index l nothing / a^l / abar^l,
plus which delta^k is held (exactly one gradient is alive at any time: delta^{L+1} at the start, and
B^k replaces delta^k by delta^{k-1}). Every operation of Table 1 (paper 004) that is valid in a state
and whose memory (stored + outputs + overhead) fits in ``M`` is an edge whose cost is its duration.
The transition rules are written here independently of :mod:`models.remat` so that the two
implementations of the semantics check each other (the found sequence is also replayed there).

The number of states is at most 3^(L+2) (L+2); L <= 7 runs in seconds.
"""
from __future__ import annotations

import heapq

from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule

_N, _A, _AB = 0, 1, 2


def exhaustive_remat(chain: Chain, memory: float, *, tol: float = 1e-9):
    """Minimum makespan over all valid sequences within ``memory``.

    Returns ``(makespan, RematSchedule)``, or ``None`` when no valid sequence fits.
    """
    L = chain.L
    wa, wab, wd = chain.wa, chain.wabar, chain.wd
    limit = memory * (1 + tol) + tol

    def stored(act, k):
        return sum(wab[l] if s == _AB else wa[l] if s == _A else 0.0 for l, s in enumerate(act)) + wd[k]

    start = (tuple([_A] + [_N] * (L + 1)), L + 1)
    dist = {start: 0.0}
    prev: dict = {}
    heap = [(0.0, 0, start)]
    counter = 0
    while heap:
        d, _, state = heapq.heappop(heap)
        if d > dist.get(state, float("inf")):
            continue
        act, k = state
        if k == 0:
            ops = []
            while state != start:
                state, op = prev[state]
                ops.append(op)
            return d, RematSchedule(ops[::-1])
        base = stored(act, k)
        moves = []
        # backward step B^k
        if act[k] == _AB and act[k - 1] != _N and base + wd[k - 1] + chain.ob[k] <= limit:
            new = list(act)
            new[k] = _N
            if new[k - 1] == _A:
                new[k - 1] = _N
            moves.append((("B", k), tuple(new), k - 1, chain.ub[k]))
        for l in range(1, L + 2):
            if act[l - 1] == _N:
                continue
            for op in ("F_all", "F_ck", "F_none"):
                out = wab[l] if op == "F_all" else wa[l]
                if base + out + chain.of[l] > limit:
                    continue
                if op == "F_none" and act[l - 1] == _AB:
                    continue
                if act[l] == _AB or (op != "F_all" and act[l] == _A):
                    continue   # recomputing a stored value: not an operation of the model
                new = list(act)
                if op == "F_all":
                    new[l] = _AB
                else:
                    new[l] = max(new[l], _A)
                if op == "F_none":
                    new[l - 1] = _N
                nt = tuple(new)
                moves.append(((op, l), nt, k, chain.uf[l]))
        for op, nact, nk, dt in moves:
            ns = (nact, nk)
            nd = d + dt
            if nd < dist.get(ns, float("inf")) - 1e-15:
                dist[ns] = nd
                prev[ns] = (state, op)
                counter += 1
                heapq.heappush(heap, (nd, counter, ns))
    return None
