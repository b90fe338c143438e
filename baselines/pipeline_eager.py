"""PipeDream's eager 1F1B schedule of a contiguous partition, simulated (paper 003, section 5).

:func:`simulate_eager` runs PipeDream's schedule of a contiguous allocation (stages on GPUs) with a
given NOAM (number of mini-batches admitted in the pipeline): stage ``s`` (0-based) holds at most
``max(1, NOAM - s)`` mini-batches between their forward and backward, runs a backward as soon as one
is ready and otherwise the next forward, and every link sends as soon as data and link are available
(FIFO). It reports the steady-state period (exact when the run is periodic, :func:`cyclic_period`;
else the mean time between completions over the second half of the run) and the memory measured by
the rules of :mod:`memplan.models.pipeline` (which also checks the explicit schedule). When the
steady state repeats every period it is also returned as a :class:`~memplan.models.pipeline.Pattern`
(:func:`steady_pattern`), a candidate MIP start for the ILP.

This is a scheduling policy (how PipeDream runs a partition), not part of the problem's definition:
the simulator of :mod:`memplan.models.pipeline` judges its output like any other schedule.
"""
from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np

from memplan.models.pipeline import (EagerResult, Pattern, TaskData, Unrolled, check_and_measure, normalize_pattern,
                                     stages_to_layer_gpu, task_gpus)


def simulate_eager(td: TaskData, stages: Sequence[tuple[int, int]], noam: int, n_batches: int = 500, *,
                   extract_pattern: bool = True) -> EagerResult:
    """Eager 1F1B schedule of a contiguous allocation (see the module docstring) for ``n_batches``
    mini-batches; stage s runs on GPU s. Returns the steady-state period and the memory measured by
    :func:`memplan.models.pipeline.check_and_measure` (O(n_batches L) events, plus the replay).

    Examples
    --------
    Two unit layers (forward 1, backward 2) on two GPUs, free communications: one mini-batch at a
    time takes the sum of all tasks, two in flight reach the stage load.

    >>> from memplan.models.chain import Chain
    >>> from memplan.models.pipeline import task_data
    >>> td = task_data(Chain.from_stages(uf=[1.0] * 2, ub=[2.0] * 2, wa=[1.0] * 3, weights=[0.0] * 2), None)
    >>> [float(simulate_eager(td, [(1, 1), (2, 2)], noam, 100).period) for noam in (1, 2)]
    [6.0, 3.0]
    """
    L, n = td.L, td.n
    stages = [(int(a), int(b)) for a, b in stages]
    layer_gpu = stages_to_layer_gpu(stages, L)
    S = len(stages)
    noam = max(1, int(noam))
    limit = [max(1, noam - s) for s in range(S)]
    fdur = [sum(td.d[l] for l in range(a, b + 1)) for a, b in stages]
    bdur = [sum(td.d[td.backward(l)] for l in range(a, b + 1)) for a, b in stages]
    fcomm = [td.dc[stages[s][1]] for s in range(S - 1)]              # A[last_s] forward, s -> s+1
    bcomm = [td.dc[n - stages[s][1]] for s in range(S - 1)]          # delta^{last_s}, s+1 -> s

    f_start = np.full((S, n_batches), np.nan)
    b_start = np.full((S, n_batches), np.nan)
    cf_start = np.full((max(S - 1, 0), n_batches), np.nan)
    cb_start = np.full((max(S - 1, 0), n_batches), np.nan)
    in_ready = [dict() for _ in range(S)]     # forward input arrival per mini-batch
    grad_ready = [dict() for _ in range(S)]   # backward input arrival
    for j in range(n_batches):
        in_ready[0][j] = 0.0
    next_f = [0] * S
    next_b = [0] * S
    gpu_free = [0.0] * S
    link_free = [0.0] * max(S - 1, 0)
    link_queue: list[list] = [[] for _ in range(max(S - 1, 0))]   # (ready, prio, kind, j)
    events: list = []
    seq = 0

    def push(t, kind, data):
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, data))
        seq += 1

    def try_gpu(s, t):
        if gpu_free[s] > t + 1e-15:
            return
        jb = next_b[s]
        if jb < n_batches and jb in grad_ready[s] and grad_ready[s][jb] <= t:
            b_start[s, jb] = t
            gpu_free[s] = t + bdur[s]
            next_b[s] += 1
            push(t + bdur[s], "bdone", (s, jb))
            return
        jf = next_f[s]
        if jf < n_batches and jf in in_ready[s] and in_ready[s][jf] <= t and jf - next_b[s] < limit[s]:
            f_start[s, jf] = t
            gpu_free[s] = t + fdur[s]
            next_f[s] += 1
            push(t + fdur[s], "fdone", (s, jf))

    def try_link(k, t):
        if link_free[k] > t + 1e-15 or not link_queue[k]:
            return
        link_queue[k].sort()
        ready, prio, kind, j = link_queue[k][0]
        if ready > t:
            return
        link_queue[k].pop(0)
        dur = fcomm[k] if kind == "f" else bcomm[k]
        (cf_start if kind == "f" else cb_start)[k, j] = t
        link_free[k] = t + dur
        push(t + dur, "cdone", (k, kind, j))

    push(0.0, "tick", None)
    while events:
        t = events[0][0]
        while events and events[0][0] <= t:
            _, _, kind, data = heapq.heappop(events)
            if kind == "fdone":
                s, j = data
                if s == S - 1:
                    grad_ready[s][j] = t
                else:
                    link_queue[s].append((t, 1, "f", j))
            elif kind == "bdone":
                s, j = data
                if s > 0:
                    link_queue[s - 1].append((t, 0, "b", j))
            elif kind == "cdone":
                k, ck, j = data
                if ck == "f":
                    in_ready[k + 1][j] = t
                else:
                    grad_ready[k][j] = t
        for k in range(S - 1):
            try_link(k, t)
        for s in range(S):
            try_gpu(s, t)
        # wake-ups for links whose queued data become ready later are events already
    if np.isnan(b_start[0]).any():
        raise RuntimeError(f"eager simulation stalled (stages {stages}, NOAM {noam})")

    # per-layer instances: forward block runs F_a..F_b back to back, backward block B_b..B_a
    tasks: dict[int, np.ndarray] = {}
    for s, (a, b) in enumerate(stages):
        t = f_start[s].copy()
        for l in range(a, b + 1):
            tasks[l] = np.stack([t, t + td.d[l]], axis=1)
            t = t + td.d[l]
        t = b_start[s].copy()
        for l in range(b, a - 1, -1):
            m = td.backward(l)
            tasks[m] = np.stack([t, t + td.d[m]], axis=1)
            t = t + td.d[m]
    comms: dict[int, np.ndarray | None] = {m: None for m in range(1, n)}
    for k in range(S - 1):
        lf = stages[k][1]
        comms[lf] = np.stack([cf_start[k], cf_start[k] + fcomm[k]], axis=1)
        comms[n - lf] = np.stack([cb_start[k], cb_start[k] + bcomm[k]], axis=1)
    gpu = task_gpus(td, layer_gpu)
    un = Unrolled(gpu=gpu, n_batches=n_batches, tasks=tasks, comms=comms)
    scale = max(float(np.nanmax(tasks[n][:, 1])), 1e-300)
    sim = check_and_measure(un, td, 1e-9 * scale)
    cyc = cyclic_period(un, td)
    if cyc is not None:
        sim.period = cyc
    else:   # not periodic within the run: the average, but never below the busiest resource
        busiest = max([fdur[s] + bdur[s] for s in range(S)] + [fcomm[k] + bcomm[k] for k in range(S - 1)])
        sim.period = max(sim.period, busiest)
    res = EagerResult(stages=stages, noam=noam, n_batches=n_batches, sim=sim, unrolled=un)
    if extract_pattern:
        res.pattern = steady_pattern(un, td, sim.period)
        if res.pattern is not None:
            res.pattern.meta.update({"method": "eager-1f1b", "stages": [list(s) for s in stages], "noam": noam})
    return res


def cyclic_period(un: Unrolled, td: TaskData, max_cycle: int = 64) -> float | None:
    """Exact steady-state period of an explicit schedule that is k-periodic (every instance of
    mini-batch j+k starts a constant time after that of j, over the third quarter of the run):
    the constant divided by k, for the smallest such k; None when no k <= max_cycle fits."""
    B = un.n_batches
    j0, j1 = B // 2, B - 1 - B // 4
    starts = [un.tasks[m][j0:j1, 0] for m in range(1, td.n + 1)]
    scale = max(float(np.abs(starts[-1]).max()), 1e-300)
    for k in range(1, min(max_cycle, (j1 - j0) // 3) + 1):
        diffs = np.concatenate([s[k:] - s[:-k] for s in starts])
        if diffs.max() - diffs.min() <= 1e-9 * scale:
            return float(diffs.mean() / k)
    return None


def steady_pattern(un: Unrolled, td: TaskData, period: float) -> Pattern | None:
    """The steady state of an explicit schedule as a pattern, when every task and communication
    repeats exactly every ``period`` over the third quarter of the run; None otherwise."""
    n = td.n
    B = un.n_batches
    j0, j1 = B // 2, B - 1 - B // 4
    if j1 - j0 < 3 or not (period > 0):
        return None
    tol = 1e-7 * period
    starts, starts_c = {}, {}
    for m in range(1, n + 1):
        s = un.tasks[m][j0:j1, 0]
        if np.any(np.abs(np.diff(s) - period) > tol):
            return None
        starts[m] = float(s[0])
    for m in range(1, n):
        c = un.comms[m]
        if c is None:
            continue
        s = c[j0:j1, 0]
        if np.any(np.abs(np.diff(s) - period) > tol):
            return None
        starts_c[m] = float(s[0])
    return normalize_pattern(un.gpu, starts, starts_c, period, td)
