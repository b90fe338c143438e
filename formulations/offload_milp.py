"""Exact MILP of Problem 1 of paper 001 (offloading with whole, non-interruptible transfers in any order).

Paper 001 proves Problem 1 strongly NP-complete (Theorem 1) and only studies relaxations; this model
gives the exact optimum for small chains. Memory model and indices: :mod:`models.offload` (paper
operations ``F_i``, ``B_i``, activations ``x_j``, ``j = 0..L``; computation position ``q = i`` for
``F_i`` and ``q = 2L+1-i`` for ``B_i``).

Time model
----------
* ``s_q``: start of computation ``q``; ``c_seq``: ``s_{q+1} >= s_q + u_q`` (the data dependencies of
  Fig. 1 force the order ``F_0..F_L, B_L..B_0``); the makespan ``C = s_{2L+1} + u_{B_0}`` is minimised.
* ``y_j`` = 1 when ``x_j`` is offloaded; ``o_j``, ``p_j`` the starts of its offload and prefetch, each
  lasting ``c_j y_j`` with ``c_j = |x_j|/beta``: ``c_ready`` (offload after ``F_{j-1}``),
  ``c_prefetch_after`` (prefetch after the offload), ``c_prefetch_before`` (prefetch ends before
  ``B_j``). A non-offloaded ``x_j`` gets zero-length transfers, which constrain nothing.
* ``c_link_*``: disjunctive ordering of the single link (section 3.1, one transfer at a time): one
  binary ``z`` per pair of transfers of different activations, relaxed by big-M when either activation
  is not offloaded. Any order is allowed (``phased=True`` forces all offloads before all prefetches,
  the class of orders the no-wait builder and :func:`baselines.offload.exhaustive` enumerate).

Memory, checked at the instants where it can grow
-------------------------------------------------
Memory grows only when a computation starts or a prefetch starts (an offload only frees memory when it
ends), so it is enough to bound it at those instants.

* Windows: the time line is cut into ``run q = [s_q, s_q + u_q]`` and ``idle q = [s_q + u_q,
  s_{q+1}]``. Each window has a *static* memory (items whose presence does not depend on transfers:
  activations that are needed there or absent there, gradients ``y``, temporary memory ``ex``) and a
  set of *variable* activations: ``x_j`` is variable from ``idle F_j`` to ``idle B_{j+1}`` (it may be
  on the host then), forced otherwise while alive (:func:`window_memory`).
* ``v_{j,w}`` (binary, ``sum_w v_{j,w} = y_j``): the prefetch of ``x_j`` starts in window ``w``
  (``c_window_lo/hi`` place ``p_j`` in it); ``b_{j,q} = sum_{w < run q} v_{j,w}`` says that it started
  no later than ``s_q``.
* ``a_{j,q}`` (binary): the first copy of ``x_j`` is still there when ``q`` starts; ``a = 0`` forces
  ``o_j + c_j <= s_q`` (``c_release``).
* ``c_mem_compute``: at ``s_q``, static + ``sum_{j variable} |x_j| (1 - y_j + a_{j,q} + b_{j,q}) <= M``.
* ``c_mem_prefetch``: when the prefetch of ``x_k`` starts in window ``w`` (``v_{k,w} = 1``), static(w) +
  ``|x_k|`` + ``sum_{j variable} |x_j| (1 - y_j + [P_k before O_j] + [P_j before P_k]) <= M``: on a single
  link, ``x_j``'s first copy is still there iff its offload comes after ``P_k``, and its second copy is
  reserved iff its prefetch came before ``P_k`` -- both are link-order binaries.

Why it is exact. Every valid schedule gives a feasible point with the same makespan (take ``y``,
times, ``z`` from the start order on the link, ``v`` from the window containing each prefetch start --
an idle window whenever the start lies in one, ties at ``s_q`` or at the end of ``q`` included -- and
``a`` from whether the offload ended by ``s_q``; a non-offloaded ``x_j`` gets its zero-length offload
first and its prefetch last on the link, so that its link-order terms vanish); every feasible point is a valid schedule, because the constraints above are the
validator's rules written at the only instants where memory can exceed the limit (ties are counted on
the conservative side: ``a``/``b``/link terms may only over-count). Big-M constants: ``H`` = an upper
bound of an optimal makespan (a left-shifted optimal schedule never leaves both the device and the
link idle, so ``sum u + 2 sum c`` works; the best heuristic's makespan is used when smaller).
Times are scaled by the total compute time and memory by ``M`` before solving.
"""
from __future__ import annotations

import itertools

from memplan.formulations.highs_driver import solve_milp, timed
from memplan.models import budget as _budget
from memplan.models.chain import Chain
from memplan.models.offload import (PROBLEM, InvalidOffloadSchedule, OffloadData, OffloadSchedule,
                                    lower_bound_value, make_solution, validate_offload)
from memplan.models.solution import InfeasibleError, Solution, Status


class BuildInterrupted(RuntimeError):
    """The call's time budget ran out while the model was being built."""


def window_memory(d: OffloadData, w: int) -> tuple[float, list[int]]:
    """Static memory of window ``w`` (``2q`` = run of computation q, ``2q+1`` = idle after it) and the
    candidates ``j`` whose presence there depends on transfers."""
    L = d.L
    q, idle = divmod(w, 2)
    static = 0.0
    var = []
    for j in range(L + 2):
        prod = 0 if j == 0 else 2 * (j - 1)
        if j == L + 1:
            alive_end = 2 * (L + 1)                  # freed with B_L
        elif j == 0:
            alive_end = 2 * (2 * L + 1) + 1          # kept to the end (freed with B_0)
        else:
            alive_end = 2 * (2 * L + 2 - j)          # run of B_{j-1}
        if w < prod or w > alive_end:
            continue
        if j <= L and 2 * j + 1 <= w <= 2 * (2 * L - j) + 1:
            var.append(j)
        else:
            static += d.x[j]
    if q <= L:                       # F_q
        if not idle:
            static += d.exF[q]
    else:                            # B_i
        i = 2 * L + 1 - q
        if not idle:
            static += d.exB[i] + d.y[i] + d.y[i + 1]
        else:
            static += d.y[i]
    return static, var


class _BuildClock:
    """Watches the active ``solve`` call's budget while the model is built. Constraint rules ask
    :meth:`out` and skip their row once time is out (an exception inside a rule would be logged by
    Pyomo as an error); :meth:`check` between the families then stops the build."""

    def __init__(self) -> None:
        self.budget = _budget.current()
        self.hit = False

    def out(self) -> bool:
        if not self.hit and self.budget.expired():
            self.hit = True
        return self.hit

    def check(self) -> None:
        if self.out():
            raise BuildInterrupted("the call's time limit was reached while the MILP was being built")


def build_offload_milp(chain: Chain, memory: float, bandwidth: float, *, horizon: float | None = None,
                       phased: bool = False):
    """The Pyomo model (see the module docstring). Returns ``(model, info)``; ``info`` holds the scales.

    Size: ``O(L^2)`` binaries (link order of every pair of transfers, prefetch windows) and ``O(L^2)``
    constraints of ``O(L)`` terms. Inside a ``solve`` call, raises :class:`BuildInterrupted` as soon as
    the call's time budget has run out (the largest constraint families check it row by row).
    """
    import pyomo.environ as pyo

    clock = _BuildClock()
    d = OffloadData.of(chain)
    L = d.L
    nq = 2 * L + 2
    dur_raw = [d.uF[q] if q <= L else d.uB[2 * L + 1 - q] for q in range(nq)]
    tu = float(sum(dur_raw)) or 1.0
    mu = float(memory)
    dur = [u / tu for u in dur_raw]
    J = [j for j in range(L + 1) if d.x[j] > 0]
    c = {j: d.x[j] / bandwidth / tu for j in J}
    H = sum(dur) + 2 * sum(c.values())
    if horizon is not None:
        H = min(H, horizon / tu * (1 + 1e-6) + 1e-9)
    Hm = float(d.x.sum() + d.y.sum() + d.exF.max() + d.exB.max()) / mu + 1.0
    qB = {j: 2 * L + 1 - j for j in range(L + 1)}

    m = pyo.ConcreteModel(name="offload_p1")
    m.Q = pyo.RangeSet(0, nq - 1)
    m.J = pyo.Set(initialize=J)
    m.s = pyo.Var(m.Q, bounds=(0, H))
    m.C = pyo.Var(bounds=(0, H))
    m.y = pyo.Var(m.J, within=pyo.Binary)
    m.o = pyo.Var(m.J, bounds=(0, H))
    m.p = pyo.Var(m.J, bounds=(0, H))
    m.obj = pyo.Objective(expr=m.C, sense=pyo.minimize)

    m.c_seq = pyo.Constraint(range(nq - 1), rule=lambda m, q: m.s[q + 1] >= m.s[q] + dur[q])
    m.c_makespan = pyo.Constraint(expr=m.C >= m.s[nq - 1] + dur[nq - 1])
    m.c_ready = pyo.Constraint(m.J, rule=lambda m, j: m.o[j] >= (m.s[j - 1] + dur[j - 1] if j > 0 else 0))
    m.c_prefetch_after = pyo.Constraint(m.J, rule=lambda m, j: m.p[j] >= m.o[j] + c[j] * m.y[j])
    m.c_prefetch_before = pyo.Constraint(m.J, rule=lambda m, j: m.p[j] + c[j] * m.y[j] <= m.s[qB[j]])

    # link: transfers ("O", j), ("P", j)
    T = [(k, j) for j in J for k in ("O", "P")]
    pairs = [(A, B) for A, B in itertools.combinations(T, 2) if A[1] != B[1]]
    m.PAIRS = pyo.Set(initialize=range(len(pairs)))
    m.z = pyo.Var(m.PAIRS, within=pyo.Binary)   # z = 1: first of the pair before the second
    pidx = {(A, B): n for n, (A, B) in enumerate(pairs)}

    def start(A):
        return m.o[A[1]] if A[0] == "O" else m.p[A[1]]

    def before(A, B):
        """Expression equal to 1 when transfer A precedes B on the link."""
        if (A, B) in pidx:
            return m.z[pidx[(A, B)]]
        return 1 - m.z[pidx[(B, A)]]

    def link1(m, n):
        if clock.out():
            return pyo.Constraint.Skip
        A, B = pairs[n]
        relax = H * (2 - m.y[A[1]] - m.y[B[1]])
        return start(B) >= start(A) + c[A[1]] - H * (1 - m.z[n]) - relax

    def link2(m, n):
        if clock.out():
            return pyo.Constraint.Skip
        A, B = pairs[n]
        relax = H * (2 - m.y[A[1]] - m.y[B[1]])
        return start(A) >= start(B) + c[B[1]] - H * m.z[n] - relax

    m.c_link_ab = pyo.Constraint(m.PAIRS, rule=link1)
    m.c_link_ba = pyo.Constraint(m.PAIRS, rule=link2)
    clock.check()
    if phased:
        for n, (A, B) in enumerate(pairs):
            if A[0] != B[0]:
                m.z[n].fix(1 if A[0] == "O" else 0)

    # windows of each prefetch
    W = {j: list(range(2 * j + 1, 2 * (2 * L - j) + 2)) for j in J}
    VW = [(j, w) for j in J for w in W[j]]
    m.VW = pyo.Set(initialize=VW, dimen=2)
    m.v = pyo.Var(m.VW, within=pyo.Binary)
    m.c_window_one = pyo.Constraint(m.J, rule=lambda m, j: sum(m.v[j, w] for w in W[j]) == m.y[j])

    def win_lo(m, j, w):
        q, idle = divmod(w, 2)
        lo = m.s[q] + (dur[q] if idle else 0)
        return m.p[j] >= lo - H * (1 - m.v[j, w])

    def win_hi(m, j, w):
        q, idle = divmod(w, 2)
        hi = m.s[q + 1] if idle else m.s[q] + dur[q]
        return m.p[j] <= hi + H * (1 - m.v[j, w])

    m.c_window_lo = pyo.Constraint(m.VW, rule=win_lo)
    m.c_window_hi = pyo.Constraint(m.VW, rule=win_hi)

    # release of the first copy before computation q
    AQ = [(j, q) for j in J for q in range(j + 1, 2 * L - j + 1)]
    m.AQ = pyo.Set(initialize=AQ, dimen=2)
    m.a = pyo.Var(m.AQ, within=pyo.Binary)
    m.c_release = pyo.Constraint(m.AQ, rule=lambda m, j, q: m.o[j] + c[j] * m.y[j] <= m.s[q] + H * m.a[j, q])
    clock.check()

    def b(j, q):
        return sum(m.v[j, w] for w in W[j] if w < 2 * q)

    def mem_compute(m, q):
        static, var = window_memory(d, 2 * q)
        expr = static / mu
        for j in var:
            if j in c:
                expr = expr + d.x[j] / mu * (1 - m.y[j] + m.a[j, q] + b(j, q))
            else:
                expr = expr + d.x[j] / mu
        if isinstance(expr, float):
            if expr > 1.0 + 1e-9:
                raise InfeasibleError(f"computation {q} alone needs {expr * mu:.6g} B > {mu:.6g} B",
                                      minimum=expr * mu)
            return pyo.Constraint.Skip
        return expr <= 1.0

    m.c_mem_compute = pyo.Constraint(m.Q, rule=mem_compute)

    def mem_prefetch(m, k, w):
        if clock.out():
            return pyo.Constraint.Skip
        static, var = window_memory(d, w)
        expr = static / mu + d.x[k] / mu
        for j in var:
            if j == k:
                continue
            if j in c:
                expr = expr + d.x[j] / mu * (1 - m.y[j] + before(("P", k), ("O", j)) + before(("P", j), ("P", k)))
            else:
                expr = expr + d.x[j] / mu
        return expr <= 1.0 + Hm * (1 - m.v[k, w])

    m.c_mem_prefetch = pyo.Constraint(m.VW, rule=mem_prefetch)
    clock.check()
    info = {"tu": tu, "mu": mu, "H": H, "J": J, "c": c, "pairs": pairs, "W": W, "dur": dur, "nq": nq}
    return m, info


def _mip_start(m, info, d: OffloadData, sched: OffloadSchedule):
    """Variable values describing a valid schedule (see 'why it is exact')."""
    tu, c, L, nq, dur = info["tu"], info["c"], d.L, info["nq"], info["dur"]
    s = [(sched.tF[q] if q <= L else sched.tB[2 * L + 1 - q]) / tu for q in range(nq)]
    vals = [(m.s[q], s[q]) for q in range(nq)] + [(m.C, s[-1] + dur[-1])]
    eF = lambda i: s[i] + dur[i]
    st = {}
    for j in info["J"]:
        off = j in sched.offload
        # a non-offloaded x_j gets zero-length transfers placed so that its link-order terms in
        # c_mem_prefetch vanish: offload as early as possible, prefetch as late as possible (ranked
        # last on ties).
        o = sched.offload[j] / tu if off else (eF(j - 1) if j > 0 else 0.0)
        p = sched.prefetch[j] / tu if off else s[2 * L + 1 - j]
        st[("O", j)] = (o, 0 if not off else 1)
        st[("P", j)] = (p, 2 if off else 3)
        vals += [(m.y[j], 1.0 if off else 0.0), (m.o[j], o), (m.p[j], p)]
        win = None
        if off:   # an idle window when p lies in one (ties at s_q or e_q included), else the run
            fits = []
            for w in info["W"][j]:
                q, idle = divmod(w, 2)
                lo = s[q] + (dur[q] if idle else 0)
                hi = s[q + 1] if idle else s[q] + dur[q]
                if lo - 1e-12 <= p <= hi + 1e-12:
                    fits.append((0 if idle else 1, w))
            win = min(fits)[1] if fits else None
        for w in info["W"][j]:
            vals.append((m.v[j, w], 1.0 if w == win else 0.0))
        for q in range(j + 1, 2 * L - j + 1):
            vals.append((m.a[j, q], 1.0 if off and o + c[j] > s[q] + 1e-12 else 0.0))
    for n, (A, B) in enumerate(info["pairs"]):
        vals.append((m.z[n], 1.0 if st[A] <= st[B] else 0.0))
    return vals


def read_schedule(m, info, d: OffloadData, bandwidth: float) -> OffloadSchedule:
    tu, L, nq = info["tu"], d.L, info["nq"]
    s = [float(m.s[q].value) * tu for q in range(nq)]
    off, pre = {}, {}
    for j in info["J"]:
        if round(m.y[j].value or 0) == 1:
            off[j] = float(m.o[j].value) * tu
            pre[j] = float(m.p[j].value) * tu
    return OffloadSchedule(tF=s[:L + 1], tB=[s[2 * L + 1 - i] for i in range(L + 1)], offload=off,
                           prefetch=pre, bandwidth=bandwidth)


def solve_offload_milp(chain: Chain, memory: float, bandwidth: float, *, start: OffloadSchedule | None = None,
                       time_limit: float | None = 60, gap: float | None = 1e-6, threads: int | None = None,
                       log_file=None, phased: bool = False, verbose: bool = False) -> Solution:
    """Solve Problem 1 exactly (within HiGHS's gap) from an optional MIP start (a valid schedule, e.g.
    the best heuristic's: it also caps the horizon); the schedule is replayed by the validator.

    Inside a ``solve`` call whose budget runs out while the model is being built, the build stops and
    the Solution is NO_SOLUTION (``details['interrupted'] = 'build'``); HiGHS's own time limit is
    clamped to what the budget has left by :func:`formulations.highs_driver.solve_milp`. The
    ``bound`` is HiGHS's dual bound, raised to Proposition 3's
    (:func:`models.offload.lower_bound_value`) when that is higher.
    """
    d = OffloadData.of(chain)
    times: dict[str, float] = {}
    lb = lower_bound_value(chain, memory, bandwidth)
    horizon = None
    if start is not None:
        horizon = validate_offload(chain, start, memory).makespan
    details = {"size": {}, "start_accepted": None, "phased": phased, "start_makespan": horizon}
    try:
        with timed(times, "build"):
            m, info = build_offload_milp(chain, memory, bandwidth, horizon=horizon, phased=phased)
            mip_start = _mip_start(m, info, d, start) if start is not None else None
    except BuildInterrupted as e:
        details["interrupted"] = "build"
        return Solution(PROBLEM, "milp", Status.NO_SOLUTION, bound=lb, memory_limit=memory,
                        message=f"not solved: {e}", times=times, details=details)
    res = solve_milp(m, time_limit=time_limit, gap=gap, threads=threads, mip_start=mip_start,
                     log_file=log_file, verbose=verbose, objective_scale=info["tu"])
    times.update(res.times)
    bound = None if res.bound is None else max(res.bound * info["tu"], lb)
    details.update(size=res.size, start_accepted=res.start_accepted)
    if not res.has_solution:
        if res.status == Status.INFEASIBLE and start is not None:
            res.message += " (unexpected: a MIP start was given)"
        return Solution(PROBLEM, "milp", res.status, bound=bound, memory_limit=memory, message=res.message,
                        times=times, details=details)
    sched = read_schedule(m, info, d, bandwidth)
    try:
        validate_offload(chain, sched, memory, tol=1e-6)
    except InvalidOffloadSchedule as e:
        if start is not None and validate_offload(chain, start, memory).makespan <= res.objective * info["tu"] * (1 + 1e-6):
            sched = start
            details["note"] = f"MILP schedule rejected by the validator ({e}); the start is as good"
        else:
            return Solution(PROBLEM, "milp", Status.ERROR, bound=bound, memory_limit=memory,
                            predicted=res.objective * info["tu"], times=times, details=details,
                            message=f"MILP schedule rejected by the validator: {e}")
    sol = make_solution(chain, "milp", sched, memory, bound=bound, predicted=res.objective * info["tu"],
                        status=res.status, message=res.message, times=times, details=details, tol=1e-6)
    return sol
