"""Offloading heuristics and bounds of paper 001 (Beaumont, Eyraud-Dubois, Shilova, Euro-Par 2020).

Every method chooses an offloaded set and transfer orders, builds the no-wait schedule of
Proposition 1 (:func:`models.offload.no_wait_schedule`) and returns a :class:`Solution` whose
``objective``/``peak_memory`` come from :func:`models.offload.validate_offload`:

* :func:`lower_bound` -- Proposition 3: ``LB = max(sum_i u_{F_i} + u_{B_i}, 2 (M_peak - M_GPU) / beta)``
  (the value itself is :func:`models.offload.lower_bound_value`, a property of the problem).
* :func:`greedy` -- section 4, Theorem 2. The *fractional value* is the makespan of the no-wait,
  eager, ordered schedule that offloads exactly ``Q = M_peak - M_GPU`` bytes when activations may be
  split (computed by :func:`fractional_makespan`; it is a lower bound for Problem 1, because any
  schedule of Problem 1 is one of the relaxation). GREEDY itself rounds up: it offloads
  ``x_0..x_k`` for the smallest ``k`` with ``sum_{i<=k} |x_i| >= Q`` (if that no-wait schedule does not
  fit, ``k`` is increased until one does).
* :func:`dynprog` -- section 5.3, Algorithm 1 (optimal for interruptible communications, Problem 2)
  used as a heuristic: the chosen set is scheduled whole, no-wait, ordered. Rounding: the states
  ``(M_F, Delta_F, Delta_B)`` are rounded to a grid of ``M_GPU / slots`` bytes (the paper's rounding,
  described only in its research report, is of this kind); ``exact=True`` keeps exact values (exact
  for integer sizes when ``u * beta`` are integers). The best ``top`` final states are rebuilt and the
  best valid schedule is kept. Without ``slots`` it tries several grids and exact values and keeps
  the best schedule, GREEDY's included.
* :func:`vdnn`, :func:`tflms`, :func:`autoswap` -- the peers of section 6 (see each docstring).
* :func:`exhaustive` -- every offloaded set and every pair of transfer orders (tests, tiny chains).

Every function takes ``(chain, memory, bandwidth, ...)`` in that order (bytes, bytes/s). ``bandwidth``
may also be a pair ``(to_host, to_device)`` (:func:`models.offload.link_speeds`): offloads last
``|x_j|/beta_out``, prefetches ``|x_j|/beta_in``. Every schedule is then built and replayed with the two
speeds; where the paper's reasoning needs one speed it is said in the function's docstring (GREEDY's
fractional bound is not used as a bound; Algorithm 1's states count forward bytes at ``beta_out`` and
backward bytes at ``beta_in``). The searches
(:func:`dynprog`, :func:`vdnn`, :func:`tflms`, :func:`autoswap`) take a keyword ``time_limit`` (seconds)
and keep the best schedule found when it runs out; :mod:`memplan.offload` gives each a share of the
call's budget. Memory below :func:`models.offload.min_feasible_memory` raises :class:`InfeasibleError`.

Reading of the garbled formulas of section 5 (Algorithm 1):

* eq. (1) ``eps^F_i = max(0, (M_{F_i} + ex^F_i + |x_{i+1}| - M_GPU)/beta)``, feasible only when the
  pending offload ``Delta^+_{F_i}`` covers the excess (Algorithm 1 writes ``Delta_{F_i}``; with a
  negative Delta -- idle link credit -- that test would wrongly be stricter, so ``Delta^+`` is used);
* eq. (6) is read with ``ex^B_i`` (the text prints ``ex^F_i``): ``B_i`` needs its own temporary memory;
* eqs. (2)-(5), (7), (8) as printed; ``M_{B_i} = |y_i| + Delta^+_{B_i} + M_{F_i} - Delta^+_{F_i}``;
* eq. (9) (idle time between the phases, Lemma 4): ``max(0, (Delta_F + Delta_B)/beta,
  max_j (R^B_j + M_F - M)/beta - sum_{i>j} u_{B_i}, max_j (R^F_j + M_B - M)/beta - sum_{i>j} u_{F_i})``,
  the third max over ``j`` with ``beta sum_{i>j} u_{B_i} < -Delta_B`` and the fourth over ``j`` with
  ``beta sum_{i>j} u_{F_i} < -Delta_F``, ``R^B_j = ex^B_j + |y_j| + |y_{j+1}| - sum_{i>j+1} |x_i|``,
  ``R^F_j = ex^F_j - sum_{i>j+1} |x_i|`` (the printed ``y_{j-1}`` is read as ``y_{j+1}``: ``B_j``
  holds ``y_j`` and ``y_{j+1}``).
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Iterable, Sequence

import numpy as np

from memplan.models.chain import Chain
from memplan.models.offload import (PROBLEM, NoWaitInfeasible, OffloadData, OffloadSchedule, fractional_makespan,
                                    has_link, link_speeds, lower_bound_value, make_solution, min_feasible_memory,
                                    no_wait_schedule, peak_memory_no_offload, same_speed, validate_offload)
from memplan.models.solution import InfeasibleError, Solution, Status
from memplan.models.units import fmt_bytes

__all__ = ["lower_bound", "fractional_makespan", "greedy", "dynprog_sets", "dynprog",
           "vdnn", "tflms", "autoswap_scores", "autoswap", "exhaustive"]


# ----------------------------------------------------------------------------------------- helpers
def _check(chain: Chain, memory: float, bandwidth) -> None:
    mf = min_feasible_memory(chain)
    if memory < mf * (1 - 1e-12):
        raise InfeasibleError(f"memory limit {fmt_bytes(memory)} B is below the minimum feasible memory {fmt_bytes(mf)} B "
                              "(an operation's own inputs, outputs and temporary memory)", minimum=mf)
    try:
        link_speeds(bandwidth)
    except (TypeError, ValueError):
        raise ValueError(f"bandwidth must be bytes/s or a pair (to the host, to the device), got {bandwidth!r}") from None
    if memory < peak_memory_no_offload(chain) and not has_link(bandwidth):
        raise ValueError("offloading needs the link bandwidth (bytes/s): give --bandwidth or a platform "
                         "bandwidth in the instance")


def _deadline(time_limit: float | None) -> float:
    """The monotonic instant at which a search given ``time_limit`` seconds stops (inf: never)."""
    return math.inf if time_limit is None else time.monotonic() + max(0.0, float(time_limit))


def _try(chain, M, beta, S, oo=None, po=None):
    """(schedule, makespan) of the no-wait schedule, or None when it does not fit."""
    try:
        s = no_wait_schedule(chain, M, beta, S, oo, po)
    except NoWaitInfeasible:
        return None
    r = validate_offload(chain, s, M)
    return s, r.makespan


# ------------------------------------------------------------------------------------- lower bound
def lower_bound(chain: Chain, memory: float, bandwidth: float | None) -> Solution:
    """LB as a Solution (no schedule, no objective; ``bound`` and ``predicted`` hold the bound)."""
    _check(chain, memory, bandwidth)
    lb = lower_bound_value(chain, memory, bandwidth)
    # no_solution, as the pipeline's lb: a bound says nothing of whether a schedule fits (FEASIBLE
    # without a schedule read as "one fits" to a script checking statuses)
    return Solution(PROBLEM, "lb", Status.NO_SOLUTION, objective=None, bound=lb, memory_limit=memory,
                    predicted=lb, message="lower bound of Proposition 3 (not a schedule)",
                    details={"M_peak": peak_memory_no_offload(chain),
                             "to_offload": max(0.0, peak_memory_no_offload(chain) - memory)})


def greedy(chain: Chain, memory: float, bandwidth: float) -> Solution:
    """GREEDY (section 4): offload ``x_0..x_k``, the smallest prefix of at least ``M_peak - M`` bytes,
    no-wait and ordered. ``details['fractional']`` holds the optimal fractional value (Theorem 2), also
    used as the ``bound`` (it is a valid lower bound for Problem 1) when the link has one speed; with
    two the bound is LB (Theorem 2 is proven for one rate)."""
    _check(chain, memory, bandwidth)
    t0 = time.perf_counter()
    d = OffloadData.of(chain)
    lb = lower_bound_value(chain, memory, bandwidth)
    Q = max(0.0, peak_memory_no_offload(chain) - memory)
    frac = fractional_makespan(chain, memory, bandwidth) if Q > 0 else lb
    cum = np.cumsum(d.x[:d.L + 1])
    k0 = -1 if Q <= 0 else int(np.searchsorted(cum, Q * (1 - 1e-12)))
    best = None
    k_used = None
    for k in range(k0, d.L + 1):
        res = _try(chain, memory, bandwidth, list(range(k + 1)))
        if res is not None:
            best, k_used = res[0], k
            break
    bound = max(lb, frac) if same_speed(bandwidth) is not None else lb
    return make_solution(chain, "greedy", best, memory, bound=bound, predicted=frac,
                         message=f"offloads x_0..x_{k_used}" if k_used is not None and k_used >= 0 else "no offload",
                         times={"total": time.perf_counter() - t0},
                         details={"fractional": frac, "k_rounded": k0, "k_used": k_used, "lb": lb})


# ------------------------------------------------------------------------------- DYNPROG (Alg. 1)
def dynprog_sets(chain: Chain, memory: float, bandwidth: float, *, slots: int = 100, exact: bool = False,
                 top: int = 8, max_states: int = 20000,
                 deadline: float | None = None) -> tuple[list[tuple[float, list[int]]], dict]:
    """Algorithm 1: the ``top`` best final states as ``(predicted makespan, offloaded set)``.

    ``deadline`` (a ``time.monotonic()`` instant): past it, the DP stops between two levels and
    returns no state (``info['stopped']`` True); its levels cost about 3 ms each at 20,000 states
    (0.9 s on 300 stages), which a short limit cannot wait for.

    States are kept with exact values; two states whose ``(M_F, Delta_F, Delta_B)`` fall in the same
    cell of a grid of ``M_GPU/slots`` bytes are merged (the cheaper one is kept), and at most
    ``max_states`` states (the cheapest) are kept per level. ``info['truncated']`` counts the levels
    where that cap was hit.

    Two link speeds (memplan's extension): ``Delta_F`` counts bytes still to offload, sent at
    ``beta_out``, and ``Delta_B`` bytes still to prefetch (the backward phase in reversed time), at
    ``beta_in``; in eq. (9) the pending transfers take ``Delta_F/beta_out + Delta_B/beta_in``, bytes
    that must leave before a backward operation fits go at ``beta_out`` and bytes that must arrive
    before a forward one's end go at ``beta_in``, the conditions on ``j`` converting each phase's
    time with its own speed. This is our reading, not the paper's; the DP only ranks offloaded sets:
    each one kept is built and replayed with both speeds."""
    d = OffloadData.of(chain)
    L, M = d.L, float(memory)
    b_out, b_in = link_speeds(bandwidth)
    q = 1.0 if exact else M / max(1, slots)
    x, y = d.x, d.y
    # idle-link credit (negative Delta) beyond one memory's worth of transfers is clamped: it only
    # matters in eq. (9) against pending data, which never exceeds M_GPU.
    low = -M

    def key(v):
        return np.round(v / q) if not exact else np.round(v * 1e6) / 1e6

    # states keep exact values; the grid only decides which states are merged (best cost kept)
    MF = np.array([float(x[0])]); DF = np.array([0.0]); DB = np.array([0.0]); cost = np.array([0.0])
    parents, decisions = [], []
    n_states = truncated = 0
    for i in range(L + 1):
        if deadline is not None and time.monotonic() > deadline:
            return [], {"states": n_states, "grid": q, "truncated": truncated, "stopped": True, "levels": i}
        mf, df, db = MF, DF, DB
        dfp, dbp = np.maximum(df, 0), np.maximum(db, 0)
        mb = y[i] + dbp + mf - dfp
        needF = mf + d.exF[i] + x[i + 1] - M
        needB = mb + d.exB[i] + x[i + 1] + y[i + 1] - M
        tolm = 1e-9 * max(1.0, M)
        feas = (needF <= dfp + tolm) & (needB <= dbp + tolm)
        epsF = np.maximum(0, needF) / b_out
        epsB = np.maximum(0, needB) / b_in
        wF = (epsF + d.uF[i]) * b_out
        wB = (epsB + d.uB[i]) * b_in
        # offload x_i: eqs. (2), (3), (7); keep x_i: eqs. (4), (5), (8)
        dF1 = dfp + x[i] - wF
        mF1 = mf + x[i + 1] - np.minimum(dfp + x[i], wF)
        dB1 = x[i] + np.maximum(0, db - wB)
        dF0 = df - wF
        mF0 = mf + x[i + 1] - np.minimum(dfp, wF)
        dB0 = db - wB
        c = cost + epsF + epsB
        idx = np.nonzero(feas)[0]
        if x[i] <= 0:        # nothing to offload: keep only the "not offloaded" branch
            nMF, nDF, nDB = mF0[idx], np.maximum(dF0[idx], low), np.maximum(dB0[idx], low)
            nc, par, dec = c[idx], idx, np.zeros(len(idx), bool)
        else:
            nMF = np.concatenate([mF1[idx], mF0[idx]])
            nDF = np.maximum(np.concatenate([dF1[idx], dF0[idx]]), low)
            nDB = np.maximum(np.concatenate([dB1[idx], dB0[idx]]), low)
            nc = np.concatenate([c[idx], c[idx]])
            par = np.concatenate([idx, idx])
            dec = np.concatenate([np.ones(len(idx), bool), np.zeros(len(idx), bool)])
        if len(nc) == 0:
            return [], {"states": n_states, "grid": q, "truncated": truncated}
        kM, kF, kB = key(nMF), key(nDF), key(nDB)
        order = np.lexsort((nc, kB, kF, kM))
        first = np.ones(len(order), bool)
        first[1:] = (kM[order][1:] != kM[order][:-1]) | (kF[order][1:] != kF[order][:-1]) | \
            (kB[order][1:] != kB[order][:-1])
        keep = order[first]
        if len(keep) > max_states:
            keep = keep[np.argsort(nc[keep], kind="stable")[:max_states]]
            truncated += 1
        MF, DF, DB, cost = nMF[keep], nDF[keep], nDB[keep], nc[keep]
        parents.append(par[keep]); decisions.append(dec[keep])
        n_states += len(keep)
    # junction, eq. (9)
    mf, df, db = MF, DF, DB
    mb = y[L + 1] + np.maximum(db, 0) + mf - np.maximum(df, 0)
    sx_after = np.array([x[j + 2:L + 2].sum() for j in range(L + 1)])       # sum_{i>j+1} |x_i|
    cumB = np.array([d.uB[j + 1:L + 1].sum() for j in range(L + 1)])          # sum_{i=j+1}^{L} u_{B_i}
    cumF = np.array([d.uF[j + 1:L + 1].sum() for j in range(L + 1)])
    RB = d.exB + y[:L + 1] + y[1:L + 2] - sx_after
    RF = d.exF - sx_after
    # suffix maxima over j >= j0 (cum is non-increasing in j)
    gB = RB / b_out - cumB
    gF = RF / b_in - cumF
    sufB = np.maximum.accumulate(gB[::-1])[::-1]
    sufF = np.maximum.accumulate(gF[::-1])[::-1]
    j0B = np.searchsorted(-b_in * cumB, db, side="right")   # first j with beta_in*cumB[j] < -db
    j0F = np.searchsorted(-b_out * cumF, df, side="right")
    t3 = np.where(j0B <= L, (mf - M) / b_out + sufB[np.minimum(j0B, L)], -np.inf)
    t4 = np.where(j0F <= L, (mb - M) / b_in + sufF[np.minimum(j0F, L)], -np.inf)
    eG = np.maximum.reduce([np.zeros_like(mf), df / b_out + db / b_in, t3, t4])
    total = cost + eG
    comp = float(d.uF.sum() + d.uB.sum())
    best = np.argsort(total, kind="stable")
    out, seen = [], set()
    for s in best:
        chosen = []
        k = int(s)
        for lvl in range(L, -1, -1):
            if decisions[lvl][k]:
                chosen.append(lvl)
            k = int(parents[lvl][k])
        key = tuple(sorted(chosen))
        if key in seen:
            continue
        seen.add(key)
        out.append((comp + float(total[s]), sorted(chosen)))
        if len(out) >= top:
            break
    return out, {"states": n_states, "grid": q, "truncated": truncated}


#: DYNPROG's grids (``memory / slots`` bytes) tried when ``slots`` is None, then exact values
AUTO_GRIDS = (500, 2000, 8000)


def dynprog(chain: Chain, memory: float, bandwidth: float, *, slots: int | None = None, exact: bool = False,
            top: int = 8, max_states: int = 20000, time_limit: float | None = None) -> Solution:
    """DYNPROG (section 5.3): Algorithm 1's offloaded set, scheduled whole, no-wait and ordered. If the
    DP keeps no state (too coarse a grid), the GREEDY set is used and the message says so.

    ``slots``/``exact`` as given are honoured. ``slots=None`` (default): the grid is chosen, refined
    and compared: Algorithm 1 runs on grids of ``memory / S`` bytes for ``S`` in :data:`AUTO_GRIDS`
    and with exact values, while time allows (merging states is a heuristic, so a finer grid is not
    always better: the best schedule of all runs is kept), and GREEDY's schedule is a candidate too,
    so DYNPROG is never worse than GREEDY (but where the limit has passed with a schedule in hand:
    GREEDY is then not run, and the message says so). ``time_limit`` (seconds) stops the refinement, the
    rebuilding of the ``top`` best final states once the first one has been tried, and Algorithm 1
    itself between two of its levels (GREEDY's schedule is then the answer, and the message says so)."""
    if exact or slots is not None:
        return _dynprog_given(chain, memory, bandwidth, slots=100 if slots is None else slots, exact=exact, top=top,
                              max_states=max_states, time_limit=time_limit)
    _check(chain, memory, bandwidth)
    t0 = time.perf_counter()
    stop = _deadline(time_limit)
    runs = []
    best = None
    for grid in list(AUTO_GRIDS) + ["exact"]:
        if runs and time.monotonic() >= stop:
            break
        ts = time.monotonic()
        sol = _dynprog_given(chain, memory, bandwidth, slots=grid if grid != "exact" else 100,
                             exact=grid == "exact", top=top, max_states=max_states,
                             time_limit=None if time_limit is None else max(0.0, stop - time.monotonic()),
                             greedy_fallback=False)     # GREEDY is run once, below
        runs.append({"grid": grid, "makespan": sol.objective, "stopped": bool(sol.details.get("dp_stopped"))})
        if sol.success and (best is None or sol.objective < best.objective - 1e-12 * sol.objective):
            best = sol
        if runs and time.monotonic() + 3 * (time.monotonic() - ts) > stop:
            break
    # GREEDY is a candidate (DYNPROG never worse than it) unless the limit has passed with a schedule in
    # hand: at L = 3000 it takes about 1 s (its fractional bound and a no-wait replay), which a 0.3 s
    # share of remat-offload's portfolio ran past its limit
    late = best is not None and time.monotonic() >= stop          # stop: inf without a limit
    g = None if late else greedy(chain, memory, bandwidth)
    if g is not None and g.success and (best is None or g.objective < best.objective - 1e-12 * g.objective):
        why = ("Algorithm 1 stopped at the time limit before its last level" if best is None and runs[-1]["stopped"]
               else "better than Algorithm 1 on every grid tried")
        best = make_solution(chain, "dynprog", g.schedule, memory, bound=g.bound if g.bound is not None else
                             lower_bound_value(chain, memory, bandwidth), predicted=g.objective,
                             message=f"GREEDY's set ({why})")
    if best is None:
        return make_solution(chain, "dynprog", None, memory, bound=lower_bound_value(chain, memory, bandwidth),
                             message="no grid gave a buildable state and GREEDY has no schedule",
                             times={"total": time.perf_counter() - t0}, details={"grids": runs})
    best.details["grids"] = runs
    best.details["greedy"] = g.objective if g is not None else None
    grids = ", ".join(str(r["grid"]) for r in runs)
    best.message += (f" (best of grids {grids} and GREEDY)" if g is not None else
                     f" (best of grids {grids}; GREEDY not compared: the time limit was reached)")
    best.times = {"total": time.perf_counter() - t0}
    return best


def _dynprog_given(chain: Chain, memory: float, bandwidth: float, *, slots: int, exact: bool, top: int,
                   max_states: int, time_limit: float | None, greedy_fallback: bool = True) -> Solution:
    """DYNPROG with the grid given (``slots``) or exact values; GREEDY's set when the DP gives no
    buildable state (unless ``greedy_fallback`` is False: the caller runs GREEDY itself)."""
    _check(chain, memory, bandwidth)
    t0 = time.perf_counter()
    stop = _deadline(time_limit)
    lb = lower_bound_value(chain, memory, bandwidth)
    cands, info = dynprog_sets(chain, memory, bandwidth, slots=slots, exact=exact, top=top,
                               max_states=max_states, deadline=None if time_limit is None else stop)
    best, pred, chosen = None, None, None
    tried = 0
    for value, S in cands:
        if tried and time.monotonic() >= stop:
            break
        tried += 1
        res = _try(chain, memory, bandwidth, S)
        if res is not None and (best is None or res[1] < best[1] - 1e-12):
            best, pred, chosen = res, value, S
    grid = "exact values" if exact else f"grid {info['grid']:.4g} B (M/{slots})"
    msg = f"Algorithm 1, states merged on a {grid}"
    if info["truncated"]:
        msg += f", {max_states} cheapest states kept on {info['truncated']} levels"
    if info.get("stopped"):
        msg += f", stopped at the time limit after {info['levels']} of its {OffloadData.of(chain).L + 1} levels"
    if tried < len(cands):
        msg += f", {tried} of its {len(cands)} best states rebuilt (time limit)"
    if best is None and greedy_fallback:
        g = greedy(chain, memory, bandwidth)
        if g.schedule is not None:
            best = (g.schedule, g.objective)
            chosen = g.schedule.offloaded
            msg += ("; GREEDY's set is used" if info.get("stopped") else
                    "; the DP kept no buildable state, GREEDY's set is used")
    if chosen is not None:
        msg += f"; offloads {len(chosen)} activations"
    return make_solution(chain, "dynprog", None if best is None else best[0], memory, bound=lb, predicted=pred,
                         message=msg, times={"total": time.perf_counter() - t0},
                         details={"dp_states": info["states"], "rounding": grid, "dp_candidates": len(cands),
                                  "truncated_levels": info["truncated"], "dp_stopped": bool(info.get("stopped"))})


# ------------------------------------------------------------------------------------------- peers
def vdnn(chain: Chain, memory: float, bandwidth: float, *, time_limit: float | None = None) -> Solution:
    """vDNN(++) as implemented in section 6: candidates are the ``x_i`` whose ratio ``u_{F_i}/|x_i|`` is
    at least a threshold; for every threshold, the no-wait ordered schedules offloading all the
    candidates and every second one (half) are built; the best valid one is returned. ``time_limit``
    (seconds) stops the scan over thresholds early, keeping the best schedule found."""
    _check(chain, memory, bandwidth)
    t0 = time.perf_counter()
    stop = _deadline(time_limit)
    d = OffloadData.of(chain)
    ratio = {i: (d.uF[i] / d.x[i] if d.x[i] > 0 else math.inf) for i in range(d.L + 1)}
    best, tried, stopped = None, set(), False
    for thr in sorted(set(ratio.values()), reverse=True) + [-1.0]:
        if tried and time.monotonic() >= stop:
            stopped = True
            break
        cand = [i for i in range(d.L + 1) if ratio[i] >= thr]
        for S in (cand, cand[::2]):
            key = tuple(S)
            if key in tried:
                continue
            tried.add(key)
            res = _try(chain, memory, bandwidth, S)
            if res is not None and (best is None or res[1] < best[1]):
                best = res
    return make_solution(chain, "vdnn", best and best[0], memory, bound=lower_bound_value(chain, memory, bandwidth),
                         message=f"best of {len(tried)} threshold/all-or-half choices"
                         + (" (stopped at the time limit)" if stopped else ""),
                         times={"total": time.perf_counter() - t0})


def _tflms_schedule(d: OffloadData, bandwidth, n: int, dist: int) -> OffloadSchedule:
    """TFLMS: offload the first ``n`` activations as soon as they exist; forward computations never
    wait for memory (TFLMS has no profile); the prefetch of ``x_j`` is triggered when ``B_{j+dist}``
    starts (``B_L`` for the last ones) and ``B_j`` waits for it."""
    L = d.L
    b_out, b_in = link_speeds(bandwidth)
    tF, t = [], 0.0
    for i in range(L + 1):
        tF.append(t)
        t += d.uF[i]
    link = 0.0
    off = {}
    for j in range(min(n, L + 1)):
        ready = 0.0 if j == 0 else tF[j - 1] + d.uF[j - 1]
        off[j] = max(link, ready)
        link = off[j] + d.x[j] / b_out
    tB = [0.0] * (L + 1)
    pre = {}
    endF = t
    trig = {}
    for j in sorted(off, reverse=True):
        trig.setdefault(min(L, j + dist), []).append(j)
    t = endF
    for i in range(L, -1, -1):
        tB[i] = t
        # the prefetches triggered by B_i start now (in decreasing j), once the link is free
        for j in sorted(trig.get(i, []), reverse=True):
            pre[j] = max(link, tB[i], off[j] + d.x[j] / b_out)
            link = pre[j] + d.x[j] / b_in
        if i in pre:   # B_i waits for x_i (only the prefetches triggered by B_L can be its own)
            tB[i] = max(tB[i], pre[i] + d.x[i] / b_in)
        t = tB[i] + d.uB[i]
    return OffloadSchedule(tF=tF, tB=tB, offload=off, prefetch=pre, bandwidth=(b_out, b_in))


def _tflms_forward_fits(d: OffloadData, M: float, bandwidth, n: int) -> bool:
    """Memory check of the TFLMS forward phase alone (it never waits): at the start of each F_i."""
    L = d.L
    beta = link_speeds(bandwidth)[0]            # the forward phase only offloads
    tF = np.concatenate([[0.0], np.cumsum(d.uF)[:-1]])
    eF = tF + d.uF
    link, rel = 0.0, []
    for j in range(min(n, L + 1)):
        start = max(link, 0.0 if j == 0 else eF[j - 1])
        link = start + d.x[j] / beta
        rel.append((max(link, eF[j]), d.x[j]))
    rel.sort()
    rt = np.array([r for r, _ in rel]) if rel else np.zeros(0)
    rc = np.cumsum([sz for _, sz in rel]) if rel else np.zeros(0)
    cum = np.cumsum(d.x)
    tol = 1e-9 * max(1.0, M)
    # bytes released by the start of every F_i at once (one searchsorted per F_i cost 1.4 s per call
    # of TFLMS on 1000 stages)
    k = np.searchsorted(rt, tF, side="right")
    freed = np.where(k > 0, rc[np.maximum(k - 1, 0)], 0.0) if len(rc) else np.zeros(L + 1)
    return not bool(np.any(cum[1:L + 2] + d.exF[:L + 1] - freed > M + tol))


def tflms(chain: Chain, memory: float, bandwidth: float, *, distances: Sequence[int] | None = None,
          time_limit: float | None = None) -> Solution:
    """TFLMS (section 6): parameterised by the number of offloaded tensors ``n`` (the first ``n``) and
    the prefetch distance (layers in advance); the best valid configuration over ``n = 0..L+1`` and a
    grid of distances (1, 2, 3, 4, 6, 8, 12, ..., L+1) is returned. Values of ``n`` holding less than
    ``M_peak - M`` bytes (Proposition 2) or whose forward phase overflows are skipped. ``time_limit``
    (seconds) stops the replay of the configurations, best first, early."""
    _check(chain, memory, bandwidth)
    t0 = time.perf_counter()
    stop = _deadline(time_limit)
    d = OffloadData.of(chain)
    L = d.L
    if distances is None:
        distances = sorted(set([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, L + 1]) & set(range(1, L + 2)))
    Q = peak_memory_no_offload(chain) - memory
    cum = np.concatenate([[0.0], np.cumsum(d.x[:L + 1])])     # cum[n] = bytes of the first n
    cands = []
    built_all = True
    for n in range(0, L + 2):
        if n and time.monotonic() >= stop:           # O(L^2) to build them all: 0.8 s on 1000 stages
            built_all = False
            break
        if cum[n] < Q - 1e-9 * max(1.0, memory) or not _tflms_forward_fits(d, memory, bandwidth, n):
            continue
        for dist in distances:
            s = _tflms_schedule(d, bandwidth, n, dist)
            cands.append((s.tB[0] + d.uB[0], n, dist, s))
            if n == 0:
                break
    cands.sort(key=lambda c: c[0])
    best, stopped = None, not built_all
    for k, (mk, n, dist, s) in enumerate(cands):
        if k and time.monotonic() >= stop:
            stopped = True
            break
        try:
            validate_offload(chain, s, memory)
        except ValueError:
            continue
        best = (s, n, dist)
        break
    return make_solution(chain, "tflms", best and best[0], memory,
                         bound=lower_bound_value(chain, memory, bandwidth),
                         message=("no configuration fits (TFLMS never delays a computation for memory)"
                                  if best is None else
                                  f"best configuration: {best[1]} tensors, prefetch distance {best[2]}")
                         + (" (stopped at the time limit)" if stopped else ""),
                         times={"total": time.perf_counter() - t0},
                         details={} if best is None else {"n_tensors": best[1], "distance": best[2]})


def autoswap_scores(chain: Chain, memory: float, bandwidth: float) -> np.ndarray:
    """The four AutoSwap priority scores of each candidate ``x_j`` (rows j = 0..L), each scaled to [0, 1]:
    DOA (duration of absence: from the end of ``F_j`` to the start of ``B_j`` with no offloading), AOA
    (size x DOA), WDOA (DOA weighted by how much the memory exceeds the limit during the absence), and
    SWDOA (WDOA times the fraction of the round trip ``2|x_j|/beta`` that fits in the absence; with two
    link speeds ``|x_j|/beta_out + |x_j|/beta_in``)."""
    d = OffloadData.of(chain)
    b_out, b_in = link_speeds(bandwidth)
    L = d.L
    tF = np.concatenate([[0], np.cumsum(d.uF)[:-1]])
    eFL = d.uF.sum()
    eB = eFL + np.cumsum(d.uB[::-1])[::-1]       # end of B_i
    sB = eB - d.uB
    cum = np.cumsum(d.x)
    mF = d.exF + cum[1:L + 2]
    mB = d.exB + d.y[:L + 1] + d.y[1:L + 2] + cum[1:L + 2]
    # the computations F_0..F_L, B_L..B_0 tile [0, end] one after the other, each with its excess over
    # the limit: the excess integrated from 0 to t is piecewise linear with these breakpoints, so the
    # weight of an absence [a, b] is G(b) - G(a) (O(L log L); the sum over every computation for
    # every candidate took seconds at L = 1000)
    starts = np.concatenate([tF, sB[::-1]])
    ends = np.concatenate([tF + d.uF, eB[::-1]])
    excess = np.maximum(0.0, np.concatenate([mF, mB[::-1]]) - memory)
    knots = np.concatenate([[0.0], ends])
    G = np.concatenate([[0.0], np.cumsum(excess * (ends - starts))])

    def integral(t):
        return np.interp(t, knots, G)

    a, b = tF + d.uF, sB
    doa = np.maximum(0.0, b - a)
    w = np.where(b > a, integral(b) - integral(np.minimum(a, b)), 0.0)
    x = np.asarray(d.x[:L + 1], dtype=float)
    rt = np.where(x > 0, x / b_out + x / b_in, 0.0)
    frac = np.where(rt > 0, np.minimum(1.0, doa / np.where(rt > 0, rt, 1.0)), 1.0)
    S = np.column_stack([doa, x * doa, w, w * frac])
    mx = S.max(axis=0)
    mx[mx == 0] = 1.0
    return S / mx


def autoswap(chain: Chain, memory: float, bandwidth: float, *, samples: int = 40, seed: int = 0,
             extra: int = 2, time_limit: float | None = None) -> Solution:
    """AutoSwap (section 6): activations ranked by a weighted sum of its four priority scores
    (:func:`autoswap_scores`); offload the top-ranked ones, the smallest prefix of the ranking holding
    ``M_peak - M`` bytes and up to ``extra`` more. The weights are searched by *random search* (the
    four unit vectors, the uniform vector and ``samples`` Dirichlet draws, seeded) instead of the
    Bayesian optimisation of the original, which makes the result reproducible. ``time_limit``
    (seconds) stops the search over weight vectors early, keeping the best schedule found."""
    _check(chain, memory, bandwidth)
    t0 = time.perf_counter()
    stop = _deadline(time_limit)
    d = OffloadData.of(chain)
    S = autoswap_scores(chain, memory, bandwidth)
    Q = max(0.0, peak_memory_no_offload(chain) - memory)
    rng = np.random.default_rng(seed)
    weights = [np.eye(4)[k] for k in range(4)] + [np.full(4, 0.25)] + list(rng.dirichlet(np.ones(4), samples))
    seen: dict[tuple, tuple | None] = {}
    best, best_w, used = None, None, 0
    for w in weights:
        if used and time.monotonic() >= stop:
            break
        used += 1
        score = S @ w
        rank = sorted(range(d.L + 1), key=lambda j: (-score[j], j))
        acc, k0 = 0.0, len(rank)
        for k, j in enumerate(rank):
            if acc >= Q - 1e-12 * max(1.0, Q):
                k0 = k
                break
            acc += d.x[j]
        else:
            k0 = len(rank) if acc < Q else len(rank)
        for k in range(k0, min(len(rank), k0 + extra) + 1):
            key = tuple(sorted(rank[:k]))
            if key not in seen:
                seen[key] = _try(chain, memory, bandwidth, list(key))
            res = seen[key]
            if res is not None and (best is None or res[1] < best[1]):
                best, best_w = res, w
    return make_solution(chain, "autoswap", best and best[0], memory,
                         bound=lower_bound_value(chain, memory, bandwidth),
                         message=f"random search over {used} weight vectors, {len(seen)} sets tried"
                         + (f" (stopped at the time limit, of {len(weights)})" if used < len(weights) else ""),
                         times={"total": time.perf_counter() - t0},
                         details={} if best_w is None else {"weights": [float(v) for v in best_w]})


# -------------------------------------------------------------------------------------- exhaustive
def exhaustive(chain: Chain, memory: float, bandwidth: float, *, max_candidates: int = 5) -> Solution:
    """Best no-wait schedule over every offloaded set and every (offload order, prefetch order) pair.
    Exponential: refuses chains with more than ``max_candidates`` candidates (L + 1)."""
    d = OffloadData.of(chain)
    if d.L + 1 > max_candidates:
        raise ValueError(f"exhaustive search over {d.L + 1} candidates refused (max {max_candidates})")
    _check(chain, memory, bandwidth)
    t0 = time.perf_counter()
    best, n = None, 0
    for k in range(d.L + 2):
        for S in itertools.combinations(range(d.L + 1), k):
            if sum(d.x[j] for j in S) < peak_memory_no_offload(chain) - memory - 1e-9:
                continue   # Proposition 2
            for oo in itertools.permutations(S):
                for po in itertools.permutations(S):
                    n += 1
                    res = _try(chain, memory, bandwidth, S, oo, po)
                    if res is not None and (best is None or res[1] < best[1] - 1e-12):
                        best = res
    return make_solution(chain, "exhaustive", best and best[0], memory,
                         bound=lower_bound_value(chain, memory, bandwidth),
                         message=f"{n} no-wait schedules tried", times={"total": time.perf_counter() - t0})
