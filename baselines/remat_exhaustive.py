"""Exhaustive search over all valid re-materialization sequences (small chains; a test oracle).

Dijkstra over memory states. A state is what is stored: for each index l nothing / a^l / abar^l,
plus which delta^k is held (exactly one gradient is alive at any time: delta^{L+1} at the start, and
B^k replaces delta^k by delta^{k-1}). Every operation of Table 1 (paper 004) that is valid in a state
and whose memory (stored + outputs + overhead) fits in ``M`` is an edge whose cost is its duration.
The transition rules are written here independently of :mod:`models.remat` so that the two
implementations of the semantics check each other (the found sequence is also replayed there).

The number of states is at most 3^(L+2) (L+2); L <= 7 runs in seconds. :func:`exhaustive_min_memory`
searches the same graph for the least peak (the oracle of :mod:`baselines.remat_min_memory`).
"""
from __future__ import annotations

import heapq

from memplan.models.chain import Chain
from memplan.models.remat import RematSchedule

_N, _A, _AB = 0, 1, 2


def _moves(chain: Chain, act: tuple, k: int, up: bool = True, last_b: bool = False):
    """Every operation valid in state ``(act, k)``: ``(op, new act, new k, duration, memory during)``.
    ``up=False`` leaves out F_all^l over a stored plain a^l (Table 1 does not have it). ``last_b``: the
    operation before was a B, so a forward now is a turn (``chain.u_turn`` more); a no-grad forward
    takes ``chain.ufn``."""
    L = chain.L
    wa, wab, wd = chain.wa, chain.wabar, chain.wd
    base = sum(wab[l] if s == _AB else wa[l] if s == _A else 0.0 for l, s in enumerate(act)) + wd[k]
    out = []
    turn = chain.u_turn if last_b else 0.0
    # backward step B^k
    if act[k] == _AB and act[k - 1] != _N:
        new = list(act)
        new[k] = _N
        if new[k - 1] == _A:
            new[k - 1] = _N
        out.append((("B", k), tuple(new), k - 1, chain.ub[k], base + wd[k - 1] + chain.ob[k]))
    for l in range(1, L + 2):
        if act[l - 1] == _N:
            continue
        for op in ("F_all", "F_ck", "F_none"):
            if op == "F_none" and act[l - 1] == _AB:
                continue
            if act[l] == _AB or (op != "F_all" and act[l] == _A):
                continue   # recomputing a stored value: not an operation of the model
            if not up and act[l] == _A:
                continue
            new = list(act)
            if op == "F_all":
                new[l] = _AB
            else:
                new[l] = max(new[l], _A)
            if op == "F_none":
                new[l - 1] = _N
            dt = (chain.uf[l] if op == "F_all" else chain.ufn[l]) + turn
            out.append(((op, l), tuple(new), k, dt, base + (wab[l] + chain.of_all[l] if op == "F_all"
                                                            else wa[l] + chain.of_ng[l])))
    return out


def exhaustive_remat(chain: Chain, memory: float, *, tol: float = 1e-9, up: bool = True):
    """Minimum makespan over all valid sequences within ``memory``. ``up=False``: over those without
    F_all^l over a stored plain a^l (the sequences of paper 004's Table 1).

    Returns ``(makespan, RematSchedule)``, or ``None`` when no valid sequence fits.
    """
    L = chain.L
    limit = memory * (1 + tol) + tol
    start = (tuple([_A] + [_N] * (L + 1)), L + 1, False)      # what is stored, delta^k, last op a B
    dist = {start: 0.0}
    prev: dict = {}
    heap = [(0.0, 0, start)]
    counter = 0
    while heap:
        d, _, state = heapq.heappop(heap)
        if d > dist.get(state, float("inf")):
            continue
        act, k, last_b = state
        if k == 0:
            return d, _path(prev, start, state)
        for op, nact, nk, dt, mem in _moves(chain, act, k, up, last_b):
            if mem > limit:
                continue
            ns = (nact, nk, op[0] == "B")
            nd = d + dt
            if nd < dist.get(ns, float("inf")) - 1e-15:
                dist[ns] = nd
                prev[ns] = (state, op)
                counter += 1
                heapq.heappush(heap, (nd, counter, ns))
    return None


def exhaustive_min_memory(chain: Chain):
    """The least peak memory of any valid sequence: a bottleneck shortest path (Dijkstra with
    ``max`` for ``+``) over the same states and operations as :func:`exhaustive_remat`.

    Returns ``(peak, RematSchedule)`` (bytes; a sequence that reaches it). Exponential in ``L``.
    """
    L = chain.L
    start = (tuple([_A] + [_N] * (L + 1)), L + 1)
    m0 = float(chain.wa[0] + chain.wd[L + 1])
    best = {start: m0}
    prev: dict = {}
    heap = [(m0, 0, start)]
    counter = 0
    while heap:
        p, _, state = heapq.heappop(heap)
        if p > best.get(state, float("inf")):
            continue
        act, k = state
        if k == 0:
            return p, _path(prev, start, state)
        for op, nact, nk, _dt, mem in _moves(chain, act, k):
            ns = (nact, nk)
            npk = max(p, mem)
            if npk < best.get(ns, float("inf")):
                best[ns] = npk
                prev[ns] = (state, op)
                counter += 1
                heapq.heappush(heap, (npk, counter, ns))
    raise RuntimeError("no valid sequence at all (cannot happen: recompute-all is always valid)")


def _path(prev: dict, start, state) -> RematSchedule:
    ops = []
    while state != start:
        state, op = prev[state]
        ops.append(op)
    return RematSchedule(ops[::-1])
