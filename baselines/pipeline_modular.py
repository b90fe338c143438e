"""Schedule builders for periodic patterns of pipelined model parallelism (paper 003).

Algorithms that *construct* :class:`~memplan.models.pipeline.Pattern` objects; the simulator of
:mod:`memplan.models.pipeline` judges every one of them.

* :func:`serial_pattern`: every task and transfer one after the other (any allocation; the pattern
  of least memory of its allocation, the fallback start of the ILP);
* :func:`modular_pattern`: modular list scheduling of one mini-batch of a contiguous partition at a
  given period (1F1B blocks placed where their GPU or link is free modulo T);
* :func:`bisect_period`: the period search shared by the schedule builders (and by the front end's
  MILP searches);
* :func:`snap_period`: removes solver noise from a period that lies within a relative 1e-6 of a lower
  bound, when the lowered pattern still replays.

Every function takes the :class:`~memplan.models.pipeline.TaskData` built once by the caller.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Sequence

from memplan.models.pipeline import (REL_TOL, InvalidPattern, Pattern, TaskData, link_key, normalize_pattern,
                                     simulate_pattern, stages_to_layer_gpu, task_gpus)

_link = link_key


def serial_pattern(td: TaskData, layer_gpu: Sequence[int]) -> Pattern:
    """Every task and communication one after the other in chain order (no overlap at all): a valid
    pattern of period sum(d) + sum(dc over cut edges) for any allocation, with all shifts 0. It
    holds at every instant only what any pattern of the allocation also holds, so it needs the least
    memory of them all (O(L)).

    Examples
    --------
    >>> from memplan.models.chain import Chain
    >>> from memplan.models.pipeline import simulate_pattern, task_data
    >>> td = task_data(Chain.from_stages(uf=[1.0] * 2, ub=[2.0] * 2, wa=[1.0] * 3, weights=[0.0] * 2), 1.0)
    >>> p = serial_pattern(td, [0, 1])
    >>> float(p.T), float(simulate_pattern(p, td).period)
    (8.0, 8.0)
    """
    n = td.n
    gpu = task_gpus(td, layer_gpu)
    t = 0.0
    starts, starts_c = {}, {}
    for m in range(1, n + 1):
        starts[m] = t
        t += td.d[m]
        if m < n:
            starts_c[m] = t
            if gpu[m - 1] != gpu[m]:
                t += td.dc[m]
    return Pattern(gpu=gpu, tau=[starts[m] for m in range(1, n + 1)],
                   tau_c=[starts_c[m] for m in range(1, n)], T=max(t, 1e-300), meta={"method": "serial"})


def bisect_period(fit: Callable[[float], Any], lo: float, hi: float, steps: int, *, lo_fails: bool = False,
                  stop: Callable[[], bool] | None = None):
    """The period search shared by the schedule builders: ``fit(T)`` returns a schedule or None and
    is expected (not guaranteed) to succeed above some threshold. Tries ``lo`` (unless the caller
    already knows it fails: ``lo_fails``), then ``hi``, then ``steps`` bisection steps; returns the
    schedule found at the smallest T (None when hi fails). ``stop()`` is asked before every call of
    ``fit``: when it says True the search ends with what it has (None if ``hi`` was not tried).

    Examples
    --------
    >>> bisect_period(lambda T: T if T >= 3.3 else None, 1.0, 5.0, 6)
    3.3125
    """
    def halt() -> bool:
        return stop is not None and stop()

    if not lo_fails:
        if halt():
            return None
        got = fit(lo)
        if got is not None:
            return got
    if halt():
        return None
    got = fit(hi)
    if got is None:
        return None
    for _ in range(steps):
        if halt():
            break
        mid = 0.5 * (lo + hi)
        q = fit(mid)
        if q is not None:
            hi, got = mid, q
        else:
            lo = mid
    return got


def snap_period(pattern: Pattern, td: TaskData, T_low: float, *, memory: float | None = None,
                gpus: int | None = None, rel: float = 1e-6) -> Pattern:
    """Return ``pattern`` with its period lowered to ``T_low`` (a lower bound) when it lies within
    ``rel`` of it and the lowered pattern still replays (valid, within ``memory``). Builders and the
    solvers' tolerances leave periods like ``T_low * (1 + 1e-9)``; this removes that noise without
    trusting it: the simulator decides."""
    if not (T_low < pattern.T <= T_low * (1 + rel)):
        return pattern
    cand = replace(pattern, T=T_low)
    try:
        sim = simulate_pattern(cand, td, gpus=gpus)
    except InvalidPattern:
        return pattern
    if memory is not None and sim.peak_memory > memory * (1 + 1e-9):
        return pattern
    return cand


def _modular_free(occupied: list[tuple[float, float]], t: float, dur: float, T: float, tol: float) -> bool:
    """True when [t, t+dur) overlaps no occupied interval modulo T."""
    s = t % T
    for a, b in occupied:
        for k in (-1, 0, 1):
            if s < b + k * T - tol and a + k * T < s + dur - tol:
                return False
    return True


def _place_modular(occupied: list[tuple[float, float]], ready: float, dur: float, T: float, tol: float) -> float:
    """Earliest t >= ready such that [t, t+dur) avoids every occupied interval modulo T."""
    cands = [ready]
    for a, b in occupied:
        e = b + math.ceil((ready - b) / T) * T
        cands.append(e)
    for t in sorted(cands):
        if t >= ready - tol and _modular_free(occupied, t, dur, T, tol):
            return t
    raise InvalidPattern("no room left on a resource: the period is below its load")


def _place_modular_latest(occupied: list[tuple[float, float]], deadline: float, dur: float, T: float,
                          tol: float) -> float:
    """Latest t with t + dur <= deadline such that [t, t+dur) avoids every occupied interval mod T."""
    cands = [deadline - dur]
    for a, b in occupied:
        cands.append(a + math.floor((deadline - a) / T) * T - dur)
    for t in sorted(cands, reverse=True):
        if t + dur <= deadline + tol and _modular_free(occupied, t, dur, T, tol):
            return t
    raise InvalidPattern("no room left on a resource: the period is below its load")


def modular_pattern(td: TaskData, stages: Sequence[tuple[int, int]], T: float, meta: dict | None = None,
                    backward_first: bool = False) -> Pattern:
    """A 1F1B pattern of period T for a contiguous allocation (stage s on GPU s), built by modular
    list scheduling of one mini-batch: each block (the forward or backward layers of a stage) and each
    transfer is placed where its resource is free modulo T. Default: forward blocks, transfers and
    backward blocks in chain order, each at the earliest time after its input is ready.
    ``backward_first``: the backward blocks first (as early as possible from the last stage), then
    the forward blocks from the last stage down, each as *late* as possible before its consumer;
    this keeps F_l close to B_l and usually stores fewer activations. Needs T at least every GPU's
    and link's load (else :class:`~memplan.models.pipeline.InvalidPattern`).

    Examples
    --------
    Four unit layers (forward 1, backward 2) in two stages, transfers of 1: at period 6 (each stage's
    load) the pattern replays with that period.

    >>> from memplan.models.chain import Chain
    >>> from memplan.models.pipeline import simulate_pattern, task_data
    >>> td = task_data(Chain.from_stages(uf=[1.0] * 4, ub=[2.0] * 4, wa=[1.0] * 5, weights=[0.0] * 4), 1.0)
    >>> p = modular_pattern(td, [(1, 2), (3, 4)], 6.0)
    >>> float(simulate_pattern(p, td).period)
    6.0
    """
    L, n = td.L, td.n
    S = len(stages)
    layer_gpu = stages_to_layer_gpu(stages, L)
    gpu = task_gpus(td, layer_gpu)
    tol = REL_TOL * T
    occ: dict[Any, list] = {}
    starts: dict[int, float] = {}
    starts_c: dict[int, float] = {}

    def block(kind, s):
        a, b = stages[s]
        return list(range(a, b + 1)) if kind == "F" else [td.backward(l) for l in range(b, a - 1, -1)]

    def occupy(key, t, dur):
        occ.setdefault(key, []).append((t % T, t % T + dur))

    def put_block(s, ms, t0):
        """Run the tasks ms back to back on GPU s from t0; returns their end."""
        occupy(("gpu", s), t0, sum(td.d[m] for m in ms))
        for m in ms:
            starts[m] = t0
            t0 += td.d[m]
        return t0

    def place_earliest(kind, s, t, prev_gpu, prev_comm):
        """Place the block (kind, s) as early as possible after time t and after the transfer from
        the previous stage's last task; returns the new (t, prev_gpu, prev_comm)."""
        ms = block(kind, s)
        if prev_comm is not None and prev_gpu != s:     # transfer from the previous stage
            dur = td.dc[prev_comm]
            lk = ("link",) + _link(prev_gpu, s)
            c0 = _place_modular(occ.setdefault(lk, []), t, dur, T, tol) if dur > 0 else t
            if dur > 0:
                occupy(lk, c0, dur)
            starts_c[prev_comm] = c0
            t = c0 + dur
        t0 = _place_modular(occ.setdefault(("gpu", s), []), t, sum(td.d[m] for m in ms), T, tol)
        return put_block(s, ms, t0), s, ms[-1]

    state = (0.0, None, None)
    if not backward_first:
        order = [("F", s) for s in range(S)] + [("B", s) for s in range(S - 1, -1, -1)]
        for kind, s in order:
            state = place_earliest(kind, s, *state)
    else:
        for s in range(S - 1, -1, -1):                      # backward pass, earliest
            state = place_earliest("B", s, *state)
        deadline = starts[block("B", S - 1)[0]]             # forward pass, latest, from the last stage
        for s in range(S - 1, -1, -1):
            ms = block("F", s)
            t0 = _place_modular_latest(occ.setdefault(("gpu", s), []), deadline, sum(td.d[m] for m in ms), T, tol)
            put_block(s, ms, t0)
            deadline = t0
            if s > 0:
                k = ms[0] - 1                                # transfer of A[first_s - 1] from s-1
                dur = td.dc[k]
                lk = ("link",) + _link(s - 1, s)
                c0 = _place_modular_latest(occ.setdefault(lk, []), deadline, dur, T, tol) if dur > 0 else deadline
                if dur > 0:
                    occupy(lk, c0, dur)
                starts_c[k] = c0
                deadline = c0
    for m in range(1, n):
        if m not in starts_c:
            starts_c[m] = starts[m] + td.d[m]
    pat = normalize_pattern(gpu, starts, starts_c, T, td)
    pat.meta.update({"method": "modular-1f1b" + ("-bf" if backward_first else ""),
                     "stages": [list(x) for x in stages]})
    pat.meta.update(meta or {})
    return pat
