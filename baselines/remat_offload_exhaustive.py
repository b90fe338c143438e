"""Exact reference for re-materialization + offloading on tiny chains: an exhaustive search.

Paper 000's DP restricts the schedules (memory persistence, only top-level inputs offloaded,
offloads in the forward phase and prefetches in the backward phase) and, in our implementation,
places transfer parts by a fixed rule (:mod:`baselines.remat_offload_dp`). To measure what these
restrictions cost, this module searches **every** schedule of a larger, well-defined space, in which
the DP's schedules lie:

- any valid operation sequence of paper 004 (not only persistent ones: any op, any order, values
  recomputed at will), with the semantics of :mod:`models.remat` / :mod:`models.remat_offload`;
- any stored forward value ``a^l``/``abar^l`` (l = 0..L) may be offloaded and prefetched, in parts of
  one byte (``1/beta`` seconds each), at any time, in any order (one transfer at a time);
- every operation and every transfer part starts on a common time grid ``tau`` that divides all
  operation times and ``1/beta`` (integer chains: ``tau`` is found from the exact fractions).

Two rules prune the space without removing any schedule the DP can produce: forward operations on
stages beyond the current gradient (``F^l`` with ``l > k`` once ``delta^k`` is the current
gradient) are not tried, and an input of the running operation is not offloaded (its memory would be
freed while it is read; the simulator rejects that too). Gradients are never offloaded.

Memory is counted exactly as the simulator does (each forward with its own overhead, ``of_all`` for
F_all and ``of_ng`` for F_ck / F_none; offloaded bytes free at the end of the part,
prefetched bytes reserved at its start, releases before allocations at equal instants). The search is
a breadth-first search over time steps of ``tau`` on states (stored values, bytes on the host, current
gradient, running operation and transfer with their remaining steps); a state reached again later is
dominated and dropped, so the first time ``delta^0`` is produced is the optimum over the space.
With an upper bound (the DP's makespan) the search stops there: if nothing faster exists, the DP is
optimal in this space. It returns a :class:`models.remat_offload.RematOffloadSchedule`, replayed by the
simulator like every other method.

Requirements: integer sizes (bytes), rational times; meant for L <= 3 or 4 with small sizes.
:func:`memplan.remat_offload.solve` exposes it as ``method="exhaustive"`` (``--method exhaustive``),
bounded by the joint DP's makespan.
"""
from __future__ import annotations

import math
import time
from fractions import Fraction

from memplan.models.chain import Chain
from memplan.models.remat_offload import RematOffloadSchedule, Transfer, simulate_remat_offload
from memplan.models.solution import Solution, Status

_OPS = ("F_all", "F_ck", "F_none", "B")


def _grid(chain: Chain, beta: float | None, max_den: int = 1000) -> Fraction:
    vals = [Fraction(float(x)).limit_denominator(max_den) for x in list(chain.uf[1:]) + list(chain.ub[1:])]
    if beta:
        # the time per byte, as a fraction itself: 1 / (beta as a fraction) had made a link slower
        # than 1 / (2 max_den) bytes/s a fraction 0 and the grid a ZeroDivisionError
        vals.append(Fraction(1.0 / float(beta)).limit_denominator(max_den))
    g = Fraction(0)
    for v in vals:
        if v == 0:
            continue
        g = v if g == 0 else Fraction(math.gcd(g.numerator * v.denominator, v.numerator * g.denominator),
                                      g.denominator * v.denominator)
    return g if g > 0 else Fraction(1)


def solve_exhaustive(chain: Chain, memory: float, bandwidth: float | None, *, upper_bound: float | None = None,
                     time_limit: float | None = 60.0, max_states: int = 5_000_000) -> Solution:
    """Optimal re-materialization + offloading schedule over the space of the module docstring.

    A breadth-first search over time steps of the grid; states grow exponentially with ``L`` (tiny
    chains only).

    Parameters
    ----------
    chain : Chain
        Integer sizes (bytes) and times on a common rational grid.
    memory : float
        Memory limit in bytes (rounded down to a whole byte).
    bandwidth : float or None
        Link bandwidth in bytes/s (0 or None: re-materialization alone).
    upper_bound : float, optional
        Stop searching at this makespan (seconds), e.g. the joint DP's: when no faster schedule
        exists the result is OPTIMAL with ``bound = upper_bound``, no schedule and
        ``details["proven_optimal_at_upper_bound"]`` (the caller keeps its own schedule).
    time_limit : float or None
        Seconds; the search stops with TIME_LIMIT (``bound`` the time reached) past it.
    max_states : int
        The search stops with TIME_LIMIT past this many states.

    Returns
    -------
    Solution
        ``method="exhaustive"``; the schedule replayed by
        :func:`memplan.models.remat_offload.simulate_remat_offload`.

    Raises
    ------
    ValueError
        Float sizes, or operation times without a common grid.

    Examples
    --------
    Below the least memory of re-materialization alone (19 B here), offloading over a 1 B/s link
    still finds a schedule:

    >>> from memplan.models.chain import random_chain
    >>> c = random_chain(2, 0, max_size=4, max_time=4)
    >>> c.store_all_time()
    20.0
    >>> sol = solve_exhaustive(c, 18, 1.0, time_limit=30)
    >>> sol.status.value, sol.objective, sol.peak_memory <= 18
    ('optimal', 21.0, True)
    """
    t_start = time.perf_counter()
    L = chain.L
    if not chain.is_integer:
        raise ValueError("the exhaustive search needs integer sizes")
    beta = float(bandwidth or 0.0)
    tau = _grid(chain, beta)
    for x in list(chain.uf[1:]) + list(chain.ub[1:]):
        if abs(float(x) / float(tau) - round(float(x) / float(tau))) > 1e-9:
            raise ValueError("operation times are not multiples of a common grid")
    uf = [int(round(float(x) / float(tau))) for x in chain.uf]
    ub = [int(round(float(x) / float(tau))) for x in chain.ub]
    part = int(round(1.0 / beta / float(tau))) if beta > 0 else 0
    if beta > 0 and (part < 1 or abs(1.0 / beta / float(tau) - part) > 1e-9 * max(1.0, part)):
        raise ValueError(f"the link's time per byte (1/bandwidth = {1.0 / beta:.6g}s) is not a multiple of the "
                         f"operation times' common grid ({float(tau):.6g}s)")
    wa = [int(x) for x in chain.wa]
    wab = [int(x) for x in chain.wabar]
    wd = [int(x) for x in chain.wd]
    ofa = [int(x) for x in chain.of_all]      # F_all's own forward overhead
    ofn = [int(x) for x in chain.of_ng]       # the no-grad forwards' (F_ck, F_none)
    ob = [int(x) for x in chain.ob]
    M = int(math.floor(memory + 1e-9))
    ub_steps = None if upper_bound is None else int(math.floor(upper_bound / float(tau) + 1e-9))

    def size(st, l):
        return wab[l] if st[l] == 2 else wa[l] if st[l] == 1 else 0

    def mem_of(st, host, dl, cop, ctr):
        m = sum(size(st, l) - host[l] for l in range(L + 1)) + size(st, L + 1) + wd[dl]
        if cop is not None:
            op, l, _ = cop
            m += (wab[l] + ofa[l]) if op == 0 else (wa[l] + ofn[l]) if op in (1, 2) else (wd[l - 1] + ob[l])
        if ctr is not None and ctr[0] == 1:
            m += 1
        return m

    def discards(op, l, st):
        if op == 2:
            return (l - 1,)
        if op == 3:
            return (l, l - 1) if st[l - 1] == 1 else (l,)
        return ()

    def reads(op, l):
        return (l, l - 1) if op == 3 else (l - 1,)

    def can_start(op, l, st, host, dl, ctr):
        if op == 3:
            if dl != l or st[l] != 2 or st[l - 1] == 0:
                return False
            ins = (l, l - 1)
        else:
            if st[l - 1] == 0 or (op == 2 and st[l - 1] == 2):
                return False
            # recomputing a stored value is not an operation of the model (models.remat): F_all^l
            # over abar^l, F_ck^l / F_none^l over a^l or abar^l (F_none^l over abar^l was tried and
            # acted as a free deletion of a^{l-1}; the replay then refused the schedule found)
            if st[l] == 2 or (op != 0 and st[l] != 0):
                return False
            if l == L + 1 and op != 0:
                return False
            if dl <= L and l > dl:      # forward steps beyond the current gradient are useless
                return False
            ins = (l - 1,)
        busy = ctr[1] if ctr is not None else -1
        for k in ins + (l,) + discards(op, l, st):
            if k <= L and (host[k] > 0 or k == busy):
                return False
        return True

    def apply(op, l, st, dl):
        st = list(st)
        if op == 3:
            st[l] = 0
            if st[l - 1] == 1:
                st[l - 1] = 0
            dl = l - 1
        else:
            st[l] = 2 if op == 0 else max(st[l], 1)
            if op == 2:
                st[l - 1] = 0
        return tuple(st), dl

    def lower(st, dl, cop):
        r = 0
        d2 = dl
        if cop is not None:
            r += cop[2]
            if cop[0] == 3:
                d2 = dl - 1
        for l in range(1, d2 + 1):
            r += ub[l]
            if st[l] != 2 and not (cop is not None and cop[0] == 0 and cop[1] == l):
                r += uf[l]
        return r

    st0 = tuple([1] + [0] * (L + 1))
    start = (st0, tuple([0] * (L + 1)), L + 1, None, None)
    parent: dict = {start: None}
    layer = [start]
    t = 0
    found = None
    states = 0
    status = None
    while layer and found is None:
        if ub_steps is not None and t >= ub_steps:
            break
        if time_limit is not None and time.perf_counter() - t_start > time_limit:
            status = Status.TIME_LIMIT
            break
        nxt = []
        for i_s, s in enumerate(layer):
            # a layer can hold tens of thousands of states: the limit is checked inside it too (a
            # check per layer overran a 1 s limit by 2.4 s on a busy machine)
            if (time_limit is not None and i_s % 256 == 255
                    and time.perf_counter() - t_start > time_limit):
                status = Status.TIME_LIMIT
                break
            # instantaneous (zero-duration) operations, then the choices at time t
            closure = [(s, ())]
            seen_c = {s}
            k = 0
            while k < len(closure):
                (st, host, dl, cop, ctr), acts = closure[k]
                k += 1
                if cop is not None:
                    continue
                for op in range(4):
                    for l in range(1, L + 2):
                        if not can_start(op, l, st, host, dl, ctr):
                            continue
                        dur = ub[l] if op == 3 else uf[l]
                        if dur == 0:
                            if mem_of(st, host, dl, (op, l, 0), ctr) > M:
                                continue
                            st2, dl2 = apply(op, l, st, dl)
                            key2 = (st2, host, dl2, None, ctr)
                            if key2 not in seen_c:
                                seen_c.add(key2)
                                closure.append((key2, acts + (("op", op, l, t),)))
            for (st, host, dl, cop, ctr), acts in closure:
                if dl == 0:
                    found = (st, host, dl, cop, ctr, acts)
                    break
                op_choices = [None] if cop is not None else [None] + [
                    (op, l) for op in range(4) for l in range(1, L + 2)
                    if can_start(op, l, st, host, dl, ctr) and (ub[l] if op == 3 else uf[l]) > 0]
                tr_choices = [None]
                if ctr is None and part > 0:
                    for l in range(L + 1):
                        if st[l] and size(st, l) - host[l] > 0:
                            tr_choices.append((0, l))
                        if st[l] and host[l] > 0:
                            tr_choices.append((1, l))
                for oc in op_choices:
                    cop2 = cop
                    if oc is not None:
                        cop2 = (oc[0], oc[1], ub[oc[1]] if oc[0] == 3 else uf[oc[1]])
                    for tc in tr_choices:
                        if oc is None and tc is None and cop is None and ctr is None:
                            continue
                        ctr2 = ctr
                        if tc is not None:
                            if cop2 is not None and (tc[1] == cop2[1] and cop2[0] != 3 or
                                                     tc[1] in discards(cop2[0], cop2[1], st) or
                                                     (tc[0] == 0 and tc[1] in reads(cop2[0], cop2[1]))):
                                continue
                            ctr2 = (tc[0], tc[1], part)
                        if mem_of(st, host, dl, cop2, ctr2) > M:
                            continue
                        # advance one step
                        st3, host3, dl3 = st, host, dl
                        cop3, ctr3 = cop2, ctr2
                        if cop3 is not None:
                            cop3 = (cop3[0], cop3[1], cop3[2] - 1)
                            if cop3[2] == 0:
                                st3, dl3 = apply(cop3[0], cop3[1], st3, dl3)
                                cop3 = None
                        if ctr3 is not None:
                            ctr3 = (ctr3[0], ctr3[1], ctr3[2] - 1)
                            if ctr3[2] == 0:
                                h = list(host3)
                                h[ctr3[1]] += 1 if ctr3[0] == 0 else -1
                                host3 = tuple(h)
                                ctr3 = None
                        key = (st3, host3, dl3, cop3, ctr3)
                        if key in parent:
                            continue
                        if ub_steps is not None and t + 1 + lower(st3, dl3, cop3) > ub_steps:
                            continue
                        new = acts
                        if oc is not None:
                            new = new + (("op", oc[0], oc[1], t),)
                        if tc is not None:
                            new = new + (("tr", tc[0], tc[1], t),)
                        parent[key] = (s, new)
                        nxt.append(key)
            if found is not None:
                found = (s, found[5])
                break
        if status is not None:           # stopped inside layer t: only times below t are searched
            break
        states += len(nxt)
        if states > max_states:
            status = Status.TIME_LIMIT
            break
        layer = nxt
        t += 1
    times = {"total": time.perf_counter() - t_start}
    details = {"grid": float(tau), "states": len(parent), "bandwidth": beta,
               "space": "all op sequences; any value offloaded/prefetched in 1-byte parts; starts on the grid"}
    if found is None:
        if status == Status.TIME_LIMIT:
            return Solution(problem="remat-offload", method="exhaustive", status=Status.NO_SOLUTION if ub_steps is None
                            else Status.TIME_LIMIT, memory_limit=memory, times=times, details=details,
                            bound=t * float(tau),
                            message=f"search stopped (time or state limit) at t = {t * float(tau):.6g}s")
        if ub_steps is not None:
            details["proven_optimal_at_upper_bound"] = True
            return Solution(problem="remat-offload", method="exhaustive", status=Status.OPTIMAL, memory_limit=memory,
                            bound=upper_bound, times=times, details=details,
                            message=f"no schedule faster than the upper bound {upper_bound:.6g}s exists in the space")
        return Solution(problem="remat-offload", method="exhaustive", status=Status.INFEASIBLE, memory_limit=memory,
                        times=times, details=details, message="no schedule fits (exhaustive)")
    # rebuild the actions along the parent chain
    s, acts = found
    chain_acts = [acts]
    while parent[s] is not None:
        s, a = parent[s]
        chain_acts.append(a)
    ops, rel, trans = [], [], []
    parts_done: dict = {}
    for a in reversed(chain_acts):
        for item in a:
            if item[0] == "op":
                _, op, l, tt = item
                ops.append((_OPS[op], l))
                rel.append(tt * float(tau))
            else:
                _, kind, l, tt = item
                k = parts_done.get((kind, l), 0)
                parts_done[(kind, l)] = k + 1
                trans.append(Transfer("offload" if kind == 0 else "prefetch", l, 1.0, tt * float(tau), k))
    sched = RematOffloadSchedule(ops=ops, release=rel, transfers=trans)
    rep = simulate_remat_offload(chain, sched, beta, memory)
    times["total"] = time.perf_counter() - t_start
    details.update(recompute_time=rep.recompute_time, idle_time=rep.idle_time, idle_data=rep.idle_data,
                   offloaded=[{"index": l, "value": "part", "bytes": b} for l, b in sched.offloaded().items()],
                   offloaded_bytes=rep.offloaded_bytes, transfer_time=rep.transfer_time)
    return Solution(problem="remat-offload", method="exhaustive", status=Status.OPTIMAL, objective=rep.makespan,
                    peak_memory=rep.peak_memory, schedule=sched, memory_limit=memory, bound=rep.makespan,
                    times=times, details=details,
                    message="optimal over every schedule on the time grid with 1-byte transfer parts "
                            f"(grid {float(tau):.4g}s, {len(parent)} states)")
